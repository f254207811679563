"""A scripted peer on a plain socket for the embedding tests (no tests of its own).

The embedded client runs its own trio (guest mode or a thread), so the peer is a
synchronous object any thread or loop can drive; every read is bounded by a timeout.
"""

from __future__ import annotations

import socket
import sys
from pathlib import Path
from typing import Any

import msgspec

from permclient.framing import ContentLengthFramer, NewlineFramer
from tests.support.peer import allow_deny

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
            frame = self.framer.next_frame()
            if frame is not None:
                message: dict[str, Any] = msgspec.json.decode(frame)
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
