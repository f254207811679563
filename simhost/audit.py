"""The audit trail: one JSON line per answered permission question, per workspace.

``audit.jsonl`` in the workspace's state folder (beside its rules, outside the
workspace). Each line is an :class:`AuditRecord`: when, which session and tool
call, what was asked (title, kind, command, paths), the outcome and option, who
answered (``person``, ``rule``, ``batch``) or why it was cancelled
(``runtime``: withdrawn by the agent, ``turn``, ``timeout``, ``teardown``;
``elsewhere``: answered by host code outside the views),
the detail (the view, the rule, the key), and the person's reason if any.
Lines are appended whole (``O_APPEND``); a line that cannot be read is skipped
by the reader, never fatal.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Final, Literal

import msgspec

from permclient import Decision, PermissionRequest, Selected
from permclient.rules import reason_of, subject_of

__all__ = ["AUDIT_NAME", "AuditLog", "AuditRecord", "Outcome", "read_audit", "record_for"]

AUDIT_NAME: Final = "audit.jsonl"
MAX_FIELD: Final = 2000
"""The longest string kept in a record (characters): the rest is cut."""

Outcome = Literal["allowed", "denied", "cancelled"]
AnsweredBy = Literal[
    "person", "rule", "batch", "runtime", "turn", "timeout", "teardown", "elsewhere"
]


class AuditRecord(msgspec.Struct, rename="camel", omit_defaults=True, kw_only=True):
    """One answered question."""

    time: datetime
    session: str
    tool_call: str
    outcome: Outcome
    by: AnsweredBy
    title: str | None = None
    kind: str | None = None
    command: str | None = None
    paths: list[str] = msgspec.field(default_factory=list)
    option_id: str | None = None
    option_name: str | None = None
    option_kind: str | None = None
    detail: str | None = None
    reason: str | None = None


def _cut(text: str | None) -> str | None:
    return None if text is None else text[:MAX_FIELD]


def record_for(
    request: PermissionRequest,
    decision: Decision | None,
    *,
    by: AnsweredBy,
    workspace: str,
    detail: str | None = None,
    reason: str | None = None,
) -> AuditRecord:
    """The record of ``request`` answered ``decision`` (``None``: cancelled); the
    reason is ``reason``, else the one in the decision's ``_meta``."""
    call = request.tool_call
    option = request.option(decision.option_id) if isinstance(decision, Selected) else None
    outcome: Outcome = "cancelled"
    if option is not None:
        outcome = "allowed" if option.kind.startswith("allow") else "denied"
    subject = subject_of(request, workspace)
    words = subject.words if subject.words is not None else subject.all_words
    return AuditRecord(
        time=datetime.now(UTC),
        session=request.session_id,
        tool_call=call.tool_call_id,
        outcome=outcome,
        by=by,
        title=_cut(call.title),
        kind=call.kind,
        command=_cut(" ".join(words)) if words else None,
        paths=[path for path in subject.paths[:100]],
        option_id=option.option_id if option else None,
        option_name=_cut(option.name) if option else None,
        option_kind=option.kind if option else None,
        detail=_cut(detail),
        reason=_cut(reason if reason is not None else reason_of(getattr(decision, "meta", None))),
    )


class AuditLog:
    """Appends records to ``path`` (its folder is made when needed)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.failed: str | None = None
        """Why the last write failed, if it did (the caller says so once)."""

    def append(self, record: AuditRecord) -> bool:
        """Write one line; False (and :attr:`failed` set) if it could not be written."""
        line = msgspec.json.encode(record) + b"\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            descriptor = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                os.write(descriptor, line)
            finally:
                os.close(descriptor)
        except OSError as exc:
            self.failed = f"cannot write the audit trail {self.path}: {exc.strerror or exc}"
            return False
        return True


def read_audit(path: Path) -> Iterator[AuditRecord | int]:
    """The records of ``path`` in order; the line number of each line that is not one."""
    decoder = msgspec.json.Decoder(AuditRecord)
    with path.open("rb") as file:
        for number, line in enumerate(file, 1):
            if not line.strip():
                continue
            try:
                yield decoder.decode(line)
            except msgspec.DecodeError:
                yield number
