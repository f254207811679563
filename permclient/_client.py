"""The trio layer: one connection to an agent runtime, in either dialect.

One reader task feeds the framer and dispatches every message synchronously
(so notifications keep their order); one writer task owns the stream's send side
and flushes whatever has been queued since its last write (batched writes; a
cancelled caller can never leave half a frame on the wire, because queueing a
frame is a synchronous append). The permission requests of one read are started
in one task, in order; a handler that blocks gets that task and a cancel scope of
its own, and the rest go on in a new task (see _lazy_scope). Each other inbound
request runs in a task of its own.
"""

from __future__ import annotations

import logging
import math
import numbers
import types
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias, TypeVar, cast, overload

import msgspec
import trio

from ._errors import ConnectionClosed, LocalProtocolError, RemoteProtocolError, RequestError
from ._framing import DEFAULT_MAX_FRAME_SIZE, ContentLengthFramer, Framer, NewlineFramer
from ._lazy_scope import Relay, ScopeOwner, start
from ._messages import (
    DECODE_ERRORS,
    ErrorCode,
    ErrorResponse,
    InvalidMessage,
    Message,
    Notification,
    Request,
    RequestId,
    Response,
    encode_error,
    encode_notification,
    encode_request,
    encode_result,
    json_cost,
    parse_message,
    str_cost,
)
from ._notifications import InboundNotification
from ._telemetry import Telemetry
from ._tracker import ToolCallTracker
from ._wire import (
    Cancelled,
    Decision,
    PermissionOption,
    PermissionRequest,
    PermissionResponse,
    Selected,
    cancel_params_decoder,
    permission_request_decoder,
)

log = logging.getLogger("permclient")

T = TypeVar("T")

DialectName = Literal["bridge", "acp"]
PermissionHandler = Callable[[PermissionRequest], Awaitable[Decision]]
RequestHandler = Callable[[Any], Awaitable[Any]]
NotificationCallback = Callable[["InboundNotification"], None]

PERMISSION_METHOD: Final = "session/request_permission"
_CANCEL_METHODS: Final = frozenset({"$/cancelRequest", "$/cancel_request"})
_RECEIVE_SIZE: Final = 256 * 1024
# Teardown waits for queued answers while the peer takes them: it gives up after
# _FLUSH_STALL_S without progress, and after _FLUSH_STALL_S plus one second per
# _FLUSH_MIN_RATE bytes queued in all (a peer that reads, however slowly, at that
# rate gets every answer; one that stopped reading holds us _FLUSH_STALL_S).
_FLUSH_STALL_S: Final = 2.0
_FLUSH_MIN_RATE: Final = 64 * 1024
# The writer sends at most this much per send_all, so a slow reader shows progress.
_WRITE_CHUNK: Final = 64 * 1024
_BACKLOG_LIMIT: Final = 4096
_BACKLOG_BYTES: Final = 16 * 1024 * 1024
_HELD_OVERHEAD: Final = 200  # a held notification's own objects
# Pending inbound requests: what their params, methods and ids take decoded (see
# json_cost), whatever the handler then keeps aside.
_PENDING_BYTES: Final = 128 * 1024 * 1024
_BRIEF: Final = 80
# Past this many queued bytes the reader stops reading until the writer catches
# up: a peer that never reads cannot make us buffer its answers without end.
_OUTBUF_HIGH_WATER: Final = 16 * 1024 * 1024
DEFAULT_MAX_PENDING: Final = 16384
_CANCELLED: Final = Cancelled()
_NO_RESULT: Final = object()
_UNANSWERED: Final = object()  # a blocked handler that raised or was cancelled
_PERMISSION_TASK: Final = "permclient.permission"
_PERMISSION_CANCELLED: Final = PermissionResponse(_CANCELLED)


@dataclass(frozen=True, slots=True)
class _Dialect:
    name: DialectName
    framer: type[ContentLengthFramer] | type[NewlineFramer]
    cancel_method: str
    cancel_key: str
    # Outbound requests that *are* a turn: cancelling one cancels the session's turn.
    turn_requests: frozenset[str]
    # Outbound notifications that cancel a session's turn.
    turn_cancels: frozenset[str]
    # What a caller giving up on a turn request sends instead of the request cancel
    # (ACP cancels a prompt with `session/cancel {"sessionId"}`), if anything.
    turn_cancel_notification: str | None


_DIALECTS: Final[dict[str, _Dialect]] = {
    "bridge": _Dialect(
        "bridge",
        ContentLengthFramer,
        "$/cancelRequest",
        "id",
        frozenset({"chatSend"}),
        frozenset(),
        None,
    ),
    "acp": _Dialect(
        "acp",
        NewlineFramer,
        "$/cancel_request",
        "requestId",
        frozenset({"session/prompt"}),
        frozenset({"session/cancel"}),
        "session/cancel",
    ),
}


class _Held:
    """A notification held for a session with no callback yet: undecoded, as a
    peer's few bytes of JSON can decode into many times as many of objects."""

    __slots__ = ("method", "params", "session_id", "size")

    def __init__(self, method: str, session_id: str, params: bytes) -> None:
        self.method = method
        self.session_id = session_id
        self.params = params
        self.size = _HELD_OVERHEAD + str_cost(method) + str_cost(session_id) + len(params)


def _brief(value: object) -> str:
    """``repr(value)``, cut short: peer strings in a log line, never megabytes of them."""
    text = repr(value[: _BRIEF + 1] if isinstance(value, str) else value)
    return text if len(text) <= _BRIEF else text[:_BRIEF] + "..."


class Registration:
    """Undoes a registration: call :meth:`close`, or use it as a context manager."""

    __slots__ = ("_undo",)

    def __init__(self, undo: Callable[[], None]) -> None:
        self._undo: Callable[[], None] | None = undo

    def close(self) -> None:
        """Remove the registration; calling it again does nothing."""
        undo, self._undo = self._undo, None
        if undo is not None:
            undo()

    def __enter__(self) -> Registration:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


class _Outbound:
    __slots__ = ("done", "error", "method", "params", "result")

    def __init__(self, method: str, params: Any) -> None:
        self.method = method
        self.params = params
        self.done = trio.Event()
        self.result: msgspec.Raw | None = None
        self.error: Exception | None = None


class _Route:
    __slots__ = ("cancelled_result", "handler")

    def __init__(self, handler: RequestHandler, cancelled_result: Any) -> None:
        self.handler = handler
        self.cancelled_result = cancelled_result


class _HandlerEntry:
    __slots__ = ("handler", "pending", "session_id", "timeout")

    def __init__(self, session_id: str, handler: PermissionHandler, timeout: float | None) -> None:
        self.session_id = session_id
        self.handler = handler
        self.timeout = timeout  # seconds from a request's arrival, or None
        self.pending: dict[_Inbound, None] = {}  # a set, in less memory


class _SharedOptions:
    __slots__ = ("options", "uses")

    def __init__(self, options: tuple[PermissionOption, ...]) -> None:
        self.options = options
        self.uses = 0


class _Inbound:
    """One inbound request from arrival until its single response is queued."""

    __slots__ = (
        "_offered",
        "_scope",
        "answered",
        "cancel_called",
        "cancelled_result",
        "entry",
        "id",
        "method",
        "session_id",
        "size",
        "started",
        "tool_call_id",
    )

    def __init__(
        self, request_id: RequestId | None, session_id: str | None, started: float
    ) -> None:
        self.id = request_id
        self.session_id = session_id
        self._scope: trio.CancelScope | None = None
        self.cancel_called = False
        self.answered = False
        self.started = started  # trio time of arrival, when telemetry or a timeout needs it
        self.method: str | None = None  # of a request other than a permission request
        self.entry: _HandlerEntry | None = None  # of a permission request only
        self.tool_call_id: str | None = None
        self.cancelled_result: Any = _NO_RESULT
        self._offered: tuple[PermissionOption, ...] | _SharedOptions = ()
        self.size = 0  # counted against _PENDING_BYTES while pending

    @property
    def is_permission(self) -> bool:
        return self.entry is not None

    @property
    def offered(self) -> tuple[PermissionOption, ...]:
        """The options offered: the answer is checked against these."""
        offered = self._offered
        return offered.options if isinstance(offered, _SharedOptions) else offered

    @property
    def shared_options(self) -> _SharedOptions | None:
        offered = self._offered
        return offered if isinstance(offered, _SharedOptions) else None

    @property
    def scope(self) -> trio.CancelScope:
        """The handler's cancel scope, made when the handler first blocks."""
        if self._scope is None:
            self._scope = trio.CancelScope()
            if self.cancel_called:
                self._scope.cancel()
        return self._scope

    def cancel(self) -> None:
        self.cancel_called = True
        if self._scope is not None:
            self._scope.cancel()


# Permission requests to start in one task: their state, request and handler.
_Batch: TypeAlias = list[tuple[_Inbound, PermissionRequest, PermissionHandler]]


class _SessionScoped(msgspec.Struct, rename="camel"):
    session_id: Any = None


_session_scoped_decoder: Final = msgspec.json.Decoder(_SessionScoped)
_any_decoder: Final = msgspec.json.Decoder()


def _session_of(params: Any) -> str | None:
    """The ``sessionId`` of outbound params given as a dict or a Struct."""
    value = (
        params.get("sessionId") if isinstance(params, dict) else getattr(params, "session_id", None)
    )
    return value if isinstance(value, str) else None



def _first_leaf(exc: BaseException, kind: type | types.UnionType) -> BaseException | None:
    """``exc`` if it is a ``kind``, else the first ``kind`` inside its exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _first_leaf(inner, kind)
            if found is not None:
                return found
        return None
    return exc if isinstance(exc, kind) else None


def _all_leaves(exc: BaseException, kind: type) -> bool:
    """Whether ``exc`` is a ``kind``, or a group (nested or not) of nothing else."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_all_leaves(inner, kind) for inner in exc.exceptions)
    return isinstance(exc, kind)

class Client:
    """A JSON-RPC connection to an agent runtime. Create it with :func:`open_client`.

    Sends requests and notifications, routes the runtime's permission requests to
    the handler registered for exactly their ``sessionId``, answers every inbound
    request exactly once, and fails closed: anything but an explicit choice of an
    offered option is answered ``cancelled``.
    """

    def __init__(
        self,
        stream: trio.abc.Stream,
        dialect: _Dialect,
        nursery: trio.Nursery,
        *,
        telemetry: Telemetry | None,
        max_frame_size: int,
        max_pending: int,
    ) -> None:
        self._stream = stream
        self._dialect = dialect
        self._nursery = nursery
        self._telemetry = telemetry
        self._framer: Framer = dialect.framer(max_frame_size=max_frame_size)
        self._encode_frame = dialect.framer.encode
        self._next_id = 0
        self._outbound: dict[RequestId, _Outbound] = {}
        self._inbound: dict[RequestId | None, _Inbound] = {}
        self._permission_handlers: dict[str, list[_HandlerEntry]] = {}
        self._starting: _Batch = []  # permission requests of the read being dispatched
        # Equal option sets of pending permission requests, held once (agents offer
        # the same few sets again and again); an entry goes with its last request.
        self._options_in_use: dict[tuple[PermissionOption, ...], _SharedOptions] = {}
        self._request_handlers: dict[str, _Route] = {}
        self._notification_callbacks: dict[str, list[NotificationCallback]] = {}
        self._session_callbacks: dict[str, list[NotificationCallback]] = {}
        self._backlog: deque[_Held] = deque()
        self._backlog_bytes = 0
        self._max_pending = max_pending
        self._pending_bytes = 0
        self._outbuf = bytearray()
        self._writer_lot = trio.lowlevel.ParkingLot()
        self._written_lot = trio.lowlevel.ParkingLot()  # woken at each write and when idle
        self._writing = 0  # bytes taken from _outbuf and not yet written
        self._written = 0  # bytes written in all: teardown watches it move
        self._write_failed = False
        # The writer outlives an outer cancellation so owed answers still go out;
        # teardown cancels it once they are flushed (or the grace period ends).
        self._writer_scope = trio.CancelScope(shield=True)
        self._closed: str | None = None
        self._stopped_by: BaseException | None = None  # a KeyboardInterrupt or SystemExit
        self._body_scope = trio.CancelScope()  # the body of open_client
        self._closed_event = trio.Event()
        # Registrations' timeouts: one task sleeps until the earliest deadline, and
        # exists only while some request with a timeout is pending.
        self._timeout_wake: trio.CancelScope | None = None
        self.process: trio.Process | None = None
        """The runtime's process when the client came from :func:`open_process`."""
        self.tool_calls = ToolCallTracker()
        """Per (session, toolCallId) state of every tool call seen (invariant 9)."""

    # ----------------------------------------------------------------- public API

    @property
    def dialect(self) -> DialectName:
        """``"bridge"`` (Content-Length framing) or ``"acp"`` (newline-delimited)."""
        return self._dialect.name

    @property
    def closed_reason(self) -> str | None:
        """Why the connection closed, or ``None`` while it is open."""
        return self._closed

    async def wait_closed(self) -> str:
        """Wait until the connection closes (peer EOF, transport or protocol error).

        Returns :attr:`closed_reason`. Useful for a program that serves requests
        until its peer goes away.
        """
        await self._closed_event.wait()
        assert self._closed is not None
        return self._closed

    @overload
    async def request(self, method: str, params: Any = None) -> Any: ...

    @overload
    async def request(self, method: str, params: Any = None, *, result_type: type[T]) -> T: ...

    async def request(self, method: str, params: Any = None, *, result_type: Any = Any) -> Any:
        """Send a request and wait for its response.

        ``params`` is anything msgspec can encode (a dict, a Struct, ...). The
        result is decoded into ``result_type`` (plain JSON values by default).
        If the caller is cancelled while waiting, the dialect's cancel
        notification is sent for this id (for ACP ``session/prompt``:
        ``session/cancel`` for its session, as ACP cancels a turn) and a late
        response is dropped; for a turn request (bridge ``chatSend``, ACP
        ``session/prompt``) every pending permission request of its session is
        answered ``cancelled`` at once.

        Raises :class:`RequestError` for an error response,
        :class:`ConnectionClosed` if the connection is or becomes closed,
        :class:`LocalProtocolError` if ``params`` cannot be encoded, and
        :class:`RemoteProtocolError` if the result does not decode as ``result_type``.
        """
        self._check_open()
        request_id = self._next_id
        self._next_id += 1
        self._queue(encode_request(request_id, method, params))
        slot = self._outbound[request_id] = _Outbound(method, params)
        try:
            await slot.done.wait()
        except BaseException:
            if self._outbound.pop(request_id, None) is not None:
                self._abandon(request_id, slot)
            raise
        if slot.error is not None:
            raise slot.error
        assert slot.result is not None
        try:
            if result_type is Any:
                return _any_decoder.decode(slot.result)
            return msgspec.json.decode(slot.result, type=result_type)
        except DECODE_ERRORS as exc:
            raise RemoteProtocolError(f"unexpected result for {method}: {exc}") from exc

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification.

        In the ACP dialect, ``session/cancel`` also answers every pending
        permission request of that session ``cancelled`` at once.

        Raises :class:`ConnectionClosed` if the connection is closed and
        :class:`LocalProtocolError` if ``params`` cannot be encoded.
        """
        self._check_open()
        self._queue(encode_notification(method, params))
        if method in self._dialect.turn_cancels:
            session_id = _session_of(params)
            if session_id is not None:
                self.cancel_permissions(session_id)
        await trio.lowlevel.checkpoint()

    @contextmanager
    def permission_handler(
        self, session_id: str, handler: PermissionHandler, *, timeout: float | None = None
    ) -> Iterator[None]:
        """Route ``session/request_permission`` requests of ``session_id`` to ``handler``.

        Scope it to a turn. The handler is ``async (PermissionRequest) -> Decision``;
        only ``Selected(option_id)`` with an offered id answers ``selected``;
        anything else (``Cancelled()``, an exception, another value, an id that
        was not offered, the scope being cancelled) answers ``cancelled``. A
        nested registration for the same session shadows this one until it
        exits. On exit, requests still pending with this handler are answered
        ``cancelled`` at once. With a ``timeout`` (seconds), a request still
        pending that long after it arrived is answered ``cancelled`` then, and its
        handler cancelled, as a withdrawal would (telemetry ``by: "timeout"``).

        Raises :class:`ValueError` if ``session_id`` is empty or ``timeout`` is not
        a positive number of seconds.
        """
        if not isinstance(session_id, str) or not session_id:
            raise ValueError("session_id must be a non-empty string")
        if timeout is not None:
            if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
                raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
            timeout = float(timeout)
            if not 0 < timeout < math.inf:
                raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
        entry = _HandlerEntry(session_id, handler, timeout)
        stack = self._permission_handlers.setdefault(session_id, [])
        stack.append(entry)
        try:
            yield
        finally:
            stack.remove(entry)
            if not stack:
                del self._permission_handlers[session_id]
            for state in list(entry.pending):
                self._cancel_inbound(state, "turn")

    def cancel_permissions(self, session_id: str) -> int:
        """Answer every pending permission request of ``session_id`` ``cancelled`` now.

        Use it when a turn is cancelled. Returns how many requests were answered.
        """
        states = [
            s for s in self._inbound.values() if s.is_permission and s.session_id == session_id
        ]
        for state in states:
            self._cancel_inbound(state, "turn")
        return len(states)

    def pending_permissions(self, session_id: str | None = None) -> int:
        """How many permission requests (of one session, or in all) await an answer."""
        return sum(
            1
            for s in self._inbound.values()
            if s.is_permission and (session_id is None or s.session_id == session_id)
        )

    def cancel_requests(self, method: str, session_id: str) -> int:
        """Cancel the pending inbound ``method`` requests of ``session_id``, as a peer cancel.

        For a runtime built on permclient: e.g. ACP's ``session/cancel`` for the
        ``session/prompt`` requests of a session, including one that arrived in the
        same read and whose handler has not started (it never starts). Each is
        answered once its handler has unwound, with the ``cancelled_result`` given to
        :meth:`on_request` (else -32800). Returns how many were cancelled.
        """
        states = [
            state
            for state in self._inbound.values()
            if state.method == method and state.session_id == session_id
        ]
        for state in states:
            self._cancel_inbound(state, "peer")
        return len(states)

    def turn_running(self, session_id: str) -> bool:
        """Whether a turn request of ``session_id`` awaits its answer.

        A turn request is the dialect's: bridge ``chatSend``, ACP ``session/prompt``.
        Kept in the order messages arrive: called from a notification callback (or a
        telemetry sink), it says whether the turn's answer had come before that
        message on the wire.
        """
        turn_requests = self._dialect.turn_requests
        return any(
            slot.method in turn_requests and _session_of(slot.params) == session_id
            for slot in self._outbound.values()
        )

    def on_request(
        self, method: str, handler: RequestHandler, *, cancelled_result: Any = _NO_RESULT
    ) -> Registration:
        """Answer inbound requests of ``method`` with ``await handler(params)``.

        ``params`` is the decoded JSON. The handler's return value is the result;
        raising :class:`RequestError` answers with that error, any other exception
        answers -32603. A peer cancel cancels the handler's scope and answers at
        once: -32800, or ``cancelled_result`` as a success result when given
        (e.g. ``{"stopReason": "cancelled"}`` for a turn). Methods with no
        handler get -32601. Returns a :class:`Registration` that removes the handler.

        Raises :class:`ValueError` for ``session/request_permission`` (use
        :meth:`permission_handler`) or a method that already has a handler, and
        :class:`LocalProtocolError` if ``cancelled_result`` cannot be encoded.
        """
        if method == PERMISSION_METHOD:
            raise ValueError("permission requests are routed per session: use permission_handler()")
        if method in self._request_handlers:
            raise ValueError(f"a handler for {method!r} is already registered")
        if cancelled_result is not _NO_RESULT:
            encode_result(0, cancelled_result)  # fail now, not when a cancel arrives
        route = self._request_handlers[method] = _Route(handler, cancelled_result)

        def undo() -> None:
            if self._request_handlers.get(method) is route:
                del self._request_handlers[method]

        return Registration(undo)

    def on_notification(self, method: str, callback: NotificationCallback) -> Registration:
        """Call ``callback(notification)`` for every inbound notification of ``method``.

        Callbacks run synchronously in the reader, in arrival order: they must
        not block (hand work to a memory channel if it must wait). An exception
        in a callback is logged and does not disturb the connection. Returns a
        :class:`Registration` that removes the callback.
        """
        return self._add_callback(self._notification_callbacks, method, callback)

    def on_session_notification(
        self, session_id: str, callback: NotificationCallback
    ) -> Registration:
        """Call ``callback(notification)`` for every notification of one session.

        Notifications that arrived for ``session_id`` while it had no session
        callback and no callback for their method took them (e.g. updates sent
        before the ``session/new`` response) are held (up to 4096 across
        sessions) and delivered first, in order, so nothing sent for a new
        session is lost. Returns a :class:`Registration`.
        """
        held = [n for n in self._backlog if n.session_id == session_id]
        if held:
            kept = [n for n in self._backlog if n.session_id != session_id]
            self._backlog = deque(kept)
            self._backlog_bytes = sum(n.size for n in kept)
        registration = self._add_callback(self._session_callbacks, session_id, callback)
        for notification in held:
            self._call(
                callback,
                InboundNotification(notification.method, notification.params, session_id),
            )
        return registration

    # ------------------------------------------------------------- registrations

    @staticmethod
    def _add_callback(
        table: dict[str, list[NotificationCallback]], key: str, callback: NotificationCallback
    ) -> Registration:
        table.setdefault(key, []).append(callback)

        def undo() -> None:
            callbacks = table.get(key, [])
            if callback in callbacks:
                callbacks.remove(callback)
            if not callbacks:
                table.pop(key, None)

        return Registration(undo)

    def _call(self, callback: NotificationCallback, notification: InboundNotification) -> None:
        try:
            callback(notification)
        except BaseException as exc:
            self._host_code_failed(exc, "notification callback for %s failed", notification.method)

    def _host_code_failed(self, exc: BaseException, what: str, *args: object) -> None:
        """Contain what the host's code (a handler, a callback, a telemetry sink) raised.

        ``KeyboardInterrupt`` and ``SystemExit`` stop the client: :func:`open_client`
        raises them, once every pending request is answered, instead of an exception
        group. A ``trio.Cancelled`` is re-raised when this task is being cancelled;
        one that no cancellation caused (made by the host) is logged like any error.
        """
        stopping = _first_leaf(exc, KeyboardInterrupt | SystemExit)
        if stopping is not None:
            log.error("%s; %s stops the client", what % args, type(stopping).__name__)
            self._stop(stopping)
        elif _all_leaves(exc, trio.Cancelled) and trio.current_effective_deadline() == -math.inf:
            raise exc  # a real cancellation, alone or grouped by the host's nurseries
        else:
            log.error(what, *args, exc_info=exc)

    def _stop(self, exc: BaseException) -> None:
        if self._stopped_by is None:
            self._stopped_by = exc
        self._connection_lost(f"stopped by {type(exc).__name__}")
        self._body_scope.cancel()

    # ------------------------------------------------------------------- writing

    def _check_open(self) -> None:
        if self._closed is not None:
            raise ConnectionClosed(self._closed)

    def _queue(self, body: bytes) -> None:
        if self._write_failed:
            return  # a dead transport is the only reason an answer is dropped
        self._outbuf += self._encode_frame(body)
        if self._writer_lot:  # only when the writer is parked: unpark_all is not free
            self._writer_lot.unpark_all()

    async def _writer_loop(self) -> None:
        with self._writer_scope:
            await self._write_until_failed()

    async def _write_until_failed(self) -> None:
        while True:
            if not self._outbuf:
                if self._written_lot:
                    self._written_lot.unpark_all()
                await self._writer_lot.park()
                continue
            data, self._outbuf = self._outbuf, bytearray()
            self._writing = len(data)
            try:
                if len(data) <= _WRITE_CHUNK:
                    await self._stream.send_all(data)
                else:
                    view = memoryview(data)
                    for start in range(0, len(data), _WRITE_CHUNK):
                        await self._stream.send_all(view[start : start + _WRITE_CHUNK])
                        self._progress(min(_WRITE_CHUNK, len(data) - start))
                    del view
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                self._lose_writer()
                self._connection_lost(f"write failed: {exc or type(exc).__name__}")
                return
            except (KeyboardInterrupt, SystemExit) as exc:
                self._lose_writer()  # perhaps half way through a frame
                self._stop(exc)
                return
            finally:
                self._progress(self._writing)  # all of it, or the connection is lost
                del data  # a burst's answers can be megabytes: not held while parked

    def _lose_writer(self) -> None:
        self._write_failed = True
        self._outbuf.clear()
        self._written_lot.unpark_all()

    def _progress(self, sent: int) -> None:
        self._writing -= sent
        self._written += sent
        if self._written_lot:
            self._written_lot.unpark_all()

    def _flushed(self) -> bool:
        return self._write_failed or not (self._outbuf or self._writing)

    async def _wait_flushed(self) -> None:
        while not self._flushed():
            await self._written_lot.park()

    async def _flush(self) -> None:
        """Wait until everything queued is written, within the bounds of _FLUSH_STALL_S."""
        queued = len(self._outbuf) + self._writing
        deadline = trio.current_time() + _FLUSH_STALL_S + queued / _FLUSH_MIN_RATE
        while not self._flushed():
            written = self._written
            with trio.move_on_at(min(deadline, trio.current_time() + _FLUSH_STALL_S)):
                while self._written == written and not self._flushed():
                    await self._written_lot.park()
            if self._written == written and not self._flushed():
                log.warning(
                    "gave up writing %d queued bytes: the peer took none for %s s",
                    len(self._outbuf) + self._writing,
                    _FLUSH_STALL_S,
                )
                return
            if trio.current_time() >= deadline and not self._flushed():
                log.warning(
                    "gave up writing %d queued bytes: the peer reads under %d bytes/s",
                    len(self._outbuf) + self._writing,
                    _FLUSH_MIN_RATE,
                )
                return

    # ------------------------------------------------------------------- reading

    async def _reader_loop(self) -> None:
        framer = self._framer
        try:
            while self._closed is None:
                if len(self._outbuf) > _OUTBUF_HIGH_WATER:
                    await self._wait_flushed()
                data = await self._stream.receive_some(_RECEIVE_SIZE)
                if not data:
                    if framer.buffered:
                        log.warning("peer closed mid-frame (%d bytes dropped)", framer.buffered)
                    self._connection_lost("the peer closed the connection")
                    return
                framer.receive_data(data)
                while True:
                    try:
                        frame = framer.next_frame()
                    except RemoteProtocolError as exc:
                        if exc.recoverable:
                            log.warning("skipped a frame: %s", exc)
                            continue
                        self._connection_lost(f"protocol error: {exc}")
                        return
                    if frame is None:
                        break
                    self._dispatch(frame)
                self._start_handlers()
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            self._connection_lost(f"read failed: {exc or type(exc).__name__}")
        except (KeyboardInterrupt, SystemExit) as exc:
            self._stop(exc)  # e.g. trio delivering Ctrl-C here
        except Exception as exc:
            # Never blow up the caller's nursery: a failed reader is a closed connection.
            log.exception("reader failed")
            self._connection_lost(f"internal error in the reader: {exc!r}")

    def _dispatch(self, frame: bytes) -> None:
        message: Message | None = None
        try:
            message = parse_message(frame)
            if isinstance(message, Request):
                self._on_request(message)
            elif isinstance(message, Notification):
                self._on_notification(message)
            elif isinstance(message, Response):
                self._settle(message.id, message.result, None)
            elif isinstance(message, ErrorResponse):
                self._on_error_response(message)
            else:
                self._on_invalid(message)
        except Exception:
            # A bug of ours must not take the connection down with it.
            log.exception("internal error while dispatching a message")
            if isinstance(message, Request) and message.id not in self._inbound:
                self._queue(encode_error(message.id, ErrorCode.INTERNAL_ERROR, "internal error"))

    def _on_invalid(self, message: InvalidMessage) -> None:
        log.warning("invalid message from peer: %s", message.reason)
        if not message.reply:
            return
        if message.method is not None and self._telemetry is not None:
            self._emit(
                "server_request.start",
                request_id=message.id,
                session_id=None,
                method=message.method,
            )
        if message.method == PERMISSION_METHOD and message.id is not None:
            # Still a permission request: it fails closed as a malformed one does.
            self._emit(
                "approval.malformed", request_id=message.id, session_id=None, reason=message.reason
            )
            self._queue(encode_result(message.id, _PERMISSION_CANCELLED))
            return
        self._queue(encode_error(message.id, message.code, message.reason))

    def _settle(
        self, request_id: RequestId, result: msgspec.Raw | None, error: Exception | None
    ) -> None:
        slot = self._outbound.pop(request_id, None)
        if slot is None:
            if isinstance(request_id, int) and 0 <= request_id < self._next_id:
                log.debug("dropped a late response for settled request %r", request_id)
            else:
                log.warning(
                    "dropped a response for request %s, which was never sent", _brief(request_id)
                )
            return
        slot.result = result
        slot.error = error
        slot.done.set()

    def _on_error_response(self, message: ErrorResponse) -> None:
        error = message.error
        if message.id is None:
            log.warning(
                "peer reported an error about no request: [%s] %s",
                error.code,
                _brief(error.message),
            )
            return
        self._settle(message.id, None, RequestError(error.code, error.message, error.data))

    def _on_notification(self, message: Notification) -> None:
        method = message.method
        if method in _CANCEL_METHODS:
            self._on_peer_cancel(message.params)
            return
        session_id = self._session_id_of(message.params)
        # One object per notification: the tracker and the callbacks share its decode.
        notification = InboundNotification(method, bytes(message.params), session_id)
        if method == "session/update":
            self.tool_calls.apply(notification)
        callbacks = self._notification_callbacks.get(method)
        session_callbacks = self._session_callbacks.get(session_id) if session_id else None
        if not callbacks and not session_callbacks:
            if session_id is not None:
                # Nobody takes it: keep it for the session's callback to come, as
                # updates may precede session/new's answer.
                self._hold(_Held(method, session_id, notification.raw))
            return
        for callback in callbacks or ():
            self._call(callback, notification)
        if session_id is None:
            return
        # Looked up again: a method callback may have just registered this session.
        for callback in list(self._session_callbacks.get(session_id, ())):
            self._call(callback, notification)

    def _hold(self, held: _Held) -> None:
        """Keep a notification for a session nobody listens to yet, within bounds."""
        self._backlog.append(held)
        self._backlog_bytes += held.size
        while len(self._backlog) > _BACKLOG_LIMIT or self._backlog_bytes > _BACKLOG_BYTES:
            dropped = self._backlog.popleft()
            self._backlog_bytes -= dropped.size
            log.warning(
                "dropped a held %s for session %s: more than %d notifications or %d bytes "
                "held for sessions with no callback",
                _brief(dropped.method),
                _brief(dropped.session_id),
                _BACKLOG_LIMIT,
                _BACKLOG_BYTES,
            )

    @staticmethod
    def _session_id_of(params: msgspec.Raw) -> str | None:
        if not params:
            return None
        try:
            value = _session_scoped_decoder.decode(params).session_id
        except DECODE_ERRORS:
            return None
        return value if isinstance(value, str) and value else None

    def _on_peer_cancel(self, params: msgspec.Raw) -> None:
        try:
            target = cancel_params_decoder.decode(params).target
        except DECODE_ERRORS as exc:
            log.warning("ignored a malformed cancel notification: %s", exc)
            return
        state = self._inbound.get(target) if target is not None else None
        if state is None:
            log.debug("cancel for request %r, which is not pending: nothing to do", target)
            return
        self._cancel_inbound(state, "peer")

    # ---------------------------------------------------------- inbound requests

    def _on_request(self, message: Request) -> None:
        if self._telemetry is not None:
            self._emit(
                "server_request.start",
                request_id=message.id,
                session_id=self._session_id_of(message.params),
                method=message.method,
            )
        if message.id in self._inbound:
            log.warning(
                "peer reused id %s of a pending request; refusing the new one", _brief(message.id)
            )
            self._queue(
                encode_error(
                    message.id, ErrorCode.INVALID_REQUEST, "id of a pending request reused"
                )
            )
            return
        size = json_cost(bytes(message.params)) + str_cost(message.method)
        if isinstance(message.id, str):
            size += str_cost(message.id)
        if (
            self._closed is not None
            or len(self._inbound) >= self._max_pending
            or self._pending_bytes + size > _PENDING_BYTES
        ):
            # No handler starts once the connection is closing, nor past the bounds
            # on pending requests: answer at once, failing closed.
            why = self._closed or (
                f"more than {self._max_pending} requests pending"
                if len(self._inbound) >= self._max_pending
                else f"more than {_PENDING_BYTES} bytes of (decoded) requests pending"
            )
            log.warning(
                "refused request %s (%s): %s", _brief(message.id), _brief(message.method), why
            )
            if message.method == PERMISSION_METHOD:
                self._queue(encode_result(message.id, _PERMISSION_CANCELLED))
                self._emit(
                    "approval.refused",
                    request_id=message.id,
                    session_id=self._session_id_of(message.params),
                    reason=why,
                )
            else:
                self._queue(encode_error(message.id, ErrorCode.INTERNAL_ERROR, why))
            return
        if message.method == PERMISSION_METHOD:
            self._on_permission_request(message, size)
            return
        route = self._request_handlers.get(message.method)
        if route is None:
            self._queue(
                encode_error(
                    message.id,
                    ErrorCode.METHOD_NOT_FOUND,
                    f"method not found: {message.method[:_BRIEF]}",
                )
            )
            return
        try:
            params = _any_decoder.decode(message.params) if message.params else None
        except DECODE_ERRORS as exc:
            self._queue(
                encode_error(message.id, ErrorCode.INVALID_PARAMS, f"invalid params: {exc}")
            )
            return
        state = _Inbound(message.id, _session_of(params), self._now())
        state.method = message.method
        state.cancelled_result = route.cancelled_result
        self._pend(state, size)
        self._nursery.start_soon(self._run_request, state, route.handler, params)

    def _now(self, entry: _HandlerEntry | None = None) -> float:
        """Arrival time, on trio's clock, when telemetry or a timeout will need it."""
        needed = self._telemetry is not None or (entry is not None and entry.timeout is not None)
        return trio.current_time() if needed else 0.0

    def _emit(self, event: str, **fields: Any) -> None:
        if self._telemetry is not None:
            try:
                self._telemetry.emit(event, **fields)
            except BaseException as exc:
                # Telemetry proves what happened; it never gets to change an answer.
                self._host_code_failed(exc, "telemetry sink failed on %s", event)

    def _pend(self, state: _Inbound, size: int) -> None:
        state.size = size
        self._pending_bytes += size
        self._inbound[state.id] = state

    def _on_permission_request(self, message: Request, size: int) -> None:
        request_id = message.id
        try:
            request = permission_request_decoder.decode(message.params)
        except DECODE_ERRORS as exc:
            log.warning(
                "malformed permission request %s answered cancelled: %s", _brief(request_id), exc
            )
            self._emit(
                "approval.malformed",
                request_id=request_id,
                session_id=self._session_id_of(message.params),
                reason=str(exc),
            )
            self._queue(encode_result(request_id, _PERMISSION_CANCELLED))
            return
        session_id = request.session_id
        stack = self._permission_handlers.get(session_id)
        if not stack:
            log.warning(
                "no handler for session %s: permission %s answered cancelled",
                _brief(session_id),
                _brief(request_id),
            )
            self._emit("approval.unrouted", request_id=request_id, session_id=session_id)
            self._queue(encode_result(request_id, _PERMISSION_CANCELLED))
            return
        entry = stack[-1]
        # Equal strings and options, shared rather than held once per pending request.
        # (Only when equal, as routing makes them: anything else must stay visible.)
        if session_id == entry.session_id:
            request.session_id = session_id = entry.session_id
        state = _Inbound(request_id, session_id, self._now(entry))
        shared = self._share_options(request.options)
        if shared is not None:
            request.options = shared.options
        state.entry = entry
        state.tool_call_id = request.tool_call.tool_call_id
        # The answer is checked against this tuple of immutable options: the handler
        # may rebind request.options, it cannot change what was offered.
        state._offered = request.options if shared is None else shared
        self._pend(state, size)
        entry.pending[state] = None
        if entry.timeout is not None:
            self._watch_deadline(state.started + entry.timeout)
        self.tool_calls.begin_approval(session_id, request.tool_call)
        if self._telemetry is not None:
            self._emit(
                "approval.requested",
                request_id=request_id,
                session_id=session_id,
                tool_call_id=state.tool_call_id,
                options=[option.option_id for option in request.options],
            )
        # Started after the rest of this read is dispatched, in one task for all.
        self._starting.append((state, request, entry.handler))

    def _watch_deadline(self, deadline: float) -> None:
        """See that the timeout task wakes by ``deadline``."""
        if self._timeout_wake is None:
            self._timeout_wake = trio.CancelScope(deadline=deadline)
            self._nursery.start_soon(self._expire_timeouts, name="permclient: timeouts")
        elif deadline < self._timeout_wake.deadline:
            self._timeout_wake.deadline = deadline

    async def _expire_timeouts(self) -> None:
        """Answer ``cancelled`` every permission request pending past its registration's
        timeout, at its deadline, whatever its handler is doing (as a peer cancel does)."""
        while self._timeout_wake is not None:
            with self._timeout_wake:
                await trio.sleep_forever()
            now = trio.current_time()
            earliest = math.inf
            for stack in list(self._permission_handlers.values()):
                for entry in list(stack):
                    timeout = entry.timeout
                    # A registration's requests arrive, so expire, in order.
                    while timeout is not None and entry.pending:
                        state = next(iter(entry.pending))
                        if state.started + timeout > now:
                            earliest = min(earliest, state.started + timeout)
                            break
                        self._cancel_inbound(state, "timeout")
            self._timeout_wake = (
                None if earliest == math.inf else trio.CancelScope(deadline=earliest)
            )

    def _share_options(self, options: tuple[PermissionOption, ...]) -> _SharedOptions | None:
        try:
            shared = self._options_in_use.get(options)
        except TypeError:  # an option carries `_meta` (a dict): not hashable, not shared
            return None
        if shared is None:
            shared = self._options_in_use[options] = _SharedOptions(options)
        shared.uses += 1
        return shared

    def _start_handlers(self) -> None:
        if self._starting:
            batch, self._starting = self._starting, []
            self._nursery.start_soon(self._run_permissions, batch, 0, name=_PERMISSION_TASK)

    async def _run_permissions(self, batch: _Batch, first: int) -> None:
        """Run the handlers of ``batch[first:]`` in order, in this one task.

        A handler that answers without blocking needs no task and no cancel scope
        of its own (see _lazy_scope). The first that blocks keeps this task, which
        then belongs to its request alone; the rest of the batch goes on in a new one.
        (Few locals on purpose: this frame lives as long as the request is pending.)
        """
        relay = self._start_permissions(batch, first)
        if relay is None:
            return
        del batch  # held from here on by what needs it only
        answer: object = _UNANSWERED
        try:
            answer = await relay
        except BaseException as exc:
            self._finish_permission(relay.owner, _UNANSWERED)
            self._host_code_failed(
                exc,
                "permission handler for session %r failed; answered cancelled",
                cast(_Inbound, relay.owner).session_id,
            )
        finally:
            # Runs on every path, including our own cancellation: exactly one answer.
            self._finish_permission(relay.owner, answer)

    def _start_permissions(self, batch: _Batch, first: int) -> Relay[Any] | None:
        """Start the handlers of ``batch[first:]``; the rest of the first that blocks."""
        for index in range(first, len(batch)):
            state, request, handler = batch[index]
            if state.answered:
                continue  # withdrawn before its handler ran: no card for a settled question
            try:
                finished, outcome = start(state, handler, request)
            except BaseException as exc:
                self._answer_permission(state, _CANCELLED)
                self._host_code_failed(
                    exc,
                    "permission handler for session %r failed; answered cancelled",
                    state.session_id,
                )
                continue
            if finished:
                self._answer_permission(state, _checked_decision(outcome, state.offered))
                continue
            if index + 1 < len(batch):
                self._nursery.start_soon(
                    self._run_permissions, batch, index + 1, name=_PERMISSION_TASK
                )
            return cast(Relay[Any], outcome)
        return None

    def _finish_permission(self, owner: ScopeOwner, answer: object) -> None:
        state = cast(_Inbound, owner)
        if state.answered:
            return
        if state.cancel_called or answer is _UNANSWERED:
            self._answer_permission(state, _CANCELLED)
        else:
            self._answer_permission(state, _checked_decision(answer, state.offered))

    def _answer_permission(self, state: _Inbound, decision: Decision) -> None:
        if state.answered:
            return
        try:
            body = encode_result(state.id, PermissionResponse(decision))
        except LocalProtocolError as exc:
            log.error("answer to %r is not encodable (%s); answered cancelled", state.id, exc)
            decision = _CANCELLED
            body = encode_result(state.id, _PERMISSION_CANCELLED)
        self._retire(state)
        self._queue(body)
        if self._telemetry is not None:
            selected = isinstance(decision, Selected)
            self._emit(
                "approval.responded",
                request_id=state.id,
                session_id=state.session_id,
                outcome="selected" if selected else "cancelled",
                option_id=decision.option_id if isinstance(decision, Selected) else None,
                latency_ms=round((trio.current_time() - state.started) * 1000, 3),
            )

    def _retire(self, state: _Inbound) -> bool:
        """Mark ``state`` answered; False if it already was (exactly one response)."""
        if state.answered:
            return False
        state.answered = True
        self._inbound.pop(state.id, None)
        self._pending_bytes -= state.size
        shared = state.shared_options
        if shared is not None:
            shared.uses -= 1
            if not shared.uses:
                del self._options_in_use[shared.options]
        if state.entry is not None:
            state.entry.pending.pop(state, None)
            assert state.session_id is not None and state.tool_call_id is not None
            self.tool_calls.end_approval(state.session_id, state.tool_call_id)
        return True

    def _cancel_inbound(self, state: _Inbound, by: str) -> None:
        """Cancel a pending inbound request's scope and see that it is answered.

        A permission request is answered ``cancelled`` now, without waiting. Another
        request cancelled by the peer is answered when its handler has unwound, so
        whatever the handler withdraws on its way out (its own pending requests) is
        on the wire before the answer; on turn cancel or teardown it is answered now.
        """
        if state.answered:
            return
        state.cancel()
        if by != "peer" or state.is_permission:
            self._withdraw(state, by)

    def _withdraw(self, state: _Inbound, by: str) -> None:
        """Answer a pending inbound request as cancelled now; its handler is left alone."""
        if not self._retire(state):
            return
        if not state.is_permission:
            self._queue(self._cancelled_answer(state))
            return
        self._queue(encode_result(state.id, _PERMISSION_CANCELLED))
        if self._telemetry is not None:
            self._emit(
                "approval.cancelled",
                request_id=state.id,
                session_id=state.session_id,
                by=by,
                latency_ms=round((trio.current_time() - state.started) * 1000, 3),
            )

    @staticmethod
    def _cancelled_answer(state: _Inbound) -> bytes:
        if state.cancelled_result is _NO_RESULT:
            return encode_error(state.id, ErrorCode.REQUEST_CANCELLED, "request cancelled")
        try:  # checked at registration, but a dict may have changed since
            return encode_result(state.id, state.cancelled_result)
        except LocalProtocolError as exc:
            return _unencodable_answer(state.id, exc)

    async def _run_request(self, state: _Inbound, handler: RequestHandler, params: Any) -> None:
        try:
            if state.answered or state.cancel_called:
                return  # cancelled before this task started: the finally answers
            finished, result = start(state, handler, params)
            if not finished:
                result = await result
            if state.cancel_called:
                return  # the handler swallowed its cancellation: still a cancelled answer
            try:
                body = encode_result(state.id, result)
            except LocalProtocolError as exc:
                body = _unencodable_answer(state.id, exc)
            if self._retire(state):
                self._queue(body)
        except RequestError as exc:
            # Encoded before the request is retired: whatever it holds, one answer.
            body = _encode_request_error(state.id, exc)
            if not state.cancel_called and self._retire(state):
                self._queue(body)
        except BaseException as exc:
            # (A trio.Cancelled is answered as one, by the finally.)
            if (
                not _all_leaves(exc, trio.Cancelled)
                and not state.cancel_called
                and self._retire(state)
            ):
                self._queue(encode_error(state.id, ErrorCode.INTERNAL_ERROR, "internal error"))
            self._host_code_failed(exc, "request handler for %r failed", state.method)
        finally:
            # Every path, our own cancellation included: exactly one answer.
            if self._retire(state):
                self._queue(self._cancelled_answer(state))

    # --------------------------------------------------------- outbound cancels

    def _abandon(self, request_id: RequestId, slot: _Outbound) -> None:
        """Our caller gave up on a request: tell the peer, and end a cancelled turn."""
        if self._closed is not None:
            return
        dialect = self._dialect
        is_turn = slot.method in dialect.turn_requests
        session_id = _session_of(slot.params) if is_turn else None
        params: dict[str, RequestId]
        if session_id is not None and dialect.turn_cancel_notification is not None:
            method, params = dialect.turn_cancel_notification, {"sessionId": session_id}
        else:
            method, params = dialect.cancel_method, {dialect.cancel_key: request_id}
        try:
            self._queue(encode_notification(method, params))
        except LocalProtocolError:  # pragma: no cover - ids and session ids are encodable
            log.exception("could not encode a cancel notification")
        if session_id is not None:
            self.cancel_permissions(session_id)

    # ------------------------------------------------------------------ teardown

    def _connection_lost(self, reason: str) -> None:
        """Fail every pending call, answer every pending request, cancel every handler.

        Idempotent. The handlers are cancelled once the answers are written (or the
        writing gave up): thousands of handlers unwinding must not keep the writer
        from its answers, and unwinding ones have nothing left to say.
        """
        if self._closed is not None:
            return
        self._closed = reason
        self._closed_event.set()
        self._starting.clear()  # every one of them is answered below
        log.info("connection closed: %s", reason)
        outbound, self._outbound = self._outbound, {}
        for slot in outbound.values():
            slot.error = ConnectionClosed(reason)
            slot.done.set()
        withdrawn = list(self._inbound.values())
        for state in withdrawn:
            self._withdraw(state, "teardown")
        if withdrawn:
            self._nursery.start_soon(
                self._cancel_when_flushed, withdrawn, name="permclient: teardown"
            )

    async def _cancel_when_flushed(self, states: list[_Inbound]) -> None:
        try:
            await self._flush()
        finally:
            for state in states:
                state.cancel()


def _checked_decision(answer: object, offered: tuple[PermissionOption, ...]) -> Decision:
    """Accept ``Selected`` of an offered option or ``Cancelled``; anything else is ``Cancelled``.

    Exact types: ``isinstance`` would run the answer's own ``__class__`` (and a
    subclass its own ``option_id``), and nothing the handler returned may raise here.
    """
    if type(answer) is Selected:
        chosen = answer.option_id
        # An exact str: a subclass could compare equal to anything.
        if type(chosen) is str:
            for option in offered:
                if option.option_id == chosen:
                    return answer
        log.warning(
            "handler chose option %r, which was not offered (%s); answered cancelled",
            chosen if type(chosen) is str else type(chosen).__qualname__,
            ", ".join(option.option_id for option in offered),
        )
        return _CANCELLED
    if type(answer) is not Cancelled:
        log.warning(
            "handler returned a %s, not a Selected or Cancelled; answered cancelled",
            type(answer).__qualname__,  # not the object: its repr is the handler's code too
        )
        return _CANCELLED
    return _CANCELLED


def _encode_request_error(request_id: RequestId | None, exc: RequestError) -> bytes:
    """The error response a handler's RequestError asks for: without its ``data`` when
    that is not encodable, the fixed internal error when nothing of it is."""
    try:
        return encode_error(request_id, exc.code, exc.message, exc.data)
    except LocalProtocolError:
        pass
    try:
        return encode_error(request_id, exc.code, exc.message)
    except LocalProtocolError as error:
        return _unencodable_answer(request_id, error)


def _unencodable_answer(request_id: RequestId | None, exc: LocalProtocolError) -> bytes:
    """The answer to a request whose own answer could not be encoded (e.g. a str with
    a lone surrogate): a fixed error, so that it still gets exactly one."""
    log.error("the answer to request %s is not encodable: %s", _brief(request_id), exc)
    return encode_error(
        request_id, ErrorCode.INTERNAL_ERROR, "internal error: the response could not be encoded"
    )


@asynccontextmanager
async def open_client(
    stream: trio.abc.Stream,
    *,
    dialect: DialectName = "bridge",
    telemetry: Telemetry | None = None,
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    max_pending: int = DEFAULT_MAX_PENDING,
) -> AsyncIterator[Client]:
    """Open a :class:`Client` over any ``trio.abc.Stream``.

    ``dialect`` is ``"bridge"`` (Content-Length framing, ``$/cancelRequest``) or
    ``"acp"`` (newline-delimited, ``$/cancel_request``). Leaving the context
    answers every pending permission request ``cancelled`` (other inbound
    requests get -32800, or their ``cancelled_result``), fails pending requests
    with :class:`ConnectionClosed`, writes the queued answers (shielded, also when
    an outer scope cancelled the client, for as long as the peer takes them: it
    gives up after 2 s without progress, or once the peer reads under 64 KiB/s),
    then cancels the handlers and closes the stream. A ``SystemExit`` or
    ``KeyboardInterrupt`` raised by a handler, callback or telemetry sink closes the
    client in the same way, cancels the body, and is raised from here as itself.

    ``max_frame_size`` caps one inbound frame (larger ones are skipped);
    ``max_pending`` caps inbound requests awaiting an answer: past it a new
    permission request is answered ``cancelled`` at once, any other -32603.

    Raises :class:`ValueError` for an unknown dialect.
    """
    spec = _DIALECTS.get(dialect)
    if spec is None:
        raise ValueError(f"unknown dialect {dialect!r}: expected 'bridge' or 'acp'")
    # The body runs inside our nursery, but its own exception is re-raised
    # outside it, so callers never have to unwrap an ExceptionGroup.
    body_error: BaseException | None = None
    async with trio.open_nursery() as nursery:
        client = Client(
            stream,
            spec,
            nursery,
            telemetry=telemetry,
            max_frame_size=max_frame_size,
            max_pending=max_pending,
        )
        nursery.start_soon(client._reader_loop)
        nursery.start_soon(client._writer_loop)
        try:
            with client._body_scope:
                yield client
        except BaseException as exc:
            body_error = exc
        finally:
            client._connection_lost("the client was closed")
            with trio.CancelScope(shield=True):
                await client._flush()
            client._writer_scope.cancel()
            nursery.cancel_scope.cancel()
            with trio.CancelScope(shield=True):
                await stream.aclose()
    if client._stopped_by is not None:
        raise client._stopped_by
    if body_error is not None:
        raise body_error
