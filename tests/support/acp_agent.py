"""permclient's ACP client side (``permclient.acp.AcpAgent``) over a memory stream,
with the scripted peer as the agent: each request it sends checked against ACP's
schema, and answered."""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import trio
import trio.testing

import permclient
from permclient.acp import AcpAgent
from tests.support.acp_schema import assert_valid
from tests.support.peer import FakePeer

INIT_RESULT = {
    "protocolVersion": 1,
    "agentCapabilities": {"loadSession": True, "promptCapabilities": {"image": False}},
    "agentInfo": {"name": "scripted-agent", "version": "9.9.9"},
    "authMethods": [],
}


@asynccontextmanager
async def connected(**flags: Any) -> AsyncIterator[tuple[AcpAgent, FakePeer]]:
    ours, theirs = trio.testing.memory_stream_pair()
    async with permclient.open_client(ours, dialect="acp") as client:
        yield AcpAgent(client, **flags), FakePeer(theirs, "acp")


async def answer(peer: FakePeer, schema: str, result: Any) -> dict[str, Any]:
    """Receive the client's next request, check it against the schema, answer it."""
    request = await peer.receive()
    assert_valid(schema, request["params"])
    await peer.send({"jsonrpc": "2.0", "id": request["id"], "result": result})
    return request


async def initialized(agent: AcpAgent, peer: FakePeer, result: Any = None) -> None:
    async with trio.open_nursery() as nursery:
        nursery.start_soon(agent.initialize)
        await answer(peer, "InitializeRequest", result or INIT_RESULT)


async def new_session(agent: AcpAgent, peer: FakePeer, cwd: Path, sid: str = "s1") -> Any:
    sessions = []

    async def create() -> None:
        sessions.append(await agent.new_session(cwd))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(create)
        request = await answer(peer, "NewSessionRequest", {"sessionId": sid})
        assert request["params"] == {"cwd": str(cwd), "mcpServers": []}
    return sessions[0]


async def fs_call(
    peer: FakePeer, method: str, params: dict[str, Any], request_id: int = 7
) -> dict[str, Any]:
    await peer.request(method, params, request_id=request_id)
    reply = await peer.receive()
    assert reply["id"] == request_id
    return reply
