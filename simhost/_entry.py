"""The ``simhost`` console script: Ctrl-C while the program is still loading ends it quietly.

Importing the CLI (trio, Rich, Typer) can take a second on a busy machine; a Ctrl-C
in that time would otherwise print a ``KeyboardInterrupt`` traceback from inside an
import and end the process by the signal instead of with status 130.
"""

from __future__ import annotations

import sys

INTERRUPTED = 130


def main() -> None:
    """Load the command line, then run it; exit 130 if Ctrl-C comes while loading."""
    try:
        from simhost.cli import main as run
    except KeyboardInterrupt:
        sys.exit(INTERRUPTED)
    run()
