"""``simhost audit``: the audit trail of a workspace, as a table."""

from __future__ import annotations

import re
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import msgspec
import typer
from rich.table import Table
from rich.text import Text

from simhost._usage import fail, plain_console
from simhost.runtime.sessions import default_state_dir

if TYPE_CHECKING:
    from simhost.audit import AuditRecord

__all__ = ["audit_command"]

_AGO = re.compile(r"(?P<count>\d+)(?P<unit>[smhd])")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
_OUTCOMES = ("allowed", "denied", "cancelled")
_STYLES = {"allowed": "green", "denied": "red", "cancelled": "yellow"}
_CELL = 80  # characters of a string shown in a cell


def _since(text: str) -> datetime:
    """``30m``, ``2h``, ``7d`` ago, or an ISO 8601 time (UTC without a zone)."""
    if ago := _AGO.fullmatch(text):
        delta = timedelta(**{_UNITS[ago["unit"]]: int(ago["count"])})
        return datetime.now(UTC) - delta
    when = datetime.fromisoformat(text)
    return when if when.utcoffset() is not None else when.replace(tzinfo=UTC)


def audit_command(
    workspace: Annotated[
        Path,
        typer.Option(
            help="The workspace whose trail to show. Default: the current folder.",
            metavar="DIR",
            show_default=False,
            file_okay=False,
            resolve_path=True,
        ),
    ] = Path("."),
    state_dir: Annotated[
        Path | None,
        typer.Option(
            "--state-dir",
            help="The state folder the chat or serve used (default: the workspace's, under "
            "$XDG_STATE_HOME/simhost/workspaces).",
            metavar="DIR",
            file_okay=False,
        ),
    ] = None,
    session: Annotated[
        str | None,
        typer.Option(help="Only this session's answers.", metavar="ID"),
    ] = None,
    outcome: Annotated[
        str | None,
        typer.Option(help="Only answers with this outcome.", metavar="allowed|denied|cancelled"),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            help="Only answers since then: 30m, 2h, 7d ago, or an ISO 8601 time.",
            metavar="WHEN",
        ),
    ] = None,
    as_json: Annotated[
        bool,
        typer.Option("--json", help="Print the matching records as JSON lines, not a table."),
    ] = False,
) -> None:
    """Show every permission answer given in a workspace: who answered, and how.

    Reads the audit trail simhost chat and simhost serve append to (audit.jsonl in
    the workspace's state folder, outside the workspace): one row per question
    answered by a person, an editor rule or a batch, or cancelled (withdrawn by the
    agent, the turn cancelled, a timeout, the host closing).

    Exit code: 0 (also when nothing matches), 2 for a usage error or a trail that
    cannot be read.
    """
    command = "simhost audit"
    if outcome is not None and outcome not in _OUTCOMES:
        raise fail(command, f"--outcome {outcome!r}: expected allowed, denied or cancelled")
    try:
        start = _since(since) if since is not None else None
    except ValueError:
        raise fail(command, f"--since {since!r}: give 30m, 2h, 7d or an ISO 8601 time") from None
    # Here, not at the top: every simhost start loads this module, and the trail's
    # reader brings the rule engine.
    from simhost.audit import AUDIT_NAME, read_audit

    path = (state_dir or default_state_dir(workspace)) / AUDIT_NAME
    console = plain_console()
    if not path.exists():
        plain_console(stderr=True).print(Text(f"no audit trail yet: {path}"), soft_wrap=True)
        return
    records: list[AuditRecord] = []
    unreadable: list[int] = []
    try:
        for item in read_audit(path):
            if isinstance(item, int):
                unreadable.append(item)
            elif (
                (session is None or item.session == session)
                and (outcome is None or item.outcome == outcome)
                and (start is None or item.time >= start)
            ):
                records.append(item)
    except OSError as exc:
        raise fail(command, f"cannot read {path}: {exc.strerror or exc}") from None
    if unreadable:
        lines = ", ".join(map(str, unreadable[:10])) + (" …" if len(unreadable) > 10 else "")
        plain_console(stderr=True).print(Text(f"{path}: lines skipped (not records): {lines}"))
    if as_json:
        for record in records:
            typer.echo(msgspec.json.encode(record).decode())
        return
    console.print(_table(records, path))


def _table(records: list[AuditRecord], path: Path) -> Table:
    # Here, not at the top: every simhost start loads this module, and the escaping
    # tables take a scan of Unicode to build.
    from simhost.chat.text import escaped

    table = Table(title=f"{len(records)} answers · {path}", title_justify="left", expand=False)
    for name in ("time", "session", "asked", "outcome", "by", "reason"):
        table.add_column(name, overflow="fold")
    for record in records:
        asked = escaped(record.title or record.tool_call, limit=_CELL)
        if record.command:
            asked.append("\n$ ")
            asked.append_text(escaped(record.command, "bold", limit=_CELL))
        for named in record.paths[:3]:
            asked.append("\n")
            asked.append_text(escaped(named, "cyan", limit=_CELL))
        result = Text(record.outcome, style=_STYLES[record.outcome])
        if record.option_name:
            result.append("\n")
            result.append_text(escaped(record.option_name, "dim", limit=_CELL))
        by = Text(record.by)
        if record.detail:
            by.append("\n")
            by.append_text(escaped(record.detail, "dim", limit=_CELL))
        table.add_row(
            record.time.astimezone(UTC).strftime("%Y-%m-%d %H:%M:%S"),
            escaped(record.session, limit=24),
            asked,
            result,
            by,
            escaped(record.reason or "", limit=_CELL),
        )
    return table
