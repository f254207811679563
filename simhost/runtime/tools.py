"""The runtime's tools: what a call will do (shown before asking) and doing it (after allow).

A tool is planned first: :func:`plan_write`, :func:`plan_read`,
:func:`plan_delete` and :func:`plan_shell` return a :class:`ToolCall` that
describes the call exactly as the editor will see it (title, kind, raw input,
diff, locations) and carries the action to run once allowed. Planning reads
files but never changes anything. A file tool refuses a path outside the
workspace at planning time (:attr:`ToolCall.refusal`), before any question is
asked; :func:`shell_fallback` then builds the equivalent shell command, which
asks like any other.

Actions check that what they are about to change is still what was shown: a
file whose content changed between the question and the answer is not written.
Files are read, written and deleted through :mod:`permclient._workspace_fs`: the
path is resolved once, then reached from the workspace folder without following
any symbolic link, so a link swapped in after the check is refused, never
followed. A file with a second hard link counts as outside the workspace, and a
FIFO or a device is refused (nothing blocks). A path that leads to a name that is
not UTF-8 is refused too: the card must show the real name, and JSON cannot carry
it; a reason naming such a place elsewhere writes its stray bytes ``\\xff``.
"""

from __future__ import annotations

import json
import logging
import os
import shlex
import signal
import subprocess
from collections.abc import Awaitable, Callable
from contextlib import suppress
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

import trio

from permclient._workspace_fs import (
    Refused,
    delete_file,
    escape_non_utf8,
    file_status,
    is_utf8,
    read_file,
    read_head,
    replace_file,
    resolve_links,
)
from simhost.runtime.policy import SHELL, ToolName
from simhost.runtime.wire import (
    DiffBlock,
    Location,
    TextBlock,
    TextContentBlock,
    ToolCallContentOut,
    ToolKind,
)

__all__ = [
    "MAX_FILE_BYTES",
    "MAX_OUTPUT_BYTES",
    "Refusal",
    "ToolCall",
    "ToolResult",
    "plan_delete",
    "plan_edit",
    "plan_read",
    "plan_shell",
    "plan_write",
    "resolve",
    "shell_fallback",
    "text_content",
]

log = logging.getLogger("simhost.runtime")

MAX_FILE_BYTES: Final = 1024 * 1024
"""The largest file the file tools read or write."""
MAX_OUTPUT_BYTES: Final = 64 * 1024
"""How much of a shell command's output (or a read file) is reported."""
_TITLE_LIMIT: Final = 120


@dataclass(frozen=True, slots=True)
class ToolResult:
    """What an action did: ``ok`` (completed) or not (failed), a line of text, raw output."""

    ok: bool
    text: str
    raw_output: dict[str, Any]
    content: list[ToolCallContentOut] = field(default_factory=list)


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a file tool will not even ask. ``outside`` means: outside the workspace."""

    reason: str
    outside: bool = False


Action = Callable[[], Awaitable[ToolResult]]


@dataclass(slots=True)
class ToolCall:
    """One planned tool call, as shown to the editor, with its action."""

    tool: ToolName
    kind: ToolKind
    title: str
    raw_input: dict[str, Any]
    action: Action
    content: list[ToolCallContentOut] = field(default_factory=list)
    locations: list[Location] = field(default_factory=list)
    refusal: Refusal | None = None
    target: Path | None = None
    """The absolute (not resolved) path a file tool was asked about."""


def text_content(text: str) -> TextContentBlock:
    """A ``{"type": "content", "content": {"type": "text", ...}}`` block."""
    return TextContentBlock(TextBlock(text))


def _title(tool: str, detail: str) -> str:
    short = tool.split(".", 1)[0] if tool == SHELL else tool
    line = detail.splitlines()[0] if detail else ""
    if len(line) > _TITLE_LIMIT or "\n" in detail:
        line = line[: _TITLE_LIMIT - 1] + "…"
    return f"{short}: {line}"


def resolve(workspace: Path, path_text: str) -> tuple[Path, Path, bool]:
    """Resolve ``path_text`` against ``workspace`` (which must be resolved).

    Returns ``(absolute, resolved, inside)``: the path as asked (absolute, ``~``
    expanded), the path with symlinks resolved, and whether the resolved path is
    inside the workspace (the workspace folder itself is not inside). Raises
    :class:`Refused` for a symbolic link loop or a path the system cannot take.
    """
    try:
        path = Path(path_text).expanduser()
    except RuntimeError:
        raise Refused("refused", f"{path_text}: no home folder to expand ~ to") from None
    absolute = path if path.is_absolute() else workspace / path
    resolved = resolve_links(absolute, path_text)
    inside = resolved != workspace and resolved.is_relative_to(workspace)
    return absolute, resolved, inside


@dataclass(frozen=True, slots=True)
class _Target:
    """Where a file tool's path leads: inside the workspace."""

    absolute: Path
    resolved: Path
    parts: tuple[str, ...]
    """``resolved`` below the workspace, walked without following links."""


def _locate(
    tool: ToolName, kind: ToolKind, workspace: Path, path_text: str, raw_input: dict[str, Any]
) -> _Target | ToolCall:
    """Where ``path_text`` leads in the workspace, else the refused call.

    A path whose name is not UTF-8 (a link's target, or ``~`` from the system) is
    refused: the card must show the real name, and JSON cannot carry it.
    """
    try:
        absolute, resolved, inside = resolve(workspace, path_text)
    except Refused as exc:
        return _refused(tool, kind, path_text, raw_input, Refusal(exc.reason))
    if not is_utf8(absolute):
        return _refused(tool, kind, path_text, raw_input, _not_utf8(absolute))
    if not inside:
        return _refused_outside(tool, kind, workspace, path_text, raw_input, absolute, resolved)
    if not is_utf8(resolved):
        return _refused(tool, kind, path_text, raw_input, _not_utf8(resolved, absolute))
    return _Target(absolute, resolved, resolved.relative_to(workspace).parts)


def _not_utf8(path: Path, asked: Path | None = None) -> Refusal:
    shown = escape_non_utf8(path if asked is None else f"{asked} (-> {path})")
    return Refusal(f"{shown}: a name in it is not UTF-8")


async def _unavailable() -> ToolResult:  # pragma: no cover - refused calls never run
    raise AssertionError("a refused tool call has no action")


def _refused(
    tool: ToolName, kind: ToolKind, path_text: str, raw_input: dict[str, Any], refusal: Refusal
) -> ToolCall:
    call = ToolCall(tool, kind, _title(tool, path_text), raw_input, _unavailable)
    call.refusal = refusal
    call.content = [text_content(f"refused: {refusal.reason}")]
    return call


def _refused_outside(
    tool: ToolName,
    kind: ToolKind,
    workspace: Path,
    path_text: str,
    raw_input: dict[str, Any],
    absolute: Path,
    resolved: Path,
) -> ToolCall:
    refused = _refused(tool, kind, path_text, raw_input, _outside(workspace, absolute, resolved))
    refused.target = absolute  # what the shell fallback acts on
    return refused


def _refused_by(
    tool: ToolName,
    kind: ToolKind,
    path_text: str,
    raw_input: dict[str, Any],
    target: _Target,
    refused: Refused,
) -> ToolCall:
    """The refused call for what the file system said; a hard-linked file is outside."""
    outside = refused.kind == "outside"
    call = _refused(tool, kind, path_text, raw_input, Refusal(refused.reason, outside=outside))
    if outside:
        call.target = target.absolute  # what the shell fallback acts on
    return call


def _existing_file(
    tool: ToolName, kind: ToolKind, workspace: Path, path_text: str, raw_input: dict[str, Any]
) -> _Target | ToolCall:
    """A regular file that must exist in the workspace, else a refused call."""
    target = _locate(tool, kind, workspace, path_text, raw_input)
    if isinstance(target, ToolCall):
        return target
    try:
        status = file_status(workspace, target.parts)
    except Refused as exc:
        return _refused_by(tool, kind, path_text, raw_input, target, exc)
    if status is None:
        return _refused(
            tool, kind, path_text, raw_input, Refusal(f"{target.resolved} does not exist")
        )
    return target


def _outside(workspace: Path, absolute: Path, resolved: Path) -> Refusal:
    if resolved == workspace:
        return Refusal(f"{absolute} is the workspace folder itself")
    shown = str(absolute) if absolute == resolved else f"{absolute} (-> {resolved})"
    reason = escape_non_utf8(f"{shown} is outside the workspace {workspace}")
    return Refusal(reason, outside=True)


def _current_text(workspace: Path, target: _Target) -> str | None:
    """The file's text (at most :data:`MAX_FILE_BYTES`), ``None`` if it does not exist.

    Raises :class:`Refused`, or :class:`UnicodeDecodeError` for a file that is not UTF-8.
    """
    try:
        data = read_file(workspace, target.parts, MAX_FILE_BYTES)
    except Refused as exc:
        if exc.kind == "missing":
            return None
        raise
    return data.decode("utf-8")


def _why(exc: Exception) -> str:
    if isinstance(exc, OSError):
        return exc.strerror or str(exc)
    if isinstance(exc, UnicodeDecodeError):
        return "not UTF-8 text"
    return str(exc)


# ---------------------------------------------------------------------- fs.write


def plan_write(
    workspace: Path, path_text: str, new_text: str | Callable[[str], str], raw_input: dict[str, Any]
) -> ToolCall:
    """Plan ``fs.write`` of ``path_text``.

    ``new_text`` is the whole new content, or a function of the old content (an
    edit, which needs the file to exist). The call carries a ``diff`` block
    (``oldText`` ``None`` for a new file). Refused when the path is outside the
    workspace (or the file has a second hard link), not a regular file,
    unreadable, or (for an edit) missing.
    """
    tool: ToolName = "fs.write"
    target = _locate(tool, "edit", workspace, path_text, raw_input)
    if isinstance(target, ToolCall):
        return target
    resolved = target.resolved
    try:
        old = _current_text(workspace, target)
    except Refused as exc:
        return _refused_by(tool, "edit", path_text, raw_input, target, exc)
    except UnicodeDecodeError as exc:
        return _refused(tool, "edit", path_text, raw_input, Refusal(f"{resolved}: {_why(exc)}"))
    if callable(new_text):
        if old is None:
            return _refused(
                tool, "edit", path_text, raw_input, Refusal(f"{resolved} does not exist")
            )
        new = new_text(old)
    else:
        new = new_text
    if len(new.encode("utf-8")) > MAX_FILE_BYTES:
        return _refused(
            tool, "edit", path_text, raw_input, Refusal(f"more than {MAX_FILE_BYTES} bytes")
        )
    diff = DiffBlock(str(resolved), old, new)

    async def write() -> ToolResult:
        await trio.lowlevel.checkpoint()
        return _write_now(workspace, path_text, target, old, new, diff)

    call = ToolCall(tool, "edit", _title(tool, path_text), raw_input, write)
    call.content = [diff]
    call.locations = [Location(str(resolved))]
    call.target = target.absolute
    return call


def _still_there(workspace: Path, path_text: str, target: _Target) -> str | None:
    """Why ``path_text`` no longer leads where it did when it was shown, or ``None``."""
    try:
        _, now, inside = resolve(workspace, path_text)
    except Refused as exc:
        return exc.reason
    if not inside or now != target.resolved:
        return escape_non_utf8(f"{path_text} now resolves to {now}")
    return None


def _write_now(
    workspace: Path, path_text: str, target: _Target, old: str | None, new: str, diff: DiffBlock
) -> ToolResult:
    moved = _still_there(workspace, path_text, target)
    if moved is not None:
        return ToolResult(False, f"not written: {moved}", {"error": "changed"})
    expected = None if old is None else old.encode("utf-8")
    data = new.encode("utf-8")
    try:
        replace_file(workspace, target.parts, data, expected=expected, make_parents=True)
    except Refused as exc:
        if exc.kind == "changed":
            reason = f"{target.resolved} changed since the change was shown; not written"
            return ToolResult(False, reason, {"error": "changed"})
        return ToolResult(False, f"not written: {exc.reason}", {"error": exc.reason})
    verb = "created" if old is None else "wrote"
    return ToolResult(
        True,
        f"{verb} {path_text} ({len(data)} bytes)",
        {"path": str(target.resolved), "bytes": len(data), "created": old is None},
        [diff],
    )


def plan_edit(workspace: Path, path_text: str, old: str, new: str) -> ToolCall:
    """Plan ``fs.write`` replacing every occurrence of ``old`` by ``new``.

    Refused (besides :func:`plan_write`'s reasons) when ``old`` does not occur.
    """
    raw_input = {"path": path_text, "old": old, "new": new}
    target = _locate("fs.write", "edit", workspace, path_text, raw_input)
    if not isinstance(target, ToolCall):
        try:
            current = _current_text(workspace, target)
        except (Refused, UnicodeDecodeError):
            current = None  # plan_write says why
        if current is not None and old not in current:
            return _refused(
                "fs.write",
                "edit",
                path_text,
                raw_input,
                Refusal(f"{old!r} does not occur in {path_text}"),
            )
    return plan_write(workspace, path_text, lambda text: text.replace(old, new), raw_input)


# ----------------------------------------------------------------------- fs.read


def plan_read(workspace: Path, path_text: str) -> ToolCall:
    """Plan ``fs.read``; refused outside the workspace. The action reports the text."""
    tool: ToolName = "fs.read"
    raw_input = {"path": path_text}
    target = _existing_file(tool, "read", workspace, path_text, raw_input)
    if isinstance(target, ToolCall):
        return target

    async def read() -> ToolResult:
        await trio.lowlevel.checkpoint()
        moved = _still_there(workspace, path_text, target)
        if moved is not None:
            return ToolResult(False, f"not read: {moved}", {"error": "changed"})
        try:
            data = read_head(workspace, target.parts, MAX_OUTPUT_BYTES + 1)
        except Refused as exc:
            return ToolResult(False, f"not read: {exc.reason}", {"error": exc.reason})
        truncated = len(data) > MAX_OUTPUT_BYTES
        text = data[:MAX_OUTPUT_BYTES].decode("utf-8", "replace")
        note = " (truncated)" if truncated else ""
        return ToolResult(
            True,
            f"read {path_text}: {len(data[:MAX_OUTPUT_BYTES])} bytes{note}",
            {"path": str(target.resolved), "text": text, "truncated": truncated},
            [text_content(text)],
        )

    call = ToolCall(tool, "read", _title(tool, path_text), raw_input, read)
    call.locations = [Location(str(target.resolved))]
    call.target = target.absolute
    return call


# --------------------------------------------------------------------- fs.delete


def plan_delete(workspace: Path, path_text: str) -> ToolCall:
    """Plan ``fs.delete`` of a file; refused outside the workspace or for a folder."""
    tool: ToolName = "fs.delete"
    raw_input = {"path": path_text}
    target = _existing_file(tool, "delete", workspace, path_text, raw_input)
    if isinstance(target, ToolCall):
        return target

    async def delete() -> ToolResult:
        await trio.lowlevel.checkpoint()
        # Checked again after the answer: the path must still lead to the file shown
        # (a folder swapped for a symlink meanwhile would point the delete elsewhere).
        moved = _still_there(workspace, path_text, target)
        if moved is not None:
            why = f"{path_text} changed since the question; not deleted: {moved}"
            return ToolResult(False, why, {"error": "changed"})
        try:
            delete_file(workspace, target.parts)
        except Refused as exc:
            return ToolResult(False, f"not deleted: {exc.reason}", {"error": exc.reason})
        return ToolResult(True, f"deleted {path_text}", {"path": str(target.resolved)})

    call = ToolCall(tool, "delete", _title(tool, path_text), raw_input, delete)
    call.content = [text_content(f"delete {target.resolved}")]
    call.locations = [Location(str(target.resolved))]
    call.target = target.absolute
    return call


# ------------------------------------------------------------ local_shell.local_shell


def plan_shell(workspace: Path, command: str, locations: list[Path] | None = None) -> ToolCall:
    """Plan ``local_shell.local_shell``: ``command`` run by ``/bin/sh`` in the workspace."""

    async def run() -> ToolResult:
        return await run_shell(command, workspace)

    call = ToolCall(
        SHELL, "execute", _title(SHELL, command), {"command": command, "cwd": str(workspace)}, run
    )
    call.locations = [Location(str(path)) for path in locations or ()]
    return call


def shell_fallback(workspace: Path, refused: ToolCall) -> ToolCall | None:
    """The shell command that does what a file tool refused to do outside the workspace.

    Returns ``None`` when the refusal was not about the workspace.
    """
    if refused.refusal is None or not refused.refusal.outside or refused.target is None:
        return None
    path = json.dumps(str(refused.target))
    raw = refused.raw_input
    if refused.tool == "fs.write" and "text" in raw:
        text = json.dumps(_with_newline(raw["text"]))
        code = f"import pathlib; pathlib.Path({path}).write_text({text})"
    elif refused.tool == "fs.write":
        old, new = json.dumps(raw["old"]), json.dumps(raw["new"])
        code = (
            f"import pathlib; p = pathlib.Path({path}); "
            f't = p.read_text(); assert {old} in t, "OLD not found"; '
            f"p.write_text(t.replace({old}, {new}))"
        )
    elif refused.tool == "fs.delete":
        code = f"import os; os.remove({path})"
    else:
        code = None
    if code is None:
        command = f"cat -- {shlex.quote(str(refused.target))}"
    else:
        command = f"python3 -c {shlex.quote(code)}"
    fallback = plan_shell(workspace, command, [refused.target])
    # The card says why a shell command asks instead of the file tool.
    fallback.content = [text_content(f"instead of {refused.title}: {refused.refusal.reason}")]
    return fallback


def _with_newline(text: str) -> str:
    return text if not text or text.endswith("\n") else text + "\n"


def new_file_text(text: str) -> str:
    """What ``create PATH with TEXT`` writes: TEXT, ending with a newline unless empty."""
    return _with_newline(text)


async def run_shell(command: str, cwd: Path) -> ToolResult:
    """Run ``command`` with ``/bin/sh -c`` in ``cwd``; stdin is empty, stderr joins stdout.

    Keeps the first :data:`MAX_OUTPUT_BYTES` of output (the rest is drained and
    dropped). The command runs in a process group of its own; if we are
    cancelled, the whole group is killed. Completed means exit code 0.
    """
    try:
        process = await trio.lowlevel.open_process(
            command,
            shell=True,
            cwd=cwd,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    except OSError as exc:
        return ToolResult(False, f"could not start: {_why(exc)}", {"error": _why(exc)})
    assert process.stdout is not None
    kept = bytearray()
    seen = 0
    try:
        while chunk := await process.stdout.receive_some(65536):
            seen += len(chunk)
            if len(kept) < MAX_OUTPUT_BYTES:
                kept += chunk[: MAX_OUTPUT_BYTES - len(kept)]
        code = await process.wait()
    finally:
        if process.returncode is None:
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
            with trio.CancelScope(shield=True):
                await process.wait()
        else:
            # The shell is gone; anything it left in its group is an orphan.
            with suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, signal.SIGKILL)
        with trio.CancelScope(shield=True):
            await process.stdout.aclose()
    output = kept.decode("utf-8", "replace")
    truncated = seen > len(kept)
    summary = f"exit code {code}"
    if truncated:
        summary += f", output truncated to {len(kept)} bytes"
    text = f"{summary}\n{output}" if output else summary
    return ToolResult(
        code == 0,
        text,
        {"exitCode": code, "output": output, "truncated": truncated},
    )
