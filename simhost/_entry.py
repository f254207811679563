"""The ``simhost`` console script: a missing ``host`` extra or an early Ctrl-C ends it in one line.

simhost's terminal and command line (Rich, Typer) come with the ``host`` extra,
which ``pip install permclient`` alone does not install: without it the command
says which extra to install, on one line, and exits 2 (a usage error).

Importing the CLI (trio, Rich, Typer) can take a second on a busy machine; a Ctrl-C
in that time would otherwise print a ``KeyboardInterrupt`` traceback from inside an
import and end the process by the signal instead of with status 130.

This module imports nothing heavy: the pytest plugin uses it too, and pytest
loads that plugin in every project where permclient is installed.
"""

from __future__ import annotations

import importlib.util
import sys
from typing import Final

INTERRUPTED: Final = 130
USAGE: Final = 2

HOST_MODULES: Final = ("rich", "typer")
"""The top-level modules that the ``host`` extra installs and simhost imports."""

HOST_EXTRA_MISSING: Final = "simhost needs the host extra: pip install 'permclient[host]'"


def missing_host_modules() -> list[str]:
    """The ``host`` extra's modules that cannot be imported here (found, not imported)."""
    missing = []
    for name in HOST_MODULES:
        try:
            found = importlib.util.find_spec(name) is not None
        except (ImportError, ValueError):  # blocked, or a broken entry in sys.modules
            found = False
        if not found:
            missing.append(name)
    return missing


def main() -> None:
    """Load the command line, then run it; exit 2 without the host extra, 130 on Ctrl-C."""
    try:
        from simhost.cli import main as run
    except KeyboardInterrupt:
        sys.exit(INTERRUPTED)
    except ModuleNotFoundError as exc:
        # Only the extra's own modules: any other missing module is a bug to show in full.
        if (exc.name or "").partition(".")[0] not in HOST_MODULES:
            raise
        print(HOST_EXTRA_MISSING, file=sys.stderr)
        sys.exit(USAGE)
    run()
