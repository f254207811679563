"""permclient.acp: the client's side of ACP, against a scripted agent (FakePeer).

Every message the client sends here is also checked against ACP's JSON Schema.
"""

from __future__ import annotations

import os
import stat
import threading
from contextlib import suppress
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import permclient
from permclient import PermclientError, PermissionRequest, Selected
from permclient.acp import (
    MAX_READ_BYTES,
    AcpAgent,
    AgentMessageChunk,
    AvailableCommandsUpdate,
    CurrentModeUpdate,
    ElicitationRequest,
    ElicitationResponse,
    Plan,
    SessionUpdate,
    ToolCallProgress,
    ToolCallStarted,
    UnknownUpdate,
    decode_session_update,
)
from tests.support.acp_agent import (
    INIT_RESULT,
    answer,
    connected,
    fs_call,
    initialized,
    new_session,
)
from tests.support.acp_schema import assert_valid
from tests.support.peer import CANCELLED

# ------------------------------------------------------------------ initialize


async def test_initialize_sends_version_info_and_only_the_capabilities_turned_on() -> None:
    async with connected(read_files=True, elicitation=True) as (agent, peer):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(agent.initialize)
            request = await answer(peer, "InitializeRequest", INIT_RESULT)
        params = request["params"]
        assert params["protocolVersion"] == 1
        assert params["clientInfo"] == {"name": "permclient", "version": permclient.__version__}
        assert params["clientCapabilities"] == {
            "fs": {"readTextFile": True, "writeTextFile": False},
            "terminal": False,
            "elicitation": {"form": {}},
        }
        assert agent.info is not None
        assert agent.info.agent_info is not None
        assert (agent.info.agent_info.name, agent.info.agent_info.version) == (
            "scripted-agent",
            "9.9.9",
        )
        assert agent.info.agent_capabilities.load_session


async def test_an_agent_speaking_another_protocol_version_is_refused() -> None:
    async with connected() as (agent, peer):
        errors: list[Exception] = []

        async def init() -> None:
            try:
                await agent.initialize()
            except PermclientError as exc:
                errors.append(exc)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(init)
            await answer(peer, "InitializeRequest", {**INIT_RESULT, "protocolVersion": 2})
        assert [str(e) for e in errors] == ["the agent speaks ACP version 2, not 1"]
        assert agent.info is None


async def test_an_acp_agent_needs_an_acp_client() -> None:
    ours, _ = trio.testing.memory_stream_pair()
    async with permclient.open_client(ours, dialect="bridge") as client:
        with pytest.raises(ValueError, match="dialect='acp'"):
            AcpAgent(client)


# ---------------------------------------------------------------- session/update


def _update(sid: str, update: dict[str, Any]) -> dict[str, Any]:
    return {"sessionId": sid, "update": update}


UPDATES: list[dict[str, Any]] = [
    {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "Hel"}},
    {"sessionUpdate": "agent_thought_chunk", "content": {"type": "text", "text": "hmm"}},
    {
        "sessionUpdate": "tool_call",
        "toolCallId": "t1",
        "title": "Run ls",
        "kind": "execute",
        "status": "pending",
        "rawInput": {"command": "ls"},
    },
    {"sessionUpdate": "tool_call_update", "toolCallId": "t1", "status": "completed"},
    {
        "sessionUpdate": "plan",
        "entries": [{"content": "write it", "priority": "high", "status": "pending"}],
    },
    {
        "sessionUpdate": "available_commands_update",
        "availableCommands": [{"name": "test", "description": "run the tests"}],
    },
    {"sessionUpdate": "current_mode_update", "currentModeId": "code"},
    {"sessionUpdate": "usage_update", "used": 10, "size": 100},  # not typed here
    {"sessionUpdate": "brand_new_variant", "whatever": [1, 2]},  # unknown to ACP v1 too
    {"sessionUpdate": "tool_call", "toolCallId": "t2", "title": "x", "kind": "teleport"},
]


def test_every_update_variant_decodes_and_unknown_ones_pass_through_untyped() -> None:
    decoded = [decode_session_update(_update("s1", u))[1] for u in UPDATES]
    kinds = [type(u) for u in decoded]
    assert kinds[:7] == [
        AgentMessageChunk,
        permclient.acp.AgentThoughtChunk,
        ToolCallStarted,
        ToolCallProgress,
        Plan,
        AvailableCommandsUpdate,
        CurrentModeUpdate,
    ]
    started = decoded[2]
    assert isinstance(started, ToolCallStarted)
    assert started.raw_input == {"command": "ls"}
    assert decoded[7] == UnknownUpdate("usage_update", UPDATES[7])
    assert decoded[8] == UnknownUpdate("brand_new_variant", UPDATES[8])
    # A known variant with a value this version does not know is passed on, untyped.
    assert decoded[9] == UnknownUpdate("tool_call", UPDATES[9])


def test_params_that_are_no_session_update_at_all_raise() -> None:
    with pytest.raises(permclient.acp.msgspec.ValidationError):
        decode_session_update({"sessionId": "s1", "update": {"no": "tag"}})


async def test_updates_reach_the_sessions_callback_in_order_even_before_it_existed(
    tmp_path: Path,
) -> None:
    async with connected() as (agent, peer):
        await initialized(agent, peer)
        # Sent before session/new is answered, as real agents do.
        for update in UPDATES[:3]:
            await peer.notify("session/update", _update("s1", update))
        session = await new_session(agent, peer, tmp_path)
        seen: list[SessionUpdate] = []
        with session.on_update(seen.append):
            for update in UPDATES[3:]:
                await peer.notify("session/update", _update("s1", update))
            await peer.notify("session/update", _update("other", UPDATES[0]))
            await trio.testing.wait_all_tasks_blocked()
        assert [getattr(u, "session_update", type(u).__name__) for u in seen][:4] == [
            "AgentMessageChunk",
            "AgentThoughtChunk",
            "ToolCallStarted",
            "ToolCallProgress",
        ]
        assert len(seen) == len(UPDATES)


async def test_on_update_gets_the_notifications_one_typed_update_and_skips_what_is_none(
    tmp_path: Path,
) -> None:
    async with connected() as (agent, peer):
        session = agent.session("s1", tmp_path)
        seen: list[SessionUpdate] = []
        shared: list[Any] = []
        with (
            session.on_update(seen.append),
            agent.client.on_notification("session/update", lambda n: shared.append(n.update)),
        ):
            await peer.notify("session/update", {"sessionId": "s1", "update": {"no": "tag"}})
            await peer.notify("session/update", {"sessionId": "s1", "update": "not an object"})
            for update in UPDATES:
                await peer.notify("session/update", _update("s1", update))
            await trio.testing.wait_all_tasks_blocked()
        assert len(seen) == len(UPDATES)
        assert all(a is b for a, b in zip(seen, shared[2:], strict=True))  # one decode, shared
        assert shared[:2] == [None, None]


def test_the_session_update_types_are_the_sdks_own() -> None:
    for name in permclient.acp.__all__:
        assert getattr(permclient.acp, name) is not None
    assert permclient.acp.ToolCallStarted is permclient._wire.ToolCallStarted
    assert permclient.acp.decode_session_update is permclient._wire.decode_session_update


# ------------------------------------------------------------------ prompt turns


async def test_prompt_sends_text_blocks_and_returns_the_stop_reason(tmp_path: Path) -> None:
    async with connected() as (agent, peer):
        await initialized(agent, peer)
        session = await new_session(agent, peer, tmp_path)
        results = []

        async def turn() -> None:
            results.append(await session.prompt("hello"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(turn)
            request = await answer(peer, "PromptRequest", {"stopReason": "end_turn"})
        assert request["params"]["prompt"] == [{"type": "text", "text": "hello"}]
        assert results[0].stop_reason == "end_turn"


async def test_a_prompt_the_agent_answers_minus_32800_ends_as_cancelled(tmp_path: Path) -> None:
    async with connected() as (agent, peer):
        await initialized(agent, peer)
        session = await new_session(agent, peer, tmp_path)
        results = []

        async def turn() -> None:
            results.append(await session.prompt("hello"))

        async with trio.open_nursery() as nursery:
            nursery.start_soon(turn)
            request = await peer.receive()
            error = {"code": -32800, "message": "cancelled"}
            await peer.send({"jsonrpc": "2.0", "id": request["id"], "error": error})
        assert results[0].stop_reason == "cancelled"


async def test_session_cancel_answers_pending_permissions_at_once_and_the_turn_ends_cancelled(
    tmp_path: Path,
) -> None:
    async with connected() as (agent, peer):
        await initialized(agent, peer)
        session = await new_session(agent, peer, tmp_path)
        asked = trio.Event()
        results = []

        async def ask(req: PermissionRequest) -> Selected:
            asked.set()
            await trio.sleep_forever()
            raise AssertionError("not reached")  # pragma: no cover

        async def turn() -> None:
            results.append(await session.prompt("do it"))

        with session.permission_handler(ask):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(turn)
                prompt = await peer.receive()
                permission = await peer.ask_permission(session.id, request_id=40)
                await asked.wait()
                await session.cancel()
                cancel = await peer.receive()
                assert cancel == {
                    "jsonrpc": "2.0",
                    "method": "session/cancel",
                    "params": {"sessionId": session.id},
                }
                assert_valid("CancelNotification", cancel["params"])
                reply = await peer.receive()
                assert reply == {"jsonrpc": "2.0", "id": permission, "result": CANCELLED}
                assert_valid("RequestPermissionResponse", reply["result"])
                await peer.send(
                    {"jsonrpc": "2.0", "id": prompt["id"], "result": {"stopReason": "cancelled"}}
                )
        assert results[0].stop_reason == "cancelled"


async def test_load_session_needs_the_agents_capability(tmp_path: Path) -> None:
    async with connected() as (agent, peer):
        no_load = {**INIT_RESULT, "agentCapabilities": {"loadSession": False}}
        await initialized(agent, peer, no_load)
        with pytest.raises(PermclientError, match="session/load"):
            await agent.load_session("old", tmp_path)


async def test_load_session_registers_first_so_the_replay_is_seen(tmp_path: Path) -> None:
    async with connected() as (agent, peer):
        await initialized(agent, peer)
        seen: list[SessionUpdate] = []
        session = agent.session("old", tmp_path)
        with session.on_update(seen.append):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(agent.load_session, "old", tmp_path)
                request = await peer.receive()
                assert_valid("LoadSessionRequest", request["params"])
                await peer.notify("session/update", _update("old", UPDATES[0]))
                await peer.send({"jsonrpc": "2.0", "id": request["id"], "result": {}})
        assert [type(u) for u in seen] == [AgentMessageChunk]


async def test_a_relative_cwd_is_refused() -> None:
    async with connected() as (agent, _):
        with pytest.raises(ValueError, match="absolute"):
            await agent.new_session("relative/dir")


# ----------------------------------------------------------------- file system


async def test_fs_methods_are_not_served_unless_turned_on(tmp_path: Path) -> None:
    (tmp_path / "a.txt").write_text("secret")
    async with connected() as (agent, peer):
        await initialized(agent, peer)
        await new_session(agent, peer, tmp_path)
        for method in ("fs/read_text_file", "fs/write_text_file", "elicitation/create"):
            params = {"sessionId": "s1", "path": str(tmp_path / "a.txt"), "content": "x"}
            reply = await fs_call(peer, method, params)
            assert reply["error"]["code"] == -32601
        assert (tmp_path / "a.txt").read_text() == "secret"


async def test_read_text_file_inside_the_sessions_directory(tmp_path: Path) -> None:
    (tmp_path / "notes.txt").write_text("one\ntwo\nthree\n")
    async with connected(read_files=True) as (agent, peer):
        await initialized(agent, peer)
        await new_session(agent, peer, tmp_path)
        path = str(tmp_path / "notes.txt")
        reply = await fs_call(peer, "fs/read_text_file", {"sessionId": "s1", "path": path})
        assert reply["result"] == {"content": "one\ntwo\nthree\n"}
        assert_valid("ReadTextFileResponse", reply["result"])
        params = {"sessionId": "s1", "path": path, "line": 2, "limit": 1}
        reply = await fs_call(peer, "fs/read_text_file", params)
        assert reply["result"] == {"content": "two\n"}


@pytest.mark.parametrize("where", ["parent", "elsewhere", "symlink", "relative", "session"])
async def test_file_access_outside_the_sessions_directory_is_an_error_never_a_read_or_write(
    tmp_path: Path, where: str
) -> None:
    root = tmp_path / "project"
    root.mkdir()
    outside = tmp_path / "outside.txt"
    outside.write_text("private")
    (root / "link").symlink_to(outside)
    path = {
        "parent": str(root / ".." / "outside.txt"),
        "elsewhere": str(outside),
        "symlink": str(root / "link"),
        "relative": "outside.txt",
        "session": str(root / "ok.txt"),
    }[where]
    session_id = "not-a-session" if where == "session" else "s1"
    async with connected(read_files=True, write_files=True) as (agent, peer):
        await initialized(agent, peer)
        await new_session(agent, peer, root)
        read = await fs_call(peer, "fs/read_text_file", {"sessionId": session_id, "path": path})
        assert read["error"]["code"] == -32602
        write = {"sessionId": session_id, "path": path, "content": "pwned"}
        written = await fs_call(peer, "fs/write_text_file", write, request_id=8)
        assert written["error"]["code"] == -32602
    assert outside.read_text() == "private"
    assert not (root / "ok.txt").exists()


async def test_write_text_file_inside_the_sessions_directory(tmp_path: Path) -> None:
    async with connected(write_files=True) as (agent, peer):
        await initialized(agent, peer)
        await new_session(agent, peer, tmp_path)
        params = {"sessionId": "s1", "path": str(tmp_path / "new.txt"), "content": "hi\n"}
        reply = await fs_call(peer, "fs/write_text_file", params)
        assert reply["result"] == {}
        assert_valid("WriteTextFileResponse", reply["result"])
    assert (tmp_path / "new.txt").read_text() == "hi\n"


async def test_malformed_fs_params_are_invalid_params(tmp_path: Path) -> None:
    async with connected(read_files=True) as (agent, peer):
        await initialized(agent, peer)
        await new_session(agent, peer, tmp_path)
        reply = await fs_call(peer, "fs/read_text_file", {"sessionId": "s1"})
        assert reply["error"]["code"] == -32602


async def test_a_hard_linked_file_is_neither_read_nor_written_through(tmp_path: Path) -> None:
    root, outside = tmp_path / "project", tmp_path / "outside.txt"
    root.mkdir()
    outside.write_text("private")
    os.link(outside, root / "notes.txt")
    path = str(root / "notes.txt")
    async with connected(read_files=True, write_files=True) as (agent, peer):
        await initialized(agent, peer)
        await new_session(agent, peer, root)
        read = await fs_call(peer, "fs/read_text_file", {"sessionId": "s1", "path": path})
        write = {"sessionId": "s1", "path": path, "content": "pwned"}
        written = await fs_call(peer, "fs/write_text_file", write, request_id=8)
    for reply in (read, written):
        assert reply["error"]["code"] == -32602
        assert reply["error"]["message"].startswith(f"{path} has 2 hard links")
        assert "private" not in repr(reply)
    assert outside.read_text() == "private"


def _unblock_fifo_later(fifo: Path) -> threading.Timer:
    """Writes to ``fifo`` after a while, so code that blocks opening it ends (and fails)."""

    def write() -> None:
        with suppress(OSError):
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO unless a reader waits
            os.write(fd, b"from the fifo")
            os.close(fd)

    timer = threading.Timer(2.0, write)
    timer.start()
    return timer


@pytest.mark.parametrize("method", ["fs/read_text_file", "fs/write_text_file"])
async def test_a_fifo_or_other_non_regular_file_is_refused_without_blocking(
    tmp_path: Path, method: str
) -> None:
    os.mkfifo(tmp_path / "pipe")
    (tmp_path / "folder").mkdir()
    timer = _unblock_fifo_later(tmp_path / "pipe")
    try:
        async with connected(read_files=True, write_files=True) as (agent, peer):
            await initialized(agent, peer)
            await new_session(agent, peer, tmp_path)
            for name, why in (
                ("pipe", "is not a regular file (a FIFO)"),
                ("folder", "is a folder"),
            ):
                params = {"sessionId": "s1", "path": str(tmp_path / name), "content": "x"}
                reply = await fs_call(peer, method, params)
                assert reply["error"] == {
                    "code": -32602,
                    "message": f"{tmp_path / name} {why}",
                }
    finally:
        timer.cancel()
    assert stat.S_ISFIFO((tmp_path / "pipe").lstat().st_mode)


@pytest.mark.parametrize("method", ["fs/read_text_file", "fs/write_text_file"])
async def test_loops_missing_folders_and_odd_paths_are_clear_errors_for_that_request(
    tmp_path: Path, method: str
) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "file.txt").write_text("x")
    cases = [
        ("a/x.txt", -32602, "symbolic link loop"),
        ("gone/x.txt", -32002, "does not exist"),
        ("file.txt/x.txt", -32602, "is not a folder"),
        ("nul\0.txt", -32602, "null byte"),
    ]
    if method == "fs/read_text_file":
        cases.append(("missing.txt", -32002, "does not exist"))
    async with connected(read_files=True, write_files=True) as (agent, peer):
        await initialized(agent, peer)
        await new_session(agent, peer, tmp_path)
        for name, code, why in cases:
            params = {"sessionId": "s1", "path": str(tmp_path / name), "content": "x"}
            reply = await fs_call(peer, method, params)
            assert reply["error"]["code"] == code, (name, reply)
            assert why in reply["error"]["message"], (name, reply)
            assert "\n" not in reply["error"]["message"]
        # The connection serves the next request as ever.
        params = {"sessionId": "s1", "path": str(tmp_path / "file.txt"), "content": "x"}
        assert "result" in await fs_call(peer, method, params)


async def test_a_read_larger_than_the_bound_is_refused_before_reading(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    big = tmp_path / "big.txt"
    with big.open("wb") as file:
        file.truncate(64 * 1024 * 1024 * 1024)  # 64 GiB, sparse
    async with connected(read_files=True) as (agent, peer):
        await initialized(agent, peer)
        await new_session(agent, peer, tmp_path)
        reply = await fs_call(peer, "fs/read_text_file", {"sessionId": "s1", "path": str(big)})
        assert reply["error"] == {
            "code": -32602,
            "message": f"{big} is larger than {MAX_READ_BYTES} bytes",
        }
        monkeypatch.setattr(permclient._acp_fs, "MAX_READ_BYTES", 4)
        (tmp_path / "five.txt").write_text("12345")
        params = {"sessionId": "s1", "path": str(tmp_path / "five.txt")}
        reply = await fs_call(peer, "fs/read_text_file", params)
        assert reply["error"]["message"] == f"{tmp_path / 'five.txt'} is larger than 4 bytes"


async def test_a_write_replaces_the_file_and_keeps_its_permissions(tmp_path: Path) -> None:
    target = tmp_path / "script.sh"
    target.write_text("old")
    target.chmod(0o751)
    async with connected(write_files=True) as (agent, peer):
        await initialized(agent, peer)
        await new_session(agent, peer, tmp_path)
        params = {"sessionId": "s1", "path": str(target), "content": "new"}
        assert (await fs_call(peer, "fs/write_text_file", params))["result"] == {}
    assert target.read_text() == "new"
    assert stat.S_IMODE(target.stat().st_mode) == 0o751
    assert os.listdir(tmp_path) == ["script.sh"]  # no temporary file left behind


def _read_raw(path: bytes) -> str:
    with open(path) as file:
        return file.read()


def _links_to_non_utf8_names(root: Path) -> None:
    """In ``root``: the folder ``d\\xff`` holding ``f.txt`` and a FIFO; links to it,
    to its file, to a missing ``\\xff-missing`` and to ``../\\xff-outside``."""
    raw_root = os.fsencode(root)
    os.makedirs(raw_root + b"/d\xff")
    with open(raw_root + b"/d\xff/f.txt", "w") as file:
        file.write("hello")
    os.mkfifo(raw_root + b"/d\xff/pipe")
    os.symlink(b"\xff-missing", raw_root + b"/dangling")
    os.symlink(os.fsencode(root.parent) + b"/\xff-outside", raw_root + b"/out")
    os.symlink(b"d\xff", raw_root + b"/dir")
    os.symlink(b"d\xff/f.txt", raw_root + b"/file")


@pytest.mark.parametrize("method", ["fs/read_text_file", "fs/write_text_file"])
async def test_non_utf8_names_from_the_file_system_are_escaped_in_errors_and_served_on(
    tmp_path: Path, method: str
) -> None:
    # The agent's paths are valid text; links lead to names that are not UTF-8.
    root = tmp_path / "project"
    _links_to_non_utf8_names(root)
    raw_root = os.fsencode(root)
    shown = f"{root}/d\\xff"
    cases = [
        ("out", -32602, f"{root}/out (-> {tmp_path}/\\xff-outside) is outside {root}"),
        ("dir/pipe", -32602, f"{shown}/pipe is not a regular file (a FIFO)"),
        ("dir", -32602, f"{shown} is a folder"),
        ("dir/gone/x.txt", -32002, f"{shown}/gone/x.txt does not exist"),
    ]
    if method == "fs/read_text_file":
        cases.append(("dangling", -32002, f"{root}/\\xff-missing does not exist"))
    async with connected(read_files=True, write_files=True) as (agent, peer):
        await initialized(agent, peer)
        await new_session(agent, peer, root)
        for name, code, message in cases:
            params = {"sessionId": "s1", "path": str(root / name), "content": "x"}
            reply = await fs_call(peer, method, params)
            assert reply["error"] == {"code": code, "message": message}, name
        # A file in that folder is served as any other: nothing of its name goes back.
        served = ["file", "dir/f.txt"] + ([] if "read" in method else ["dangling"])
        for name in served:
            params = {"sessionId": "s1", "path": str(root / name), "content": "hello"}
            reply = await fs_call(peer, method, params)
            assert reply["result"] == ({"content": "hello"} if "read" in method else {})
        assert agent.client.closed_reason is None
    assert _read_raw(raw_root + b"/d\xff/f.txt") == "hello"
    if method == "fs/write_text_file":  # the link's target, inside the folder, was created
        assert _read_raw(raw_root + b"/\xff-missing") == "hello"


async def test_a_session_folder_that_cannot_be_resolved_is_an_escaped_one_line_error(
    tmp_path: Path,
) -> None:
    loop = Path(os.fsdecode(os.fsencode(tmp_path) + b"/loop\xff"))
    os.symlink(os.fsencode(loop), os.fsencode(loop))
    async with connected(read_files=True) as (agent, peer):
        await initialized(agent, peer)
        agent.session("s1", loop)  # the host's own choice of folder, never sent
        params = {"sessionId": "s1", "path": f"{tmp_path}/loop/x.txt"}
        reply = await fs_call(peer, "fs/read_text_file", params)
        assert reply["error"]["code"] == -32603
        assert reply["error"]["message"].startswith(f"cannot resolve {tmp_path}/loop\\xff: ")
        assert "\n" not in reply["error"]["message"]
        assert agent.client.closed_reason is None


# ----------------------------------------------------------------- elicitation


def _elicitation(sid: str | None, mode: str = "form") -> dict[str, Any]:
    params: dict[str, Any] = {
        "mode": mode,
        "message": "Which branch?",
        "requestedSchema": {"type": "object", "properties": {"branch": {"type": "string"}}},
    }
    if sid is not None:
        params["sessionId"] = sid
    return params


async def test_elicitation_is_routed_to_its_sessions_handler(tmp_path: Path) -> None:
    async with connected(elicitation=True) as (agent, peer):
        await initialized(agent, peer)
        s1 = await new_session(agent, peer, tmp_path, "s1")
        s2 = await new_session(agent, peer, tmp_path, "s2")
        seen: list[tuple[str, str | None]] = []

        def handler_for(name: str) -> Any:
            async def handler(request: ElicitationRequest) -> ElicitationResponse:
                seen.append((name, request.session_id))
                return ElicitationResponse("accept", {"branch": name})

            return handler

        with s1.elicitation_handler(handler_for("one")), s2.elicitation_handler(handler_for("two")):
            reply = await fs_call(peer, "elicitation/create", _elicitation("s2"))
            assert reply["result"] == {"action": "accept", "content": {"branch": "two"}}
            assert_valid("CreateElicitationResponse", reply["result"])
        assert seen == [("two", "s2")]


@pytest.mark.parametrize("case", ["no handler", "no session", "url mode", "raises", "junk"])
async def test_elicitation_without_a_valid_answer_is_cancel(tmp_path: Path, case: str) -> None:
    async with connected(elicitation=True) as (agent, peer):
        await initialized(agent, peer)
        session = await new_session(agent, peer, tmp_path)

        async def broken(request: ElicitationRequest) -> ElicitationResponse:
            if case == "raises":
                raise RuntimeError("bug")
            return "yes"  # type: ignore[return-value]

        params = {
            "no handler": _elicitation("s1"),
            "no session": _elicitation(None),
            "url mode": _elicitation("s1", "url"),
            "raises": _elicitation("s1"),
            "junk": _elicitation("s1"),
        }[case]
        if case in ("raises", "junk", "url mode"):
            with session.elicitation_handler(broken):
                reply = await fs_call(peer, "elicitation/create", params)
        else:
            reply = await fs_call(peer, "elicitation/create", params)
        assert reply["result"] == {"action": "cancel"}


async def test_an_elicitation_the_agent_withdraws_is_answered_cancel(tmp_path: Path) -> None:
    async with connected(elicitation=True) as (agent, peer):
        await initialized(agent, peer)
        session = await new_session(agent, peer, tmp_path)
        waiting = trio.Event()
        cancelled = []

        async def slow(request: ElicitationRequest) -> ElicitationResponse:
            waiting.set()
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                cancelled.append(True)
                raise
            raise AssertionError("not reached")  # pragma: no cover

        with session.elicitation_handler(slow):
            await peer.request("elicitation/create", _elicitation("s1"), request_id=9)
            await waiting.wait()
            await peer.notify("$/cancel_request", {"requestId": 9})
            assert await peer.receive() == {
                "jsonrpc": "2.0",
                "id": 9,
                "result": {"action": "cancel"},
            }
        assert cancelled == [True]
