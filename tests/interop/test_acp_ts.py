"""Interop: permclient's ACP dialect against two file-writing agents on the official SDKs.

Every test runs once per agent (the ``acp_agent`` fixture, params ``ts`` and ``python``):

* ``ts``: ``tests/interop/node/ts_agent.mjs``, the AGENT side of
  ``@agentclientprotocol/sdk`` 2.4.0 (``agent()`` + ``ndJsonStream`` over stdio);
* ``python``: ``tests/interop/acp_python_write_agent.py``, its twin on the official ACP
  Python SDK (agent-client-protocol 0.12.1).

Each agent reports tool calls, asks permission for several at once, withdraws one,
writes files only when allowed, and logs every JSON-RPC message it read and wrote. The
scenarios are in ``tests/interop/acp_scenarios.py``; the assertions are here.

Facts about the TS SDK these tests rely on (read from its source and seen here): its
request ids start at 0; it withdraws a request with its own cancellation (an
``AbortSignal``, on the wire ``$/cancel_request {"requestId"}``); after it sends
``$/cancel_request`` it keeps waiting for the answer by default, so what the agent gets
for a withdrawn request is the client's own ``cancelled`` answer.

The Python SDK 0.12.1 numbers its requests from 0 too, but does not implement
``$/cancel_request`` in either direction. An agent built on it can only "withdraw" a
permission request by cancelling the asyncio task that awaits ``request_permission``:
the SDK then forgets the id and sends NOTHING, so the client is never told. The tests
assert exactly that where the agents differ (``acp_agent.honours_cancel_request``): the
client's handler stays pending after the turn ended, is cancelled when its
``permission_handler`` block exits (telemetry ``by: "turn"``, not ``"peer"``), and the
``cancelled`` answer it then writes reaches the agent, whose SDK drops it silently.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio

import permclient
from tests.interop import (
    INTEROP_DIR,
    NODE_DIR,
    TEST_BOUND_S,
    require_node_packages,
    require_python_module,
)
from tests.interop.acp_scenarios import (
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
from tests.support.acp_schema import validate_client_message, validate_client_stream

TS_AGENT = NODE_DIR / "ts_agent.mjs"
PYTHON_AGENT = INTEROP_DIR / "acp_python_write_agent.py"
WITHDRAWN = "write:withdrawn.txt"


@dataclass(frozen=True)
class Agent:
    """One of the two agents: how to start it and what it calls itself."""

    kind: str  # "ts" or "python", the fixture's param
    argv: list[str]
    name: str

    @property
    def honours_cancel_request(self) -> bool:
        """The TS SDK sends and obeys ``$/cancel_request``; the Python SDK 0.12.1 does neither."""
        return self.kind == "ts"


@pytest.fixture(params=["ts", "python"])
def acp_agent(request: pytest.FixtureRequest) -> Agent:
    if request.param == "ts":
        # Skips (or fails, with PERMCLIENT_REQUIRE_INTEROP=1) without node or its packages.
        node = require_node_packages("@agentclientprotocol/sdk", "zod")
        return Agent("ts", [node, str(TS_AGENT)], "permclient-ts-interop-agent")
    python = require_python_module("acp")
    return Agent("python", [python, str(PYTHON_AGENT)], "permclient-py-write-agent")


def response(request_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


async def test_concurrent_permissions_are_answered_per_call_and_a_withdrawn_one_is_cancelled(
    acp_agent: Agent, tmp_path: Path
) -> None:
    with trio.fail_after(TEST_BOUND_S):
        run = await run_mixed_turn(open_agent_process, acp_agent.argv, tmp_path)
    assert run.session is not None
    session_id = run.session.id

    assert run.init["protocolVersion"] == 1
    assert run.init["agentInfo"]["name"] == acp_agent.name
    assert run.result == {"stopReason": "end_turn"}

    # Routing: the session's handler got all four requests, each for exactly its session
    # (they were all pending at once: the answering handlers waited for the fourth).
    names = ["allowed-once.txt", "allowed-always.txt", "denied.txt", "withdrawn.txt"]
    assert sorted(run.seen) == sorted((session_id, f"write:{n}", f"write {n}") for n in names)

    ids = run.log.permission_request_ids()
    assert sorted(ids.values()) == [0, 1, 2, 3]  # both SDKs number from 0

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

    # The withdrawn request: its handler was cancelled either way, but the agents differ.
    assert run.handler_cancelled == [WITHDRAWN]
    if acp_agent.honours_cancel_request:
        # TS: the agent's $/cancel_request cancelled its handler's scope during the turn.
        assert run.pending_after_prompt == 0
        assert run.log.cancels_sent() == [{"requestId": ids[WITHDRAWN]}]
        # The cancelled answer came after (and because of) the agent's withdrawal.
        withdrew_at = run.log.position("out", lambda m: m.get("method") == "$/cancel_request")
        assert withdrew_at < run.log.answer_at(ids[WITHDRAWN])
        # What the SDK delivered to the agent: it kept waiting after its own cancel and
        # got the client's `cancelled`.
        assert run.log.answers() == {tc: {"ok": True, "value": o} for tc, o in expected.items()}
        withdrawn_by = "peer"
    else:
        # Python SDK 0.12.1: the agent gave up on the withdrawn request, but its SDK sent
        # no cancel: the client still had it pending when the turn ended...
        assert run.log.events("withdraw") == [
            {"event": "withdraw", "sessionId": session_id, "toolCallId": WITHDRAWN}
        ]
        assert run.log.cancels_sent() == []
        assert run.pending_after_prompt == 1
        # ...until the turn's `permission_handler` block exited: that cancelled the
        # handler, and its `cancelled` arrived after the agent had already ended the turn.
        turn_ended_at = run.log.position("out", lambda m: "stopReason" in m.get("result", {}))
        assert turn_ended_at < run.log.answer_at(ids[WITHDRAWN])
        # What the SDK delivered: the three answers; nothing for the withdrawn request.
        assert run.log.answers() == {
            **{tc: {"ok": True, "value": o} for tc, o in expected.items() if tc != WITHDRAWN},
            WITHDRAWN: {"ok": False, "error": {"message": "withdrawn (task cancelled)"}},
        }
        withdrawn_by = "turn"

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

    # Telemetry tells the same story: three answered by the handler, one withdrawn (by
    # the peer's $/cancel_request, or by the end of the turn when the SDK sent none).
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
        (ids[WITHDRAWN], withdrawn_by)
    ]


async def test_two_concurrent_sessions_each_handler_sees_only_its_own_requests(
    acp_agent: Agent, tmp_path: Path
) -> None:
    with trio.fail_after(TEST_BOUND_S):
        run = await run_two_sessions(open_agent_process, acp_agent.argv, tmp_path)
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
    acp_agent: Agent, tmp_path: Path
) -> None:
    with trio.fail_after(TEST_BOUND_S):
        run = await run_session_cancel(open_agent_process, acp_agent.argv, tmp_path)
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
    acp_agent: Agent, tmp_path: Path
) -> None:
    with trio.fail_after(TEST_BOUND_S):
        run = await run_abandoned_requests(open_agent_process, acp_agent.argv, tmp_path)
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
    # ...and the agent was told the ACP way, `session/cancel` (not `$/cancel_request`;
    # both SDKs implement it), before those answers; it ended that turn `cancelled`, an
    # answer permclient dropped.
    cancels = [m for m in run.log.wire("in") if m.get("method") == "session/cancel"]
    assert cancels == [
        {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": run.session.id}}
    ]
    assert run.log.events("session_cancel") == [
        {"event": "session_cancel", "sessionId": run.session.id}
    ]
    cancel_at = run.log.position("in", lambda m: m.get("method") == "session/cancel")
    assert all(cancel_at < run.log.answer_at(ids[tc]) for tc in tool_call_ids)
    assert run.log.responses_sent(first["id"]) == [
        response(first["id"], {"stopReason": "cancelled"})
    ]

    # 2. Giving up on another request: `$/cancel_request` for exactly its id.
    assert run.wait_cancelled_caught
    assert run.log.cancels_received() == [{"requestId": wait["id"]}]
    if acp_agent.honours_cancel_request:
        # The TS SDK aborted the handler's signal and the agent answered with the SDK's
        # -32800, late.
        assert [e["requestId"] for e in run.log.events("wait_aborted")] == [wait["id"]]
        (late_error,) = run.log.responses_sent(wait["id"])
        assert late_error["error"]["code"] == -32800
    else:
        # Python SDK 0.12.1 does not implement it: it logged an error, never told the
        # handler, and never answered the request (it was still waiting when the
        # connection closed).
        assert len(run.log.events("wait_started")) == 1
        assert run.log.responses_sent(wait["id"]) == []

    # 3. The connection went on; any late answer was dropped: the next prompt got its own.
    assert run.next_result == {"stopReason": "end_turn"}
    assert run.log.responses_sent(last["id"]) == [response(last["id"], {"stopReason": "end_turn"})]
    assert run.files == {"after.txt": "still works"}


async def test_a_5_mib_diff_on_one_line_reaches_the_handler_intact_and_is_answered(
    acp_agent: Agent, tmp_path: Path
) -> None:
    with trio.fail_after(TEST_BOUND_S):
        run = await run_big_diff(open_agent_process, acp_agent.argv, tmp_path)

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
    acp_agent: Agent, tmp_path: Path
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
            run = await scenario(recorder, acp_agent.argv, tmp_path / scenario.__name__)
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
