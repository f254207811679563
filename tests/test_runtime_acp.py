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
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import trio
import trio.testing

import permclient
import simhost
from permclient import Cancelled, Decision, PermissionRequest, Selected
from simhost.runtime.acp import prompt_text
from simhost.runtime.acp_wire import PromptBlock
from simhost.runtime.policy import load_policy
from simhost.runtime.server import RuntimeConfig, serve

from .peer import FakePeer
from .runtime_editor import (
    Handler,
    RuntimeEditor,
    answering,
    never_asked,
    simhost_meta,
    statuses,
)
from .test_wire import SCHEMA_PATH

RUNTIME = [sys.executable, "-m", "simhost", "runtime", "--stdio", "--dialect", "acp"]
BOUND_S = 20


# Runs the runtime as its child and copies each direction of its stdio, as it
# passes, to a file: argv is [python, -c, TAP, into.log, out.log, runtime argv...].
# It changes no byte and exits with the runtime's exit code.
TAP = r"""
import os, subprocess, sys, threading
into_path, out_path, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

def pump(source, sink, path):
    with open(path, "ab") as log:
        try:
            while data := os.read(source, 65536):
                log.write(data)
                log.flush()
                sink.write(data)
                sink.flush()
        except BrokenPipeError:
            pass
        finally:
            try:
                sink.close()
            except BrokenPipeError:
                pass

threading.Thread(target=pump, args=(0, child.stdin, into_path), daemon=True).start()
pump(child.stdout.fileno(), sys.stdout.buffer, out_path)
sys.exit(child.wait())
"""


# ----------------------------------------------------------------- the schema

RESULT_DEFS = {
    "initialize": "InitializeResponse",
    "session/new": "NewSessionResponse",
    "session/load": "LoadSessionResponse",
    "session/list": "ListSessionsResponse",
    "session/set_mode": "SetSessionModeResponse",
    "session/prompt": "PromptResponse",
}
REQUEST_DEFS = {"session/request_permission": "RequestPermissionRequest"}
NOTIFICATION_DEFS = {
    "session/update": "SessionNotification",
    "$/cancel_request": "CancelRequestNotification",
}


@cache
def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return schema


@cache
def _validator(part: str | int) -> jsonschema.protocols.Validator:
    """A validator for ``$defs/<part>``, or for the schema's top-level message branch ``part``.

    (Branch 0: agent messages, 2: protocol-level ones.) The schema itself is checked
    once by tests/test_wire.py.
    """
    schema = _schema()
    target = {"$ref": f"#/$defs/{part}"} if isinstance(part, str) else schema["anyOf"][part]
    validator: jsonschema.protocols.Validator = jsonschema.Draft202012Validator(
        {**target, "$defs": schema["$defs"]}
    )
    return validator


def assert_valid(def_name: str, instance: Any) -> None:
    """Validate ``instance`` against ``$defs/<def_name>`` of ACP's schema."""
    _validator(def_name).validate(instance)


def parse_lines(data: bytes) -> list[dict[str, Any]]:
    """Newline-delimited JSON: every line is one JSON object, the last one ends too."""
    assert data == b"" or data.endswith(b"\n"), "a message was left without its newline"
    messages = []
    for line in data.split(b"\n")[:-1]:
        message = json.loads(line)
        assert isinstance(message, dict), line
        messages.append(message)
    return messages


def check_runtime_messages(
    from_runtime: list[dict[str, Any]], to_runtime: list[dict[str, Any]]
) -> None:
    """Validate every message the runtime wrote against ACP's schema.

    A response is checked against the result type of the request it answers
    (its method is looked up among the client's requests).
    """
    asked = {m["id"]: m["method"] for m in to_runtime if "method" in m and "id" in m}
    for message in from_runtime:
        assert message["jsonrpc"] == "2.0"
        method = message.get("method")
        if method == "$/cancel_request":
            _validator(2).validate(message)
        else:
            _validator(0).validate(message)
        if method is not None and "id" in message:
            assert_valid(REQUEST_DEFS[method], message["params"])
        elif method is not None:
            assert_valid(NOTIFICATION_DEFS[method], message["params"])
        elif "result" in message:
            assert_valid(RESULT_DEFS[asked[message["id"]]], message["result"])
        else:
            assert_valid("Error", message["error"])


# ---------------------------------------------------------------- the editor


class AcpEditor(RuntimeEditor):
    """An editor in the ``acp`` dialect: ``initialize``, ``session/new``, ``session/prompt``."""

    async def initialize(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.client.request(
            "initialize",
            {
                "protocolVersion": 1,
                "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}},
                "clientInfo": {"name": "test", "version": "0"},
            },
        )
        return result

    async def new_session(self) -> str:
        result = await self.client.request(
            "session/new", {"cwd": str(self.workspace), "mcpServers": []}
        )
        session_id: str = result["sessionId"]
        return session_id

    async def prompt(
        self, session_id: str, prompt: str | list[dict[str, Any]], handler: Handler | None = None
    ) -> str:
        """One turn; its questions are answered by ``handler`` (none: any question fails)."""
        blocks = [{"type": "text", "text": prompt}] if isinstance(prompt, str) else prompt
        with self.client.permission_handler(session_id, handler or never_asked):
            result = await self.client.request(
                "session/prompt", {"sessionId": session_id, "prompt": blocks}
            )
        stop_reason: str = result["stopReason"]
        return stop_reason


@asynccontextmanager
async def open_runtime(
    tmp_path: Path, *extra: str, state: str = "state", telemetry: Any = None
) -> AsyncIterator[AcpEditor]:
    """Start the runtime (behind the tap) and check, afterwards, all it wrote."""
    workspace = tmp_path / "w"
    workspace.mkdir(exist_ok=True)
    into, out = tmp_path / "to-runtime.jsonl", tmp_path / "from-runtime.jsonl"
    into.unlink(missing_ok=True)
    out.unlink(missing_ok=True)
    runtime = [*RUNTIME, "--workspace", str(workspace), "--state-dir", str(tmp_path / state)]
    argv = [sys.executable, "-c", TAP, str(into), str(out), *runtime, *extra]
    log = tmp_path / "runtime.log"
    async with permclient.open_process(
        argv, dialect="acp", stderr=log, telemetry=telemetry
    ) as client:
        yield AcpEditor(client, workspace)
        assert client.process is not None
    # It exited on its own when its stdin closed, with nothing to complain about.
    assert client.process.returncode == 0
    assert log.read_text() == ""
    from_runtime = parse_lines(out.read_bytes())
    assert from_runtime, "the runtime wrote nothing"
    check_runtime_messages(from_runtime, parse_lines(into.read_bytes()))


def runtime_wrote(tmp_path: Path) -> list[dict[str, Any]]:
    """What the runtime has written so far (the tap's copy)."""
    return parse_lines((tmp_path / "from-runtime.jsonl").read_bytes())


# ------------------------------------------------------------ the handshake


async def test_initialize_answers_version_1_capabilities_and_who_it_is(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with open_runtime(tmp_path) as editor:
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
        async with open_runtime(tmp_path) as editor:
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
        async with open_runtime(tmp_path) as editor:
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
        async with open_runtime(tmp_path, telemetry=telemetry) as editor:
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
    argv = [*RUNTIME, "--workspace", str(workspace), "--state-dir", str(tmp_path / "s")]
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
    argv = [*RUNTIME, "--workspace", str(workspace), "--state-dir", str(tmp_path / "s")]
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
        async with open_runtime(tmp_path, "--policy", str(policy)) as editor:
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


class _Tap(trio.abc.Stream):
    """Keeps a copy of every byte received through ``inner``."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner
        self.received = bytearray()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self.inner.receive_some(max_bytes)
        self.received += data
        return data

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_the_strict_policys_five_minute_timeout_withdraws_on_the_clock(
    tmp_path: Path, autojump_clock: trio.testing.MockClock
) -> None:
    """In-process: the shipped ``strict`` policy (300 s for writes), on trio's mock clock."""
    workspace = tmp_path / "w"
    workspace.mkdir()
    policy, label = load_policy("strict")
    config = RuntimeConfig(workspace.resolve(), policy, label, tmp_path / "s", "acp")
    runtime_end, editor_end = trio.testing.memory_stream_pair()
    tap = _Tap(editor_end)
    asked_at: list[float] = []
    withdrawn_at: list[float] = []

    async def waits(request: PermissionRequest) -> Decision:
        asked_at.append(trio.current_time())
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            withdrawn_at.append(trio.current_time())
            raise
        raise AssertionError("unreachable")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(serve, runtime_end, config)
        async with permclient.open_client(tap, dialect="acp") as client:
            editor = AcpEditor(client, workspace)
            await editor.initialize()
            session = await editor.new_session()
            assert await editor.prompt(session, "create late.txt with x", waits) == "end_turn"
            await editor.wait_for(lambda: bool(withdrawn_at))
    assert withdrawn_at[0] - asked_at[0] == pytest.approx(300)
    assert not (workspace / "late.txt").exists()
    events = editor.last_call(session)
    assert statuses(events) == ["pending", "failed"]
    assert simhost_meta(events) == {"decidedBy": "timeout", "decision": "deny"}
    wrote = parse_lines(bytes(tap.received))
    [card] = [m for m in wrote if m.get("method") == "session/request_permission"]
    cancels = [m for m in wrote if m.get("method") == "$/cancel_request"]
    assert [m["params"] for m in cancels] == [{"requestId": card["id"]}]
    requests = [
        {"id": 0, "method": "initialize"},
        {"id": 1, "method": "session/new"},
        {"id": 2, "method": "session/prompt"},
    ]
    check_runtime_messages(wrote, requests)


# -------------------------------------------------- sessions, modes, prompts


async def test_session_load_replays_the_history_then_answers(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with open_runtime(tmp_path) as editor:
            await editor.initialize()
            session = await editor.new_session()
            await editor.prompt(session, "create kept.txt with k", answering(Selected("allow"), []))
            await editor.client.request(
                "session/set_mode", {"sessionId": session, "modeId": "read-only"}
            )
        async with open_runtime(tmp_path) as editor:
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
        async with open_runtime(tmp_path) as editor:
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


def test_prompt_text_joins_text_blocks_and_links() -> None:
    def blocks(*items: tuple[str, str]) -> list[PromptBlock]:
        return [
            PromptBlock(kind, text=value) if kind == "text" else PromptBlock(kind, uri=value)
            for kind, value in items
        ]

    assert prompt_text(blocks(("text", "create a.txt"), ("text", " with hi"))) == (
        "create a.txt with hi"
    )
    assert prompt_text(blocks(("text", "read"), ("resource_link", "file:///w/a%20b.txt"))) == (
        'read "/w/a b.txt" '
    )
    assert prompt_text(blocks(("text", "read "), ("resource_link", "file:///w/a.txt"))) == (
        "read /w/a.txt "
    )
    assert prompt_text(blocks(("resource_link", "https://example.com/x"))) == (
        "https://example.com/x "
    )
    assert prompt_text([PromptBlock("image"), PromptBlock("text", text="help")]) == "help"


async def test_a_cancel_in_the_same_read_as_its_prompt_cancels_that_prompt(
    tmp_path: Path,
) -> None:
    """session/cancel right behind its session/prompt (one write): the turn never runs."""
    from .peer import FakePeer

    workspace = tmp_path / "w"
    workspace.mkdir()
    policy, label = load_policy("default")
    config = RuntimeConfig(workspace.resolve(), policy, label, tmp_path / "s", "acp")
    runtime_end, editor_end = trio.testing.memory_stream_pair()
    peer = FakePeer(editor_end, "acp")
    with trio.fail_after(10):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(serve, runtime_end, config)
            await peer.request("initialize", {"protocolVersion": 1}, request_id=0)
            assert "result" in await peer.receive()
            params = {"cwd": str(workspace.resolve()), "mcpServers": []}
            await peer.request("session/new", params, request_id=1)
            session_id = (await peer.receive())["result"]["sessionId"]
            prompt = {
                "jsonrpc": "2.0",
                "id": 2,
                "method": "session/prompt",
                "params": {
                    "sessionId": session_id,
                    "prompt": [{"type": "text", "text": "create never.txt with x"}],
                },
            }
            cancel = {
                "jsonrpc": "2.0",
                "method": "session/cancel",
                "params": {"sessionId": session_id},
            }
            frames = [peer.framer_type.encode(json.dumps(m).encode()) for m in (prompt, cancel)]
            await peer.send_raw(b"".join(frames))
            while True:
                reply = await peer.receive()
                assert reply.get("method") != "session/request_permission"
                if reply.get("id") == 2:
                    break
            assert reply["result"] == {"stopReason": "cancelled"}
            await editor_end.aclose()
    assert not (workspace / "never.txt").exists()
