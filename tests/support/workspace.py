"""A workspace with a file in a folder of it, and a file outside it, for the tests that
try to reach outside (symlink swaps, races): and whether anything outside changed."""

from __future__ import annotations

import os
from pathlib import Path

INSIDE = "inside\n"
SECRET = "secret\n"


class Layout:
    """``w/sub/f.txt`` in the workspace ``w``; ``outside/f.txt`` next to it."""

    def __init__(self, tmp_path: Path, outside_text: str) -> None:
        self.workspace = tmp_path / "w"
        self.sub = self.workspace / "sub"
        self.sub.mkdir(parents=True)
        (self.sub / "f.txt").write_text(INSIDE)
        self.outside = tmp_path / "outside"
        self.outside.mkdir()
        self.outside_file = self.outside / "f.txt"
        self.outside_text = outside_text
        self.outside_file.write_text(outside_text)

    def untouched(self) -> bool:
        """Nothing outside was written, created or deleted."""
        return (
            sorted(p.name for p in self.outside.iterdir()) == ["f.txt"]
            and self.outside_file.read_text() == self.outside_text
        )

    # Each swap turns part of the path into a way out (or into something unreadable).

    def parent_to_symlink(self) -> None:
        os.rename(self.sub, self.workspace / "sub.aside")
        os.symlink(self.outside, self.sub)

    def file_to_symlink(self) -> None:
        os.symlink(self.outside_file, self.sub / ".link")
        os.replace(self.sub / ".link", self.sub / "f.txt")

    def file_to_hard_link(self) -> None:
        os.link(self.outside_file, self.sub / ".link")
        os.replace(self.sub / ".link", self.sub / "f.txt")

    def file_to_fifo(self) -> None:
        os.mkfifo(self.sub / ".fifo")
        os.replace(self.sub / ".fifo", self.sub / "f.txt")
