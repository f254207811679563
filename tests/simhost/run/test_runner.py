"""``simhost run``: the example scenarios pass in both dialects, failures and invariant
violations are reported (exit 1, JUnit, JSON), malformed scenarios exit 2; the matcher
and the answer selection on their own."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import trio
from typer.testing import CliRunner

from permclient import Cancelled, PermissionOption, PermissionRequest, Selected, ToolCallUpdate
from simhost.cli import app
from simhost.run.runner import (
    NoSuchOption,
    _Run,
    _Session,
    _Turn,
    answer_delay_ms,
    choose_decision,
    match_request,
    percentile,
)
from simhost.run.scenario import (
    AgentSpec,
    ExpectedRequest,
    Scenario,
    SessionSpec,
    TurnSpec,
)


def test_a_handler_given_another_sessions_request_judges_by_the_session_it_named(
    tmp_path: Path,
) -> None:
    # A misrouted request whose session_id was rewritten to the handler's own: the
    # telemetry still says which session the request named.
    turn_spec = TurnSpec(prompt="hi", requests=[ExpectedRequest(title="x")])
    scenario = Scenario(sessions=[SessionSpec(name="b", turns=[turn_spec])])
    run = _Run(
        scenario,
        AgentSpec(),
        seed=0,
        repeat=1,
        workspace=tmp_path,
        on_event=None,
        turn_timeout=5,
    )
    session = _Session(run, "s-b", "b", 1)
    turn = _Turn(run, session, turn_spec, 1)
    run.ledger.emit("server_request.start", request_id=7, method="session/request_permission")
    run.ledger.emit(
        "approval.requested", request_id=7, session_id="s-a", tool_call_id="t1", options=["y"]
    )
    request = PermissionRequest(
        session_id="s-b",
        tool_call=ToolCallUpdate(tool_call_id="t1", title="x"),
        options=(PermissionOption("y", "Allow", "allow_once"),),
    )
    decision = trio.run(turn.handle, request)
    assert isinstance(decision, Cancelled)
    assert run.violations == [
        "b turn 1: its handler was given a request for session 's-a': answered cancelled"
    ]
    assert turn.counts == [0]


def test_help_describes_the_command_and_every_option() -> None:
    result = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0
    for option in ("--agent", "--dialect", "--junit", "--json", "--repeat", "--seed"):
        assert option in result.output
    assert "SCENARIO" in result.output and "<bool>" not in result.output
    assert "Exit code: 0 if every expectation and invariant held" in result.output


def expected(title: str, **fields: Any) -> ExpectedRequest:
    return ExpectedRequest(title=title, **fields)


def test_match_request_searches_the_title_and_checks_the_kind() -> None:
    requests = [expected(r"\.txt$", kind="edit"), expected("^local_shell: ")]
    assert match_request(requests, [0, 0], "fs.write: notes.txt", "edit") == 0
    assert match_request(requests, [0, 0], "fs.write: notes.txt", "delete") is None
    assert match_request(requests, [0, 0], "local_shell: rm x.txt", "execute") == 1
    assert match_request(requests, [0, 0], "fs.read: a.md", "read") is None
    assert match_request(requests, [0, 0], "", None) is None


def test_match_request_moves_on_when_a_count_is_used_up() -> None:
    requests = [expected("burst", count=2, answer="allow"), expected("burst", answer="reject")]
    assert match_request(requests, [0, 0], "fs.write: burst-1.txt", "edit") == 0
    assert match_request(requests, [2, 0], "fs.write: burst-3.txt", "edit") == 1
    # All fitting ones used up: the last of them, whose count check then fails.
    only = [expected("burst", count=1)]
    assert match_request(only, [1], "fs.write: burst-2.txt", "edit") == 0


OPTIONS = (
    PermissionOption("yes", "Allow", "allow_once"),
    PermissionOption("always", "Always", "allow_always"),
    PermissionOption("no", "Deny", "reject_once"),
    PermissionOption("never", "Never", "reject_always"),
)


def test_choose_decision_picks_the_offered_option_of_the_answers_kind() -> None:
    assert choose_decision("allow", OPTIONS) == Selected("yes")
    assert choose_decision("allow_always", OPTIONS) == Selected("always")
    assert choose_decision("reject", OPTIONS) == Selected("no")
    assert choose_decision("reject_always", OPTIONS) == Selected("never")
    assert choose_decision("cancel", OPTIONS) == Cancelled()
    assert choose_decision("ignore", OPTIONS) is None


def test_choose_decision_never_falls_back_to_another_option() -> None:
    only_once = (OPTIONS[0], OPTIONS[2])
    with pytest.raises(NoSuchOption, match="allow_always; offered: yes \\(allow_once\\)"):
        choose_decision("allow_always", only_once)
    with pytest.raises(NoSuchOption):
        choose_decision("reject", (OPTIONS[0],))
    assert choose_decision("cancel", ()) == Cancelled()


def test_percentile_is_nearest_rank() -> None:
    assert percentile([], 0.5) is None
    values = [float(v) for v in range(1, 101)]
    assert percentile(values, 0.5) == 50.0
    assert percentile(values, 0.99) == 99.0
    assert percentile([3.0], 0.99) == 3.0


def test_answer_delay_is_seeded_per_request_not_by_arrival_order() -> None:
    plain = expected("x", delay_ms=25)
    assert answer_delay_ms(plain, 1, "a") == answer_delay_ms(plain, 2, "b") == 25
    jittery = expected("x", delay_ms=10, jitter_ms=50)
    keys = [f"1/alpha#{k} turn 1/call-1" for k in range(1, 41)]
    first = [answer_delay_ms(jittery, 7, key) for key in keys]
    assert first == [answer_delay_ms(jittery, 7, key) for key in reversed(keys)][::-1]
    assert all(10 <= d <= 60 for d in first) and len(set(first)) > 5
    assert first != [answer_delay_ms(jittery, 8, key) for key in keys]

