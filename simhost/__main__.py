"""``python -m simhost``: the same as the ``simhost`` command."""

from __future__ import annotations

from simhost._entry import main

main()
