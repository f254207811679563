"""Interop: permclient's ACP dialect against an agent built on the official ACP Python SDK.

The agent is ``tests/interop/acp_python_agent.py`` (agent-client-protocol 0.12.1,
newline-delimited JSON-RPC over stdio; one or two approvals, reports what it got as
message text). Its file-writing twin, ``tests/interop/acp_python_write_agent.py``, runs
the shared scenarios of ``tests/interop/acp_scenarios.py`` in
``tests/interop/test_acp_ts.py``, parametrized with the TypeScript SDK agent. Each test
here does the real ACP handshake (``initialize``, ``session/new``), registers a
permission handler for exactly the session the agent returned, prompts, and checks what
the agent says it got.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest
import trio

import permclient
from permclient import Cancelled, InboundNotification, PermissionRequest, Selected
from tests.interop import INTEROP_DIR, TEST_BOUND_S, require_python_module

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
