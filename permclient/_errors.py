"""Exceptions raised by permclient, named for whose fault the failure was."""

from __future__ import annotations

from typing import Any


class PermclientError(Exception):
    """Base class of every exception permclient raises on purpose."""


class ProtocolError(PermclientError):
    """A message or frame broke the JSON-RPC or framing rules."""


class RemoteProtocolError(ProtocolError):
    """The peer broke the protocol (bad header, oversized frame, invalid JSON, ...).

    ``recoverable`` is true when the framer could skip the offending input and the
    byte stream can still be trusted (an oversized frame whose end is known); false
    when the stream is out of sync and the connection must close.
    """

    def __init__(self, message: str, *, recoverable: bool = False) -> None:
        super().__init__(message)
        self.recoverable = recoverable


class LocalProtocolError(ProtocolError):
    """We were asked to do something the protocol forbids (e.g. a value that cannot be encoded)."""


class ConnectionClosed(PermclientError):
    """The connection to the runtime is closed; raised by calls that needed it.

    ``reason`` says why (peer closed its stream, transport error, protocol error,
    or the client context exited).
    """

    def __init__(self, reason: str) -> None:
        super().__init__(f"connection closed: {reason}")
        self.reason = reason


class RequestError(PermclientError):
    """The peer answered our request with a JSON-RPC error response.

    Also raised by ``on_request`` handlers to answer with a specific error.
    """

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(f"[{code}] {message}")
        self.code = code
        self.message = message
        self.data = data
