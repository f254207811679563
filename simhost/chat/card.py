"""The permission card: everything a person needs to answer one permission request.

A :class:`PermissionCard` shows which session asks (title and id), the tool
call's title and kind, the command (``rawInput.command``) or the raw input as
JSON, every diff of the request as a coloured unified diff (all files), the
locations, the ``_meta`` of the request and of the tool call, the plain content
blocks, and the numbered options with their kinds. It has no default option.
It is a Rich renderable; the SDK stays free of Rich.

Nothing the runtime sends can draw a line the chat did not mean:

* every runtime string goes through :func:`~simhost.chat.text.escaped` (one
  line, line breaks and invisible characters as escapes), and the card warns
  when a request carried any;
* what is legitimately multi-line (a command, a diff, JSON) is split by the
  chat and shown one runtime line per row, each behind a gutter (``▏``, or the
  ``Command`` column), so no row of it starts where the session row or an option
  row starts, even when a long line wraps;
* an option row is the option's number in reverse video, then its name (one
  line), then its kind.

A card given ``max_height`` (the live card) is never taller than that. It
shows its head (session, tool, the first lines of the command) and the options
a key can choose (1 to :data:`KEYED_OPTIONS`; the others are counted in one
row: no key chooses them, ``v`` shows them), and as much of the rest as fits,
then ``… N more lines: press v to view``. When that does not fit, every row of
it is cut to one terminal row (``…`` at the end); when even that does not fit,
the card shows its first rows and says the terminal is too small. Without
``max_height`` (the full card, for ``v`` and for a pipe) every option is shown
and the details stop after :data:`FULL_MAX_ROWS` rows.
Either way the work done is bounded by what is shown: a 10 MB diff is never
compared, styled or measured whole.
"""

from __future__ import annotations

import difflib
import re
import shlex
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.panel import Panel
from rich.segment import Segment
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

from .text import compact_json, escaped, has_hidden, pretty_json, visible

__all__ = [
    "EDITOR_RULE_KEYS",
    "FULL_MAX_ROWS",
    "KEYED_OPTIONS",
    "OPTION_STYLES",
    "PermissionCard",
    "option_label",
    "session_label",
]

OPTION_STYLES: Final = {
    "allow_once": "green",
    "allow_always": "bold green",
    "reject_once": "red",
    "reject_always": "bold red",
}
FULL_MAX_ROWS: Final = 2000
"""Rows of details a full card shows at most (``v`` and a pipe)."""
KEYED_OPTIONS: Final = 9
EDITOR_RULE_KEYS: Final = "abcd"
"""The keys of a card's editor-rule entries, after the agent's options."""
"""Options a key can choose (``1`` to ``9``): the live card shows these and counts the rest."""

_NUMBER_STYLE: Final = "bold reverse"
_GUTTER: Final = Text("▏", style="dim")
_COMMAND_HEAD: Final = 3  # command lines the live card always shows
_LIVE_CHARS: Final = 300  # characters of one runtime line on the live card
_FULL_CHARS: Final = 4000  # ... on the full card
_DIFF_CONTEXT: Final = 3
# Changed lines (old + new) past which difflib is not run: it is quadratic.
_DIFF_COMPARE_LINES: Final = 2000
_HUNK: Final = re.compile(r"^@@ -(\d+)((?:,\d+)?) \+(\d+)((?:,\d+)?) @@$")
_CACHED_REQUESTS: Final = 4
_PANEL_ROWS: Final = 2  # the panel's top and bottom borders
_PANEL_COLUMNS: Final = 4  # its side borders and padding


def session_label(session_id: str, title: str | None) -> str:
    """``title (id)``, or ``(id)`` for an untitled session; one line, safe to print."""
    if title:
        return f"{visible(title, keep='')} ({visible(session_id, keep='')})"
    return f"({visible(session_id, keep='')})"


def option_label(number: int | None, option: PermissionOption) -> Text:
    """`` 1  Allow  allow_once``: the number in reverse video, the name on one line, the kind."""
    text = Text()
    if number is not None:
        text.append(f"{number:>2} ", style=_NUMBER_STYLE)
        text.append(" ")
    text.append_text(escaped(option.name, OPTION_STYLES.get(option.kind, ""), limit=_LIVE_CHARS))
    text.append("  ")
    text.append_text(escaped(option.kind, "dim"))
    return text


# ------------------------------------------------------------------ the rows


@dataclass(frozen=True)
class _Run:
    """Rows ``lines[start:stop]``, each behind ``prefix``; a title run is the chat's own text.

    ``style=None`` colours a row by its first character, as a unified diff.
    """

    lines: Sequence[str]
    start: int = 0
    stop: int | None = None
    prefix: str = ""
    style: str | None = ""
    title: bool = False

    def __len__(self) -> int:
        stop = len(self.lines) if self.stop is None else self.stop
        return max(0, stop - self.start)


@dataclass
class _Rows:
    """A lazy list of rows: runs of lines, counted without being built."""

    runs: list[_Run] = field(default_factory=list)

    def title(self, text: str) -> None:
        self.runs.append(_Run([text], title=True))

    def lines(self, lines: Sequence[str], **kwargs: Any) -> None:
        run = _Run(lines, **kwargs)
        if len(run):
            self.runs.append(run)

    def line(self, text: str, style: str | None = "") -> None:
        self.runs.append(_Run([text], style=style))

    def __len__(self) -> int:
        return sum(len(run) for run in self.runs)

    def __iter__(self) -> Iterator[tuple[_Run, str]]:
        for run in self.runs:
            stop = len(run.lines) if run.stop is None else run.stop
            for index in range(run.start, stop):
                yield run, run.prefix + run.lines[index]


def split_lines(text: str) -> list[str]:
    """The lines of ``text``: split at ``\\n`` only (a lone ``\\r`` is shown escaped).

    A ``\\r\\n`` ending counts as one line break; a final line break ends the last line.
    """
    if not text:
        return []
    lines = text.split("\n")
    if len(lines) > 1 and lines[-1] == "":
        lines.pop()
    if "\r\n" in text:
        lines = [line[:-1] if line.endswith("\r") else line for line in lines]
    return lines


def _shift_hunk(line: str, old_offset: int, new_offset: int) -> str:
    match = _HUNK.match(line)
    if match is None:
        return line
    old_start, old_count, new_start, new_count = match.groups()
    return (
        f"@@ -{int(old_start) + old_offset}{old_count} +{int(new_start) + new_offset}{new_count} @@"
    )


def _diff_rows(diff: Diff, rows: _Rows) -> None:
    """Add ``diff`` to ``rows`` as a unified diff, in time linear in its size.

    Lines common to both ends are cut off first; what changed between them is
    compared with difflib when it is small, else shown as all old lines removed
    then all new lines added (said so).
    """
    old = diff.old_text
    path = diff.path
    if old is None:
        rows.line(f"new file {path}", "bold")
    elif diff.new_text == "" and old != "":
        rows.line(f"empties {path}", "bold")
    else:
        rows.line(f"edit {path}", "bold")
    old_lines = split_lines(old or "")
    new_lines = split_lines(diff.new_text)
    if old_lines == new_lines:
        if old is None and diff.new_text == "":
            rows.line("(empty file)", "dim")
        elif (old or "") == diff.new_text:
            rows.line("(no change)", "dim")
        else:
            rows.line("(only line endings differ)", "yellow")
            rows.line(f"- {old!r}", "red")
            rows.line(f"+ {diff.new_text!r}", "green")
        return
    fromfile = "/dev/null" if old is None else path
    rows.line(f"--- {fromfile}", "bold")
    rows.line(f"+++ {path}", "bold")
    head = 0
    limit = min(len(old_lines), len(new_lines))
    while head < limit and old_lines[head] == new_lines[head]:
        head += 1
    tail = 0
    while tail < limit - head and old_lines[len(old_lines) - 1 - tail] == new_lines[-1 - tail]:
        tail += 1
    old_stop, new_stop = len(old_lines) - tail, len(new_lines) - tail
    start = max(0, head - _DIFF_CONTEXT)
    if (old_stop - head) + (new_stop - head) <= _DIFF_COMPARE_LINES:
        hunks = difflib.unified_diff(
            old_lines[start : old_stop + _DIFF_CONTEXT],
            new_lines[start : new_stop + _DIFF_CONTEXT],
            lineterm="",
            n=_DIFF_CONTEXT,
        )
        body = [_shift_hunk(line, start, start) for line in hunks][2:]  # without ---/+++
        rows.lines(body, style=None)
        return
    context_stop = min(len(old_lines), old_stop + _DIFF_CONTEXT)
    old_count = context_stop - start
    new_count = old_count - (old_stop - new_stop)
    rows.line(f"@@ -{start + 1},{old_count} +{start + 1},{new_count} @@", "cyan")
    rows.line("(too many changed lines to compare: old ones removed, new ones added)", "dim")
    rows.lines(old_lines, start=start, stop=head, prefix=" ")
    rows.lines(old_lines, start=head, stop=old_stop, prefix="-", style="red")
    rows.lines(new_lines, start=head, stop=new_stop, prefix="+", style="green")
    rows.lines(old_lines, start=old_stop, stop=context_stop, prefix=" ")


def _diff_style(line: str) -> str:
    if line.startswith("@@"):
        return "cyan"
    if line.startswith("+"):
        return "green"
    if line.startswith("-"):
        return "red"
    return ""


# --------------------------------------------------------------- the request


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


@dataclass
class _Analysis:
    """What a card shows of a request, worked out once (a card is drawn many times)."""

    command_lines: list[str]
    details: _Rows
    hidden: bool


def _one_line_strings(request: PermissionRequest) -> Iterator[str]:
    call = request.tool_call
    yield request.session_id
    yield call.tool_call_id
    yield call.title or ""
    for block in call.content or ():
        if isinstance(block, Diff):
            yield block.path
    for location in call.locations or ():
        yield location.path
    for option in request.options:
        yield option.name
        yield option.kind


def _multi_line_strings(request: PermissionRequest) -> Iterator[str]:
    call = request.tool_call
    yield pretty_json(call.raw_input)
    for block in call.content or ():
        if isinstance(block, Diff):
            yield block.old_text or ""
            yield block.new_text
        elif isinstance(block, Content):
            yield _block_text(block.content)
    yield pretty_json(request.meta)
    yield pretty_json(call.meta)


def _analyse(request: PermissionRequest) -> _Analysis:
    call = request.tool_call
    raw_input = call.raw_input
    command = _command_of(raw_input)
    rows = _Rows()
    if command is not None and isinstance(raw_input, dict):
        rest = {k: v for k, v in raw_input.items() if k != "command"}
        if rest:
            rows.title("Other input")
            rows.lines(split_lines(pretty_json(rest)))
    elif raw_input is not None:
        rows.title("Input")
        rows.lines(split_lines(pretty_json(raw_input)))
    diffs = [block for block in call.content or () if isinstance(block, Diff)]
    if diffs:
        count = len(diffs)
        rows.title(f"Changes ({count} file{'s' if count != 1 else ''})")
        for diff in diffs:
            _diff_rows(diff, rows)
    if call.locations:
        rows.title("Locations")
        for location in call.locations:
            line = f":{location.line}" if location.line is not None else ""
            meta = f"  {compact_json(location.meta)}" if location.meta else ""
            rows.line(location.path + line + meta)
    others = [block for block in call.content or () if not isinstance(block, Diff)]
    if others:
        rows.title("Content")
        for block in others:
            if isinstance(block, Terminal):
                rows.line(f"[terminal] {block.terminal_id}")
            elif isinstance(block, Content):
                rows.lines(split_lines(_block_text(block.content)))
    if request.meta:
        rows.title("Request _meta")
        rows.lines(split_lines(pretty_json(request.meta)), style="dim")
    if call.meta:
        rows.title("Tool call _meta")
        rows.lines(split_lines(pretty_json(call.meta)), style="dim")
    hidden = any(has_hidden(s) for s in _one_line_strings(request)) or any(
        has_hidden(s.replace("\r\n", "\n"), keep="\n\t") for s in _multi_line_strings(request)
    )
    return _Analysis(split_lines(command) if command is not None else [], rows, hidden)


_analyses: dict[int, tuple[PermissionRequest, _Analysis]] = {}


def _analysis(request: PermissionRequest) -> _Analysis:
    """:func:`_analyse`, remembered for the last few requests (keyed by identity)."""
    cached = _analyses.get(id(request))
    if cached is not None and cached[0] is request:
        return cached[1]
    analysis = _analyse(request)
    if len(_analyses) >= _CACHED_REQUESTS:
        del _analyses[next(iter(_analyses))]
    _analyses[id(request)] = (request, analysis)
    return analysis


# ------------------------------------------------------------------ the card


def _label_grid() -> Table:
    grid = Table.grid(padding=(0, 2))
    grid.add_column(style="bold", no_wrap=True, min_width=7)
    grid.add_column(overflow="fold")
    return grid


def _gutter_grid() -> Table:
    grid = Table.grid(padding=(0, 1))
    grid.add_column(no_wrap=True, width=1)
    grid.add_column(overflow="fold")
    return grid


def _one_row(text: Text) -> Text:
    """``text`` cut to one terminal row, with ``…`` where it was cut."""
    row = text.copy()
    row.no_wrap = True
    row.overflow = "ellipsis"
    return row


def _command_row(index: int, line: str, chars: int) -> Text:
    if index == 0:  # "$ " and the command in one style: one run of text on the terminal
        return escaped("$ " + line, "bold yellow", limit=chars + 2)
    row = Text("> ", style="dim")
    row.append_text(escaped(line, "bold yellow", limit=chars))
    return row


def _detail_row(run: _Run, line: str, chars: int) -> Text:
    style = _diff_style(line) if run.style is None else run.style
    return escaped(line, style, limit=chars)


_WARNING: Final = Text(
    "⚠ this request contains line breaks, control or invisible characters, or characters "
    "a terminal may draw wider or narrower, where they do not belong; they are shown escaped "
    "(\\n, \\x1b, \\u202e …)",
    style="bold yellow",
)


@dataclass(frozen=True)
class _Layout:
    """What a live card shows: command lines, detail rows, the summary, one row per line or not."""

    commands: int
    rows: list[tuple[_Run, str]]
    summary: str | None
    compact: bool


class PermissionCard:
    """A permission request, ready to show: ``console.print(PermissionCard(request, ...))``.

    ``session_title`` names the session that asks (``None`` if unknown);
    ``position`` is ``(n, total)`` when other cards wait behind this one;
    ``hint`` is the last line (how to answer, given the input mode);
    ``max_height`` makes it a live card of at most that many rows (see the
    module docstring); ``None`` is the full card.
    """

    def __init__(
        self,
        request: PermissionRequest,
        *,
        session_title: str | None = None,
        position: tuple[int, int] | None = None,
        hint: Text | str | None = None,
        max_height: int | None = None,
        editor_rules: Sequence[str] = (),
    ) -> None:
        self.request = request
        self.session_title = session_title
        self.position = position
        self.hint = hint
        self.max_height = max_height
        self.editor_rules = tuple(editor_rules)

    def fitted(self, max_height: int | None) -> PermissionCard:
        """This card, as a live card of at most ``max_height`` rows (``None``: full)."""
        return PermissionCard(
            self.request,
            session_title=self.session_title,
            position=self.position,
            hint=self.hint,
            max_height=max_height,
            editor_rules=self.editor_rules,
        )

    @property
    def offers_deny(self) -> bool:
        """True if at least one option is a ``reject_*`` kind."""
        return any(option.kind.startswith("reject") for option in self.request.options)

    def _head(self, command_lines: Sequence[str], shown: int, chars: int, compact: bool) -> Table:
        request = self.request
        call = request.tool_call
        head = _label_grid()

        def row(text: Text) -> Text:
            return _one_row(text) if compact else text

        session = escaped(self.session_title or "", "bold", limit=chars)
        if self.session_title:
            session.append(" ")
        session.append_text(escaped(f"({request.session_id})", limit=chars))
        head.add_row("Session", row(session))
        tool = escaped(call.title or "(untitled tool call)", "bold", limit=chars)
        tool.append(f"  kind: {call.kind or 'unknown'}", style="magenta")
        head.add_row("Tool", row(tool))
        head.add_row("Call", row(escaped(call.tool_call_id, "dim", limit=chars)))
        for index, line in enumerate(command_lines[:shown]):
            head.add_row("Command" if index == 0 else "", row(_command_row(index, line, chars)))
        return head

    def _options(self, chars: int, compact: bool) -> list[RenderableType]:
        """The options, then what Esc does if none denies, then the hint.

        The live card shows only the options a key can choose and counts the rest.
        """
        options = self.request.options
        live = self.max_height is not None
        shown = options[:KEYED_OPTIONS] if live else options
        grid = Table.grid(padding=(0, 2))
        grid.add_column(no_wrap=True)
        grid.add_column(overflow="fold")
        grid.add_column(no_wrap=True)
        for number, option in enumerate(shown, start=1):
            name = escaped(option.name, OPTION_STYLES.get(option.kind, ""), limit=chars)
            if option.kind.endswith("_always"):
                name.append(" (the agent decides what this covers)", style="dim")
            grid.add_row(
                Text(f"{number:>2} ", style=_NUMBER_STYLE),
                _one_row(name) if compact else name,
                escaped(option.kind, "dim"),
            )
        rules: list[RenderableType] = []
        if self.editor_rules:
            rules_grid = Table.grid(padding=(0, 2))
            rules_grid.add_column(no_wrap=True)
            rules_grid.add_column(overflow="fold")
            for key, label in zip(EDITOR_RULE_KEYS, self.editor_rules, strict=False):
                style = "green" if label.startswith("Always allow") else "red"
                text = escaped(label, style, limit=chars)
                rules_grid.add_row(
                    Text(f" {key} ", style=_NUMBER_STYLE), _one_row(text) if compact else text
                )
            rules = [
                Text("Editor rules (kept by the editor; /rules lists them)", style="bold"),
                rules_grid,
            ]
        lines: list[Text] = []
        if len(shown) < len(options):
            lines.append(
                Text(
                    f"… {len(options) - len(shown):,} more options "
                    f"({len(shown) + 1}-{len(options)}): no key chooses them; "
                    "press v to see them all",
                    style="bold yellow",
                )
            )
        if not any(option.kind.startswith("reject") for option in shown):
            what = "was offered" if len(shown) == len(options) else "has a key"
            lines.append(
                Text(f"No deny option {what}: Esc answers cancelled (a denial).", style="red")
            )
        if self.hint is not None:
            lines.append(self.hint if isinstance(self.hint, Text) else Text(self.hint))
        if compact:
            lines = [_one_row(line) for line in lines]
        return [Text("Options", style="bold"), grid, *rules, *lines]

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        analysis = _analysis(self.request)
        width = max(8, options.max_width - _PANEL_COLUMNS)
        inner = options.update(width=width, height=None)
        warning = _WARNING if analysis.hidden else None
        if self.max_height is None:
            rows = list(_take(analysis.details, FULL_MAX_ROWS))
            more = len(analysis.details) - len(rows)
            summary = f"… {more:,} more lines not shown" if more else None
            full = _Layout(len(analysis.command_lines), rows, summary, compact=False)
            yield self._panel(analysis, full, warning, _FULL_CHARS)
            return
        budget = self.max_height
        layout = self._fit(console, inner, analysis, warning, budget - _PANEL_ROWS, False)
        if layout is None:
            warning = None if warning is None else _one_row(warning)
            layout = self._fit(console, inner, analysis, warning, budget - _PANEL_ROWS, True)
        if layout is None:  # the least this card can be: its first rows, then why
            layout = _Layout(min(1, len(analysis.command_lines)), [], None, compact=True)
        panel = self._panel(analysis, layout, warning, _LIVE_CHARS)
        lines = console.render_lines(panel, options, pad=False)
        if len(lines) > budget:
            notice = _one_row(
                Text(
                    "⚠ the terminal is too small for this card: press v to print it whole, "
                    "Esc answers cancelled",
                    style="bold reverse yellow",
                )
            )
            lines = lines[: max(0, budget - 1)] + console.render_lines(notice, options, pad=False)
        new_line = Segment.line()
        for line in lines:
            yield from line
            yield new_line

    def _panel(
        self, analysis: _Analysis, layout: _Layout, warning: Text | None, chars: int
    ) -> Panel:
        parts: list[RenderableType] = [
            self._head(analysis.command_lines, layout.commands, chars, layout.compact)
        ]
        if warning is not None:
            parts.append(warning)
        parts.extend(_details(layout.rows, chars))
        if layout.summary is not None:
            summary = Text(layout.summary, style="bold yellow")
            parts.append(_one_row(summary) if layout.compact else summary)
        parts.extend(self._options(chars, layout.compact))
        title = Text("Permission request", style="bold")
        if self.position is not None and self.position[1] > 1:
            title.append(f"  {self.position[0]} of {self.position[1]}", style="dim")
        return Panel(
            Group(*parts),
            title=title,
            title_align="left",
            subtitle=Text(session_label(self.request.session_id, self.session_title)),
            subtitle_align="right",
            border_style="yellow",
            expand=False,  # as wide as what it shows: less to draw on each frame
        )

    def _fit(
        self,
        console: Console,
        inner: ConsoleOptions,
        analysis: _Analysis,
        warning: Text | None,
        budget: int,
        compact: bool,
    ) -> _Layout | None:
        """How many command lines and which detail rows fit in ``budget`` rows.

        The head, at least the first command line, the warning and the options
        come first (``None`` if they do not fit); then the other command lines,
        then the details, as far as they fit (each row measured as it will
        wrap); then the summary line.
        """
        commands = analysis.command_lines
        details = analysis.details
        rest: list[RenderableType] = [] if warning is None else [warning]
        rest.extend(self._options(_LIVE_CHARS, compact))
        rest_height = len(console.render_lines(Group(*rest), inner, pad=False))
        # The first lines of the command, or only the first on a very small screen.
        for shown in (min(len(commands), _COMMAND_HEAD), min(len(commands), 1)):
            head = self._head(commands, shown, _LIVE_CHARS, compact)
            left = budget - rest_height - len(console.render_lines(head, inner, pad=False))
            hidden_total = len(commands) - shown + len(details)
            if hidden_total == 0:
                return _Layout(shown, [], None, compact) if left >= 0 else None
            # The summary, unless everything fits: as tall as its longest wording.
            longest = _summary(len(commands) + len(details), len(commands))
            left -= 1 if compact else len(Text(longest).wrap(console, inner.max_width))
            if left >= 0:
                break
        else:
            return None
        command_width = max(1, inner.max_width - 9)  # right of the label column
        while shown < len(commands):
            row = _command_row(shown, commands[shown], _LIVE_CHARS)
            height = 1 if compact else len(row.wrap(console, command_width))
            if height > left:
                break
            left -= height
            shown += 1
        rows: list[tuple[_Run, str]] = []
        if shown == len(commands):
            detail_width = max(1, inner.max_width - 2)  # the gutter
            for run, line in details:
                if run.title:
                    height = 1
                else:
                    height = len(_detail_row(run, line, _LIVE_CHARS).wrap(console, detail_width))
                if height > left:
                    break
                left -= height
                rows.append((run, line))
        more = len(commands) - shown + len(details) - len(rows)
        if more == 0:
            return _Layout(shown, rows, None, compact)
        return _Layout(shown, rows, _summary(more, len(commands) - shown), compact)


def _summary(more: int, of_command: int) -> str:
    where = f" ({of_command:,} of the command)" if of_command else ""
    return f"… {more:,} more lines{where}: press v to view"


def _take(rows: Iterable[tuple[_Run, str]], count: int) -> Iterator[tuple[_Run, str]]:
    for index, row in enumerate(rows):
        if index >= count:
            return
        yield row


def _details(rows: Sequence[tuple[_Run, str]], chars: int) -> list[RenderableType]:
    """Title rows at the left edge; the runtime's lines behind a gutter, one grid per run."""
    parts: list[RenderableType] = []
    grid: Table | None = None
    for run, line in rows:
        if run.title:
            grid = None
            parts.append(Text(line, style="bold"))
            continue
        if grid is None:
            grid = _gutter_grid()
            parts.append(grid)
        grid.add_row(_GUTTER, _detail_row(run, line, chars))
    return parts
