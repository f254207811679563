"""The scripted JSON-RPC peer of the tests: it plays the runtime, sends raw messages
and reads what the client wrote. :class:`FakePeer` over the other end of a trio
stream; :class:`SyncPeer` over a plain socket, for the embedding tests, whose client
runs its own trio (guest mode or a thread), so any thread or loop can drive it (every
read bounded by a timeout)."""

from __future__ import annotations

import socket
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import msgspec
import trio
import trio.testing

import permclient
from permclient import PermissionRequest
from permclient.framing import ContentLengthFramer, NewlineFramer


@asynccontextmanager
async def connected(
    dialect: str = "bridge", **kwargs: Any
) -> AsyncIterator[tuple[permclient.Client, FakePeer]]:
    """A client over an in-memory stream, and the peer at its other end."""
    ours, theirs = trio.testing.memory_stream_pair()
    async with permclient.open_client(ours, dialect=dialect, **kwargs) as client:  # type: ignore[arg-type]
        yield client, FakePeer(theirs, dialect)


class FakePeer:
    """Plays the runtime: sends raw JSON-RPC messages and reads what the client wrote."""

    def __init__(self, stream: trio.abc.Stream, dialect: str) -> None:
        self.stream = stream
        self.framer_type = ContentLengthFramer if dialect == "bridge" else NewlineFramer
        self.framer = self.framer_type()
        self.next_id = 0

    async def send_raw(self, data: bytes) -> None:
        await self.stream.send_all(data)

    async def send(self, message: dict[str, Any]) -> None:
        await self.stream.send_all(self.framer_type.encode(msgspec.json.encode(message)))

    async def receive(self) -> dict[str, Any]:
        """The next message the client wrote (fails the test if the client closed)."""
        while True:
            message = next_message(self.framer)
            if message is not None:
                return message
            data = await self.stream.receive_some(65536)
            assert data, "the client closed the stream"
            self.framer.receive_data(data)

    async def request(self, method: str, params: Any, request_id: Any = None) -> Any:
        """Send a request; returns the id used."""
        if request_id is None:
            request_id = self.next_id
            self.next_id += 1
        await self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return request_id

    async def notify(self, method: str, params: Any) -> None:
        await self.send({"jsonrpc": "2.0", "method": method, "params": params})

    async def ask_permission(
        self,
        session_id: str,
        tool_call_id: str = "call-1",
        options: Any = None,
        request_id: Any = None,
        **extra: Any,
    ) -> Any:
        """Send a well-formed session/request_permission; returns its id."""
        params = permission_params(session_id, tool_call_id, options, **extra)
        return await self.request("session/request_permission", params, request_id)


def next_message(framer: ContentLengthFramer | NewlineFramer) -> dict[str, Any] | None:
    """The next whole message ``framer`` holds, decoded; None until one is whole."""
    frame = framer.next_frame()
    if frame is None:
        return None
    message: dict[str, Any] = msgspec.json.decode(frame)
    return message


def permission_params(
    session_id: str, tool_call_id: str = "call-1", options: Any = None, **extra: Any
) -> dict[str, Any]:
    """The params of a well-formed session/request_permission."""
    return {
        "sessionId": session_id,
        "toolCall": {
            "toolCallId": tool_call_id,
            "title": f"run {tool_call_id}",
            "kind": "execute",
            "status": "pending",
            "rawInput": {"command": "python3"},
        },
        "options": options if options is not None else allow_deny(),
        **extra,
    }


def allow_deny() -> list[dict[str, str]]:
    return [
        {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
        {"optionId": "deny", "name": "Deny", "kind": "reject_once"},
    ]


def selected(option_id: str) -> dict[str, Any]:
    return {"outcome": {"outcome": "selected", "optionId": option_id}}


CANCELLED = {"outcome": {"outcome": "cancelled"}}


TIMEOUT_S = 10.0


def socket_pair() -> tuple[socket.socket, socket.socket]:
    """(ours, theirs): give ``ours`` to the client, ``theirs`` to a :class:`SyncPeer`."""
    return socket.socketpair()


class SyncPeer:
    """Plays the runtime over a blocking socket: sends raw JSON-RPC, reads what the client wrote."""

    def __init__(self, sock: socket.socket, dialect: str = "bridge") -> None:
        sock.settimeout(TIMEOUT_S)
        self.sock = sock
        self.framer_type = ContentLengthFramer if dialect == "bridge" else NewlineFramer
        self.framer = self.framer_type()

    def send(self, message: dict[str, Any]) -> None:
        self.sock.sendall(self.framer_type.encode(msgspec.json.encode(message)))

    def receive(self) -> dict[str, Any]:
        """The next message the client wrote; fails if it closed or wrote nothing in time."""
        while True:
            message = next_message(self.framer)
            if message is not None:
                return message
            data = self.sock.recv(65536)
            assert data, "the client closed the stream"
            self.framer.receive_data(data)

    def receive_eof(self) -> bytes:
        """What the client still wrote before closing its end (b"" if nothing)."""
        chunks = []
        while data := self.sock.recv(65536):
            chunks.append(data)
        return b"".join(chunks)

    def request(self, method: str, params: Any, request_id: Any) -> Any:
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        return request_id

    def notify(self, method: str, params: Any) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def respond(self, request_id: Any, result: Any) -> None:
        self.send({"jsonrpc": "2.0", "id": request_id, "result": result})

    def ask_permission(self, session_id: str, tool_call_id: str, request_id: Any) -> Any:
        params = {
            "sessionId": session_id,
            "toolCall": {"toolCallId": tool_call_id, "title": f"run {tool_call_id}"},
            "options": allow_deny(),
        }
        return self.request("session/request_permission", params, request_id)

    def close(self) -> None:
        self.sock.close()


def runtime_argv(workspace: Path, state: Path) -> list[str]:
    """The reference runtime, over stdio, in ``workspace``."""
    return [
        sys.executable,
        "-m",
        "simhost",
        "runtime",
        "--stdio",
        "--workspace",
        str(workspace),
        "--state-dir",
        str(state),
    ]


# The workspace, and a request of two options, of the audit trail's tests.
WS = "/ws"
AUDIT_OPTIONS = [
    {"optionId": "yes", "name": "Allow", "kind": "allow_once"},
    {"optionId": "no", "name": "Deny", "kind": "reject_once"},
]


def audit_request(session: str = "s-1", **tool_call: Any) -> PermissionRequest:
    call = {"toolCallId": "call-1", "title": "run it", "kind": "execute", **tool_call}
    params = {"sessionId": session, "toolCall": call, "options": AUDIT_OPTIONS}
    return PermissionRequest.from_json(msgspec.json.encode(params))
