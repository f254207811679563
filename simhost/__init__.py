"""simhost: the reference host for permclient.

``simhost chat`` is a stand-in editor (interactive terminal approvals),
``simhost runtime`` a deterministic stand-in agent runtime. The SDK itself
(permclient) never imports Rich or Typer; this package owns the terminal.
"""

from __future__ import annotations

__version__ = "0.1.0.dev0"
