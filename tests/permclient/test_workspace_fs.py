"""The workspace is a wall: symbolic links swapped in while a file tool runs never lead out.

Two kinds of test. The races run a swapper process against the runtime's file tools
and ``permclient.acp``'s ``fs/*`` service for a bounded number of calls and count
what reached the outside folder: it must be nothing. The exhaustive ones swap the
path at every single step of the file access in turn (before its 1st system call,
its 2nd, ...), so no window is left to chance.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from permclient import _workspace_fs
from permclient._workspace_fs import Refused
from tests.support.workspace import INSIDE, SECRET, Layout

# ------------------------------------------------------- a swap at every step


class _SwapAtCall:
    """Stands in for ``os`` in the module: runs ``swap`` just before its ``at``-th system call."""

    CALLS = frozenset({"open", "stat", "fstat", "mkdir", "replace", "unlink", "access", "fchmod"})

    def __init__(self, at: int, swap: Callable[[], None]) -> None:
        self.at, self.swap, self.count = at, swap, 0

    def __getattr__(self, name: str) -> Any:
        real = getattr(os, name)
        if name not in self.CALLS:
            return real

        def call(*args: Any, **kwargs: Any) -> Any:
            self.count += 1
            if self.count == self.at:
                self.swap()
            return real(*args, **kwargs)

        return call


OPERATIONS: dict[str, Callable[[Path], object]] = {
    "read": lambda w: _workspace_fs.read_file(w, ("sub", "f.txt"), 1000),
    "read_head": lambda w: _workspace_fs.read_head(w, ("sub", "f.txt"), 1000),
    "status": lambda w: _workspace_fs.file_status(w, ("sub", "f.txt")),
    "write": lambda w: _workspace_fs.replace_file(w, ("sub", "f.txt"), b"new\n"),
    "edit": lambda w: _workspace_fs.replace_file(
        w, ("sub", "f.txt"), b"new\n", expected=INSIDE.encode()
    ),
    "create": lambda w: _workspace_fs.replace_file(
        w, ("sub", "new", "g.txt"), b"new\n", make_parents=True
    ),
    "delete": lambda w: _workspace_fs.delete_file(w, ("sub", "f.txt")),
}
SWAPS = ["parent_to_symlink", "file_to_symlink", "file_to_hard_link", "file_to_fifo"]


@pytest.mark.parametrize("swap", SWAPS)
@pytest.mark.parametrize("operation", sorted(OPERATIONS))
def test_a_swap_before_any_step_of_a_file_access_never_reaches_outside(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, operation: str, swap: str
) -> None:
    # How many steps the access takes when nothing interferes.
    counting = _SwapAtCall(0, lambda: None)
    monkeypatch.setattr(_workspace_fs, "os", counting)
    OPERATIONS[operation](Layout(tmp_path / "count", SECRET).workspace)
    assert counting.count > 2
    for at in range(1, counting.count + 1):
        layout = Layout(tmp_path / str(at), SECRET)
        swapper = _SwapAtCall(at, getattr(layout, swap))
        monkeypatch.setattr(_workspace_fs, "os", swapper)
        try:
            outcome: object = OPERATIONS[operation](layout.workspace)
        except Refused as exc:
            outcome = exc
        assert swapper.count >= at, "the swap happened"
        assert layout.untouched(), (at, outcome)
        assert SECRET.encode() not in repr(outcome).encode(), (at, outcome)


# ------------------------------------------------ names that are not UTF-8


@pytest.mark.parametrize(
    ("text", "shown"),
    [
        ("plain/文.txt", "plain/文.txt"),
        (os.fsdecode(b"/w/d\xff/x\xe6\x96.txt"), "/w/d\\xff/x\\xe6\\x96.txt"),
        (Path(os.fsdecode(b"/w/\xc3")), "/w/\\xc3"),
        ("lone \ud800 surrogate", "lone \\ud800 surrogate"),  # no file name decodes to it
    ],
)
def test_escape_non_utf8_shows_each_stray_byte_and_leaves_utf8_alone(
    text: str | Path, shown: str
) -> None:
    assert _workspace_fs.escape_non_utf8(text) == shown
    assert _workspace_fs.is_utf8(text) == (str(text) == shown)


def _non_utf8_folder(tmp_path: Path) -> tuple[Path, Path]:
    """``tmp_path/w`` (resolved) holding the folder ``d\\xff`` with a FIFO, a folder, a
    hard-linked file, a file too large and a file used as a folder; and a link out."""
    root = tmp_path.resolve() / "w"
    folder = Path(os.fsdecode(os.fsencode(root) + b"/d\xff"))
    folder.mkdir(parents=True)
    os.mkfifo(folder / "pipe")
    (folder / "sub").mkdir()
    (folder / "big").write_bytes(b"x" * 100)
    (folder / "file").write_text("x")
    (tmp_path / "outside.txt").write_text("x")
    os.link(tmp_path / "outside.txt", folder / "linked")
    os.symlink(os.fsencode(tmp_path) + b"/\xff-outside", os.fsencode(root) + b"/out")
    return root, folder


NON_UTF8_REFUSALS: dict[str, Callable[[Path], object]] = {
    "missing": lambda w: _workspace_fs.read_file(w, ("d\udcff", "gone"), 1000),
    "missing folder": lambda w: _workspace_fs.replace_file(w, ("d\udcff", "no", "x"), b""),
    "fifo": lambda w: _workspace_fs.read_file(w, ("d\udcff", "pipe"), 1000),
    "folder": lambda w: _workspace_fs.file_status(w, ("d\udcff", "sub")),
    "hard link": lambda w: _workspace_fs.delete_file(w, ("d\udcff", "linked")),
    "too large": lambda w: _workspace_fs.read_file(w, ("d\udcff", "big"), 10),
    "not a folder": lambda w: _workspace_fs.read_file(w, ("d\udcff", "file", "x"), 10),
    "changed": lambda w: _workspace_fs.replace_file(
        w, ("d\udcff", "file"), b"y", expected=b"other"
    ),
    "outside": lambda w: _workspace_fs.locate(w, w / "out"),
}


@pytest.mark.parametrize("case", sorted(NON_UTF8_REFUSALS))
def test_every_refusal_naming_a_non_utf8_path_is_valid_utf8_with_the_byte_shown(
    tmp_path: Path, case: str
) -> None:
    root, _ = _non_utf8_folder(tmp_path)
    with pytest.raises(Refused) as refused:
        NON_UTF8_REFUSALS[case](root)
    for text in (refused.value.reason, str(refused.value)):
        text.encode("utf-8")  # JSON can carry it
        assert "\\xff" in text and "\n" not in text, text


def test_a_file_in_a_non_utf8_folder_is_read_and_written_like_any_other(tmp_path: Path) -> None:
    root, folder = _non_utf8_folder(tmp_path)
    parts = _workspace_fs.locate(root, root / "d\udcff" / "file")
    assert _workspace_fs.replace_file(root, parts, b"new") is False
    assert _workspace_fs.read_file(root, parts, 10) == b"new"
    assert (folder / "file").read_bytes() == b"new"


# ------------------------------------------------------- replace_file details


@pytest.mark.parametrize(
    "name",
    ["文" * 85, "é" * 127 + "x", "x" * 255, os.fsdecode(b"\xff" * 255)],
    ids=["cjk-255-bytes", "accents-255-bytes", "ascii-255", "non-utf8-255"],
)
@pytest.mark.parametrize("exists", [True, False], ids=["replace", "create"])
def test_replace_file_writes_a_name_of_the_longest_legal_length(
    tmp_path: Path, name: str, exists: bool
) -> None:
    assert len(os.fsencode(name)) == 255
    if exists:
        (tmp_path / name).write_bytes(b"old")
    created = _workspace_fs.replace_file(tmp_path, (name,), b"new")
    assert created is not exists
    assert (tmp_path / name).read_bytes() == b"new"
    assert os.listdir(tmp_path) == [name]  # no temporary file left behind


def test_replace_file_keeps_the_permission_bits_but_not_setuid_setgid_or_sticky(
    tmp_path: Path,
) -> None:
    for old_mode, new_mode in ((0o7755, 0o755), (0o6750, 0o750), (0o1644, 0o644), (0o640, 0o640)):
        target = tmp_path / f"tool-{old_mode:o}"
        target.write_text("#!/bin/sh\necho hi\n")
        os.chmod(target, old_mode)
        assert stat.S_IMODE(target.stat().st_mode) == old_mode  # the system kept them
        _workspace_fs.replace_file(tmp_path, (target.name,), b"#!/bin/sh\nid\n")
        assert stat.S_IMODE(target.stat().st_mode) == new_mode, oct(old_mode)
