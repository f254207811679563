"""Interop: permclient's ACP dialect against an agent built on the official TypeScript SDK.

The agent is ``tests/interop/node/ts_agent.mjs``: the AGENT side of
``@agentclientprotocol/sdk`` 2.4.0 (``agent()`` + ``ndJsonStream`` over stdio). It
reports tool calls, asks permission for several at once, withdraws one with the SDK's
own cancellation (an ``AbortSignal``, on the wire ``$/cancel_request {"requestId"}``),
writes files only when allowed, and logs every JSON-RPC message it read and wrote. The
scenarios are in ``tests/interop/acp_scenarios.py`` (shared with the Python SDK agent);
the assertions are here.

Facts about the TS SDK these tests rely on (read from its source and seen here): its
request ids start at 0; after it sends ``$/cancel_request`` it keeps waiting for the
answer by default, so what the agent gets for a withdrawn request is the client's own
``cancelled`` answer.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
import trio

import permclient

from .acp_schema import validate_client_message, validate_client_stream
from .interop import NODE_DIR, TEST_BOUND_S, require_node_packages
from .interop.acp_scenarios import (
    CANCEL_PROMPT,
    CANCELLED,
    MIB,
    WireRecorder,
    open_agent_process,
    run_abandoned_requests,
    run_big_diff,
    run_mixed_turn,
    run_session_cancel,
    run_two_sessions,
    selected,
)

AGENT = NODE_DIR / "ts_agent.mjs"
WITHDRAWN = "write:withdrawn.txt"


@pytest.fixture
def ts_agent() -> list[str]:
    node = require_node_packages("@agentclientprotocol/sdk", "zod")
    return [node, str(AGENT)]


def response(request_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


async def test_concurrent_permissions_are_answered_per_call_and_a_withdrawn_one_is_cancelled(
    ts_agent: list[str], tmp_path: Path
) -> None:
    with trio.fail_after(TEST_BOUND_S):
        run = await run_mixed_turn(open_agent_process, ts_agent, tmp_path)
    assert run.session is not None
    session_id = run.session.id

    assert run.init["protocolVersion"] == 1
    assert run.init["agentInfo"]["name"] == "permclient-ts-interop-agent"
    assert run.result == {"stopReason": "end_turn"}

    # Routing: the session's handler got all four requests, each for exactly its session
    # (they were all pending at once: the answering handlers waited for the fourth).
    names = ["allowed-once.txt", "allowed-always.txt", "denied.txt", "withdrawn.txt"]
    assert sorted(run.seen) == sorted((session_id, f"write:{n}", f"write {n}") for n in names)

    # The withdrawn request: the agent's $/cancel_request cancelled its handler's scope.
    assert run.handler_cancelled == [WITHDRAWN]
    assert run.pending_after_prompt == 0

    ids = run.log.permission_request_ids()
    assert sorted(ids.values()) == [0, 1, 2, 3]  # the TS SDK numbers from 0
    assert run.log.cancels_sent() == [{"requestId": ids[WITHDRAWN]}]

    # Exactly one answer per request id, as the agent read it off the wire.
    expected = {
        "write:allowed-once.txt": selected("allow"),
        "write:allowed-always.txt": selected("allow-always"),
        "write:denied.txt": selected("deny"),
        WITHDRAWN: CANCELLED,
    }
    for tool_call_id, outcome in expected.items():
        request_id = ids[tool_call_id]
        assert run.log.responses_to(request_id) == [response(request_id, outcome)], tool_call_id
    # The cancelled answer came after (and because of) the agent's withdrawal.
    withdrew_at = run.log.position("out", lambda m: m.get("method") == "$/cancel_request")
    assert withdrew_at < run.log.answer_at(ids[WITHDRAWN])
    # What the SDK delivered to the agent: it kept waiting after its own cancel and got
    # the client's `cancelled`.
    assert run.log.answers() == {tc: {"ok": True, "value": o} for tc, o in expected.items()}

    # Files exist only for the allowed calls, with the text the diff showed.
    assert run.files == {"allowed-once.txt": "first file", "allowed-always.txt": "second file"}
    assert run.session.tool_statuses() == {
        "write:allowed-once.txt": ["pending", "in_progress", "completed"],
        "write:allowed-always.txt": ["pending", "in_progress", "completed"],
        "write:denied.txt": ["pending", "failed"],
        WITHDRAWN: ["pending", "failed"],
    }
    assert run.tool_states == {
        "write:allowed-once.txt": ("completed", False),
        "write:allowed-always.txt": ("completed", False),
        "write:denied.txt": ("failed", False),
        WITHDRAWN: ("failed", False),
    }

    # Telemetry tells the same story: three answered by the handler, one withdrawn by
    # the peer.
    responded = {
        r["request_id"]: (r["outcome"], r["option_id"])
        for r in run.telemetry.of("approval.responded")
    }
    assert responded == {
        ids["write:allowed-once.txt"]: ("selected", "allow"),
        ids["write:allowed-always.txt"]: ("selected", "allow-always"),
        ids["write:denied.txt"]: ("selected", "deny"),
    }
    assert [(c["request_id"], c["by"]) for c in run.telemetry.of("approval.cancelled")] == [
        (ids[WITHDRAWN], "peer")
    ]


async def test_two_concurrent_sessions_each_handler_sees_only_its_own_requests(
    ts_agent: list[str], tmp_path: Path
) -> None:
    with trio.fail_after(TEST_BOUND_S):
        run = await run_two_sessions(open_agent_process, ts_agent, tmp_path)
    a, b = run.sessions["A"], run.sessions["B"]
    assert a.id != b.id

    assert run.results == {"A": {"stopReason": "end_turn"}, "B": {"stopReason": "end_turn"}}
    assert sorted(run.seen["A"]) == [(a.id, "write a-1.txt"), (a.id, "write a-2.txt")]
    assert sorted(run.seen["B"]) == [(b.id, "write b-allowed.txt"), (b.id, "write b-denied.txt")]

    # Every request the agent sent carried its own session; each got that session's answer.
    ids = run.log.permission_request_ids()
    sessions_of = {
        m["id"]: m["params"]["sessionId"]
        for m in run.log.wire("out")
        if m.get("method") == "session/request_permission"
    }
    expected = {
        "write:a-1.txt": (a.id, selected("allow")),
        "write:a-2.txt": (a.id, selected("allow")),
        "write:b-denied.txt": (b.id, selected("deny")),
        "write:b-allowed.txt": (b.id, selected("allow")),
    }
    assert set(ids) == set(expected)
    for tool_call_id, (session_id, outcome) in expected.items():
        request_id = ids[tool_call_id]
        assert sessions_of[request_id] == session_id
        assert run.log.responses_to(request_id) == [response(request_id, outcome)]

    # Both turns were in flight together: all four requests went out before any answer.
    last_request = max(run.log.request_at(i) for i in ids.values())
    first_answer = min(run.log.answer_at(i) for i in ids.values())
    assert last_request < first_answer

    # Notifications were routed per session too.
    assert a.foreign == [] and b.foreign == []
    assert set(a.tool_statuses()) == {"write:a-1.txt", "write:a-2.txt"}
    assert b.tool_statuses() == {
        "write:b-denied.txt": ["pending", "failed"],
        "write:b-allowed.txt": ["pending", "in_progress", "completed"],
    }
    assert run.files == {
        "A": {"a-1.txt": "from A", "a-2.txt": "from A"},
        "B": {"b-allowed.txt": "from B"},
    }


async def test_session_cancel_answers_every_pending_permission_cancelled_at_once(
    ts_agent: list[str], tmp_path: Path
) -> None:
    with trio.fail_after(TEST_BOUND_S):
        run = await run_session_cancel(open_agent_process, ts_agent, tmp_path)
    assert run.session is not None
    tool_call_ids = sorted(f"write:{block.split()[1]}" for block in CANCEL_PROMPT)

    # All three were pending; notify() itself answered them (no wait for the agent).
    assert run.pending_before_cancel == 3
    assert run.pending_after_cancel == 0
    assert sorted(run.seen) == tool_call_ids
    assert sorted(run.handler_cancelled) == tool_call_ids

    # The turn ended cancelled (ACP's way); a -32800 error would be acceptable too.
    if isinstance(run.outcome, permclient.RequestError):
        assert run.outcome.code == -32800
    else:
        assert run.outcome == {"stopReason": "cancelled"}

    assert run.log.events("session_cancel") == [
        {"event": "session_cancel", "sessionId": run.session.id}
    ]
    # The agent never withdrew anything: the cancelled answers are the client's own,
    # and the agent read the session/cancel before any of them.
    assert run.log.cancels_sent() == []
    ids = run.log.permission_request_ids()
    assert sorted(ids) == tool_call_ids
    cancel_at = run.log.position("in", lambda m: m.get("method") == "session/cancel")
    for request_id in ids.values():
        assert run.log.responses_to(request_id) == [response(request_id, CANCELLED)]
        assert cancel_at < run.log.answer_at(request_id)

    assert run.files == {}
    assert run.session.tool_statuses() == {tc: ["pending", "failed"] for tc in tool_call_ids}
    assert sorted(c["by"] for c in run.telemetry.of("approval.cancelled")) == ["turn"] * 3


async def test_a_caller_giving_up_tells_the_agent_answers_its_permissions_and_drops_late_answers(
    ts_agent: list[str], tmp_path: Path
) -> None:
    with trio.fail_after(TEST_BOUND_S):
        run = await run_abandoned_requests(open_agent_process, ts_agent, tmp_path)
    assert run.session is not None
    tool_call_ids = ["write:d-1.txt", "write:d-2.txt"]
    first, last = run.log.requests_received("session/prompt")
    (wait,) = run.log.requests_received("_permclient/wait")

    # 1. Giving up on session/prompt: the turn's permissions were answered at once...
    assert run.prompt_cancelled_caught
    assert run.pending_after_cancel == 0
    assert sorted(run.seen) == tool_call_ids
    assert sorted(run.handler_cancelled) == tool_call_ids
    assert sorted(c["by"] for c in run.telemetry.of("approval.cancelled")) == ["turn"] * 2
    ids = run.log.permission_request_ids()
    for tool_call_id in tool_call_ids:
        request_id = ids[tool_call_id]
        assert run.log.responses_to(request_id) == [response(request_id, CANCELLED)]
    # ...and the agent was told the ACP way, `session/cancel` (not `$/cancel_request`),
    # before those answers; it ended that turn `cancelled`, an answer permclient dropped.
    cancels = [m for m in run.log.wire("in") if m.get("method") == "session/cancel"]
    assert cancels == [
        {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": run.session.id}}
    ]
    cancel_at = run.log.position("in", lambda m: m.get("method") == "session/cancel")
    assert all(cancel_at < run.log.answer_at(ids[tc]) for tc in tool_call_ids)
    assert run.log.responses_sent(first["id"]) == [
        response(first["id"], {"stopReason": "cancelled"})
    ]

    # 2. Giving up on another request: `$/cancel_request` for exactly its id; the TS SDK
    # aborted the handler's signal and the agent answered with the SDK's -32800, late.
    assert run.wait_cancelled_caught
    assert run.log.cancels_received() == [{"requestId": wait["id"]}]
    assert [e["requestId"] for e in run.log.events("wait_aborted")] == [wait["id"]]
    (late_error,) = run.log.responses_sent(wait["id"])
    assert late_error["error"]["code"] == -32800

    # 3. Both late answers were dropped: the next prompt got its own answer.
    assert run.next_result == {"stopReason": "end_turn"}
    assert run.log.responses_sent(last["id"]) == [response(last["id"], {"stopReason": "end_turn"})]
    assert run.files == {"after.txt": "still works"}


async def test_a_5_mib_diff_on_one_line_reaches_the_handler_intact_and_is_answered(
    ts_agent: list[str], tmp_path: Path
) -> None:
    with trio.fail_after(TEST_BOUND_S):
        run = await run_big_diff(open_agent_process, ts_agent, tmp_path)

    (generated,) = run.log.events("generated")
    sent = (generated["bytes"], generated["sha256"])
    assert sent[0] == 5 * MIB
    # The handler got the diff intact: same length, same hash (the text has quotes,
    # backslashes, tabs, newlines, U+2028 and non-BMP characters to escape).
    assert run.received == [sent]
    assert run.update_digest == sent  # the 5 MiB tool_call notification too
    assert run.file_digest == sent  # allowed, so the agent wrote it

    (request,) = [m for m in run.log.wire("out") if m.get("method") == "session/request_permission"]
    assert len(json.dumps(request, ensure_ascii=False).encode()) > 5 * MIB
    assert run.log.responses_to(request["id"]) == [response(request["id"], selected("allow"))]
    assert run.result == {"stopReason": "end_turn"}


async def test_every_message_permclient_sends_validates_against_the_acp_schema(
    ts_agent: list[str], tmp_path: Path
) -> None:
    """Run every scenario again over a recording stream; check each message permclient wrote."""
    recorder = WireRecorder()
    logs = []
    for scenario in (
        run_mixed_turn,
        run_two_sessions,
        run_session_cancel,
        run_abandoned_requests,
        run_big_diff,
    ):
        with trio.fail_after(TEST_BOUND_S):
            run = await scenario(recorder, ts_agent, tmp_path / scenario.__name__)
        logs.append(run.log)

    checked: Counter[tuple[str, str]] = Counter()
    outcomes: Counter[str] = Counter()
    for recorded, log in zip(recorder.runs, logs, strict=True):
        sent = recorded.sent
        # The recording is the whole stream: exactly what the agent's SDK read.
        assert sent == log.wire("in")
        checked.update(validate_client_stream(sent, recorded.received))
        outcomes.update(
            m["result"]["outcome"]["outcome"]
            for m in sent
            if "result" in m and "outcome" in m["result"]
        )

    assert set(checked) == {
        ("initialize", "InitializeRequest"),
        ("session/new", "NewSessionRequest"),
        ("session/prompt", "PromptRequest"),
        ("session/cancel", "CancelNotification"),
        ("$/cancel_request", "CancelRequestNotification"),
        ("_permclient/wait", "ExtRequest"),
        ("response", "RequestPermissionResponse"),
    }
    # 4 + 4 + 3 + 3 + 1 permission requests, each answered once; both outcomes covered.
    assert checked[("response", "RequestPermissionResponse")] == 15
    assert outcomes == {"selected": 9, "cancelled": 6}

    # The validator is not vacuous: a selected answer without its optionId is refused.
    bad = response(0, {"outcome": {"outcome": "selected"}})
    with pytest.raises(AssertionError, match="is not valid under any of the given schemas"):
        validate_client_message(bad, {0: "session/request_permission"})
