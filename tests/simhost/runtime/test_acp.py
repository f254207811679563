"""``simhost runtime --dialect acp``: the reference runtime as an ACP v1 agent.

Driven for real through permclient's ``acp`` dialect (``open_process``), with a
transparent tap in front of the runtime that copies both directions of its stdio
to files, so every message the runtime wrote is checked against ACP's JSON Schema
(the whole message against the schema's agent envelope, and its params or result
against the type of its method). Cancellation on the wire is checked byte for
byte with a scripted peer; the policy timeout also runs in-process under trio's
autojump clock."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import trio
import trio.testing

import permclient
from permclient import Decision, PermissionRequest
from simhost.runtime.acp import prompt_text
from simhost.runtime.acp_wire import PromptBlock
from simhost.runtime.policy import load_policy
from simhost.runtime.server import RuntimeConfig, serve
from tests.support.peer import FakePeer
from tests.support.runtime_editor import (
    AcpEditor,
    check_runtime_messages,
    parse_lines,
    simhost_meta,
    statuses,
)


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

