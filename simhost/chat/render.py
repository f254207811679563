"""How the chat shows everything that is not a permission card.

Pure functions from data to Rich renderables; strings from the runtime go
through :func:`~simhost.chat.text.one_line` (or :func:`~simhost.chat.text.visible`
where a line break is theirs to make, a history entry) and are never parsed as markup.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Final, NamedTuple

from rich.console import Group, RenderableType
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from permclient import Selected, ToolCallState
from simhost.rulebook import RuleBook

from .approvals import Approval
from .card import session_label
from .protocol import (
    HistoryEntry,
    InitializeResult,
    PermissionsResult,
    SessionHistory,
    SessionSummary,
)
from .text import compact_json, escaped, one_line, visible

__all__ = [
    "GLYPHS",
    "ListedRule",
    "banner",
    "batch_items",
    "batch_list",
    "busy_line",
    "decision_note",
    "help_table",
    "history_view",
    "permissions_view",
    "prompt_line",
    "receipt_line",
    "rule_list",
    "rules_table",
    "sessions_table",
    "tool_line",
    "waiting_marker",
]

RECEIPT_RULE_CHARS: Final = 120  # of a rule's words on a receipt line
GLYPHS: Final = {"pending": "○", "in_progress": "◐", "completed": "✓", "failed": "✗"}
_GLYPH_STYLES: Final = {
    "pending": "dim",
    "in_progress": "cyan",
    "completed": "green",
    "failed": "red",
}
_BY: Final = {
    "editor": "by you",
    "policy": "by the policy",
    "preset": "by the session's preset",
}

COMMANDS: Final[Sequence[tuple[str, str]]] = (
    ("TEXT", "send TEXT to the current session (waits for the turn; Ctrl-C cancels it)"),
    ("/bg TEXT", "send TEXT in the background and keep typing"),
    ("/new [TITLE]", "start a session and make it current"),
    ("/sessions", "list sessions: active flag, running turns, approvals waiting"),
    ("/switch SESSION", "make SESSION current (loads it; the runtime activates it)"),
    ("/peek SESSION", "show SESSION's history without activating it"),
    ("", "SESSION: an id, a unique prefix of one, or a title (any case)"),
    ("/policy [PRESET]", "show the current session's permission preset, or set it"),
    ("/cancel [ID]", "cancel the running turn of session ID (default: current)"),
    ("/wait", "wait until a card is up or no turn runs (for scripts)"),
    ("/rules", "list the editor rules: scope, lifetime, how many questions each answered"),
    ("/rules rm N", "revoke rule N (saved at once)"),
    ("/rules edit", "open the rules file in $VISUAL/$EDITOR; /rules reload reads it again"),
    ("/allow-all WHAT", "answer this session's pending questions of a kind (reads) or a path"),
    ("/deny-all WHAT", "glob (src/**): lists them, then asks y/N; runs during a turn too"),
    ("/help", "this help"),
    ("/quit", "leave; asks first while turns run (Ctrl-C, Ctrl-D on an empty line too)"),
)
KEYS: Final[Sequence[tuple[str, str]]] = (
    ("1-9", "on a card: choose that option (a deny option then takes a reason: Enter sends)"),
    ("a-d", "on a card: save that editor rule (its scope is shown first)"),
    ("y", "on a card: confirm an always option or an editor rule picked by key"),
    ("Esc", "on a card: answer cancelled (a denial)"),
    ("v", "on a card: print the whole card into the transcript (answers nothing)"),
    ("Enter", "on a card: does nothing (there is no default option)"),
    ("Ctrl-C", "cancel the turn (its open cards are answered cancelled); at the prompt:"),
    ("", "clear the line, or quit on an empty one"),
    ("Ctrl-U, Ctrl-W", "clear the line, delete a word"),
)


def decision_note(meta: Mapping[str, Any]) -> str | None:
    """What ``_meta.simhost`` says about who decided, e.g. ``denied by you``."""
    decided_by = meta.get("decidedBy")
    decision = meta.get("decision")
    if not isinstance(decided_by, str):
        return None
    verb = "allowed" if decision == "allow" else "denied" if decision == "deny" else None
    if decided_by == "grant":
        return f"standing grant applied ({verb or one_line(str(decision))})"
    if decided_by == "timeout":
        return "denied: the question timed out and was withdrawn"
    who = _BY.get(decided_by, f"by {one_line(decided_by)}")
    return f"{verb or one_line(str(decision))} {who}"


def tool_line(
    state: ToolCallState, *, prefix: str = "", meta: Mapping[str, Any] | None = None
) -> Text:
    """One line for a tool call: glyph, title, kind, status, and who decided."""
    status = state.status
    line = Text(prefix)
    line.append(GLYPHS.get(status, "?") + " ", style=_GLYPH_STYLES.get(status, ""))
    line.append(one_line(state.title or state.tool_call_id), style="bold")
    if state.kind:
        line.append(f"  [{one_line(state.kind)}]", style="magenta")
    line.append(f"  {status.replace('_', ' ')}", style=_GLYPH_STYLES.get(status, ""))
    note = decision_note(meta) if meta else None
    if note:
        line.append(f" — {note}", style="yellow" if "grant" in note else "")
    output = _output_summary(state.raw_output)
    if output and note and output.lower() in note.lower():
        output = None  # the note already says it
    if output and state.is_final:
        line.append(f"  {output}", style="dim")
    return line


def _output_summary(raw_output: Any) -> str | None:
    if isinstance(raw_output, str):
        text = raw_output
    elif isinstance(raw_output, dict):
        for key in ("error", "message", "result", "stdout"):
            value = raw_output.get(key)
            if isinstance(value, str) and value.strip():
                text = value
                break
        else:
            return None
    else:
        return None
    first = text.strip().splitlines()[0] if text.strip() else ""
    if len(first) > 100:
        first = first[:99] + "…"
    return one_line(first) or None


def sessions_table(
    sessions: Iterable[SessionSummary],
    *,
    current: str | None,
    waiting: Mapping[str, int],
    running: Mapping[str, str],
) -> Table:
    """The ``/sessions`` table: id, title, active flag, updatedAt, turn, approvals waiting."""
    table = Table(title="Sessions", title_justify="left", expand=False)
    table.add_column("id", no_wrap=True)
    table.add_column("title")
    table.add_column("active", justify="center")
    table.add_column("updated")
    table.add_column("turn")
    table.add_column("approvals", justify="right")
    for row in sessions:
        sid = row.session_id
        marker = "▶ " if sid == current else "  "
        count = waiting.get(sid, 0)
        table.add_row(
            Text(marker + one_line(sid), style="bold" if sid == current else ""),
            Text(one_line(row.title or "")),
            Text("●", style="green") if row.is_active else Text("·", style="dim"),
            Text(one_line(row.updated_at or ""), style="dim"),
            Text(running.get(sid, ""), style="cyan"),
            Text(f"⧗ {count}", style="bold yellow") if count else Text(""),
        )
    return table


def _history_line(entry: HistoryEntry) -> Text:
    if entry.role == "user":
        line = Text("you   ", style="bold cyan")
    elif entry.role == "tool":
        glyph = GLYPHS.get(entry.status or "", "•")
        line = Text(f"tool  {glyph} ", style=_GLYPH_STYLES.get(entry.status or "", "magenta"))
    else:
        line = Text(f"{one_line(entry.role)[:5]:<6}", style="bold")
    line.append(visible(entry.text))
    return line


def history_view(history: SessionHistory, *, peek: bool, limit: int = 40) -> Panel:
    """A session's history; ``peek`` marks it as read without activating."""
    entries = history.history
    parts: list[RenderableType] = []
    if len(entries) > limit:
        parts.append(Text(f"… {len(entries) - limit} earlier entries", style="dim"))
        entries = entries[-limit:]
    parts.extend(_history_line(entry) for entry in entries)
    if not history.history:
        parts.append(Text("(no history yet)", style="dim"))
    what = "peek (not activated)" if peek else "switched to"
    title = Text(f"{what}: {session_label(history.session_id, history.title)}", style="bold")
    active = "active" if history.is_active else "not active"
    return Panel(
        Group(*parts),
        title=title,
        title_align="left",
        subtitle=Text(f"{active} · updated {one_line(history.updated_at or '?')}", style="dim"),
        subtitle_align="right",
        border_style="blue" if peek else "green",
    )


def permissions_view(session_id: str, title: str | None, result: PermissionsResult) -> Table:
    """The ``/policy`` table: presets (current one marked) and standing grants."""
    table = Table(
        title=Text(f"Permissions of {session_label(session_id, title)}"),
        title_justify="left",
        show_header=True,
    )
    table.add_column("preset", no_wrap=True)
    table.add_column("description")
    for preset in result.presets:
        chosen = preset.preset_id == result.preset_id
        marker = "▶ " if chosen else "  "
        table.add_row(
            Text(marker + one_line(preset.preset_id), style="bold" if chosen else ""),
            Text(one_line(preset.description)),
        )
    if not result.presets:
        table.add_row(Text("▶ " + one_line(result.preset_id), style="bold"), Text(""))
    for grant in result.grants:
        if grant.name:
            what = grant.name
        elif grant.scope:
            what = f"always {grant.decision}: {' '.join(grant.scope)}"
        else:
            what = f"always {grant.decision}"
        table.add_row(
            Text(f"  grant: {one_line(grant.tool)}", style="yellow"),
            Text(one_line(what), style="yellow"),
        )
    return table


def help_table(
    commands: Sequence[tuple[str, str]] = COMMANDS, keys: Sequence[tuple[str, str]] = KEYS
) -> Table:
    """Commands and keys (the chat's, unless others are given: ``simhost approve``'s)."""
    table = Table.grid(padding=(0, 2))
    table.add_column(style="bold cyan", no_wrap=True)
    table.add_column()
    for name, text in commands:
        table.add_row(name, text)
    table.add_row("", "")
    for name, text in keys:
        table.add_row(name, text)
    return table


def banner(init: InitializeResult, *, pid: int | None, role: str = "runtime") -> Text:
    """Which runtime (or ``agent``: ``role``) we talk to, its workspace and policy."""
    info = init.runtime_info
    text = Text("simhost chat", style="bold")
    text.append(f" · {role} ")
    text.append(one_line(f"{info.name} {info.version}".strip() if info else "?"), style="bold")
    if pid is not None:
        text.append(f" (pid {pid})", style="dim")
    if init.workspace:
        text.append(" · workspace ")
        text.append(one_line(init.workspace), style="bold")
    if init.policy is not None:
        policy = init.policy if isinstance(init.policy, str) else compact_json(init.policy)
        text.append(" · policy ")
        text.append(one_line(policy), style="bold")
    text.append("\n/help lists the commands; answer cards with their number keys.", style="dim")
    return text


def waiting_marker(
    waiting: Sequence[Approval], titles: Mapping[str, str | None], *, note: str | None = None
) -> Text:
    """``⧗ 2 approvals waiting: s-2 fs.write: a.txt, s-3 …`` for cards not shown now.

    Every string is cut short: a long title of a card not shown must never push the
    shown one off the screen."""
    count = len(waiting)
    text = Text(f"⧗ {count} approval{'s' if count != 1 else ''} waiting: ", style="bold yellow")
    shown = []
    for approval in waiting[:3]:
        title = titles.get(approval.session_id)
        who = _short(approval.session_id) + (f" '{_short(title)}'" if title else "")
        shown.append(f"{who} {_short(approval.tool_title)}")
    text.append(", ".join(shown) + (" …" if count > 3 else ""), style="yellow")
    if note:
        text.append(f"  ({note})", style="dim")
    return text


def _short(text: str, limit: int = 40) -> str:
    """``text`` on one line, at most ``limit`` characters of it (then ``…``)."""
    line = one_line(text)
    return line if len(line) <= limit else line[: limit - 1] + "…"


def prompt_line(label: str, text: str, *, cursor: bool = True) -> Text:
    """``label > text█`` (the block is a drawn cursor)."""
    line = Text()
    line.append(label, style="bold cyan")
    line.append(" > ", style="cyan")
    line.append(text)
    if cursor:
        line.append(" ", style="reverse")
    return line


def busy_line(what: str, typed: str) -> Text:
    """Shown instead of the prompt while a foreground turn or command runs."""
    line = Text("… ", style="cyan")
    line.append(what, style="cyan")
    line.append("  (Ctrl-C cancels)", style="dim")
    if typed:
        line.append("  typed ahead: ", style="dim")
        line.append(typed)
    return line


class ListedRule(NamedTuple):
    """One row of a rules list: what :func:`rule_list` shows of a rule."""

    number: int
    effect: str  # "allow" or "deny"
    rule: str  # its words (``describe``)
    hits: int  # questions it answered
    kept_in: str | None  # its file, or None: kept in memory


def rule_list(rows: Sequence[ListedRule], *, empty: str) -> Table | Text:
    """The rules, numbered, with what each matches, its hits and where it is kept; or
    ``empty`` when there are none. Shared by ``simhost chat`` and ``simhost approve``."""
    if not rows:
        return Text(empty, style="dim")
    table = Table(title="editor rules (a deny rule beats an allow rule)", title_justify="left")
    for name in ("#", "rule", "answered", "kept in"):
        table.add_column(name, overflow="fold")
    for row in rows:
        table.add_row(
            str(row.number),
            Text(visible(row.rule), style="green" if row.effect == "allow" else "red"),
            str(row.hits),
            visible(row.kept_in) if row.kept_in else "memory (until the session ends)",
        )
    return table


def rules_table(book: RuleBook) -> Table | Text:
    """``/rules``: every rule, numbered, with its scope, lifetime, hits and file."""
    engine = book.engine
    rows = []
    for number, rule in enumerate(engine.rules, 1):
        where = book.file_of(rule)
        rows.append(
            ListedRule(
                number,
                rule.effect,
                rule.describe(engine.workspace),
                engine.hits(rule),
                str(where) if where else None,
            )
        )
    return rule_list(
        rows,
        empty="no editor rules yet: a card's a-d keys save one; "
        f"files: {book.workspace_file}, {book.user_file}",
    )


def batch_items(
    command: str, what: str, items: Sequence[tuple[str, str, str]], *, where: str | None = None
) -> Text:
    """What ``/allow-all`` or ``/deny-all`` will answer, and the question it asks: each
    item is (a tag such as ``#3``, the tool call's title, the option's name);
    ``where`` names the session, if the command does not say it."""
    count = len(items)
    text = Text(
        f"{command} {one_line(what)} will answer {count} question{'s' if count != 1 else ''}"
        + (f" in {where}" if where else "")
        + ":\n",
        style="bold",
    )
    for tag, title, name in items:
        text.append(f"  {tag} {one_line(title)}", style="")
        text.append(f" → {one_line(name)}\n", style="dim")
    text.append("Answer them? y/N", style="bold yellow")
    return text


def batch_list(command: str, what: str, answers: Sequence[tuple[Approval, Selected]]) -> Text:
    """What ``/allow-all`` or ``/deny-all`` will answer, and the question it asks."""
    items = []
    for approval, decision in answers:
        option = approval.request.option(decision.option_id)
        name = option.name if option is not None else "?"
        items.append((f"#{approval.seq}", approval.tool_title, name))
    return batch_items(command, what, items)


def receipt_line(number: int, allowed: bool, title: str, where: str, rule: str) -> Text:
    """``⚖ rule 1 allowed · <tool> · <session> · <the rule>``: an editor rule answered
    a question (``where``: the session's label, already made safe)."""
    line = Text(
        f"⚖ rule {number} {'allowed' if allowed else 'denied'}",
        style="bold green" if allowed else "bold red",
    )
    line.append(f" · {one_line(title)}")
    line.append(f" · {where} · ", style="dim")
    line.append_text(escaped(rule, "dim", limit=RECEIPT_RULE_CHARS))
    return line
