"""The approver's connection to ``simhost serve``: open, replay, events, and again.

:func:`keep_connected` connects to the relay protocol's WebSocket (token in the
URL, the server's own ``Origin``), opens the view, hands the replay to the
:class:`~.app.Approver`, then feeds it every message. One writer task sends what
the approver queues, so a cancelled caller never leaves half a frame on the wire.
A connection that stops answering pings is taken for dropped. When the connection
drops it tries again after 0.5 s, doubling up to 5 s, for as long as it runs; a
server that refuses the view (HTTP 403: a wrong token, or not the address it was
started on) or cannot be reached on the first try ends it.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Awaitable, Callable
from typing import Final

import msgspec
import trio
from trio_websocket import (
    ConnectionClosed,
    ConnectionRejected,
    ConnectionTimeout,
    DisconnectionTimeout,
    HandshakeError,
    WebSocketConnection,
    open_websocket_url,
)

from permclient.framing import DEFAULT_MAX_FRAME_SIZE
from permclient.relay import RelayQuestion, Requested
from simhost.serve.protocol import (
    ListSessions,
    Open,
    Opened,
    Replayed,
    ServerMessage,
    ViewMessage,
)

from .app import Approver
from .target import Target

__all__ = ["keep_connected"]

CONNECT_WAIT_S: Final = 10.0  # the TCP connection and the WebSocket handshake
OPEN_WAIT_S: Final = 10.0  # for ``opened``, and for each message of the replay
SEND_WAIT_S: Final = 10.0
PING_EVERY_S: Final = 15.0
PONG_WAIT_S: Final = 10.0
CLOSE_WAIT_S: Final = 2.0
FIRST_RETRY_S: Final = 0.5
LAST_RETRY_S: Final = 5.0
# A question carries the agent's request, up to a frame of permclient's, and its summary.
MAX_SERVER_MESSAGE: Final = DEFAULT_MAX_FRAME_SIZE + 1024 * 1024
_OUTBOX: Final = 64  # an answer or a rule in flight, list_sessions, and commands typed fast
_FORBIDDEN: Final = 403

_decoder: Final = msgspec.json.Decoder(ServerMessage)
_encoder: Final = msgspec.json.Encoder()


class _ServerBroke(Exception):
    """The server did not follow the protocol while the view opened."""


async def keep_connected(target: Target, view: str, approver: Approver) -> str:
    """Keep ``approver`` connected to ``target`` as ``view``; returns (only) why it
    gave up: the server refused the view, or the first connection failed."""
    retry_in = FIRST_RETRY_S
    was_open = False
    while True:
        try:
            async with open_websocket_url(
                target.websocket_url,
                extra_headers=[(b"Origin", target.origin.encode())],
                max_message_size=MAX_SERVER_MESSAGE,
                receive_buffer_size=None,  # (trio's own: a question can hold a large diff)
                connect_timeout=CONNECT_WAIT_S,
                disconnect_timeout=CLOSE_WAIT_S,
            ) as ws:
                replay, meanwhile = await _open(ws, view)
                was_open, retry_in = True, FIRST_RETRY_S
                why = await _follow(ws, target, approver, replay, meanwhile)
        except ConnectionRejected as exc:
            if exc.status_code == _FORBIDDEN:
                return (
                    f"{target.authority} refused this view (HTTP 403): a wrong token, "
                    "or not the address the server was started on"
                )
            why = f"the server refused the connection (HTTP {exc.status_code})"
        except ConnectionTimeout:
            why = f"no connection within {CONNECT_WAIT_S:g} s"
        except DisconnectionTimeout:
            why = "the server did not close the connection in time"
        except HandshakeError as exc:
            why = _unreached(exc)
        except ConnectionClosed as exc:
            why = _closed(exc)
        except trio.TooSlowError:
            why = f"the server did not answer within {OPEN_WAIT_S:g} s"
        except _ServerBroke as exc:
            why = str(exc)
        if not was_open:
            return f"cannot connect to {target.authority}: {why}"
        approver.dropped(why, retry_in)
        await trio.sleep(retry_in)
        retry_in = min(retry_in * 2, LAST_RETRY_S)


async def _open(
    ws: WebSocketConnection, view: str
) -> tuple[list[RelayQuestion], list[ServerMessage]]:
    """Open the view; the questions of the replay, and the other messages that came
    meanwhile (the server's news travels apart from the questions: a rule's receipt)."""
    with trio.fail_after(SEND_WAIT_S):
        await ws.send_message(_encoder.encode(Open(view=view)).decode())
    if not isinstance(await _next(ws), Opened):
        raise _ServerBroke("the server did not open the view")
    replay = []
    meanwhile: list[ServerMessage] = []
    while not isinstance(message := await _next(ws), Replayed):
        if isinstance(message, Requested):
            replay.append(message.question)
        else:
            meanwhile.append(message)
    return replay, meanwhile


async def _next(ws: WebSocketConnection) -> ServerMessage:
    with trio.fail_after(OPEN_WAIT_S):
        data = await ws.get_message()
    try:
        return _decoder.decode(data)
    except msgspec.DecodeError as exc:
        raise _ServerBroke(f"the server sent what this approver cannot read: {exc}") from None


async def _follow(
    ws: WebSocketConnection,
    target: Target,
    approver: Approver,
    replay: list[RelayQuestion],
    meanwhile: list[ServerMessage],
) -> str:
    """Feed the approver until the connection ends; returns why it ended."""
    outbox, to_send = trio.open_memory_channel[ViewMessage](_OUTBOX)
    ended: list[str] = []
    with outbox, to_send:

        def send(message: ViewMessage) -> bool:
            try:
                outbox.send_nowait(message)
            except (trio.WouldBlock, trio.ClosedResourceError, trio.BrokenResourceError):
                return False
            return True

        approver.opened(send, target.authority, replay)
        for message in meanwhile:
            approver.receive(message)
        send(ListSessions())
        async with trio.open_nursery() as nursery:

            async def until_broken(task: Callable[[], Awaitable[None]]) -> None:
                # A broken connection is the end of this one, told by a reason, never
                # an exception group to unwrap.
                try:
                    await task()
                except ConnectionClosed as exc:
                    ended.append(_closed(exc))
                except trio.TooSlowError:
                    ended.append("the server stopped answering")
                nursery.cancel_scope.cancel()

            nursery.start_soon(until_broken, functools.partial(_write, ws, to_send))
            nursery.start_soon(until_broken, functools.partial(_keep_alive, ws))
            await until_broken(functools.partial(_read, ws, approver))
    return ended[0] if ended else "the connection ended"


async def _read(ws: WebSocketConnection, approver: Approver) -> None:
    while True:
        data = await ws.get_message()
        try:
            message = _decoder.decode(data)
        except (msgspec.DecodeError, RecursionError) as exc:  # (JSON nested too deep)
            approver.unreadable(str(exc) or type(exc).__name__)
            continue
        approver.receive(message)


async def _write(ws: WebSocketConnection, to_send: trio.MemoryReceiveChannel[ViewMessage]) -> None:
    async for message in to_send:
        with trio.fail_after(SEND_WAIT_S):
            await ws.send_message(_encoder.encode(message).decode())


async def _keep_alive(ws: WebSocketConnection) -> None:
    while True:
        await trio.sleep(PING_EVERY_S)
        with trio.fail_after(PONG_WAIT_S):
            await ws.ping()


def _unreached(exc: HandshakeError) -> str:
    cause = exc.__cause__  # (an OSError, when it could not connect)
    if not isinstance(cause, OSError):
        return "the WebSocket handshake failed"
    attempts = cause.__cause__  # (trio's: one error per address tried)
    if cause.errno is None and isinstance(attempts, BaseExceptionGroup):
        for attempt in attempts.exceptions:
            if isinstance(attempt, OSError) and attempt.errno is not None:
                cause = attempt
                break
    return os.strerror(cause.errno) if cause.errno is not None else str(cause)


def _closed(exc: ConnectionClosed) -> str:
    reason = exc.reason
    if reason is None or reason.code == 1006:
        return "the connection broke"
    said = f": {reason.reason}" if reason.reason else ""
    return f"the server closed the connection ({reason.code} {reason.name}{said})"
