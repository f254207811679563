"""Interop: permclient's ACP dialect against an agent built on the official ACP Python SDK.

Two agents (agent-client-protocol 0.12.1, newline-delimited JSON-RPC over stdio):
``tests/interop/acp_python_agent.py`` (one or two approvals, reports what it got as
message text) and ``tests/interop/acp_python_write_agent.py`` (the file-writing twin of
the TypeScript SDK agent, driven by the scenarios of ``tests/interop/acp_scenarios.py``;
see the section at the end). Each test does the real ACP handshake (``initialize``,
``session/new``), registers a permission handler for exactly the session the agent
returned, prompts, and checks what the agent says it got.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

import permclient
from permclient import Cancelled, InboundNotification, PermissionRequest, Selected

from .acp_schema import validate_client_stream
from .interop import INTEROP_DIR, TEST_BOUND_S, require_python_module
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

AGENT = INTEROP_DIR / "acp_python_agent.py"


@pytest.fixture
def agent_argv() -> list[str]:
    python = require_python_module("acp")
    return [python, str(AGENT)]


class Session:
    """One ACP session of the agent, with every notification the client got for it."""

    def __init__(self, client: permclient.Client, session_id: str) -> None:
        self.client = client
        self.id = session_id
        self.updates: list[dict[str, Any]] = []

    def on_notification(self, notification: InboundNotification) -> None:
        assert notification.session_id == self.id
        if notification.method == "session/update":
            self.updates.append(notification.params["update"])

    def agent_text(self) -> list[str]:
        return [
            u["content"]["text"]
            for u in self.updates
            if u["sessionUpdate"] == "agent_message_chunk" and u["content"]["type"] == "text"
        ]

    def tool_statuses(self, tool_call_id: str) -> list[str]:
        return [
            u["status"]
            for u in self.updates
            if u["sessionUpdate"] in {"tool_call", "tool_call_update"}
            and u["toolCallId"] == tool_call_id
            and u.get("status") is not None
        ]

    async def prompt(self, text: str) -> Any:
        return await self.client.request(
            "session/prompt",
            {"sessionId": self.id, "prompt": [{"type": "text", "text": text}]},
        )


@asynccontextmanager
async def acp_session(
    argv: list[str], tmp_path: Path, *, listen: bool = True
) -> AsyncIterator[Session]:
    """Spawn the agent, initialize, open one session, and collect its notifications.

    With ``listen=False`` no session callback is registered: the caller does it.
    """
    async with permclient.open_process(argv, dialect="acp") as client:
        init = await client.request(
            "initialize",
            {
                "protocolVersion": 1,
                "clientCapabilities": {},
                "clientInfo": {"name": "permclient-tests", "version": "0"},
            },
        )
        assert init["protocolVersion"] == 1
        assert init["agentInfo"]["name"] == "permclient-interop-agent"
        created = await client.request("session/new", {"cwd": str(tmp_path), "mcpServers": []})
        session = Session(client, created["sessionId"])
        if not listen:
            yield session
            return
        # Replays anything the agent sent for the session before this registration.
        with client.on_session_notification(session.id, session.on_notification):
            yield session


def recording(
    seen: list[PermissionRequest], choose: Callable[[PermissionRequest], Selected | Cancelled]
) -> Callable[[PermissionRequest], Any]:
    async def handler(req: PermissionRequest) -> Selected | Cancelled:
        seen.append(req)
        return choose(req)

    return handler


@pytest.mark.parametrize(
    ("decision", "expected_text", "final_status"),
    [
        (Selected("allow"), "call-1: selected allow", "completed"),
        (Selected("allow-always"), "call-1: selected allow-always", "completed"),
        (Selected("deny"), "call-1: selected deny", "failed"),
        (Cancelled(), "call-1: cancelled", "failed"),
    ],
    ids=["allow", "allow-always", "deny", "cancelled"],
)
async def test_single_permission_reaches_the_agent(
    agent_argv: list[str],
    tmp_path: Path,
    decision: Selected | Cancelled,
    expected_text: str,
    final_status: str,
) -> None:
    seen: list[PermissionRequest] = []
    with trio.fail_after(TEST_BOUND_S):
        async with acp_session(agent_argv, tmp_path) as session:
            with session.client.permission_handler(
                session.id, recording(seen, lambda _req: decision)
            ):
                result = await session.prompt("approve me")

    assert result["stopReason"] == "end_turn"
    (req,) = seen
    assert req.session_id == session.id
    assert req.tool_call.tool_call_id == "call-1"
    assert req.tool_call.title == "local_shell: echo call-1"
    assert req.tool_call.kind == "execute"
    assert req.tool_call.raw_input == {"command": "echo call-1"}
    assert [(o.option_id, o.kind) for o in req.options] == [
        ("allow", "allow_once"),
        ("allow-always", "allow_always"),
        ("deny", "reject_once"),
    ]
    assert session.agent_text() == [expected_text]
    assert session.tool_statuses("call-1") == ["pending", final_status]


async def test_handler_for_another_session_is_never_asked(
    agent_argv: list[str], tmp_path: Path
) -> None:
    """A handler registered for a different session must not answer: fail closed."""
    seen: list[PermissionRequest] = []
    with trio.fail_after(TEST_BOUND_S):
        async with acp_session(agent_argv, tmp_path) as session:
            with session.client.permission_handler(
                "some-other-session", recording(seen, lambda _req: Selected("allow"))
            ):
                result = await session.prompt("approve me")

    assert seen == []
    assert result["stopReason"] == "end_turn"
    assert session.agent_text() == ["call-1: cancelled"]


async def test_two_concurrent_permissions_get_their_own_answers(
    agent_argv: list[str], tmp_path: Path
) -> None:
    seen: list[str] = []
    both_pending = trio.Event()
    choices = {"call-2a": "allow", "call-2b": "deny"}

    async def handler(req: PermissionRequest) -> Selected | Cancelled:
        assert req.session_id == session.id
        seen.append(req.tool_call.tool_call_id)
        if len(seen) == 2:
            both_pending.set()
        # Answer only once both are pending: proves the agent asked concurrently
        # (asked one by one, this would never finish and fail_after would fire).
        await both_pending.wait()
        return Selected(choices[req.tool_call.tool_call_id])

    with trio.fail_after(TEST_BOUND_S):
        async with acp_session(agent_argv, tmp_path) as session:
            with session.client.permission_handler(session.id, handler):
                result = await session.prompt("two")

    assert sorted(seen) == ["call-2a", "call-2b"]
    assert result["stopReason"] == "end_turn"
    assert session.agent_text() == ["call-2a: selected allow", "call-2b: selected deny"]
    assert session.tool_statuses("call-2a") == ["pending", "completed"]
    assert session.tool_statuses("call-2b") == ["pending", "failed"]


async def test_session_cancel_answers_the_pending_permission_cancelled(
    agent_argv: list[str], tmp_path: Path
) -> None:
    waiting = trio.Event()
    handler_cancelled: list[str] = []

    async def handler(req: PermissionRequest) -> Selected | Cancelled:
        waiting.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            handler_cancelled.append(req.tool_call.tool_call_id)
            raise
        return Selected("allow")  # pragma: no cover - never reached

    results: list[Any] = []
    with trio.fail_after(TEST_BOUND_S):
        async with acp_session(agent_argv, tmp_path) as session:
            client = session.client
            with client.permission_handler(session.id, handler):
                async with trio.open_nursery() as nursery:

                    async def prompt() -> None:
                        results.append(await session.prompt("wait"))

                    nursery.start_soon(prompt)
                    await waiting.wait()
                    # ACP turn cancel: the client answers the pending request itself,
                    # at once; the agent then ends the turn with `cancelled`.
                    await client.notify("session/cancel", {"sessionId": session.id})
                    assert client.pending_permissions(session.id) == 0

    assert handler_cancelled == ["call-wait"]
    assert results == [{"stopReason": "cancelled"}]
    assert session.agent_text() == ["call-wait: cancelled"]


async def test_updates_sent_before_the_callback_is_registered_are_replayed(
    agent_argv: list[str], tmp_path: Path
) -> None:
    with trio.fail_after(TEST_BOUND_S):
        async with acp_session(agent_argv, tmp_path, listen=False) as session:
            client = session.client
            with client.permission_handler(session.id, recording([], lambda _r: Selected("deny"))):
                result = await session.prompt("approve me")
            # Every update of the turn arrived before its response, with no callback yet.
            with client.on_session_notification(session.id, session.on_notification):
                replayed = list(session.updates)
            # Held updates are delivered once: a second registration gets nothing old.
            late: list[InboundNotification] = []
            with client.on_session_notification(session.id, late.append):
                pass

    assert result["stopReason"] == "end_turn"
    assert [(u["sessionUpdate"], u.get("status")) for u in replayed] == [
        ("tool_call", "pending"),
        ("tool_call_update", "failed"),
        ("agent_message_chunk", None),
    ]
    assert session.agent_text() == ["call-1: selected deny"]
    assert late == []


# --------------------------------------------------------------------------------------
# The file-writing agent (tests/interop/acp_python_write_agent.py): the scenarios of
# tests/interop/acp_scenarios.py, shared with the TypeScript SDK agent.
#
# The official Python SDK 0.12.1 does not implement `$/cancel_request` in either
# direction. An agent built on it can only "withdraw" a permission request by cancelling
# the asyncio task that awaits `request_permission`: the SDK then forgets the id and
# sends NOTHING, so the client is never told. These tests assert exactly that: the
# client's handler stays pending after the turn ended, is cancelled when its
# `permission_handler` block exits (telemetry `by: "turn"`, not `"peer"`), and the
# `cancelled` answer it then writes reaches the agent, whose SDK drops it silently.

WRITE_AGENT = INTEROP_DIR / "acp_python_write_agent.py"
WITHDRAWN = "write:withdrawn.txt"


@pytest.fixture
def write_agent() -> list[str]:
    python = require_python_module("acp")
    return [python, str(WRITE_AGENT)]


def response(request_id: Any, result: dict[str, Any]) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


async def test_write_agent_concurrent_permissions_and_a_withdrawal_the_sdk_never_sends(
    write_agent: list[str], tmp_path: Path
) -> None:
    with trio.fail_after(TEST_BOUND_S):
        run = await run_mixed_turn(open_agent_process, write_agent, tmp_path)
    assert run.session is not None
    session_id = run.session.id

    assert run.init["agentInfo"]["name"] == "permclient-py-write-agent"
    assert run.result == {"stopReason": "end_turn"}
    names = ["allowed-once.txt", "allowed-always.txt", "denied.txt", "withdrawn.txt"]
    assert sorted(run.seen) == sorted((session_id, f"write:{n}", f"write {n}") for n in names)

    ids = run.log.permission_request_ids()
    assert sorted(ids.values()) == [0, 1, 2, 3]  # the Python SDK numbers from 0 too

    # The agent gave up on the withdrawn request, but its SDK sent no cancel: the client
    # still had it pending when the turn ended...
    assert run.log.events("withdraw") == [
        {"event": "withdraw", "sessionId": session_id, "toolCallId": WITHDRAWN}
    ]
    assert run.log.cancels_sent() == []
    assert run.pending_after_prompt == 1
    # ...until the turn's `permission_handler` block exited: that cancelled the handler.
    assert run.handler_cancelled == [WITHDRAWN]
    assert [(c["request_id"], c["by"]) for c in run.telemetry.of("approval.cancelled")] == [
        (ids[WITHDRAWN], "turn")
    ]

    # Exactly one answer per request id, as the agent read it off the wire. The
    # withdrawn one's `cancelled` arrived after the agent had already ended the turn.
    expected = {
        "write:allowed-once.txt": selected("allow"),
        "write:allowed-always.txt": selected("allow-always"),
        "write:denied.txt": selected("deny"),
        WITHDRAWN: CANCELLED,
    }
    for tool_call_id, outcome in expected.items():
        request_id = ids[tool_call_id]
        assert run.log.responses_to(request_id) == [response(request_id, outcome)], tool_call_id
    turn_ended_at = run.log.position("out", lambda m: "stopReason" in m.get("result", {}))
    assert turn_ended_at < run.log.answer_at(ids[WITHDRAWN])
    # What the SDK delivered: the three answers; nothing for the withdrawn request.
    assert run.log.answers() == {
        **{tc: {"ok": True, "value": o} for tc, o in expected.items() if tc != WITHDRAWN},
        WITHDRAWN: {"ok": False, "error": {"message": "withdrawn (task cancelled)"}},
    }

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


async def test_write_agent_two_concurrent_sessions_each_handler_sees_only_its_own(
    write_agent: list[str], tmp_path: Path
) -> None:
    with trio.fail_after(TEST_BOUND_S):
        run = await run_two_sessions(open_agent_process, write_agent, tmp_path)
    a, b = run.sessions["A"], run.sessions["B"]
    assert a.id != b.id

    assert run.results == {"A": {"stopReason": "end_turn"}, "B": {"stopReason": "end_turn"}}
    assert sorted(run.seen["A"]) == [(a.id, "write a-1.txt"), (a.id, "write a-2.txt")]
    assert sorted(run.seen["B"]) == [(b.id, "write b-allowed.txt"), (b.id, "write b-denied.txt")]

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


async def test_write_agent_session_cancel_answers_every_pending_permission_at_once(
    write_agent: list[str], tmp_path: Path
) -> None:
    with trio.fail_after(TEST_BOUND_S):
        run = await run_session_cancel(open_agent_process, write_agent, tmp_path)
    assert run.session is not None
    tool_call_ids = sorted(f"write:{block.split()[1]}" for block in CANCEL_PROMPT)

    assert run.pending_before_cancel == 3
    assert run.pending_after_cancel == 0
    assert sorted(run.seen) == tool_call_ids
    assert sorted(run.handler_cancelled) == tool_call_ids
    if isinstance(run.outcome, permclient.RequestError):
        assert run.outcome.code == -32800
    else:
        assert run.outcome == {"stopReason": "cancelled"}

    assert run.log.events("session_cancel") == [
        {"event": "session_cancel", "sessionId": run.session.id}
    ]
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


async def test_write_agent_a_caller_giving_up_is_told_to_an_sdk_that_ignores_cancel_request(
    write_agent: list[str], tmp_path: Path
) -> None:
    with trio.fail_after(TEST_BOUND_S):
        run = await run_abandoned_requests(open_agent_process, write_agent, tmp_path)
    assert run.session is not None
    tool_call_ids = ["write:d-1.txt", "write:d-2.txt"]
    first, last = run.log.requests_received("session/prompt")
    (wait,) = run.log.requests_received("_permclient/wait")

    # 1. Giving up on session/prompt: permissions answered at once, `session/cancel`
    # sent (which this SDK does implement): the agent ended that turn `cancelled`.
    assert run.prompt_cancelled_caught
    assert run.pending_after_cancel == 0
    assert sorted(run.handler_cancelled) == tool_call_ids
    ids = run.log.permission_request_ids()
    for tool_call_id in tool_call_ids:
        request_id = ids[tool_call_id]
        assert run.log.responses_to(request_id) == [response(request_id, CANCELLED)]
    assert run.log.events("session_cancel") == [
        {"event": "session_cancel", "sessionId": run.session.id}
    ]
    assert run.log.responses_sent(first["id"]) == [
        response(first["id"], {"stopReason": "cancelled"})
    ]

    # 2. Giving up on another request: permclient sent `$/cancel_request` for its id.
    # SDK 0.12.1 does not implement it: it logged an error, never told the handler, and
    # never answered the request (it was still waiting when the connection closed).
    assert run.wait_cancelled_caught
    assert run.log.cancels_received() == [{"requestId": wait["id"]}]
    assert len(run.log.events("wait_started")) == 1
    assert run.log.responses_sent(wait["id"]) == []

    # 3. The connection went on: the next prompt got its own answer.
    assert run.next_result == {"stopReason": "end_turn"}
    assert run.log.responses_sent(last["id"]) == [response(last["id"], {"stopReason": "end_turn"})]
    assert run.files == {"after.txt": "still works"}


async def test_write_agent_5_mib_diff_reaches_the_handler_intact_and_is_answered(
    write_agent: list[str], tmp_path: Path
) -> None:
    with trio.fail_after(TEST_BOUND_S):
        run = await run_big_diff(open_agent_process, write_agent, tmp_path)

    (generated,) = run.log.events("generated")
    sent = (generated["bytes"], generated["sha256"])
    assert sent[0] == 5 * MIB
    assert run.received == [sent]
    assert run.update_digest == sent
    assert run.file_digest == sent
    (request,) = [m for m in run.log.wire("out") if m.get("method") == "session/request_permission"]
    assert len(json.dumps(request, ensure_ascii=False).encode()) > 5 * MIB
    assert run.log.responses_to(request["id"]) == [response(request["id"], selected("allow"))]
    assert run.result == {"stopReason": "end_turn"}


async def test_write_agent_every_message_permclient_sends_validates_against_the_acp_schema(
    write_agent: list[str], tmp_path: Path
) -> None:
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
            run = await scenario(recorder, write_agent, tmp_path / scenario.__name__)
        logs.append(run.log)

    checked: Counter[tuple[str, str]] = Counter()
    outcomes: Counter[str] = Counter()
    for recorded, log in zip(recorder.runs, logs, strict=True):
        sent = recorded.sent
        assert sent == log.wire("in")  # the recording is exactly what the SDK read
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
    assert checked[("response", "RequestPermissionResponse")] == 15
    assert outcomes == {"selected": 9, "cancelled": 6}
