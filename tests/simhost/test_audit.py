"""The audit trail (``simhost.audit``) and ``simhost audit``: records, filters, bad lines."""

from __future__ import annotations

from pathlib import Path

from permclient import Cancelled, Selected
from permclient.rules import with_reason
from simhost.audit import AUDIT_NAME, AuditLog, read_audit, record_for
from tests.support.peer import WS
from tests.support.peer import audit_request as request


def test_a_record_says_what_was_asked_the_outcome_and_who_answered() -> None:
    asked = request(rawInput={"command": "git status", "cwd": WS}, locations=[{"path": "a.txt"}])
    allowed = record_for(asked, Selected("yes"), by="rule", workspace=WS, detail="rule 1: …")
    assert (allowed.outcome, allowed.by, allowed.option_id, allowed.option_kind) == (
        "allowed",
        "rule",
        "yes",
        "allow_once",
    )
    assert allowed.command == "git status" and allowed.paths == ["/ws/a.txt"]
    assert allowed.session == "s-1" and allowed.tool_call == "call-1"
    assert allowed.title == "run it" and allowed.detail == "rule 1: …"
    denied = record_for(asked, with_reason(Selected("no"), "not now"), by="person", workspace=WS)
    assert denied.outcome == "denied" and denied.option_name == "Deny"
    cancelled = record_for(asked, None, by="turn", workspace=WS)
    assert cancelled.outcome == "cancelled" and cancelled.option_id is None
    assert record_for(asked, Cancelled(), by="person", workspace=WS).outcome == "cancelled"


def test_a_compound_command_is_kept_with_all_its_words_and_strings_are_cut() -> None:
    asked = request(title="t" * 5000, rawInput={"command": "ls | rm -rf x"})
    record = record_for(asked, None, by="runtime", workspace=WS, reason="r" * 5000)
    assert record.command == "ls rm -rf x"
    assert len(record.title or "") == 2000 and len(record.reason or "") == 2000


def test_appended_lines_read_back_and_a_bad_line_is_skipped(tmp_path: Path) -> None:
    path = tmp_path / "state" / AUDIT_NAME
    log = AuditLog(path)
    first = record_for(request(), Selected("yes"), by="person", workspace=WS, detail="key 1")
    assert log.append(first) and log.append(
        record_for(request("s-2"), None, by="teardown", workspace=WS)
    )
    with path.open("ab") as file:
        file.write(b"{not json\n\n")
    log.append(record_for(request("s-3"), None, by="timeout", workspace=WS))
    items = list(read_audit(path))
    assert [item if isinstance(item, int) else item.session for item in items] == [
        "s-1",
        "s-2",
        3,
        "s-3",
    ]
    assert path.stat().st_mode & 0o777 == 0o600


def test_a_trail_that_cannot_be_written_says_why_and_raises_nothing(tmp_path: Path) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    log = AuditLog(blocker / AUDIT_NAME)  # its folder is a file
    assert not log.append(record_for(request(), None, by="turn", workspace=WS))
    assert log.failed is not None and str(blocker) in log.failed

