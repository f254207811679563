"""``simhost runtime --dialect acp``: the reference runtime as an ACP v1 agent.

Driven for real through permclient's ``acp`` dialect (``open_process``), with a
transparent tap in front of the runtime that copies both directions of its stdio
to files, so every message the runtime wrote is checked against ACP's JSON Schema
(the whole message against the schema's agent envelope, and its params or result
against the type of its method). Cancellation on the wire is checked byte for
byte with a scripted peer; the policy timeout also runs in-process under trio's
autojump clock.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import permclient
import simhost
from permclient import Cancelled, Decision, PermissionRequest, Selected
from tests.support.peer import FakePeer
from tests.support.runtime_editor import (
    ACP_RUNTIME,
    answering,
    check_runtime_messages,
    open_acp_runtime,
    runtime_wrote,
    simhost_meta,
    statuses,
)

# ------------------------------------------------------------ the handshake

BOUND_S = 20


async def test_initialize_answers_version_1_capabilities_and_who_it_is(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with open_acp_runtime(tmp_path) as editor:
            request = editor.client.request
            # Like the official SDKs: nothing but initialize before initialize.
            with pytest.raises(permclient.RequestError) as info:
                await request("session/new", {"cwd": str(editor.workspace), "mcpServers": []})
            assert info.value.code == -32600
            assert "must be initialized before 'session/new'" in info.value.message

            result = await editor.initialize()
            assert result["protocolVersion"] == 1
            assert result["authMethods"] == []
            assert result["agentInfo"]["name"] == "simhost-runtime"
            assert result["agentInfo"]["version"] == simhost.__version__
            capabilities = result["agentCapabilities"]
            assert capabilities["loadSession"] is True
            assert capabilities["promptCapabilities"] == {
                "image": False,
                "audio": False,
                "embeddedContext": False,
            }
            assert capabilities["sessionCapabilities"] == {"list": {}}
            assert result["_meta"]["simhost"] == {
                "workspace": str(editor.workspace.resolve()),
                "policy": "default",
                "presets": ["ask", "read-only", "auto-edit"],
            }

            created = await request("session/new", {"cwd": str(editor.workspace), "mcpServers": []})
            assert created["sessionId"].startswith("s-")
            assert created["modes"]["currentModeId"] == "ask"
            assert [m["id"] for m in created["modes"]["availableModes"]] == [
                "ask",
                "read-only",
                "auto-edit",
            ]
            # The tools act in the workspace only: another cwd is refused, not ignored.
            # A cwd that cannot be resolved (a link loop, a NUL) is refused the same way.
            (tmp_path / "loop-a").symlink_to(tmp_path / "loop-b")
            (tmp_path / "loop-b").symlink_to(tmp_path / "loop-a")
            for cwd in (str(tmp_path), "w", str(tmp_path / "loop-a"), f"{tmp_path}/a\0b"):
                with pytest.raises(permclient.RequestError) as info:
                    await request("session/new", {"cwd": cwd, "mcpServers": []})
                assert info.value.code == -32602
            with pytest.raises(permclient.RequestError) as info:
                await request("session/new", {"cwd": str(editor.workspace)})  # no mcpServers
            assert info.value.code == -32602
            with pytest.raises(permclient.RequestError) as info:
                await request("session/prompt", {"sessionId": "s-nope", "prompt": []})
            assert info.value.code == -32002
            with pytest.raises(permclient.RequestError) as info:
                await request("chatSend", {"sessionId": created["sessionId"], "text": "hi"})
            assert info.value.code == -32601  # the bridge's methods are not ACP's


# --------------------------------------------------------------- approvals


async def test_a_write_runs_only_after_allow_and_a_denial_leaves_the_workspace_untouched(
    tmp_path: Path,
) -> None:
    with trio.fail_after(BOUND_S):
        async with open_acp_runtime(tmp_path) as editor:
            await editor.initialize()
            session = await editor.new_session()
            target = editor.workspace / "notes.txt"
            seen: list[PermissionRequest] = []

            def not_yet() -> None:
                assert not target.exists()

            # Denied: nothing is written, and the call ends failed, never completed.
            stop = await editor.prompt(
                session, "create notes.txt with hello", answering(Selected("deny"), seen, not_yet)
            )
            assert stop == "end_turn"
            assert list(editor.workspace.iterdir()) == []
            [request] = seen
            assert request.session_id == session
            call = request.tool_call
            assert (call.title, call.kind, call.status) == (
                "fs.write: notes.txt",
                "edit",
                "pending",
            )
            assert [(o.option_id, o.name, o.kind) for o in request.options] == [
                ("allow", "Allow", "allow_once"),
                ("allow-always", "Always allow edits to notes.txt in this session", "allow_always"),
                ("deny", "Deny", "reject_once"),
                ("deny-always", "Always deny edits to notes.txt in this session", "reject_always"),
            ]
            events = editor.calls(session)[call.tool_call_id]
            assert statuses(events) == ["pending", "failed"]
            assert simhost_meta(events) == {
                "decidedBy": "editor",
                "decision": "deny",
                "optionId": "deny",
            }
            assert editor.texts(session)[-1].startswith("denied: fs.write: notes.txt")

            # The editor dismissing the card (cancelled) is no allow either.
            stop = await editor.prompt(
                session, "create notes.txt with hello", answering(Cancelled(), seen, not_yet)
            )
            assert stop == "end_turn"
            assert list(editor.workspace.iterdir()) == []
            events = editor.last_call(session)
            assert statuses(events) == ["pending", "failed"]
            assert simhost_meta(events) == {"decidedBy": "editor", "decision": "deny"}

            # Allowed: written, and only then completed.
            stop = await editor.prompt(
                session, "create notes.txt with hello", answering(Selected("allow"), seen, not_yet)
            )
            assert stop == "end_turn"
            assert target.read_text() == "hello\n"
            events = editor.last_call(session)
            assert statuses(events) == ["pending", "in_progress", "completed"]
            assert simhost_meta(events)["optionId"] == "allow"
            state = editor.client.tool_calls.get(session, events[0]["toolCallId"])
            assert state is not None and state.status == "completed"
            assert len(seen) == 3


async def test_a_shell_command_asks_and_reject_always_is_a_standing_grant(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with open_acp_runtime(tmp_path) as editor:
            await editor.initialize()
            session = await editor.new_session()
            seen: list[PermissionRequest] = []
            await editor.prompt(
                session, "run touch ran.txt", answering(Selected("deny-always"), seen)
            )
            [request] = seen
            assert request.tool_call.kind == "execute"
            assert request.tool_call.raw_input["command"] == "touch ran.txt"
            await editor.prompt(session, "run touch again.txt")  # not asked: the grant denies
            assert simhost_meta(editor.last_call(session)) == {
                "decidedBy": "grant",
                "decision": "deny",
                "grant": 'denied by your grant "Always deny `touch …` in this session (no options)"',
            }
            assert statuses(editor.last_call(session)) == ["pending", "failed"]
            assert list(editor.workspace.iterdir()) == []


# ------------------------------------------------------------ cancellation


async def test_session_cancel_answers_the_pending_card_cancelled_and_the_turn_cancelled(
    tmp_path: Path,
) -> None:
    asked = trio.Event()
    dismissed: list[str] = []

    async def waits(request: PermissionRequest) -> Decision:
        asked.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            dismissed.append(request.tool_call.tool_call_id)
            raise
        raise AssertionError("unreachable")

    telemetry = Events()
    with trio.fail_after(BOUND_S):
        async with open_acp_runtime(tmp_path, telemetry=telemetry) as editor:
            await editor.initialize()
            session = await editor.new_session()
            result: dict[str, Any] = {}

            async def turn() -> None:
                with editor.client.permission_handler(session, waits):
                    result.update(
                        await editor.client.request(
                            "session/prompt",
                            {
                                "sessionId": session,
                                "prompt": [{"type": "text", "text": "run touch ran.txt"}],
                            },
                        )
                    )

            async with trio.open_nursery() as nursery:
                nursery.start_soon(turn)
                await asked.wait()
                await editor.client.notify("session/cancel", {"sessionId": session})
            assert result == {"stopReason": "cancelled"}
            # The card was answered cancelled at once (by permclient) and dismissed.
            [call_id] = dismissed
            assert editor.client.pending_permissions(session) == 0
            [answered] = [e for e in telemetry.events if e["event"] == "approval.cancelled"]
            assert answered["by"] == "turn"
            # Its tool call ended failed *before* the prompt was answered.
            events = editor.calls(session)[call_id]
            assert statuses(events) == ["pending", "failed"]
            assert events[-1]["content"][0]["content"]["text"] == "the turn was cancelled"
            assert editor.texts(session)[-1] == "cancelled: the turn was cancelled"
            # The runtime is still healthy; nothing ran.
            assert await editor.prompt(session, "hello") == "end_turn"
            assert list(editor.workspace.iterdir()) == []


class Events:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def emit(self, event: str, /, **fields: Any) -> None:
        self.events.append({"event": event, **fields})


async def test_on_the_wire_session_cancel_withdraws_each_card_then_answers_cancelled(
    tmp_path: Path,
) -> None:
    """Byte for byte, with a client that does not answer the cards itself first."""
    workspace = tmp_path / "w"
    workspace.mkdir()
    argv = [*ACP_RUNTIME, "--workspace", str(workspace), "--state-dir", str(tmp_path / "s")]
    with trio.fail_after(BOUND_S):
        process = await trio.lowlevel.open_process(argv, stdin=-1, stdout=-1, stderr=None)
        assert process.stdin is not None and process.stdout is not None
        peer = FakePeer(trio.StapledStream(process.stdin, process.stdout), "acp")
        wrote: list[dict[str, Any]] = []

        async def receive() -> dict[str, Any]:
            message = await peer.receive()
            wrote.append(message)
            return message

        await peer.request("initialize", {"protocolVersion": 1})
        assert (await receive())["result"]["protocolVersion"] == 1
        await peer.request("session/new", {"cwd": str(workspace), "mcpServers": []})
        session = (await receive())["result"]["sessionId"]
        prompt = {"sessionId": session, "prompt": [{"type": "text", "text": "burst 2"}]}
        turn = await peer.request("session/prompt", prompt)
        asked: set[int] = set()
        while len(asked) < 2:
            message = await receive()
            if message.get("method") == "session/request_permission":
                assert message["params"]["sessionId"] == session
                asked.add(message["id"])
        await peer.notify("session/cancel", {"sessionId": session})
        withdrawn: set[int] = set()
        failed: set[str] = set()
        while True:
            message = await receive()
            if message.get("method") == "$/cancel_request":
                assert set(message["params"]) == {"requestId"}
                withdrawn.add(message["params"]["requestId"])
            elif message.get("method") == "session/update":
                update = message["params"]["update"]
                if update.get("status") == "failed":
                    failed.add(update["toolCallId"])
            elif message.get("id") == turn:
                assert message["result"] == {"stopReason": "cancelled"}
                break
        # Every card withdrawn and every open call failed before the turn's answer.
        assert withdrawn == asked
        assert len(failed) == 2
        # A late "allow" for a withdrawn card is treated as cancelled: nothing runs.
        for request_id in asked:
            await peer.send(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "result": {"outcome": {"outcome": "selected", "optionId": "allow"}},
                }
            )
        await peer.request("session/list", {})
        listing = await receive()
        assert [s["sessionId"] for s in listing["result"]["sessions"]] == [session]
        await process.stdin.aclose()
        assert await process.wait() == 0
        assert peer.framer.buffered == 0
    assert list(workspace.iterdir()) == []
    requests = [
        {"id": 0, "method": "initialize"},
        {"id": 1, "method": "session/new"},
        {"id": turn, "method": "session/prompt"},
        {"id": 3, "method": "session/list"},
    ]
    check_runtime_messages(wrote, requests)


@pytest.mark.parametrize(
    ("method", "params"),
    [("$/cancel_request", "requestId"), ("$/cancelRequest", "id")],
)
async def test_a_cancel_for_the_prompt_itself_ends_it_in_either_spelling(
    tmp_path: Path, method: str, params: str
) -> None:
    workspace = tmp_path / "w"
    workspace.mkdir()
    argv = [*ACP_RUNTIME, "--workspace", str(workspace), "--state-dir", str(tmp_path / "s")]
    with trio.fail_after(BOUND_S):
        process = await trio.lowlevel.open_process(argv, stdin=-1, stdout=-1, stderr=None)
        assert process.stdin is not None and process.stdout is not None
        peer = FakePeer(trio.StapledStream(process.stdin, process.stdout), "acp")
        await peer.request("initialize", {"protocolVersion": 1})
        await peer.receive()
        await peer.request("session/new", {"cwd": str(workspace), "mcpServers": []})
        session = (await peer.receive())["result"]["sessionId"]
        prompt = {"sessionId": session, "prompt": [{"type": "text", "text": "run touch x"}]}
        turn = await peer.request("session/prompt", prompt)
        while (message := await peer.receive()).get("method") != "session/request_permission":
            pass
        card = message["id"]
        await peer.notify(method, {params: turn})
        withdrawn = []
        while (message := await peer.receive()).get("id") != turn or "method" in message:
            if message.get("method") == "$/cancel_request":
                withdrawn.append(message["params"]["requestId"])
        assert message["result"] == {"stopReason": "cancelled"}
        assert withdrawn == [card]
        await process.stdin.aclose()
        assert await process.wait() == 0
    assert list(workspace.iterdir()) == []


async def test_a_policy_timeout_withdraws_the_card_with_cancel_request_and_denies(
    tmp_path: Path,
) -> None:
    policy = tmp_path / "quick.json"
    policy.write_text(json.dumps({"default": "approve", "timeoutS": 0.2, "onTimeout": "deny"}))
    withdrawn = trio.Event()
    asked: list[PermissionRequest] = []

    async def waits(request: PermissionRequest) -> Decision:
        asked.append(request)
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            withdrawn.set()
            raise
        raise AssertionError("unreachable")

    with trio.fail_after(BOUND_S):
        async with open_acp_runtime(tmp_path, "--policy", str(policy)) as editor:
            await editor.initialize()
            session = await editor.new_session()
            stop = await editor.prompt(session, "create late.txt with x", waits)
            assert stop == "end_turn"  # the question was denied, not the turn
            await withdrawn.wait()  # dismissed by the runtime's withdrawal
            [request] = asked
            cancels = [m for m in runtime_wrote(tmp_path) if m.get("method") == "$/cancel_request"]
            assert [m["params"] for m in cancels] == [{"requestId": _request_id(tmp_path)}]
    assert request.meta == {"simhost": {"tool": "fs.write", "timeoutS": 0.2}}
    assert not (editor.workspace / "late.txt").exists()
    events = editor.last_call(session)
    assert statuses(events) == ["pending", "failed"]
    assert simhost_meta(events) == {"decidedBy": "timeout", "decision": "deny"}
    assert "no answer within 0.2 s" in editor.texts(session)[-1]


def _request_id(tmp_path: Path) -> Any:
    [card] = [m for m in runtime_wrote(tmp_path) if m.get("method") == "session/request_permission"]
    return card["id"]


# -------------------------------------------------- sessions, modes, prompts


async def test_session_load_replays_the_history_then_answers(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with open_acp_runtime(tmp_path) as editor:
            await editor.initialize()
            session = await editor.new_session()
            await editor.prompt(session, "create kept.txt with k", answering(Selected("allow"), []))
            await editor.client.request(
                "session/set_mode", {"sessionId": session, "modeId": "read-only"}
            )
        async with open_acp_runtime(tmp_path) as editor:
            await editor.initialize()
            listing = await editor.client.request("session/list", {})
            [info] = listing["sessions"]
            assert (info["sessionId"], info["cwd"]) == (session, str(editor.workspace.resolve()))
            other = await editor.client.request("session/list", {"cwd": str(tmp_path)})
            assert other == {"sessions": []}
            loaded = await editor.client.request(
                "session/load",
                {"sessionId": session, "cwd": str(editor.workspace), "mcpServers": []},
            )
            # The replay came before the answer, in order.
            replay = editor.updates[session]
            assert replay[0] == {
                "sessionUpdate": "user_message_chunk",
                "content": {"type": "text", "text": "create kept.txt with k"},
            }
            [tool] = [u for u in replay if u["sessionUpdate"] == "tool_call"]
            assert (tool["toolCallId"], tool["status"]) == ("call-1", "completed")
            assert tool["title"].startswith("fs.write: kept.txt")
            assert any("created kept.txt" in text for text in editor.texts(session))
            assert loaded["modes"]["currentModeId"] == "read-only"
            # The preset holds: read-only denies a write without asking.
            await editor.prompt(session, "create more.txt with m")
            events = editor.last_call(session)
            assert events[0]["toolCallId"] == "call-2"  # ids go on where they stopped
            assert simhost_meta(events) == {"decidedBy": "preset", "decision": "deny"}
            assert not (editor.workspace / "more.txt").exists()
            with pytest.raises(permclient.RequestError) as info:
                await editor.client.request(
                    "session/set_mode", {"sessionId": session, "modeId": "yolo"}
                )
            assert info.value.code == -32602
            with pytest.raises(permclient.RequestError) as info:
                await editor.client.request(
                    "session/load",
                    {"sessionId": "s-nope", "cwd": str(editor.workspace), "mcpServers": []},
                )
            assert info.value.code == -32002


async def test_a_resource_link_in_a_prompt_stands_for_its_path(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with open_acp_runtime(tmp_path) as editor:
            await editor.initialize()
            notes = editor.workspace / "my notes.txt"
            notes.write_text("some text\n")
            session = await editor.new_session()
            blocks = [
                {"type": "text", "text": "read"},
                {"type": "resource_link", "uri": notes.as_uri(), "name": "my notes.txt"},
            ]
            await editor.prompt(session, blocks)
            events = editor.last_call(session)
            assert statuses(events) == ["pending", "in_progress", "completed"]
            assert events[-1]["rawOutput"]["text"] == "some text\n"


