"""The permission card: everything a person needs to answer one permission request.

A :class:`PermissionCard` shows which session asks (title and id), the tool
call's title and kind, the command (``rawInput.command``) or the raw input as
JSON, every diff of the request as a coloured unified diff (all files), the
locations, the ``_meta`` of the request and of the tool call, the plain content
blocks, and the numbered options with their kinds. It has no default option.
It is a Rich renderable (``__rich__``); the SDK stays free of Rich.

Every string from the runtime goes through :func:`~simhost.chat.text.visible`,
and the card says so when a request carried control or invisible characters.
"""

from __future__ import annotations

import difflib
import shlex
from collections.abc import Iterable
from typing import Any, Final

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from permclient import (
    Content,
    Diff,
    EmbeddedResource,
    PermissionOption,
    PermissionRequest,
    ResourceLink,
    Terminal,
    TextContent,
)

from .text import compact_json, has_hidden, pretty_json, visible

__all__ = ["OPTION_STYLES", "PermissionCard", "option_label", "session_label", "unified_diff"]

OPTION_STYLES: Final = {
    "allow_once": "green",
    "allow_always": "bold green",
    "reject_once": "red",
    "reject_always": "bold red",
}
_DIFF_CONTEXT: Final = 3


def session_label(session_id: str, title: str | None) -> str:
    """``'title' (id)``, or ``(id)`` for an untitled session; safe to print."""
    if title:
        return f"{visible(title)!s} ({visible(session_id)})"
    return f"({visible(session_id)})"


def option_label(number: int | None, option: PermissionOption) -> Text:
    """``1  Allow  allow_once`` in the option's colour."""
    text = Text()
    if number is not None:
        text.append(f"{number:>2}  ", style="bold")
    text.append(visible(option.name), style=OPTION_STYLES.get(option.kind, ""))
    text.append(f"  {option.kind}", style="dim")
    return text


def unified_diff(diff: Diff) -> Text:
    """The diff as coloured unified-diff lines; ``old_text is None`` is a new file."""
    old = diff.old_text
    path = visible(diff.path)
    out = Text()
    if old is None:
        out.append(f"new file {path}\n", style="bold")
        fromfile = "/dev/null"
    elif diff.new_text == "" and old != "":
        out.append(f"empties {path}\n", style="bold")
        fromfile = path
    else:
        out.append(f"edit {path}\n", style="bold")
        fromfile = path
    old_lines = (old or "").splitlines()
    new_lines = diff.new_text.splitlines()
    lines = list(
        difflib.unified_diff(old_lines, new_lines, fromfile, path, lineterm="", n=_DIFF_CONTEXT)
    )
    if not lines:
        if old is None and diff.new_text == "":
            out.append("(empty file)\n", style="dim")
        elif (old or "") == diff.new_text:
            out.append("(no change)\n", style="dim")
        else:
            out.append("(only line endings differ)\n", style="yellow")
            out.append(f"- {visible(repr(old))}\n", style="red")
            out.append(f"+ {visible(repr(diff.new_text))}", style="green")
        out.rstrip()
        return out
    for line in lines:
        shown = visible(line)
        if line.startswith(("---", "+++")):
            out.append(shown + "\n", style="bold")
        elif line.startswith("@@"):
            out.append(shown + "\n", style="cyan")
        elif line.startswith("+"):
            out.append(shown + "\n", style="green")
        elif line.startswith("-"):
            out.append(shown + "\n", style="red")
        else:
            out.append(shown + "\n")
    out.rstrip()
    return out


def _command_of(raw_input: Any) -> str | None:
    if not isinstance(raw_input, dict):
        return None
    command = raw_input.get("command")
    if isinstance(command, str):
        return command
    if isinstance(command, list) and all(isinstance(part, str) for part in command):
        return shlex.join(command)
    return None


def _block_text(block: Any) -> str:
    if isinstance(block, TextContent):
        return block.text
    if isinstance(block, ResourceLink):
        return f"[link] {block.title or block.name}: {block.uri}"
    if isinstance(block, EmbeddedResource):
        uri = block.resource.get("uri", "")
        text = block.resource.get("text")
        return f"[resource] {uri}" + (f"\n{text}" if isinstance(text, str) else " (binary)")
    kind = getattr(block, "mime_type", "")
    return f"[{type(block).__name__.removesuffix('Content').lower()}] {kind}"


class PermissionCard:
    """A permission request, ready to show: ``console.print(PermissionCard(request, ...))``.

    ``session_title`` names the session that asks (``None`` if unknown);
    ``position`` is ``(n, total)`` when other cards wait behind this one;
    ``hint`` is the last line (how to answer, given the input mode);
    ``compact`` leaves the long parts out (for a card whose full text was
    printed above because it does not fit on the screen).
    """

    def __init__(
        self,
        request: PermissionRequest,
        *,
        session_title: str | None = None,
        position: tuple[int, int] | None = None,
        hint: Text | str | None = None,
        compact: bool = False,
    ) -> None:
        self.request = request
        self.session_title = session_title
        self.position = position
        self.hint = hint
        self.compact = compact

    @property
    def offers_deny(self) -> bool:
        """True if at least one option is a ``reject_*`` kind."""
        return any(option.kind.startswith("reject") for option in self.request.options)

    def _strings(self) -> Iterable[str]:
        request = self.request
        call = request.tool_call
        yield request.session_id
        yield call.title or ""
        yield pretty_json(call.raw_input)
        for block in call.content or ():
            if isinstance(block, Diff):
                yield block.path
                yield block.old_text or ""
                yield block.new_text
            elif isinstance(block, Content):
                yield _block_text(block.content)
        for location in call.locations or ():
            yield location.path
        yield pretty_json(request.meta)
        yield pretty_json(call.meta)
        for option in request.options:
            yield option.name

    def __rich__(self) -> RenderableType:
        request = self.request
        call = request.tool_call
        parts: list[RenderableType] = []

        head = Table.grid(padding=(0, 2))
        head.add_column(style="bold", no_wrap=True)
        head.add_column(overflow="fold")
        head.add_row("Session", Text(session_label(request.session_id, self.session_title)))
        tool = Text(visible(call.title or "(untitled tool call)"), style="bold")
        tool.append(f"  kind: {call.kind or 'unknown'}", style="magenta")
        head.add_row("Tool", tool)
        head.add_row("Call", Text(visible(call.tool_call_id), style="dim"))
        command = _command_of(call.raw_input)
        if command is not None:
            head.add_row("Command", Text("$ " + visible(command), style="bold yellow"))
        parts.append(head)

        if any(has_hidden(s) for s in self._strings()):
            parts.append(
                Text(
                    "⚠ this request contains control or invisible characters; "
                    "they are shown escaped (\\x.., \\u....)",
                    style="bold yellow",
                )
            )

        diffs = [block for block in call.content or () if isinstance(block, Diff)]
        others = [block for block in call.content or () if not isinstance(block, Diff)]
        if self.compact:
            details = []
            if diffs:
                details.append(f"{len(diffs)} diff{'s' if len(diffs) != 1 else ''}")
            if call.raw_input is not None:
                details.append("input")
            parts.append(
                Text(
                    f"↑ the full request ({', '.join(details) or 'details'}) is printed above",
                    style="italic",
                )
            )
        else:
            parts.extend(self._details(command, diffs, others))

        parts.append(Text("Options", style="bold"))
        for number, option in enumerate(request.options, start=1):
            parts.append(option_label(number, option))
        if not self.offers_deny:
            parts.append(
                Text("No deny option was offered: Esc answers cancelled (a denial).", style="red")
            )
        if self.hint is not None:
            parts.append(self.hint if isinstance(self.hint, Text) else Text(self.hint))

        title = Text("Permission request", style="bold")
        if self.position is not None and self.position[1] > 1:
            title.append(f"  {self.position[0]} of {self.position[1]}", style="dim")
        return Panel(
            Group(*parts),
            title=title,
            title_align="left",
            subtitle=Text(session_label(request.session_id, self.session_title)),
            subtitle_align="right",
            border_style="yellow",
        )

    def _details(
        self, command: str | None, diffs: list[Diff], others: list[Any]
    ) -> Iterable[RenderableType]:
        request = self.request
        call = request.tool_call
        raw_input = call.raw_input
        if command is not None and isinstance(raw_input, dict):
            rest = {k: v for k, v in raw_input.items() if k != "command"}
            if rest:
                yield Text("Other input", style="bold")
                yield Text(visible(pretty_json(rest)))
        elif raw_input is not None:
            yield Text("Input", style="bold")
            yield Text(visible(pretty_json(raw_input)))
        if diffs:
            count = len(diffs)
            yield Text(f"Changes ({count} file{'s' if count != 1 else ''})", style="bold")
            for diff in diffs:
                yield unified_diff(diff)
        if call.locations:
            yield Text("Locations", style="bold")
            for location in call.locations:
                line = f":{location.line}" if location.line is not None else ""
                text = Text("  " + visible(location.path) + line)
                if location.meta:
                    text.append("  " + visible(compact_json(location.meta)), "dim")
                yield text
        if others:
            yield Text("Content", style="bold")
            for block in others:
                if isinstance(block, Terminal):
                    yield Text(f"  [terminal] {visible(block.terminal_id)}")
                elif isinstance(block, Content):
                    yield Text(visible(_block_text(block.content)))
        if request.meta:
            yield Text("Request _meta", style="bold")
            yield Text(visible(pretty_json(request.meta)), style="dim")
        if call.meta:
            yield Text("Tool call _meta", style="bold")
            yield Text(visible(pretty_json(call.meta)), style="dim")
