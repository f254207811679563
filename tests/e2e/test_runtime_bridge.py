"""``simhost runtime --stdio`` for real, driven through permclient as an editor drives it."""

from __future__ import annotations

import json
import os
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio

import permclient
import permclient.framing
from permclient import Decision, PermissionRequest, Selected
from simhost.runtime.sessions import SessionStore
from tests.support.acp_schema import assert_valid
from tests.support.peer import CANCELLED, FakePeer
from tests.support.runtime_editor import (
    BRIDGE_RUNTIME,
    BridgeEditor,
    Handler,
    answering,
    open_bridge_runtime,
    simhost_meta,
    statuses,
)

# ------------------------------------------------------------------- each tool

BOUND_S = 20


async def test_a_write_runs_only_after_allow_and_a_deny_leaves_the_workspace_untouched(
    tmp_path: Path,
) -> None:
    with trio.fail_after(BOUND_S):
        async with open_bridge_runtime(tmp_path) as editor:
            info = await editor.client.request("initialize", {"clientInfo": {"name": "test"}})
            assert info["workspace"] == str(editor.workspace.resolve())
            assert info["presets"] == ["ask", "read-only", "auto-edit"]
            session = await editor.new_session("writes")
            target = editor.workspace / "notes.txt"
            seen: list[PermissionRequest] = []

            def not_yet() -> None:
                assert not target.exists()

            stop = await editor.send(
                session, "create notes.txt with hello", answering("deny", seen, not_yet)
            )
            assert stop == "end_turn"
            assert not target.exists()
            assert list(editor.workspace.iterdir()) == []
            [request] = seen
            assert request.session_id == session
            call = request.tool_call
            assert (call.title, call.kind, call.status) == (
                "fs.write: notes.txt",
                "edit",
                "pending",
            )
            assert call.raw_input == {"path": "notes.txt", "text": "hello"}
            assert call.content is not None
            [diff] = call.content
            assert isinstance(diff, permclient.Diff)
            assert (diff.path, diff.old_text, diff.new_text) == (str(target), None, "hello\n")
            assert [o.option_id for o in request.options] == [
                "allow",
                "allow-always",
                "deny",
                "deny-always",
            ]
            events = editor.calls(session)[call.tool_call_id]
            assert statuses(events) == ["pending", "failed"]
            assert simhost_meta(events) == {
                "decidedBy": "editor",
                "decision": "deny",
                "optionId": "deny",
            }
            assert any(t.startswith("denied: fs.write: notes.txt") for t in editor.texts(session))

            stop = await editor.send(
                session, "create notes.txt with hello", answering("allow", seen, not_yet)
            )
            assert stop == "end_turn"
            assert target.read_text() == "hello\n"
            events = editor.last_call(session)
            assert statuses(events) == ["pending", "in_progress", "completed"]
            assert simhost_meta(events)["decidedBy"] == "editor"
            state = editor.client.tool_calls.get(session, events[0]["toolCallId"])
            assert state is not None and state.status == "completed"


CASES: list[tuple[str, str, Callable[[Path], bool], Callable[[Path], bool]]] = [
    (
        "edit notes.txt: hello => bye",
        "edit",
        lambda w: (w / "notes.txt").read_text() == "hello\n",
        lambda w: (w / "notes.txt").read_text() == "bye\n",
    ),
    (
        "run echo ran > ran.txt",
        "execute",
        lambda w: not (w / "ran.txt").exists(),
        lambda w: (w / "ran.txt").read_text() == "ran\n",
    ),
    (
        "delete notes.txt",
        "delete",
        lambda w: (w / "notes.txt").exists(),
        lambda w: not (w / "notes.txt").exists(),
    ),
]


async def test_edit_delete_and_shell_run_only_after_allow(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with open_bridge_runtime(tmp_path) as editor:
            (editor.workspace / "notes.txt").write_text("hello\n")
            session = await editor.new_session()
            for prompt, kind, untouched, done in CASES:
                seen: list[PermissionRequest] = []

                def check(untouched: Callable[[Path], bool] = untouched) -> None:
                    assert untouched(editor.workspace)

                await editor.send(session, prompt, answering("deny", seen, check))
                assert untouched(editor.workspace), prompt
                assert statuses(editor.last_call(session)) == ["pending", "failed"]
                assert "denied" in editor.texts(session)[-1]
                await editor.send(session, prompt, answering("allow", seen, check))
                assert done(editor.workspace), prompt
                events = editor.last_call(session)
                assert statuses(events) == ["pending", "in_progress", "completed"]
                assert [r.tool_call.kind for r in seen] == [kind, kind]
                if kind == "execute":
                    assert seen[0].tool_call.raw_input["command"] == "echo ran > ran.txt"
                    assert seen[0].tool_call.title == "local_shell: echo ran > ran.txt"
                    assert events[-1]["rawOutput"]["exitCode"] == 0
                if kind == "edit":
                    content = seen[0].tool_call.content
                    assert content is not None
                    [diff] = content
                    assert isinstance(diff, permclient.Diff)
                    assert (diff.old_text, diff.new_text) == ("hello\n", "bye\n")


async def test_reads_run_without_asking_and_report_the_text(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with open_bridge_runtime(tmp_path) as editor:
            (editor.workspace / "notes.txt").write_text("some text\n")
            session = await editor.new_session()
            await editor.send(session, "read notes.txt")
            events = editor.last_call(session)
            assert events[0]["kind"] == "read"
            assert statuses(events) == ["pending", "in_progress", "completed"]
            assert simhost_meta(events) == {"decidedBy": "preset", "decision": "allow"}
            assert events[-1]["rawOutput"]["text"] == "some text\n"
            await editor.send(session, "hello there")
            assert editor.texts(session)[-1].startswith("You said: hello there")


# ---------------------------------------------------------------- standing grants


async def test_allow_always_is_remembered_and_persisted(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with open_bridge_runtime(tmp_path) as editor:
            session = await editor.new_session()
            seen: list[PermissionRequest] = []
            await editor.send(session, "create a.txt with a", answering("allow-always", seen))
            assert len(seen) == 1
            assert simhost_meta(editor.last_call(session))["optionId"] == "allow-always"
            await editor.send(session, "edit a.txt: a => b")  # not asked: the same file
            assert (editor.workspace / "a.txt").read_text() == "b\n"
            receipt = 'allowed by your grant "Always allow edits to a.txt in this session"'
            assert simhost_meta(editor.last_call(session)) == {
                "decidedBy": "grant",
                "decision": "allow",
                "grant": receipt,
            }
            assert receipt in editor.texts(session)
            # reject_always is remembered the same way, for the command's program.
            await editor.send(session, "run touch c.txt", answering("deny-always", seen))
            await editor.send(session, "run touch d.txt")  # not asked: denied by the grant
            assert simhost_meta(editor.last_call(session))["decidedBy"] == "grant"
            assert not (editor.workspace / "c.txt").exists()
            assert not (editor.workspace / "d.txt").exists()
            # Another session has no grant.
            other = await editor.new_session()
            await editor.send(other, "create a.txt with e", answering("deny", seen))
            assert len(seen) == 3
        async with open_bridge_runtime(tmp_path) as editor:
            permissions = await editor.client.request("sessionPermissions", {"sessionId": session})
            assert permissions["grants"] == [
                {
                    "tool": "fs.write",
                    "decision": "allow",
                    "scope": ["a.txt"],
                    "name": "Always allow edits to a.txt in this session",
                },
                {
                    "tool": "local_shell.local_shell",
                    "decision": "reject",
                    "scope": ["touch"],
                    "name": "Always deny `touch …` in this session (no options)",
                },
            ]
            await editor.send(session, "create a.txt with f")  # still not asked
            assert (editor.workspace / "a.txt").read_text() == "f\n"


# ---------------------------------------------------------- withdrawn questions


class Events:
    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def emit(self, event: str, /, **fields: Any) -> None:
        self.events.append({"event": event, **fields})


async def test_a_policy_timeout_withdraws_the_question_and_denies(tmp_path: Path) -> None:
    policy = tmp_path / "quick.json"
    policy.write_text(json.dumps({"default": "approve", "timeoutS": 0.3, "onTimeout": "deny"}))
    telemetry = Events()
    withdrawn = trio.Event()
    asked: list[PermissionRequest] = []

    async def waits(request: PermissionRequest) -> Decision:
        asked.append(request)
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            withdrawn.set()
            raise

    workspace = tmp_path / "w"
    workspace.mkdir()
    argv = [*BRIDGE_RUNTIME, "--workspace", str(workspace), "--state-dir", str(tmp_path / "s")]
    with trio.fail_after(BOUND_S):
        async with permclient.open_process(
            [*argv, "--policy", str(policy)],
            stderr=tmp_path / "runtime.log",
            telemetry=telemetry,
        ) as client:
            editor = BridgeEditor(client, workspace)
            session = await editor.new_session()
            stop = await editor.send(session, "create late.txt with x", waits)
            assert stop == "end_turn"  # the turn goes on: the question was denied, not the turn
            # The editor's handler is dismissed while the connection is still open.
            await withdrawn.wait()
            assert client.closed_reason is None
    [request] = asked
    assert request.meta == {"simhost": {"tool": "fs.write", "timeoutS": 0.3}}
    cancelled = [e for e in telemetry.events if e["event"] == "approval.cancelled"]
    assert [(e["by"], e["session_id"]) for e in cancelled] == [("peer", session)]
    assert not (workspace / "late.txt").exists()
    events = editor.last_call(session)
    assert statuses(events) == ["pending", "failed"]
    assert simhost_meta(events) == {"decidedBy": "timeout", "decision": "deny"}
    assert "no answer within 0.3 s" in editor.texts(session)[-1]


async def test_cancelling_chat_send_withdraws_its_open_questions(tmp_path: Path) -> None:
    pending = 0
    all_pending = trio.Event()
    seen: list[PermissionRequest] = []

    async def waits(request: PermissionRequest) -> Decision:
        nonlocal pending
        seen.append(request)
        pending += 1
        if pending == 3:
            all_pending.set()
        await trio.sleep_forever()
        raise AssertionError("unreachable")

    with trio.fail_after(BOUND_S):
        async with open_bridge_runtime(tmp_path) as editor:
            session = await editor.new_session()
            with editor.client.permission_handler(session, waits):
                async with trio.open_nursery() as nursery:

                    async def turn() -> None:
                        await editor.client.request(
                            "chatSend", {"sessionId": session, "text": "burst 3"}
                        )
                        raise AssertionError("the turn was not cancelled")

                    nursery.start_soon(turn)
                    await all_pending.wait()
                    nursery.cancel_scope.cancel()
            assert editor.client.pending_permissions(session) == 0
            # permclient answers the cancelled chatSend at once; the runtime's cleanup follows.
            await editor.wait_for(
                lambda: "cancelled: the turn was cancelled" in editor.texts(session)
            )
            # The runtime is still healthy and the cancelled calls ended failed.
            await editor.send(session, "hello")
            for request in seen:
                state = editor.client.tool_calls.get(session, request.tool_call.tool_call_id)
                assert state is not None and state.status == "failed"
            assert list(editor.workspace.iterdir()) == []


async def test_cancelling_a_turn_kills_its_running_shell_command(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with open_bridge_runtime(tmp_path) as editor:
            session = await editor.new_session()
            pid_fifo = editor.workspace / "pid"
            os.mkfifo(pid_fifo)
            with editor.client.permission_handler(session, answering("allow", [])):
                async with trio.open_nursery() as nursery:

                    async def turn() -> None:
                        text = f"run echo $$ > {pid_fifo}; exec sleep 60"
                        await editor.client.request(
                            "chatSend", {"sessionId": session, "text": text}
                        )

                    nursery.start_soon(turn)
                    # Blocks until the command writes its pid: it is running.
                    pid = int(
                        await trio.to_thread.run_sync(pid_fifo.read_text, abandon_on_cancel=True)
                    )
                    nursery.cancel_scope.cancel()
            await editor.wait_for(
                lambda: "cancelled: the turn was cancelled" in editor.texts(session)
            )
            with pytest.raises(ProcessLookupError):
                os.kill(pid, 0)
            assert statuses(editor.last_call(session)) == ["pending", "in_progress", "failed"]


async def test_sigterm_to_the_runtime_kills_its_running_shell_command(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with open_bridge_runtime(tmp_path) as editor:
            session = await editor.new_session()
            pid_fifo = editor.workspace / "pid"
            os.mkfifo(pid_fifo)
            runtime = editor.client.process
            assert runtime is not None
            with editor.client.permission_handler(session, answering("allow", [])):
                async with trio.open_nursery() as nursery:

                    async def turn() -> None:
                        text = f"run echo $$ > {pid_fifo}; exec sleep 60"
                        try:
                            result = await editor.client.request(
                                "chatSend", {"sessionId": session, "text": text}
                            )
                        except permclient.ConnectionClosed:
                            return  # gone before its answer was flushed: also fine
                        assert result == {"stopReason": "cancelled"}

                    nursery.start_soon(turn)
                    pid = int(
                        await trio.to_thread.run_sync(pid_fifo.read_text, abandon_on_cancel=True)
                    )
                    command = os.pidfd_open(pid)  # readable once the command has ended
                    runtime.send_signal(signal.SIGTERM)
                    await runtime.wait()
            await trio.lowlevel.wait_readable(command)
            os.close(command)


async def test_on_the_wire_a_cancelled_turn_answers_cancelled_and_withdraws_each_question(
    tmp_path: Path,
) -> None:
    """The same, byte for byte: what the runtime sends when its ``chatSend`` is cancelled."""
    workspace = tmp_path / "w"
    workspace.mkdir()
    argv = [*BRIDGE_RUNTIME, "--workspace", str(workspace), "--state-dir", str(tmp_path / "s")]
    with trio.fail_after(BOUND_S):
        process = await trio.lowlevel.open_process(argv, stdin=-1, stdout=-1, stderr=None)
        assert process.stdin is not None and process.stdout is not None
        peer = FakePeer(trio.StapledStream(process.stdin, process.stdout), "bridge")
        await peer.request("sessionNew", {})
        session = (await peer.receive())["result"]["sessionId"]
        turn = await peer.request("chatSend", {"sessionId": session, "text": "burst 2"})
        asked: set[int] = set()
        while len(asked) < 2:
            message = await peer.receive()
            if message.get("method") == "session/update":
                assert_valid("SessionNotification", message["params"])
            if message.get("method") == "session/request_permission":
                assert_valid("RequestPermissionRequest", message["params"])
                assert message["params"]["sessionId"] == session
                asked.add(message["id"])
        await peer.notify("$/cancelRequest", {"id": turn})
        withdrawn: set[int] = set()
        while True:
            message = await peer.receive()
            if message.get("method") == "$/cancelRequest":
                withdrawn.add(message["params"]["id"])
            elif message.get("id") == turn:
                assert message["result"] == {"stopReason": "cancelled"}
                break
        assert withdrawn == asked  # every question withdrawn before the turn's answer
        for request_id in asked:  # the editor still answers; the runtime ignores it
            await peer.send({"jsonrpc": "2.0", "id": request_id, "result": CANCELLED})
        await process.stdin.aclose()
        assert await process.wait() == 0
    assert list(workspace.iterdir()) == []


async def test_the_runtime_exits_cleanly_when_the_editor_goes_away_mid_turn(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "w"
    workspace.mkdir()
    log = tmp_path / "runtime.log"
    argv = [*BRIDGE_RUNTIME, "--workspace", str(workspace), "--state-dir", str(tmp_path / "s")]
    with trio.fail_after(BOUND_S), log.open("wb") as stderr:
        process = await trio.lowlevel.open_process(argv, stdin=-1, stdout=-1, stderr=stderr)
        assert process.stdin is not None and process.stdout is not None
        peer = FakePeer(trio.StapledStream(process.stdin, process.stdout), "bridge")
        await peer.request("sessionNew", {})
        session = (await peer.receive())["result"]["sessionId"]
        await peer.request("chatSend", {"sessionId": session, "text": "run touch ran.txt"})
        while (await peer.receive()).get("method") != "session/request_permission":
            pass
        await process.stdin.aclose()  # no answer, no cancel: the editor is just gone
        assert await process.wait() == 0
    assert list(workspace.iterdir()) == []
    assert log.read_text() == ""


async def test_piped_requests_are_answered_and_stdout_holds_nothing_but_frames(
    tmp_path: Path,
) -> None:
    """``printf … | simhost runtime --stdio``: end of input right after the requests."""
    workspace = tmp_path / "w"
    workspace.mkdir()
    requests = [
        ("initialize", {}),
        ("sessionNew", {"title": "piped"}),
        ("chatSend", {"sessionId": "?", "text": "run touch ran.txt"}),
        ("sessionList", {}),
    ]
    argv = [*BRIDGE_RUNTIME, "--workspace", str(workspace), "--state-dir", str(tmp_path / "s")]
    session = SessionStore(tmp_path / "s").create("made earlier").session_id
    requests[2] = ("chatSend", {"sessionId": session, "text": "run touch ran.txt"})
    with trio.fail_after(BOUND_S):
        result = await trio.run_process(
            argv,
            stdin=b"".join(_frame(i, m, p) for i, (m, p) in enumerate(requests)),
            capture_stdout=True,
            capture_stderr=True,
        )
    assert result.stderr == b""
    answers = {m["id"]: m for m in _frames(result.stdout) if "id" in m and "method" not in m}
    assert answers[0]["result"]["runtimeInfo"]["name"] == "simhost-runtime"
    assert answers[1]["result"]["sessionId"] != session
    # Requests run concurrently (JSON-RPC promises no order): the list may or may not
    # include the session created by request 1 of the same batch.
    listed = [s["sessionId"] for s in answers[3]["result"]["sessions"]]
    assert listed in ([session], [session, answers[1]["result"]["sessionId"]])
    # The turn had to ask, and the editor is gone: it is cancelled, nothing ran.
    assert answers[2]["result"] == {"stopReason": "cancelled"}
    assert list(workspace.iterdir()) == []


async def test_the_end_of_input_does_not_import_pytest(tmp_path: Path) -> None:
    """The drain at end of input uses ``trio.testing``, which imports pytest where it is
    installed (here it is): a second or more of every exit, until it was kept out."""
    workspace = tmp_path / "w"
    workspace.mkdir()
    argv = [sys.executable, "-X", "importtime", *BRIDGE_RUNTIME[1:], "--workspace", str(workspace)]
    argv += ["--state-dir", str(tmp_path / "s")]
    with trio.fail_after(BOUND_S):
        result = await trio.run_process(
            argv, stdin=_frame(0, "initialize", {}), capture_stdout=True, capture_stderr=True
        )
    imported = {
        line.rsplit("|", 1)[-1].strip()
        for line in result.stderr.decode().splitlines()
        if line.startswith("import time:")
    }
    assert "trio.testing" in imported  # the drain ran
    # (A "pytest" line is the import trio.testing tried and was refused; pytest's own
    # modules are all under _pytest.)
    assert not [name for name in imported if name.split(".")[0] == "_pytest"]
    assert "pytest" in {name.split(".")[0] for name in sys.modules}  # (it could have been)


def _frame(request_id: int, method: str, params: Any) -> bytes:
    body = json.dumps({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
    return permclient.framing.ContentLengthFramer.encode(body.encode())


def _frames(data: bytes) -> list[dict[str, Any]]:
    framer = permclient.framing.ContentLengthFramer()
    framer.receive_data(data)
    frames = []
    while (frame := framer.next_frame()) is not None:
        frames.append(json.loads(frame))
    assert framer.buffered == 0
    return frames


# -------------------------------------------------------------------- sessions


async def test_session_read_never_activates_and_session_load_does(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with open_bridge_runtime(tmp_path) as editor:
            request = editor.client.request
            first = await editor.new_session("first")
            second = await editor.new_session("second")

            async def active() -> list[str]:
                listing = await request("sessionList", {})
                return [s["sessionId"] for s in listing["sessions"] if s["isActive"]]

            assert await active() == [second]
            read = await request("sessionRead", {"sessionId": first})
            assert (read["sessionId"], read["title"], read["isActive"]) == (first, "first", False)
            assert await active() == [second]
            loaded = await request("sessionLoad", {"sessionId": first})
            assert loaded["isActive"] is True
            assert await active() == [first]
            read = await request("sessionRead", {"sessionId": second})
            assert read["isActive"] is False
            assert await active() == [first]
            with pytest.raises(permclient.RequestError) as info:
                await request("sessionRead", {"sessionId": "s-nope"})
            assert info.value.code == -32602 and "s-nope" in info.value.message
            with pytest.raises(permclient.RequestError) as info:
                await request("sessionLoad", {})
            assert info.value.code == -32602
            with pytest.raises(permclient.RequestError) as info:
                await request("sessionDance", {})
            assert info.value.code == -32601


async def test_a_restarted_runtime_lists_its_sessions_again(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with open_bridge_runtime(tmp_path) as editor:
            first = await editor.new_session("kept")
            await editor.send(first, "create kept.txt with k", answering("allow", []))
            second = await editor.new_session("also kept")
            await editor.client.request(
                "sessionSetPermission", {"sessionId": second, "presetId": "read-only"}
            )
            await editor.client.request("sessionLoad", {"sessionId": first})
            before = await editor.client.request("sessionList", {})
        async with open_bridge_runtime(tmp_path) as editor:
            after = await editor.client.request("sessionList", {})
            assert after == before
            assert [(s["sessionId"], s["title"], s["isActive"]) for s in after["sessions"]] == [
                (first, "kept", True),
                (second, "also kept", False),
            ]
            history = (await editor.client.request("sessionRead", {"sessionId": first}))["history"]
            assert history[0] == {"role": "user", "text": "create kept.txt with k"}
            [tool] = [entry for entry in history if entry["role"] == "tool"]
            assert tool["status"] == "completed" and tool["toolCallId"] == "call-1"
            assert any(e["role"] == "agent" and "created kept.txt" in e["text"] for e in history)
            permissions = await editor.client.request("sessionPermissions", {"sessionId": second})
            assert permissions["presetId"] == "read-only"
            # Tool-call ids go on where they stopped: no id is reused in a session.
            await editor.send(first, "read kept.txt")
            assert editor.last_call(first)[0]["toolCallId"] == "call-2"


# --------------------------------------------------------------------- routing


async def test_burst_50_in_two_sessions_at_once_routes_every_question_to_its_session(
    tmp_path: Path,
) -> None:
    with trio.fail_after(BOUND_S):
        async with open_bridge_runtime(tmp_path) as editor:
            sessions = [await editor.new_session("A"), await editor.new_session("B")]
            seen: dict[str, list[PermissionRequest]] = {s: [] for s in sessions}
            stop_reasons: dict[str, str] = {}

            def handler_for(session: str, option_id: str) -> Handler:
                everyone_asked = trio.Event()

                async def handler(request: PermissionRequest) -> Decision:
                    assert request.session_id == session
                    seen[session].append(request)
                    if len(seen[session]) == 50:
                        # All 50 questions of this session are pending at this moment.
                        assert editor.client.pending_permissions(session) == 50
                        everyone_asked.set()
                    await everyone_asked.wait()
                    return Selected(option_id)

                return handler

            async def turn(session: str, option_id: str) -> None:
                stop_reasons[session] = await editor.send(
                    session, "burst 50", handler_for(session, option_id)
                )

            async with trio.open_nursery() as nursery:
                nursery.start_soon(turn, sessions[0], "allow")
                nursery.start_soon(turn, sessions[1], "deny")
    assert stop_reasons == {sessions[0]: "end_turn", sessions[1]: "end_turn"}
    for session in sessions:
        assert len(seen[session]) == 50
        assert len({r.tool_call.tool_call_id for r in seen[session]}) == 50
        titles = {r.tool_call.title for r in seen[session]}
        assert titles == {f"fs.write: burst-{k}.txt" for k in range(1, 51)}
        calls = editor.calls(session)
        assert set(calls) == {r.tool_call.tool_call_id for r in seen[session]}
    allowed, denied = sessions
    assert all(statuses(events)[-1] == "completed" for events in editor.calls(allowed).values())
    assert all(statuses(events)[-1] == "failed" for events in editor.calls(denied).values())
    assert editor.texts(allowed)[-1] == "burst 50: 50 completed, 0 denied, 0 failed"
    assert editor.texts(denied)[-1] == "burst 50: 0 completed, 50 denied, 0 failed"
    assert sorted(p.name for p in editor.workspace.iterdir()) == sorted(
        f"burst-{k}.txt" for k in range(1, 51)
    )


# --------------------------------------------------- outside the workspace, presets


async def test_a_write_outside_the_workspace_is_refused_and_the_shell_fallback_asks(
    tmp_path: Path,
) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    target = elsewhere / "x.txt"
    with trio.fail_after(BOUND_S):
        async with open_bridge_runtime(tmp_path) as editor:
            session = await editor.new_session()
            seen: list[PermissionRequest] = []
            await editor.send(session, f"create {target} with hi", answering("deny", seen))
            assert not target.exists()
            [request] = seen
            call = request.tool_call
            assert call.kind == "execute"
            assert call.raw_input["command"].startswith("python3 -c ")
            assert call.title is not None and call.title.startswith("local_shell: python3 -c ")
            assert call.locations is not None and call.locations[0].path == str(target)
            refused, fallback = editor.calls(session).values()
            assert refused[0]["title"] == f"fs.write: {target}"
            assert statuses(refused) == ["pending", "failed"]
            assert "outside the workspace" in refused[-1]["content"][0]["content"]["text"]
            assert statuses(fallback) == ["pending", "failed"]
            assert fallback[0]["_meta"]["simhost"]["fallbackFor"] == refused[0]["toolCallId"]
            texts = editor.texts(session)
            assert any("refused" in t and "falling back to the shell" in t for t in texts)
            assert texts[-1].startswith("denied: local_shell: python3")

            await editor.send(session, f"create {target} with hi", answering("allow", seen))
            assert target.read_text() == "hi\n"
            assert statuses(editor.last_call(session)) == ["pending", "in_progress", "completed"]


async def test_a_hard_linked_file_is_outside_the_card_says_so_and_nothing_goes_through(
    tmp_path: Path,
) -> None:
    outside = tmp_path / "outside.txt"
    outside.write_text("private\n")
    with trio.fail_after(BOUND_S):
        async with open_bridge_runtime(tmp_path) as editor:
            os.link(outside, editor.workspace / "notes.txt")
            session = await editor.new_session()
            seen: list[PermissionRequest] = []
            for prompt in ("create notes.txt with x", "read notes.txt"):
                assert await editor.send(session, prompt, answering("deny", seen)) == "end_turn"
            # Neither went through the link: each file tool refused, and the shell
            # fallback asked, its card saying why.
            assert len(seen) == 2
            for request in seen:
                assert request.tool_call.kind == "execute"
                [why] = request.tool_call.content or []
                assert isinstance(why, permclient.Content)
                assert isinstance(why.content, permclient.TextContent)
                assert "has 2 hard links" in why.content.text
            calls = list(editor.calls(session).values())
            for refused, fallback in zip(calls[::2], calls[1::2], strict=True):
                assert statuses(refused) == ["pending", "failed"]
                assert "has 2 hard links" in refused[-1]["content"][0]["content"]["text"]
                assert statuses(fallback) == ["pending", "failed"]
            assert "private" not in json.dumps(editor.updates[session])
    assert outside.read_text() == "private\n"


async def test_loops_fifos_and_vanished_folders_fail_that_call_and_the_turn_goes_on(
    tmp_path: Path,
) -> None:
    with trio.fail_after(BOUND_S):
        async with open_bridge_runtime(tmp_path) as editor:
            workspace = editor.workspace
            (workspace / "loop").symlink_to(workspace / "loop")
            os.mkfifo(workspace / "pipe")
            session = await editor.new_session()
            for prompt, why in (
                ("read loop/x.txt", "symbolic link loop"),
                ("create loop/x.txt with x", "symbolic link loop"),
                ("read pipe", "is not a regular file (a FIFO)"),
                ("create pipe with x", "is not a regular file (a FIFO)"),
                ("delete gone/x.txt", "does not exist"),
            ):
                assert await editor.send(session, prompt) == "end_turn", prompt
                events = editor.last_call(session)
                assert statuses(events) == ["pending", "failed"], prompt
                assert why in events[-1]["content"][0]["content"]["text"], prompt
            await editor.send(session, "hello there")
            assert editor.texts(session)[-1].startswith("You said: hello there")


async def test_presets_read_only_denies_without_asking_and_auto_edit_writes(
    tmp_path: Path,
) -> None:
    with trio.fail_after(BOUND_S):
        async with open_bridge_runtime(tmp_path) as editor:
            request = editor.client.request
            session = await editor.new_session()
            permissions = await request("sessionPermissions", {"sessionId": session})
            assert permissions["presetId"] == "ask"
            assert [p["presetId"] for p in permissions["presets"]] == [
                "ask",
                "read-only",
                "auto-edit",
            ]
            assert permissions["grants"] == []
            result = await request(
                "sessionSetPermission", {"sessionId": session, "presetId": "read-only"}
            )
            assert result == {"presetId": "read-only"}
            for prompt in ("create a.txt with a", "run touch b.txt", "delete c.txt"):
                (editor.workspace / "c.txt").write_text("c")
                await editor.send(session, prompt)  # never asked
                events = editor.last_call(session)
                assert statuses(events) == ["pending", "failed"]
                assert simhost_meta(events) == {"decidedBy": "preset", "decision": "deny"}
            assert sorted(p.name for p in editor.workspace.iterdir()) == ["c.txt"]

            await request("sessionSetPermission", {"sessionId": session, "presetId": "auto-edit"})
            await editor.send(session, "create a.txt with a")  # never asked
            assert (editor.workspace / "a.txt").read_text() == "a\n"
            seen: list[PermissionRequest] = []
            await editor.send(session, "run touch b.txt", answering("deny", seen))
            assert len(seen) == 1  # the shell still asks
            with pytest.raises(permclient.RequestError) as info:
                await request("sessionSetPermission", {"sessionId": session, "presetId": "yolo"})
            assert info.value.code == -32602


# ------------------------------------------------------------------ command line


async def test_the_command_line_exits_2_for_an_unknown_dialect(tmp_path: Path) -> None:
    argv = [*BRIDGE_RUNTIME, "--state-dir", str(tmp_path), "--dialect", "lsp"]
    with trio.fail_after(BOUND_S):
        result = await trio.run_process(
            argv, stdin=b"", capture_stdout=True, capture_stderr=True, check=False
        )
    assert result.returncode == 2
    assert result.stdout == b""
    assert "unknown dialect 'lsp'" in " ".join(result.stderr.decode().split())
