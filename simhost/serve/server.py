"""The HTTP and WebSocket side of ``simhost serve``: views of a relay, over the web.

A Starlette app, served by hypercorn's trio worker in the caller's trio run (no
HTTP server of our own). Every request and WebSocket must carry the server's
token (``?token=``) and name the bound host and port in its ``Host`` header (a
page of another site that resolves its own name to 127.0.0.1 cannot reach it); a
WebSocket's ``Origin`` must be the server's own. Responses carry a strict
Content-Security-Policy and no CORS header. A view speaks the relay protocol
(:mod:`.protocol`): ``open``, then the replay, then events; bad input gets an
``error`` and changes nothing. Every reply to a view's message carries its ``ref``.

The page is package data (``static/``); sessions, prompts, turns and presets are
:class:`~.host.ServeHost`'s. Where hypercorn has no setting for what this server
needs, :func:`_harden` installs a subclass of its own class (checked at import).
"""

from __future__ import annotations

import functools
import logging
import secrets
import socket
from collections.abc import Awaitable, Callable, Sequence
from contextlib import ExitStack
from importlib import resources
from typing import Any, Final

import msgspec
import trio
from hypercorn import protocol as hypercorn_protocol
from hypercorn.config import Config, Sockets
from hypercorn.protocol import h2, h11, ws_stream
from hypercorn.protocol.events import Body, Data, StreamClosed
from hypercorn.trio import run as hypercorn_run
from hypercorn.trio import serve, tcp_server
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import Route, WebSocketRoute
from starlette.types import Message, Receive, Scope, Send
from starlette.websockets import WebSocket
from wsproto.connection import ConnectionState
from wsproto.events import CloseConnection

from permclient.relay import Relay, Requested, Resolved, Subscription

from .access import MIN_TOKEN, TOKEN
from .editor import EditorDesk
from .host import Listener, ServeHost
from .protocol import (
    MAX_MESSAGE,
    Answer,
    AnswerBatch,
    AnswerRefused,
    CancelTurn,
    Error,
    ListPresets,
    ListRules,
    ListSessions,
    NewSession,
    Open,
    Opened,
    PreviewBatch,
    Prompt,
    Replayed,
    Reply,
    RevokeRule,
    SaveRule,
    ServerMessage,
    SetPreset,
    ViewMessage,
    decode_view_message,
    encode,
    with_ref,
)

SECURITY_HEADERS: Final = {
    "Content-Security-Policy": (
        "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; "
        "connect-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
    ),
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-store",
}
log = logging.getLogger(__name__)

OPEN_WAIT_S: Final = 10  # a view that does not open within this is let go
SEND_WAIT_S: Final = 10  # a view that takes nothing for this long is let go
POLICY_VIOLATION: Final = 1008  # WebSocket close codes
MESSAGE_TOO_BIG: Final = 1009
TRY_AGAIN_LATER: Final = 1013
MAX_VIEWS: Final = 64  # views connected at once
# A connection whose peer acknowledges nothing for this long is dropped by the
# kernel (Linux): hypercorn's writes cannot be cancelled, so a view that stops
# reading would otherwise hold its task, and shutdown, for ever.
TCP_USER_TIMEOUT_MS: Final = SEND_WAIT_S * 1000


class Gate:
    """Who may come in: the token, and the authority (``host:port``) once bound.

    The token comes in ``?token=`` (the page, the WebSocket), or as the first part
    of a page file's path (``/static/TOKEN/app.js``): the page's own references,
    and the module imports relative to them, carry it. No cookie: a cookie would go
    to every port of the host."""

    def __init__(self, token: str) -> None:
        if not TOKEN.fullmatch(token):
            raise ValueError(
                f"a token is {MIN_TOKEN} to 256 characters of A-Z a-z 0-9 _ . ~ - (128 bits)"
            )
        self.token = token
        self.authorities: frozenset[str] = frozenset()

    def bind(self, host: str, port: int) -> str:
        """Accept requests for ``host:port`` (and ``localhost:port`` on a loopback
        address); the authority to print."""
        authority = f"[{host}]:{port}" if ":" in host else f"{host}:{port}"
        loopback = host in ("127.0.0.1", "::1")
        self.authorities = frozenset({authority, f"localhost:{port}"} if loopback else {authority})
        return authority

    def refuses(self, scope: Scope, headers: Any, token: str | None) -> str | None:
        """Why a request is refused, or None."""
        if scope.get("http_version") not in ("1.0", "1.1"):
            return "HTTP/1.1 only"
        if headers.get("host") not in self.authorities:
            return "the Host header does not name this server"
        given = token or _path_token(scope.get("path", "")) or ""
        if not secrets.compare_digest(given.encode(), self.token.encode()):
            return "wrong or missing token"
        return None

    def refuses_origin(self, headers: Any) -> str | None:
        if headers.get("origin") != f"http://{headers.get('host')}":
            return "the Origin is not this server's"
        return None


def _path_token(path: str) -> str | None:
    """The token of a page file's path, ``/static/TOKEN/NAME``."""
    parts = path.split("/")
    return parts[2] if len(parts) == 4 and parts[1] == "static" else None


STATIC: Final = resources.files("simhost.serve") / "static"
_CONTENT_TYPES: Final = {
    ".html": "text/html; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".png": "image/png",
    ".svg": "image/svg+xml",
}


def _static_file(name: str) -> bytes | None:
    """A file of the page (package data): only a plain name of a known type."""
    suffix = "." + name.rpartition(".")[2]
    if "/" in name or name.startswith(".") or suffix not in _CONTENT_TYPES:
        return None
    try:
        return (STATIC / name).read_bytes()
    except (OSError, ValueError):  # (ValueError: a NUL in the name)
        return None


def _file_response(name: str, body: bytes | None) -> Response:
    if body is None:
        return PlainTextResponse("not found", 404)
    return Response(body, media_type=_CONTENT_TYPES["." + name.rpartition(".")[2]])


def make_app(
    relay: Relay, gate: Gate, host: ServeHost | None = None
) -> Callable[..., Awaitable[None]]:
    """The ASGI app: ``/`` (the page), ``/static/TOKEN/NAME`` (its files) and ``/ws`` (the
    relay protocol), every path and method behind the gate and with the security
    headers. Without a ``host``, views answer questions and nothing else."""

    page = _static_file("index.html")
    assert page is not None, "simhost serve: the page is missing from the package"
    # The page's own references carry the token (see Gate): the rest follows them.
    page = page.replace(b'"/static/', f'"/static/{gate.token}/'.encode())

    async def index(request: Request) -> Response:
        return _file_response("index.html", page)

    async def static(request: Request) -> Response:
        name = request.path_params["name"]
        return _file_response(name, _static_file(name))

    open_views = 0

    async def views(websocket: WebSocket) -> None:
        nonlocal open_views
        await websocket.accept()
        if open_views >= MAX_VIEWS:
            await websocket.close(TRY_AGAIN_LATER, f"at most {MAX_VIEWS} views at once")
            return
        open_views += 1
        try:
            await ViewSocket(websocket, relay, host).run()
        finally:
            open_views -= 1

    routes = Starlette(
        routes=[
            Route("/", index),
            Route("/static/{token}/{name}", static),
            WebSocketRoute("/ws", views),
        ]
    )

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        kind = scope["type"]
        if kind not in ("http", "websocket"):
            await routes(scope, receive, send)  # (lifespan)
            return
        request = Request(scope) if kind == "http" else WebSocket(scope, receive, send)
        why = gate.refuses(scope, request.headers, request.query_params.get("token"))
        if why is None and kind == "websocket":
            why = gate.refuses_origin(request.headers)
        if why is not None:
            if kind == "websocket":  # (refused before the upgrade: a 403)
                await send({"type": "websocket.close", "code": POLICY_VIOLATION})
            else:
                await PlainTextResponse(why, 403, SECURITY_HEADERS)(scope, receive, send)
            return

        async def with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                kept = [(k, v) for k, v in message.get("headers", []) if k.lower() not in _OURS]
                message = {**message, "headers": kept + _SECURITY_HEADER_BYTES}
            await send(message)

        await routes(scope, receive, with_headers if kind == "http" else send)

    return guarded


_SECURITY_HEADER_BYTES: Final = [
    (name.lower().encode(), value.encode()) for name, value in SECURITY_HEADERS.items()
]
_OURS: Final = {name for name, _ in _SECURITY_HEADER_BYTES}


class ViewSocket:
    """One view's WebSocket: ``open`` first, then requests in and events out."""

    def __init__(self, websocket: WebSocket, relay: Relay, host: ServeHost | None) -> None:
        self.websocket = websocket
        self.relay = relay
        self.host = host
        self.sending = trio.Lock()  # events and replies are whole messages, one at a time

    async def send(self, message: ServerMessage) -> None:
        async with self.sending:
            with trio.fail_after(SEND_WAIT_S):
                await self.websocket.send_text(encode(message).decode())

    async def receive(self) -> str | bytes | None:
        """The next message's data, or None once the view is gone."""
        message = await self.websocket.receive()
        if message["type"] == "websocket.disconnect":
            return None
        data: str | bytes | None = message.get("text")
        return data if data is not None else message.get("bytes") or b""

    async def run(self) -> None:
        try:
            await self._run()
        except* trio.TooSlowError:  # it stopped reading: its questions stay pending
            await self.websocket.close(code=POLICY_VIOLATION)

    async def _run(self) -> None:
        opening: ViewMessage | Error | None = None
        with trio.move_on_after(OPEN_WAIT_S):
            data = await self.receive()
            opening = None if data is None else decode_view_message(data)
        if not isinstance(opening, Open):
            ref: str | None = None
            if isinstance(opening, Error):
                await self.send(opening)
                ref = opening.ref or None
            elif opening is not None:
                ref = opening.ref
            await self.send(with_ref(Error("the first message must be open"), ref))
            await self.websocket.close(code=POLICY_VIOLATION)
            return
        with self.relay.subscribe(opening.view) as events, ExitStack() as stack:
            listener = stack.enter_context(self.host.listen()) if self.host else None
            await self.send(with_ref(Opened(opening.view), opening.ref))
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self._forward, events, nursery.cancel_scope)
                if listener is not None:
                    nursery.start_soon(self._forward_host, listener, nursery.cancel_scope)
                while (data := await self.receive()) is not None:
                    await self._handle(decode_view_message(data), opening.view, listener)
                nursery.cancel_scope.cancel()
            dropped = events.dropped or (listener is not None and listener.dropped)
            if dropped or self.relay.closed:  # (told with a close frame)
                await self.websocket.close()

    async def _forward(self, events: Subscription, scope: trio.CancelScope) -> None:
        left = events.replayed
        if not left:
            await self.send(Replayed(0))
        desk = self.host.desk if self.host is not None else None
        replayed: list[str] = []  # (their offers follow ``replayed``: the replay is questions)
        async for event in events:
            await self.send(event)
            if desk is not None and isinstance(event, Requested):
                if left > 0:
                    replayed.append(event.question.question_id)
                else:
                    await self._send_offers(desk, event.question.question_id)
            left -= 1
            if left == 0:
                await self.send(Replayed(events.replayed))
                for question_id in replayed:
                    await self._send_offers(desk, question_id)
                replayed.clear()
        scope.cancel()  # the relay closed, or this view fell too far behind

    async def _send_offers(self, desk: EditorDesk | None, question_id: str) -> None:
        """The rules a card may save for the question, if it is still pending."""
        offers = desk.offers_for(question_id) if desk is not None else None
        if offers is not None:
            await self.send(offers)

    async def _forward_host(self, listener: Listener, scope: trio.CancelScope) -> None:
        async for message in listener:
            await self.send(message)
        scope.cancel()  # this view fell too far behind

    async def _handle(
        self, message: ViewMessage | Error, view: str, listener: Listener | None
    ) -> None:
        if isinstance(message, Error):
            await self.send(message)  # (with the message's ref, if it had a readable one)
            return
        for reply in self._replies(message, view, listener):
            await self.send(with_ref(reply, message.ref))

    def _replies(
        self, message: ViewMessage, view: str, listener: Listener | None
    ) -> Sequence[Reply]:
        """Act on ``message``; what its view is told now, in order (a request that
        waits for the agent replies later, through ``listener``, with the ref)."""
        if isinstance(message, Answer):
            decision = msgspec.to_builtins(message.decision)
            result = self.relay.answer(
                message.question_id,
                decision,
                view=view,
                session_id=message.session_id,
                reason=message.reason,
            )
            if isinstance(result, Resolved):
                return ()  # (a resolution reaches every view as an event)
            return (AnswerRefused(result.question_id, result.reason),)
        if isinstance(message, Open):
            return (Error("already open"),)
        if self.host is None or listener is None:
            return (Error(f"not served here: {type(message).__name__}"),)
        reply = self._for_host(self.host, message, listener, view)
        desk = self.host.desk
        if isinstance(message, RevokeRule) and isinstance(reply, Error) and desk is not None:
            return (reply, desk.rules())  # (numbers moved: the list as it is now)
        return () if reply is None else (reply,)

    @staticmethod
    def _for_host(
        host: ServeHost, message: ViewMessage, listener: Listener, view: str
    ) -> Reply | None:
        """Hand a session request to the host: an immediate reply, if any (a request
        that waits for the agent replies later, through ``listener``)."""
        if isinstance(message, ListSessions):
            return host.session_list()
        if isinstance(message, Prompt):
            return host.prompt(message.session_id, message.text)
        if isinstance(message, CancelTurn):
            return host.cancel_turn(message.session_id)
        if isinstance(message, NewSession):
            host.start_request(listener, functools.partial(_created, host, view), message.ref)
        elif isinstance(message, ListPresets):
            listing = functools.partial(host.presets, message.session_id)
            host.start_request(listener, listing, message.ref)
        elif isinstance(message, SetPreset):
            switch = functools.partial(host.set_preset, message.session_id, message.preset)
            host.start_request(listener, switch, message.ref)
        elif host.desk is None:
            return Error("no editor rules here")
        elif isinstance(message, SaveRule):
            return host.desk.save_rule(message.question_id, message.session_id, message.index)
        elif isinstance(message, ListRules):
            return host.desk.rules()
        elif isinstance(message, RevokeRule):
            return host.desk.revoke(message.number, message.rule)
        elif isinstance(message, PreviewBatch):
            return host.desk.preview_batch(message.session_id, message.effect, message.what)
        elif isinstance(message, AnswerBatch):
            return host.desk.answer_batch(
                message.session_id, message.effect, message.what, message.question_ids, view
            )
        return None


async def _created(host: ServeHost, view: str) -> None:
    await host.new_session(view)  # (every view is told: ``created``, by ``view``)


class _PlainHandshake(ws_stream.Handshake):
    """A WebSocket handshake that accepts no extension. hypercorn always accepts
    ``permessage-deflate`` when a client offers it, and wsproto inflates a frame
    with no limit: a few kilobytes on the wire would become megabytes here."""

    def __init__(self, headers: list[tuple[bytes, bytes]], http_version: str) -> None:
        super().__init__(headers, http_version)
        self.extensions = None


class _CappedBuffer(ws_stream.WebsocketBuffer):
    """A message buffer that keeps nothing once a message is over the limit.
    hypercorn closes the connection (1009) on the first overflow, but goes on
    buffering what the peer sends until the peer acknowledges the close."""

    def extend(self, event: Any) -> None:
        if self.length > self.max_length:
            raise ws_stream.FrameTooLargeError()
        try:
            super().extend(event)
        except ws_stream.FrameTooLargeError:
            self.value = None  # (the message is refused: its bytes are not kept)
            raise


class _PlainStream(ws_stream.WSStream):
    """A WebSocket stream that drops what a client sends once it broke a rule, but
    for its close:

    * it sent data before the upgrade's answer (hypercorn answered such bytes with a
      400 its HTTP state machine could not send: the error ended the whole server).
      The bytes are dropped; once the app accepts, the view is closed (1008);
    * it sent a message over the size limit (hypercorn closes with 1009 but reads one
      frame at a time from then on, and wsproto keeps every byte that waits).

    The app is told the view is gone (``websocket.disconnect``)."""

    _premature = False
    _dropping = False

    async def handle(self, event: Any) -> None:
        if isinstance(event, Body | Data) and not self.closed and not self.handshake.accepted:
            self._premature = True  # (dropped: there is no WebSocket to read them yet)
            return
        await super().handle(event)

    async def app_send(self, message: Any) -> None:
        await super().app_send(message)
        if self._premature and self.handshake.accepted and not self._dropping:
            await self._send_wsproto_event(CloseConnection(code=POLICY_VIOLATION))
            await self._drop_from_now(POLICY_VIOLATION)

    async def _handle_events(self) -> None:
        if not self._dropping:
            await super()._handle_events()
            if self.buffer.length <= self.buffer.max_length or self.closed:
                return
            await self._drop_from_now(MESSAGE_TOO_BIG)
        for event in self.connection.events():  # (all of them: none waits in wsproto)
            if isinstance(event, CloseConnection):
                if self.connection.state == ConnectionState.REMOTE_CLOSING:
                    await self._send_wsproto_event(event.response())
                await self.send(StreamClosed(stream_id=self.stream_id))
                return

    async def _drop_from_now(self, code: int) -> None:
        self._dropping = True
        if self.app_put is not None:
            await self.app_put({"type": "websocket.disconnect", "code": code})


class _Http11Only(h11.H11Protocol):
    """HTTP/1.1 only: hypercorn would switch a connection to HTTP/2 (an ``h2c``
    upgrade, or HTTP/2's preface) before any request reaches the gate."""

    async def _check_protocol(self, event: Any) -> None:
        return


class _ContainedServer(tcp_server.TCPServer):
    """One connection's failure ends that connection, never the server (hypercorn
    lets it through to the task that serves every connection)."""

    async def run(self) -> None:
        try:
            await super().run()
        except Exception as exc:
            log.warning("a connection failed and was closed: %r", exc)

    async def _close(self) -> None:
        # hypercorn ends the stream without its send lock: a view's last message or
        # close frame sent meanwhile failed with BusyResourceError (in the app's task).
        if self.send_lock.statistics().owner is trio.lowlevel.current_task():
            await super()._close()  # (from a send that found the stream broken)
            return
        async with self.send_lock:
            await super()._close()


def _harden() -> None:
    """Install the classes above in hypercorn (it has no setting for any of them).
    Checked at import: an incompatible hypercorn fails here, with a message, rather
    than serve without them."""
    if not (
        isinstance(getattr(ws_stream, "Handshake", None), type)
        and isinstance(getattr(ws_stream, "WebsocketBuffer", None), type)
        and hasattr(ws_stream, "FrameTooLargeError")
        and getattr(h11, "WSStream", None) is ws_stream.WSStream
        and getattr(h2, "WSStream", None) is ws_stream.WSStream
        and getattr(hypercorn_run, "TCPServer", None) is tcp_server.TCPServer
        and callable(getattr(tcp_server.TCPServer, "_close", None))
        and getattr(hypercorn_protocol, "H11Protocol", None) is h11.H11Protocol
        and callable(getattr(h11.H11Protocol, "_check_protocol", None))
    ):  # pragma: no cover - a hypercorn whose insides we do not know
        raise ImportError("simhost serve: this version of hypercorn is not supported")
    ws_stream.Handshake = _PlainHandshake  # type: ignore[misc]
    ws_stream.WebsocketBuffer = _CappedBuffer  # type: ignore[misc]
    setattr(h11, "WSStream", _PlainStream)  # noqa: B010 - (not exported: no attribute to mypy)
    setattr(h2, "WSStream", _PlainStream)  # noqa: B010
    setattr(hypercorn_run, "TCPServer", _ContainedServer)  # noqa: B010
    setattr(hypercorn_protocol, "H11Protocol", _Http11Only)  # noqa: B010


_harden()


class _Config(Config):
    """Hypercorn's configuration, keeping the sockets it binds: hypercorn leaves
    its listening socket open when it stops, and we close it."""

    sockets: Sockets | None = None

    def create_sockets(self) -> Sockets:
        self.sockets = super().create_sockets()
        if hasattr(socket, "TCP_USER_TIMEOUT"):  # (inherited by accepted connections)
            for sock in self.sockets.insecure_sockets:
                sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_USER_TIMEOUT, TCP_USER_TIMEOUT_MS)
        return self.sockets


def hypercorn_config(host: str, port: int) -> _Config:
    config = _Config()
    config.bind = [f"{host}:{port}"]
    config.websocket_max_message_size = MAX_MESSAGE
    config.h11_max_incomplete_size = 16 * 1024  # request line and headers
    config.accesslog = None
    config.errorlog = log  # (an exception in the app is a bug: it must show)
    return config


async def serve_relay(
    relay: Relay,
    gate: Gate,
    host: str,
    port: int,
    shutdown: Callable[[], Awaitable[None]],
    *,
    sessions: ServeHost | None = None,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``relay`` (and the ``sessions`` of a host, if given) until
    ``shutdown()`` returns; ``task_status`` gets the bound ``host:port``."""

    config = hypercorn_config(host, port)

    async def started_binds(task_status: trio.TaskStatus[list[str]]) -> None:
        try:
            await serve(
                make_app(relay, gate, sessions),
                config,
                shutdown_trigger=shutdown,
                task_status=task_status,
            )
        finally:
            if config.sockets is not None:
                for sock in config.sockets.insecure_sockets:
                    sock.close()

    async with trio.open_nursery() as nursery:
        binds = await nursery.start(started_binds)
        bound_port = int(binds[0].rpartition(":")[2])
        task_status.started(gate.bind(host, bound_port))
