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
    inside the workspace (the workspace folder itself is not inside).
    """
    path = Path(path_text).expanduser()
    absolute = path if path.is_absolute() else workspace / path
    resolved = absolute.resolve()
    inside = resolved != workspace and resolved.is_relative_to(workspace)
    return absolute, resolved, inside


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


def _existing_file(
    tool: ToolName, kind: ToolKind, workspace: Path, path_text: str, raw_input: dict[str, Any]
) -> tuple[Path, Path] | ToolCall:
    """``(absolute, resolved)`` of a file that must exist in the workspace, else a refused call."""
    absolute, resolved, inside = resolve(workspace, path_text)
    if not inside:
        return _refused_outside(tool, kind, workspace, path_text, raw_input, absolute, resolved)
    if not resolved.is_file():
        why = "is a folder" if resolved.is_dir() else "does not exist"
        return _refused(tool, kind, path_text, raw_input, Refusal(f"{resolved} {why}"))
    return absolute, resolved


def _outside(workspace: Path, absolute: Path, resolved: Path) -> Refusal:
    if resolved == workspace:
        return Refusal(f"{absolute} is the workspace folder itself")
    shown = str(absolute) if absolute == resolved else f"{absolute} (-> {resolved})"
    return Refusal(f"{shown} is outside the workspace {workspace}", outside=True)


def _read_text(path: Path) -> str:
    """Read a text file of at most :data:`MAX_FILE_BYTES`; raises OSError or ValueError."""
    with path.open("rb") as file:
        data = file.read(MAX_FILE_BYTES + 1)
    if len(data) > MAX_FILE_BYTES:
        raise ValueError(f"{path} is larger than {MAX_FILE_BYTES} bytes")
    return data.decode("utf-8")


def _current_text(path: Path) -> str | None:
    """The file's text, ``None`` if it does not exist; raises OSError/ValueError otherwise."""
    try:
        return _read_text(path)
    except FileNotFoundError:
        return None


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
    workspace, a directory, unreadable, or (for an edit) missing.
    """
    tool: ToolName = "fs.write"
    absolute, resolved, inside = resolve(workspace, path_text)
    if not inside:
        return _refused_outside(tool, "edit", workspace, path_text, raw_input, absolute, resolved)
    if resolved.exists() and not resolved.is_file():
        # A folder, or a FIFO/device whose open would block the whole runtime.
        why = "is a folder" if resolved.is_dir() else "is not a regular file"
        return _refused(tool, "edit", path_text, raw_input, Refusal(f"{resolved} {why}"))
    try:
        old = _current_text(resolved)
    except (OSError, ValueError) as exc:
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
        return _write_now(workspace, path_text, resolved, old, new, diff)

    call = ToolCall(tool, "edit", _title(tool, path_text), raw_input, write)
    call.content = [diff]
    call.locations = [Location(str(resolved))]
    call.target = absolute
    return call


def _write_now(
    workspace: Path, path_text: str, planned: Path, old: str | None, new: str, diff: DiffBlock
) -> ToolResult:
    _, resolved, inside = resolve(workspace, path_text)
    if not inside or resolved != planned:
        return ToolResult(False, f"not written: {path_text} now resolves to {resolved}", {})
    try:
        current = _current_text(resolved)
    except (OSError, ValueError) as exc:
        return ToolResult(False, f"not written: {resolved}: {_why(exc)}", {"error": _why(exc)})
    if current != old:
        reason = f"{resolved} changed since the change was shown; not written"
        return ToolResult(False, reason, {"error": "changed"})
    try:
        resolved.parent.mkdir(parents=True, exist_ok=True)
        with resolved.open("w", encoding="utf-8", newline="") as file:
            file.write(new)
    except OSError as exc:
        return ToolResult(False, f"not written: {resolved}: {_why(exc)}", {"error": _why(exc)})
    size = len(new.encode("utf-8"))
    verb = "created" if old is None else "wrote"
    return ToolResult(
        True,
        f"{verb} {path_text} ({size} bytes)",
        {"path": str(resolved), "bytes": size, "created": old is None},
        [diff],
    )


def plan_edit(workspace: Path, path_text: str, old: str, new: str) -> ToolCall:
    """Plan ``fs.write`` replacing every occurrence of ``old`` by ``new``.

    Refused (besides :func:`plan_write`'s reasons) when ``old`` does not occur.
    """
    raw_input = {"path": path_text, "old": old, "new": new}
    _, resolved, inside = resolve(workspace, path_text)
    if inside and resolved.is_file():
        try:
            current = _current_text(resolved)
        except (OSError, ValueError):
            current = None
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
    absolute, resolved = target

    async def read() -> ToolResult:
        await trio.lowlevel.checkpoint()
        try:
            with resolved.open("rb") as file:
                data = file.read(MAX_OUTPUT_BYTES + 1)
        except OSError as exc:
            return ToolResult(False, f"cannot read {path_text}: {_why(exc)}", {"error": _why(exc)})
        truncated = len(data) > MAX_OUTPUT_BYTES
        text = data[:MAX_OUTPUT_BYTES].decode("utf-8", "replace")
        note = " (truncated)" if truncated else ""
        return ToolResult(
            True,
            f"read {path_text}: {len(data[:MAX_OUTPUT_BYTES])} bytes{note}",
            {"path": str(resolved), "text": text, "truncated": truncated},
            [text_content(text)],
        )

    call = ToolCall(tool, "read", _title(tool, path_text), raw_input, read)
    call.locations = [Location(str(resolved))]
    call.target = absolute
    return call


# --------------------------------------------------------------------- fs.delete


def plan_delete(workspace: Path, path_text: str) -> ToolCall:
    """Plan ``fs.delete`` of a file; refused outside the workspace or for a folder."""
    tool: ToolName = "fs.delete"
    raw_input = {"path": path_text}
    target = _existing_file(tool, "delete", workspace, path_text, raw_input)
    if isinstance(target, ToolCall):
        return target
    absolute, resolved = target

    async def delete() -> ToolResult:
        await trio.lowlevel.checkpoint()
        # Checked again after the answer: the path must still lead to the file shown
        # (a folder swapped for a symlink meanwhile would point the delete elsewhere).
        _, now, inside = resolve(workspace, path_text)
        if not inside or now != resolved or not now.is_file():
            why = f"{path_text} changed since the question; not deleted"
            return ToolResult(False, why, {"error": "changed"})
        try:
            resolved.unlink()
        except OSError as exc:
            why = _why(exc)
            return ToolResult(False, f"not deleted: {path_text}: {why}", {"error": why})
        return ToolResult(True, f"deleted {path_text}", {"path": str(resolved)})

    call = ToolCall(tool, "delete", _title(tool, path_text), raw_input, delete)
    call.content = [text_content(f"delete {resolved}")]
    call.locations = [Location(str(resolved))]
    call.target = absolute
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
        return plan_shell(workspace, f"cat -- {shlex.quote(str(refused.target))}", [refused.target])
    return plan_shell(workspace, f"python3 -c {shlex.quote(code)}", [refused.target])


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
