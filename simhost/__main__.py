"""``python -m simhost``: the same as the ``simhost`` command."""

from __future__ import annotations

from simhost.cli import main

main()
