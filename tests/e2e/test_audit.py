"""The audit trail (``simhost.audit``) and ``simhost audit``: records, filters, bad lines."""

from __future__ import annotations

import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path

import msgspec
import pytest

from permclient import Selected
from permclient.rules import with_reason
from simhost.audit import AUDIT_NAME, AuditLog, AuditRecord, record_for
from tests.support.cli import ForkedSimhost, Ran
from tests.support.peer import WS
from tests.support.peer import audit_request as request

# ---------------------------------------------------------------- simhost audit


def simhost_audit(forked: ForkedSimhost, tmp_path: Path, *args: str) -> Ran:
    env = {**os.environ, "COLUMNS": "200", "XDG_STATE_HOME": str(tmp_path / "xdg")}
    argv = ["audit", "--state-dir", str(tmp_path / "state"), *args]
    return forked.run(argv, cwd=tmp_path, env=env, timeout=60)


@pytest.fixture
def trail(tmp_path: Path) -> Path:
    log = AuditLog(tmp_path / "state" / AUDIT_NAME)
    old = record_for(request("s-old"), Selected("yes"), by="person", workspace=WS)
    log.append(msgspec.structs.replace(old, time=datetime.now(UTC) - timedelta(days=3)))
    git = request("s-1", rawInput={"command": "git push"})
    log.append(
        record_for(git, with_reason(Selected("no"), "[bold]not now"), by="person", workspace=WS)
    )
    log.append(
        record_for(request("s-2"), Selected("yes"), by="rule", workspace=WS, detail="rule 2")
    )
    log.append(record_for(request("s-2"), None, by="runtime", workspace=WS))
    return tmp_path


def test_audit_shows_every_answer_as_a_table(forked: ForkedSimhost, trail: Path) -> None:
    result = simhost_audit(forked, trail)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "4 answers" in out
    for text in (
        "s-old",
        "$ git push",
        "denied",
        "[bold]not now",
        "rule 2",
        "cancelled",
        "runtime",
    ):
        assert text in out, text


@pytest.mark.parametrize(
    ("args", "sessions"),
    [
        (["--session", "s-2"], ["s-2", "s-2"]),
        (["--outcome", "denied"], ["s-1"]),
        (["--outcome", "allowed", "--since", "1d"], ["s-2"]),
        (["--since", "2h"], ["s-1", "s-2", "s-2"]),
        (
            ["--since", (datetime.now(UTC) - timedelta(days=4)).isoformat()],
            ["s-old", "s-1", "s-2", "s-2"],
        ),
        (["--session", "nobody"], []),
    ],
)
def test_audit_filters_by_session_outcome_and_since(
    forked: ForkedSimhost, trail: Path, args: list[str], sessions: list[str],
) -> None:
    result = simhost_audit(forked, trail, *args, "--json")
    assert result.returncode == 0, result.stderr
    found = [json.loads(line)["session"] for line in result.stdout.splitlines()]
    assert found == sessions
    for line in result.stdout.splitlines():
        msgspec.json.decode(line, type=AuditRecord)  # each line is a whole record


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (["--outcome", "maybe"], "--outcome 'maybe': expected allowed, denied or cancelled"),
        (["--since", "yesterday"], "--since 'yesterday': give 30m, 2h, 7d or an ISO 8601 time"),
    ],
)
def test_audit_usage_errors_are_one_line_exit_2(
    forked: ForkedSimhost, trail: Path, args: list[str], says: str,
) -> None:
    result = simhost_audit(forked, trail, *args)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"simhost audit: {says}"]


def test_audit_without_a_trail_says_so_and_exits_0(forked: ForkedSimhost, tmp_path: Path) -> None:
    result = simhost_audit(forked, tmp_path)
    assert result.returncode == 0
    assert result.stdout == "" and "no audit trail yet" in result.stderr
