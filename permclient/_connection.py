"""Every rule of a permclient connection, as a plain object: bytes and calls in,
bytes and events out (sans-I/O: no trio, no sockets, no clocks of its own).

:class:`Connection` owns outbound id allocation and response matching, the
pending inbound requests and their exactly-once retire point, routing each
permission request to its session's registration stack, fail-closed decisions,
both cancel spellings, the turn-cancel rules, and the notifications held for
sessions nobody listens to yet. The trio driver (``_client.py``) feeds it what it
reads, writes what :meth:`Connection.data_to_send` returns, and acts on the
events of :meth:`Connection.events`: start a handler, wake a caller, close.

Rule and deferred handlers are plain functions: the connection calls them itself,
as a request arrives. Async handlers and other inbound request handlers need a
task: the connection hands them to the driver as events, with the record the
driver answers through.
"""

from __future__ import annotations

import logging
import math
import numbers
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final, Literal, TypeAlias, cast

import msgspec

from ._errors import ConnectionClosed, LocalProtocolError, RemoteProtocolError, RequestError
from ._handlers import (
    AsyncHandler,
    Deferred,
    PartlyKnownQuestion,
    PermissionHandler,
    Question,
    Rule,
    WithdrawnBy,
    checked_decision,
)
from ._messages import (
    DECODE_ERRORS,
    VALUE_COST,
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
    has_unicode_escape,
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
    own_raw_json,
    partly_known_request,
    permission_request_decoder,
)
from .framing import DEFAULT_MAX_FRAME_SIZE, ContentLengthFramer, Framer, NewlineFramer

log = logging.getLogger("permclient")

DialectName = Literal["bridge", "acp"]
RequestHandler: TypeAlias = Callable[[Any], Any]  # async (params) -> result
NotificationCallback: TypeAlias = Callable[[InboundNotification], None]

PERMISSION_METHOD: Final = "session/request_permission"
_CANCEL_METHODS: Final = frozenset({"$/cancelRequest", "$/cancel_request"})
_BACKLOG_LIMIT: Final = 4096
_BACKLOG_BYTES: Final = 16 * 1024 * 1024
_HELD_OVERHEAD: Final = 200  # a held notification's own objects
# Frames past this size are costed (and refused past the budget) before they are
# decoded; smaller ones only once they are to be held pending.
_EAGER_COST_FRAME: Final = 64 * 1024
# Pending questions past which equal option sets are held once: sharing saves
# about half a kilobyte a question, and costs a hash of the set, which only a
# large backlog (an editor away from its keyboard) pays back.
SHARE_OPTIONS_FROM: Final = 256
DEFAULT_MAX_PENDING_BYTES: Final = 128 * 1024 * 1024
"""Pending inbound requests: at most what their frames take once decoded (see
json_cost), whatever the handler then keeps aside."""
_BRIEF: Final = 80
# What a telemetry record keeps of a peer's string, and of a list of them.
_TELEMETRY_CHARS: Final = 256
_TELEMETRY_ITEMS: Final = 64
DEFAULT_MAX_PENDING: Final = 16384
_CANCELLED: Final = Cancelled()
NO_RESULT: Final = object()
"""``cancelled_result`` when a cancelled request gets the -32800 error."""


@dataclass(frozen=True, slots=True)
class Dialect:
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


DIALECTS: Final[dict[str, Dialect]] = {
    "bridge": Dialect(
        "bridge",
        ContentLengthFramer,
        "$/cancelRequest",
        "id",
        frozenset({"chatSend"}),
        frozenset(),
        None,
    ),
    "acp": Dialect(
        "acp",
        NewlineFramer,
        "$/cancel_request",
        "requestId",
        frozenset({"session/prompt"}),
        frozenset({"session/cancel"}),
        "session/cancel",
    ),
}


# ----------------------------------------------------------------------- events


class ResponseReceived:
    """The response to our request ``request_id``: a raw ``result`` or an ``error``."""

    __slots__ = ("error", "request_id", "result")

    def __init__(
        self, request_id: RequestId, result: msgspec.Raw | None, error: Exception | None
    ) -> None:
        self.request_id = request_id
        self.result = result
        self.error = error


class StartPermissionHandlers:
    """Run these async handlers, in order, each in a cancel scope of its own while it runs."""

    __slots__ = ("batch",)

    def __init__(self, batch: list[tuple[Question, AsyncHandler]]) -> None:
        self.batch = batch


class StartRequestHandler:
    """Run ``handler(params)`` for an inbound request and answer through ``inbound``."""

    __slots__ = ("handler", "inbound", "params")

    def __init__(self, inbound: InboundRequest, handler: RequestHandler, params: Any) -> None:
        self.inbound = inbound
        self.handler = handler
        self.params = params


class Closed:
    """The connection closed (every pending request is answered, every call failed)."""

    __slots__ = ("reason",)

    def __init__(self, reason: str) -> None:
        self.reason = reason


class Stopped:
    """Host code raised ``KeyboardInterrupt`` or ``SystemExit``: the client must stop."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


Event: TypeAlias = (
    ResponseReceived | StartPermissionHandlers | StartRequestHandler | Closed | Stopped
)


# ---------------------------------------------------------------------- records


class PermissionRegistration:
    """One ``permission_handler`` registration in its session's stack."""

    __slots__ = ("handler", "pending", "removed", "session_id", "timeout")

    def __init__(self, session_id: str, handler: PermissionHandler, timeout: float | None) -> None:
        self.session_id = session_id
        self.handler = handler
        self.removed = False
        self.timeout = timeout  # seconds from a request's arrival, or None
        self.pending: dict[Question, None] = {}  # a set, in less memory; in arrival order


class InboundRequest:
    """An inbound request other than a permission request, pending until answered."""

    __slots__ = (
        "cancel_called",
        "cancelled_result",
        "id",
        "method",
        "on_cancel",
        "session_id",
        "size",
    )

    def __init__(
        self,
        request_id: RequestId | None,
        method: str,
        session_id: str | None,
        cancelled_result: Any,
    ) -> None:
        self.id = request_id
        self.method = method
        self.session_id = session_id
        self.cancelled_result = cancelled_result
        self.cancel_called = False
        self.on_cancel: Callable[[], object] | None = None  # the driver's scope.cancel
        self.size = 0


class _SharedOptions:
    __slots__ = ("options", "uses")

    def __init__(self, options: tuple[PermissionOption, ...]) -> None:
        self.options = options
        self.uses = 0


class _SessionScoped(msgspec.Struct, rename="camel"):
    session_id: Any = None


_session_scoped_decoder: Final = msgspec.json.Decoder(_SessionScoped)
_NO_PARAMS: Final = msgspec.Raw()
_any_decoder: Final = msgspec.json.Decoder()


def session_of(params: Any) -> str | None:
    """The ``sessionId`` of outbound params given as a dict or a Struct."""
    value = (
        params.get("sessionId") if isinstance(params, dict) else getattr(params, "session_id", None)
    )
    return value if isinstance(value, str) else None


class _WholePermissionRequest(msgspec.Struct, gc=False):
    """A ``session/request_permission`` request decoded with its params in one pass
    (the method and the version checked by the decoder, which makes no str of them)."""

    id: RequestId | None
    method: Literal["session/request_permission"]
    params: PermissionRequest
    jsonrpc: Literal["2.0"]
    result: msgspec.Raw = msgspec.Raw()
    error: msgspec.Raw = msgspec.Raw()


_whole_permission_request_decoder: Final = msgspec.json.Decoder(_WholePermissionRequest)
_PERMISSION_METHOD_JSON: Final = b'"' + PERMISSION_METHOD.encode() + b'"'
# Where the method is looked for: peers put it before the params, and a search
# bounded there costs a third of one through the whole frame.
METHOD_WITHIN: Final = 256


def parse_permission_request(frame: bytes) -> _WholePermissionRequest | None:
    """The frame as a well-formed permission request, decoded in one pass; ``None``
    for anything else (which :func:`parse_message` classifies, and says what is
    wrong with).

    Most frames a client reads are permission requests: decoding the envelope,
    then its params, would read each twice. A large frame is left to the general
    path, which checks the pending bytes it would cost before decoding its params,
    and so is one that names its method past its first METHOD_WITHIN bytes.
    """
    if (
        len(frame) > _EAGER_COST_FRAME
        or frame.find(_PERMISSION_METHOD_JSON, 0, METHOD_WITHIN) < 0
        or not frame.isascii()  # (a non-ASCII frame needs parse_message's UTF-8 checks)
    ):
        return None
    try:
        whole = _whole_permission_request_decoder.decode(frame)
    except DECODE_ERRORS:
        return None
    if whole.result or whole.error:
        return None
    return whole


class _Params(msgspec.Struct):
    params: msgspec.Raw = msgspec.Raw()


_params_decoder: Final = msgspec.json.Decoder(_Params)


def _params_of(frame: bytes) -> msgspec.Raw:
    """A copy of the params of a request already decoded whole from ``frame``."""
    return _params_decoder.decode(frame).params.copy()


def _request_of(whole: _WholePermissionRequest) -> Request:
    return Request(whole.id, PERMISSION_METHOD, _NO_PARAMS, whole.params)


_ANSWER_HEAD: Final = b'{"jsonrpc":"2.0","id":'
_SELECTED_HEAD: Final = b',"result":{"outcome":{"outcome":"selected","optionId":'
_SELECTED_TAIL: Final = b"}}}"
_CANCELLED_TAIL: Final = b',"result":{"outcome":{"outcome":"cancelled"}}}'
_SELECTED_FOR_INT_ID: Final = _ANSWER_HEAD + b"%d" + _SELECTED_HEAD + b"%b" + _SELECTED_TAIL
# The encoded ends of a connection's answers are kept by option id (agents offer
# the same few ids again and again): the first this many ids, of at most this many
# characters (peers choose the ids).
SELECTED_ENDS_HELD: Final = 64
SELECTED_END_ID_MAX: Final = 64
# Queued frames are joined this many at a time, so a backlog (a peer that does not
# read) holds little more than its bytes; fewer are joined only when taken.
FRAMES_PER_CHUNK: Final = 256
_json: Final = msgspec.json.Encoder()


def _permission_answer(request_id: RequestId | None, decision: Decision) -> bytes:
    """The response to a permission request.

    Put together from its parts when the decision carries no ``_meta`` (all but a
    handler's own): byte for byte what msgspec makes of it (a test holds them
    equal), in a third of the time.
    """
    if decision.meta is None:
        try:
            if type(decision) is Selected:
                if type(request_id) is int:  # (not a bool: %d would write 1 for true)
                    return _SELECTED_FOR_INT_ID % (request_id, _json.encode(decision.option_id))
                return (
                    _ANSWER_HEAD
                    + _json.encode(request_id)
                    + _SELECTED_HEAD
                    + _json.encode(decision.option_id)
                    + _SELECTED_TAIL
                )
            if type(decision) is Cancelled:
                return _ANSWER_HEAD + _json.encode(request_id) + _CANCELLED_TAIL
        except (TypeError, ValueError) as exc:  # e.g. a str with a lone surrogate
            raise LocalProtocolError(f"cannot encode message as JSON: {exc}") from exc
    return encode_result(request_id, PermissionResponse(decision))


def _session_of_request(message: Request) -> str | None:
    if message.decoded is not None:
        return cast(PermissionRequest, message.decoded).session_id
    return _session_id_of(message.params)


def _session_id_of(params: msgspec.Raw) -> str | None:
    if not params:
        return None
    try:
        value = _session_scoped_decoder.decode(params).session_id
    except DECODE_ERRORS:
        return None
    return value if isinstance(value, str) and value else None


def brief(value: object) -> str:
    """``repr(value)``, cut short: peer strings in a log line, never megabytes of them."""
    text = repr(value[: _BRIEF + 1] if isinstance(value, str) else value)
    return text if len(text) <= _BRIEF else text[:_BRIEF] + "..."


def checked_timeout(timeout: object) -> float | None:
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, numbers.Real):
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    seconds = float(timeout)
    if not 0 < seconds < math.inf:
        raise ValueError(f"timeout must be a positive number of seconds, not {timeout!r}")
    return seconds


class Connection:
    """The protocol state of one connection to an agent runtime.

    Feed it with :meth:`receive_data` / :meth:`receive_eof`; send what
    :meth:`data_to_send` returns; handle :meth:`events`. ``clock`` is the time
    source for timeouts and telemetry latencies (the trio driver gives
    ``trio.current_time``). ``on_output`` is called when bytes are queued into an
    empty buffer, or an event is added, outside :meth:`receive_data` (e.g. a
    deferred answer given from a UI callback), so a driver can wake its writer.
    """

    # Slots: past 30 attributes, an instance dict's keys stop being shared and
    # every attribute read on the hot path gets slower.
    __slots__ = (
        "_backlog",
        "_backlog_bytes",
        "_chunked_at",
        "_clock",
        "_dispatching",
        "_encode_frame",
        "_events",
        "_framer",
        "_max_pending",
        "_max_pending_bytes",
        "_method_callbacks",
        "_newline",
        "_next_id",
        "_on_output",
        "_options_in_use",
        "_outbound",
        "_outbuf",
        "_outbuf_size",
        "_pending_bytes",
        "_questions",
        "_request_handlers",
        "_requests",
        "_selected_ends",
        "_session_callbacks",
        "_stacks",
        "_starting",
        "_telemetry",
        "_timed",
        "_write_failed",
        "closed_reason",
        "dialect",
        "stopped_by",
        "tool_calls",
    )

    def __init__(
        self,
        dialect: DialectName = "bridge",
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        max_pending: int = DEFAULT_MAX_PENDING,
        max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
        telemetry: Telemetry | None = None,
        clock: Callable[[], float] = time.monotonic,
        on_output: Callable[[], object] | None = None,
    ) -> None:
        spec = DIALECTS.get(dialect)
        if spec is None:
            raise ValueError(f"unknown dialect {dialect!r}: expected 'bridge' or 'acp'")
        self.dialect = spec
        self._framer: Framer = spec.framer(max_frame_size=max_frame_size)
        self._encode_frame = spec.framer.encode
        self._telemetry = telemetry
        self._clock = clock
        self._on_output = on_output
        self._max_pending = max_pending
        self._max_pending_bytes = max_pending_bytes
        self._next_id = 0
        self._outbound: dict[RequestId, tuple[str, Any]] = {}  # id -> (method, params)
        self._questions: dict[RequestId | None, Question] = {}
        self._requests: dict[RequestId | None, InboundRequest] = {}
        self._pending_bytes = 0
        self._stacks: dict[str, list[PermissionRegistration]] = {}
        # Equal option sets of pending permission requests, held once (agents offer
        # the same few sets again and again) once SHARE_OPTIONS_FROM are pending;
        # an entry goes with its last request.
        self._options_in_use: dict[tuple[PermissionOption, ...], _SharedOptions] = {}
        self._request_handlers: dict[str, tuple[RequestHandler, Any]] = {}
        self._method_callbacks: dict[str, list[NotificationCallback]] = {}
        self._session_callbacks: dict[str, list[NotificationCallback]] = {}
        self._backlog: deque[tuple[InboundNotification, int]] = deque()
        self._backlog_bytes = 0
        self._starting: list[tuple[Question, AsyncHandler]] = []
        self._timed: set[PermissionRegistration] = set()
        self._events: list[Event] = []
        self._outbuf: list[bytes] = []  # chunks of joined frames, then frames
        self._outbuf_size = 0
        self._chunked_at = FRAMES_PER_CHUNK  # the length at which the frames are joined
        self._newline = spec.framer is NewlineFramer
        self._selected_ends: dict[str, bytes] = {}
        self._write_failed = False
        self._dispatching = False
        self.closed_reason: str | None = None
        """Why the connection closed, or ``None`` while it is open."""
        self.stopped_by: BaseException | None = None
        """The ``KeyboardInterrupt`` or ``SystemExit`` host code raised, if any."""
        self.tool_calls = ToolCallTracker()
        """Per (session, toolCallId) state of every tool call seen (invariant 9)."""

    # ------------------------------------------------------------------ output

    def data_to_send(self) -> bytes:
        """Take every byte queued for the peer (empty when there is none)."""
        queued = self._outbuf
        if not queued:
            return b""
        self._outbuf = []
        self._outbuf_size = 0
        self._chunked_at = FRAMES_PER_CHUNK
        return queued[0] if len(queued) == 1 else b"".join(queued)

    @property
    def bytes_queued(self) -> int:
        """How many bytes wait in :meth:`data_to_send`."""
        return self._outbuf_size

    def events(self) -> list[Event]:
        """Take the events since the last call, in order."""
        events = self._events
        if events:
            self._events = []
        return events

    def send_failed(self) -> None:
        """The transport can take no more: drop what is queued and what comes."""
        self._write_failed = True
        self._outbuf = []
        self._outbuf_size = 0
        self._chunked_at = FRAMES_PER_CHUNK

    def _queue(self, body: bytes) -> None:
        self._queue_frame(self._encode_frame(body))

    def _queue_frame(self, frame: bytes) -> None:
        if self._write_failed:
            return  # a dead transport is the only reason an answer is dropped
        queued = self._outbuf
        idle = not queued  # else the driver was told, and has yet to take them
        queued.append(frame)
        self._outbuf_size += len(frame)
        if len(queued) >= self._chunked_at:  # (a bytes object costs ~40 B besides its data)
            chunks = self._chunked_at - FRAMES_PER_CHUNK
            queued[chunks:] = [b"".join(queued[chunks:])]
            self._chunked_at = chunks + 1 + FRAMES_PER_CHUNK
        if idle and self._on_output is not None and not self._dispatching:
            self._on_output()

    def _selected_frame(
        self, request_id: RequestId | None, answer: object, offered: tuple[PermissionOption, ...]
    ) -> bytes | None:
        """The answer most handlers give, checked, encoded and framed in one step: an
        int id, and ``answer`` a ``Selected`` of an offered option with no ``_meta``.
        ``None`` for anything else, which :func:`checked_decision` and
        :func:`_permission_answer` take in two. Encoded from the offered option's id,
        as ``checked_decision``'s result is: never from the handler's object."""
        if type(answer) is Selected and type(request_id) is int:
            try:
                meta, chosen = answer.meta, answer.option_id
            except AttributeError:  # a field the handler deleted: refused the long way
                return None
            if meta is None and type(chosen) is str:  # (exact: see checked_decision)
                for option in offered:
                    if option.option_id == chosen:
                        end = self._selected_ends.get(chosen) or self._selected_end(option)
                        if end is None:
                            return None
                        body = b"".join((_ANSWER_HEAD, _json.encode(request_id), end))
                        return body if self._newline else self._encode_frame(body)
        return None

    def _selected_end(self, option: PermissionOption) -> bytes | None:
        """What follows the id in an answer selecting ``option`` (with the newline
        dialect's line end: JSON that msgspec encodes has no line break), kept for
        the next answer if there is room; ``None`` if its id cannot be encoded."""
        option_id = option.option_id
        try:
            end = _SELECTED_HEAD + _json.encode(option_id) + _SELECTED_TAIL
        except (TypeError, ValueError):  # e.g. a lone surrogate: the long way
            return None
        if self._newline:
            end += b"\n"
        ends = self._selected_ends
        if len(ends) < SELECTED_ENDS_HELD and len(option_id) <= SELECTED_END_ID_MAX:
            ends[option_id] = end
        return end

    def _event(self, event: Event) -> None:
        self._events.append(event)
        if self._on_output is not None and not self._dispatching:
            self._on_output()

    # ------------------------------------------------------------------- input

    def receive_data(self, data: bytes | bytearray, max_messages: int | None = None) -> bool:
        """Take bytes read from the peer; handle the complete messages in them, at
        most ``max_messages`` (all when ``None``).

        Returns whether complete messages may be left: ``receive_data(b"")`` goes on
        with them. (A driver handles a large read in parts, so that the answers
        of the first part go out while it handles the rest.) Rule and deferred
        handlers and notification callbacks run from here; the async handlers of
        this call are started by one event, after it.
        """
        if max_messages is not None and max_messages < 1:
            raise ValueError("max_messages must be at least 1")
        framer = self._framer
        if self.closed_reason is None:
            if data:  # (b"" goes on with what is held: no append, which could copy it)
                framer.receive_data(data)
        elif not framer.buffered:
            return False  # closed, and nothing of an earlier read is left
        left = -1 if max_messages is None else max_messages
        self._dispatching = True
        try:
            # Once closed, whatever is left of the read is handled at once, parts
            # or not: every request in it is owed its (refusing) answer now.
            while left or self.closed_reason is not None:
                left -= 1
                try:
                    frame = framer.next_frame()
                except RemoteProtocolError as exc:
                    if exc.recoverable:
                        log.warning("skipped a frame: %s", exc)
                        continue
                    self.close(f"protocol error: {exc}")
                    return False
                if frame is None:
                    return False
                self._dispatch(frame)
            return self.closed_reason is None
        finally:
            self._dispatching = False
            if self._starting:
                batch, self._starting = self._starting, []
                self._events.append(StartPermissionHandlers(batch))

    def receive_eof(self) -> None:
        """The peer closed its side: close, answering everything pending."""
        self.receive_data(b"")  # what is left of the last read, handled in parts or not
        if self._framer.buffered:
            log.warning("peer closed mid-frame (%d bytes dropped)", self._framer.buffered)
        self.close("the peer closed the connection")

    def _dispatch(self, frame: bytes) -> None:
        whole: _WholePermissionRequest | None = None
        message: Message | None = None
        try:
            whole = parse_permission_request(frame)
            if whole is not None and self._routed_at_once(whole, frame):
                return
            message = parse_message(frame) if whole is None else _request_of(whole)
            if self.closed_reason is not None and not isinstance(message, Request | InvalidMessage):
                return  # closed by host code earlier in this read: only requests are owed
            if isinstance(message, Request):
                self._on_request(message, frame)
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
            owed = message if isinstance(message, Request) else whole  # a request, to answer
            if owed is not None and not self._is_pending(owed.id):
                self._queue(encode_error(owed.id, ErrorCode.INTERNAL_ERROR, "internal error"))

    def _is_pending(self, request_id: RequestId | None) -> bool:
        return request_id in self._questions or request_id in self._requests

    # ---------------------------------------------------------------- outbound

    def send_request(self, method: str, params: Any = None) -> RequestId:
        """Queue a request; returns its id. Its answer comes as :class:`ResponseReceived`.

        Raises :class:`ConnectionClosed` if closed, :class:`LocalProtocolError` if
        ``params`` cannot be encoded.
        """
        self._check_open()
        request_id = self._next_id
        body = encode_request(request_id, method, params)
        self._next_id += 1
        self._outbound[request_id] = (method, params)
        self._queue(body)
        return request_id

    def abandon_request(self, request_id: RequestId) -> None:
        """Our caller gave up on a request: tell the peer, and end a cancelled turn."""
        sent = self._outbound.pop(request_id, None)
        if sent is None or self.closed_reason is not None:
            return
        method, params = sent
        dialect = self.dialect
        session_id = session_of(params) if method in dialect.turn_requests else None
        cancel_params: dict[str, RequestId]
        if session_id is not None and dialect.turn_cancel_notification is not None:
            cancel, cancel_params = dialect.turn_cancel_notification, {"sessionId": session_id}
        else:
            cancel, cancel_params = dialect.cancel_method, {dialect.cancel_key: request_id}
        self._queue(encode_notification(cancel, cancel_params))
        if session_id is not None:
            self.cancel_permissions(session_id)

    def send_notification(self, method: str, params: Any = None) -> None:
        """Queue a notification; the dialect's turn cancel also withdraws the session's
        pending permission requests."""
        self._check_open()
        self._queue(encode_notification(method, params))
        if method in self.dialect.turn_cancels:
            session_id = session_of(params)
            if session_id is not None:
                self.cancel_permissions(session_id)

    def turn_running(self, session_id: str) -> bool:
        """Whether a turn request of ``session_id`` awaits its answer."""
        turn_requests = self.dialect.turn_requests
        return any(
            method in turn_requests and session_of(params) == session_id
            for method, params in self._outbound.values()
        )

    def _check_open(self) -> None:
        if self.closed_reason is not None:
            raise ConnectionClosed(self.closed_reason)

    def _settle(
        self, request_id: RequestId, result: msgspec.Raw | None, error: Exception | None
    ) -> None:
        if self._outbound.pop(request_id, None) is None:
            if isinstance(request_id, int) and 0 <= request_id < self._next_id:
                log.debug("dropped a late response for settled request %r", request_id)
            else:
                log.warning(
                    "dropped a response for request %s, which was never sent", brief(request_id)
                )
            return
        self._events.append(ResponseReceived(request_id, result, error))

    def _on_error_response(self, message: ErrorResponse) -> None:
        error = message.error
        if message.id is None:
            log.warning(
                "peer reported an error about no request: [%s] %s",
                error.code,
                brief(error.message),
            )
            return
        self._settle(message.id, None, RequestError(error.code, error.message, error.data))

    # ----------------------------------------------------------- registrations

    def add_permission_handler(
        self, session_id: str, handler: PermissionHandler, timeout: float | None
    ) -> PermissionRegistration:
        if not isinstance(session_id, str) or not session_id:
            raise ValueError("session_id must be a non-empty string")
        if not callable(handler) and not isinstance(handler, Rule | Deferred):
            raise TypeError(f"a permission handler must be callable, not {type(handler).__name__}")
        if isinstance(handler, Rule) and type(handler) is not Rule:
            handler = Rule(handler.function)  # a subclass (a rule engine): routed by exact type
        registration = PermissionRegistration(session_id, handler, checked_timeout(timeout))
        self._stacks.setdefault(session_id, []).append(registration)
        return registration

    def remove_permission_handler(self, registration: PermissionRegistration) -> None:
        """Unregister; its pending questions are answered ``cancelled`` now."""
        self.stop_routing(registration)
        self._timed.discard(registration)
        if registration.pending:
            self._withdraw(list(registration.pending), "turn")

    def stop_routing(self, registration: PermissionRegistration) -> None:
        """Route no new question to ``registration``; its pending ones stay pending.

        Queues nothing and starts nothing: safe where the driver cannot run (a
        guest-mode host between two trio ticks). :meth:`remove_permission_handler`
        answers the pending ones.
        """
        stack = self._stacks.get(registration.session_id)
        if stack is not None and registration in stack:
            stack.remove(registration)
            if not stack:
                del self._stacks[registration.session_id]
        registration.removed = True

    def add_request_handler(
        self, method: str, handler: RequestHandler, cancelled_result: Any = NO_RESULT
    ) -> Callable[[], None]:
        if method == PERMISSION_METHOD:
            raise ValueError("permission requests are routed per session: use permission_handler()")
        if method in self._request_handlers:
            raise ValueError(f"a handler for {method!r} is already registered")
        if cancelled_result is not NO_RESULT:
            encode_result(0, cancelled_result)  # fail now, not when a cancel arrives
        route = self._request_handlers[method] = (handler, cancelled_result)

        def undo() -> None:
            if self._request_handlers.get(method) is route:
                del self._request_handlers[method]

        return undo

    def add_method_callback(
        self, method: str, callback: NotificationCallback
    ) -> Callable[[], None]:
        return _add(self._method_callbacks, method, callback)

    def add_session_callback(
        self, session_id: str, callback: NotificationCallback
    ) -> Callable[[], None]:
        """Register, then deliver what was held for the session, in order."""
        held = [n for n, _ in self._backlog if n.session_id == session_id]
        if held:
            kept = [(n, size) for n, size in self._backlog if n.session_id != session_id]
            self._backlog = deque(kept)
            self._backlog_bytes = sum(size for _, size in kept)
        undo = _add(self._session_callbacks, session_id, callback)
        for notification in held:
            self._call(callback, notification)
        return undo

    # ----------------------------------------------------------- notifications

    def _on_notification(self, message: Notification) -> None:
        method = message.method
        if method in _CANCEL_METHODS:
            self._on_peer_cancel(message.params)
            return
        if method == "session/update":
            # One decode gives the typed update and the session it routes to.
            notification = InboundNotification.session_update(bytes(message.params))
            if notification.update is None:  # no session update: route it as any other
                notification.session_id = _session_id_of(message.params)
            else:
                self.tool_calls.apply(notification)
            session_id = notification.session_id
        else:
            session_id = _session_id_of(message.params)
            notification = InboundNotification(method, bytes(message.params), session_id)
        callbacks = self._method_callbacks.get(method)
        session_callbacks = self._session_callbacks.get(session_id) if session_id else None
        if not callbacks and not session_callbacks:
            if session_id is not None:
                # Nobody takes it: keep it for the session's callback to come, as
                # updates may precede session/new's answer.
                self._hold(notification)
            return
        for callback in callbacks or ():
            self._call(callback, notification)
        if session_id is None:
            return
        # Looked up again: a method callback may have just registered this session.
        for callback in list(self._session_callbacks.get(session_id, ())):
            self._call(callback, notification)

    def _hold(self, notification: InboundNotification) -> None:
        """Keep a notification for a session nobody listens to yet, within bounds."""
        assert notification.session_id is not None
        notification.forget_decoded()  # held as its bytes: the bound below is theirs
        size = (
            _HELD_OVERHEAD
            + str_cost(notification.method)
            + str_cost(notification.session_id)
            + len(notification.raw)
        )
        self._backlog.append((notification, size))
        self._backlog_bytes += size
        while len(self._backlog) > _BACKLOG_LIMIT or self._backlog_bytes > _BACKLOG_BYTES:
            dropped, dropped_size = self._backlog.popleft()
            self._backlog_bytes -= dropped_size
            log.warning(
                "dropped a held %s for session %s: more than %d notifications or %d bytes "
                "held for sessions with no callback",
                brief(dropped.method),
                brief(dropped.session_id),
                _BACKLOG_LIMIT,
                _BACKLOG_BYTES,
            )

    def _call(self, callback: NotificationCallback, notification: InboundNotification) -> None:
        try:
            callback(notification)
        except BaseException as exc:
            self.host_code_failed(exc, "notification callback for %s failed", notification.method)

    def host_code_failed(self, exc: BaseException, what: str, *args: object) -> None:
        """Contain what the host's code (a handler, a callback, a sink) raised: log it.

        ``KeyboardInterrupt`` and ``SystemExit`` (also inside exception groups)
        stop the client: the connection closes, answering everything pending
        (and every request still to come in the read being dispatched), and a
        :class:`Stopped` event says so.
        """
        stopping = _first_leaf(exc, (KeyboardInterrupt, SystemExit))
        if stopping is None:
            log.error(what, *args, exc_info=exc)
            return
        log.error("%s; %s stops the client", what % args, type(stopping).__name__)
        if self.stopped_by is None:
            self.stopped_by = stopping
            self._event(Stopped(stopping))
        self.close(f"stopped by {type(stopping).__name__}")

    # --------------------------------------------------------- inbound requests

    def _on_invalid(self, message: InvalidMessage) -> None:
        log.warning("invalid message from peer: %s", message.reason)
        if not message.reply:
            return
        if message.method is not None:
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
            self._queue(_permission_answer(message.id, _CANCELLED))
            return
        self._queue(encode_error(message.id, message.code, message.reason))

    def _on_request(self, message: Request, frame: bytes) -> None:
        request_id = message.id
        if self._telemetry is not None:
            self._emit(
                "server_request.start",
                request_id=request_id,
                session_id=_session_of_request(message),
                method=message.method,
            )
        if self._is_pending(request_id):
            log.warning(
                "peer reused id %s of a pending request; refusing the new one", brief(request_id)
            )
            self._queue(
                encode_error(
                    request_id, ErrorCode.INVALID_REQUEST, "id of a pending request reused"
                )
            )
            return
        pending = len(self._questions) + len(self._requests)
        why = self.closed_reason or (
            f"more than {self._max_pending} requests pending"
            if pending >= self._max_pending
            else None
        )
        size: int | None = None
        if why is None and len(frame) > _EAGER_COST_FRAME:
            # Checked before it is decoded: a large frame may decode into many objects.
            size = _cost(message, frame)
            why = self._over_budget(size)
        if why is not None:
            # No handler starts once the connection is closing, nor past the bounds
            # on pending requests: answer at once, failing closed.
            self._refuse(message, why)
        elif message.method == PERMISSION_METHOD:
            self._on_permission_request(message, frame, size)
        else:
            self._on_other_request(message, frame, size)

    def _admitted(self, message: Request, frame: bytes, size: int | None) -> int | None:
        """What holding ``message`` pending costs, or ``None`` once it is refused for
        the budget (``size``: already costed and checked, before decoding)."""
        if size is not None:
            return size
        size = _cost(message, frame)
        why = self._over_budget(size)
        if why is not None:
            self._refuse(message, why)
            return None
        return size

    def _over_budget(self, size: int) -> str | None:
        if self._pending_bytes + size > self._max_pending_bytes:
            return f"more than {self._max_pending_bytes} bytes of (decoded) requests pending"
        return None

    def _refuse(self, message: Request, why: str) -> None:
        log.warning("refused request %s (%s): %s", brief(message.id), brief(message.method), why)
        if message.method == PERMISSION_METHOD:
            self._queue(_permission_answer(message.id, _CANCELLED))
            self._emit(
                "approval.refused",
                request_id=message.id,
                session_id=_session_of_request(message),
                reason=why,
            )
        else:
            self._queue(encode_error(message.id, ErrorCode.INTERNAL_ERROR, why))

    def _on_other_request(self, message: Request, frame: bytes, size: int | None) -> None:
        request_id, method, raw = message.id, message.method, message.params
        route = self._request_handlers.get(method)
        if route is None:
            self._queue(
                encode_error(
                    request_id, ErrorCode.METHOD_NOT_FOUND, f"method not found: {method[:_BRIEF]}"
                )
            )
            return
        size = self._admitted(message, frame, size)
        if size is None:
            return
        try:
            params = _any_decoder.decode(raw) if raw else None
        except DECODE_ERRORS as exc:
            self._queue(
                encode_error(request_id, ErrorCode.INVALID_PARAMS, f"invalid params: {exc}")
            )
            return
        handler, cancelled_result = route
        inbound = InboundRequest(request_id, method, session_of(params), cancelled_result)
        inbound.size = size
        self._pending_bytes += size
        self._requests[request_id] = inbound
        self._events.append(StartRequestHandler(inbound, handler, params))

    def answer_request(self, inbound: InboundRequest, result: Any) -> None:
        """Answer an inbound request with ``result`` (once; later calls do nothing).

        A request cancelled meanwhile gets its cancelled answer instead.
        """
        if not self._retire_request(inbound):
            return
        if inbound.cancel_called:
            self._queue(_cancelled_answer(inbound))
            return
        try:
            body = encode_result(inbound.id, result)
        except LocalProtocolError as exc:
            body = _unencodable_answer(inbound.id, exc)
        self._queue(body)

    def fail_request(self, inbound: InboundRequest, error: RequestError | None) -> None:
        """Answer an inbound request with ``error`` (``None``: the internal error).

        A request cancelled meanwhile gets its cancelled answer instead.
        """
        if not self._retire_request(inbound):
            return
        if inbound.cancel_called:
            self._queue(_cancelled_answer(inbound))
        elif error is None:
            self._queue(encode_error(inbound.id, ErrorCode.INTERNAL_ERROR, "internal error"))
        else:
            self._queue(_encode_request_error(inbound.id, error))

    def cancel_requests(self, method: str, session_id: str) -> int:
        """Cancel the pending inbound ``method`` requests of ``session_id``, as a peer cancel."""
        cancelled = [
            inbound
            for inbound in self._requests.values()
            if inbound.method == method and inbound.session_id == session_id
        ]
        for inbound in cancelled:
            self._cancel_request(inbound, answer_now=False)
        return len(cancelled)

    def _cancel_request(self, inbound: InboundRequest, *, answer_now: bool) -> None:
        """Cancel the handler; answer now, or (peer cancel) once it has unwound, so
        whatever it withdraws on its way out is on the wire before the answer."""
        if inbound.cancel_called and not answer_now:
            return
        inbound.cancel_called = True
        if answer_now and self._retire_request(inbound):
            self._queue(_cancelled_answer(inbound))
        if inbound.on_cancel is not None:
            inbound.on_cancel()

    def _retire_request(self, inbound: InboundRequest) -> bool:
        if self._requests.get(inbound.id) is not inbound:
            return False
        del self._requests[inbound.id]
        self._pending_bytes -= inbound.size
        return True

    def _on_peer_cancel(self, params: msgspec.Raw) -> None:
        try:
            target = cancel_params_decoder.decode(params).target
        except DECODE_ERRORS as exc:
            log.warning("ignored a malformed cancel notification: %s", exc)
            return
        if target is None:
            return
        question = self._questions.get(target)
        if question is not None:
            self._withdraw([question], "peer")
            return
        inbound = self._requests.get(target)
        if inbound is not None:
            self._cancel_request(inbound, answer_now=False)
            return
        log.debug("cancel for request %r, which is not pending: nothing to do", target)

    # ------------------------------------------------------ permission requests

    def _on_permission_request(self, message: Request, frame: bytes, size: int | None) -> None:
        request_id, raw = message.id, message.params
        understood = True
        try:
            request = message.decoded or permission_request_decoder.decode(raw)
        except DECODE_ERRORS as exc:
            partly = partly_known_request(raw, exc)
            if partly is not None and self._shows_raw_params(partly.session_id):
                request, understood = partly, False
            else:
                self._malformed_permission_request(request_id, raw, exc)
                return
        session_id = request.session_id
        stack = self._stacks.get(session_id)
        if stack and stack[0].session_id == session_id:
            # Equal strings, shared rather than held once per pending request (only
            # when equal, as routing makes them: anything else must stay visible).
            request.session_id = stack[0].session_id
        telemetry = self._telemetry is not None
        if telemetry and stack:
            self._emit(
                "approval.requested",
                request_id=request_id,
                session_id=session_id,
                tool_call_id=request.tool_call.tool_call_id,
                options=[option.option_id for option in request.options],
            )
        if self.closed_reason is not None:  # the telemetry sink stopped the client
            self._queue(_permission_answer(request_id, _CANCELLED))
            return
        if size is not None:  # a large frame: what a rule keeps must not hold all of it
            own_raw_json(request.tool_call)
        started = self._clock() if telemetry else 0.0
        # A snapshot: a rule may close registrations (its own too) while it runs.
        registrations = tuple(stack or ())
        self._route(
            message,
            frame,
            size,
            request,
            request.session_id,
            request.options,
            registrations,
            started,
            understood,
        )

    def _malformed_permission_request(
        self, request_id: RequestId | None, raw: msgspec.Raw, exc: Exception
    ) -> None:
        log.warning(
            "malformed permission request %s answered cancelled: %s", brief(request_id), exc
        )
        self._emit(
            "approval.malformed",
            request_id=request_id,
            session_id=_session_id_of(raw),
            reason=str(exc),
        )
        self._queue(_permission_answer(request_id, _CANCELLED))

    def _shows_raw_params(self, session_id: str) -> bool:
        """Whether the session's latest handler is deferred with ``raw_params=True``:
        the one that may get a request this version types only in part (it can show
        the person the request as it arrived)."""
        for registration in reversed(self._stacks.get(session_id) or ()):
            if not registration.removed:
                handler = registration.handler
                return type(handler) is Deferred and handler.keeps_raw_params
        return False

    def _routed_at_once(self, whole: _WholePermissionRequest, frame: bytes) -> bool:
        """Route in one step what most requests need: a request (decoded with its
        envelope) goes to its session's latest registration, when none of the
        general path's checks applies (no registration, telemetry, closing, an id
        in use, the bound on pending requests). ``False``, having done nothing,
        when one does."""
        request = whole.params
        stack = self._stacks.get(request.session_id)
        if stack is None or self._telemetry is not None or self.closed_reason is not None:
            return False
        request_id = whole.id
        questions, requests = self._questions, self._requests
        if (
            request_id in questions
            or request_id in requests
            or len(questions) + len(requests) >= self._max_pending
        ):
            return False
        top = stack[-1]
        session_id = request.session_id
        if top.session_id == session_id:  # shared when equal (see _on_permission_request)
            session_id = request.session_id = top.session_id
        handler = top.handler
        offered = request.options  # what the answer is checked against, whatever a rule does
        if type(handler) is not Rule:
            size = _plain_cost(whole, frame)
            if size is None or self._over_budget(size) is not None:
                size = self._admitted(_request_of(whole), frame, None)  # (refused if over)
            if size is not None:
                self._pend(request_id, request, session_id, offered, top, size, frame)
            return True
        registrations = tuple(stack)  # the snapshot the rule may change
        answer = self._run_rule(handler, request)
        if answer is None:
            self._route(
                _request_of(whole),
                frame,
                None,
                request,
                session_id,
                offered,
                registrations[:-1],
                0.0,
            )
            return True
        self.tool_calls.fold_answered(session_id, request.tool_call)
        answer_frame = self._selected_frame(request_id, answer, offered)
        if answer_frame is None:
            self._send_answer(request_id, session_id, checked_decision(answer, offered), 0.0)
        else:
            self._queue_frame(answer_frame)
        return True

    def _route(
        self,
        message: Request,
        frame: bytes,
        size: int | None,
        request: PermissionRequest,
        session_id: str,
        offered: tuple[PermissionOption, ...],
        registrations: tuple[PermissionRegistration, ...],
        started: float,
        understood: bool = True,
    ) -> None:
        """Ask ``registrations`` from the latest down: rules until one decides, or
        the first other handler gets the question; none left answers cancelled.

        ``session_id`` and ``offered`` are the request's as it arrived: what it is
        routed and its answer checked by, whatever a rule that passed did to it.
        A request ``understood`` only in part goes to the latest registration, a
        deferred one that keeps the raw params (see ``_shows_raw_params``).
        """
        request_id = message.id
        for registration in reversed(registrations):
            if registration.removed:
                continue
            handler = registration.handler
            if type(handler) is Rule:
                answer = self._run_rule(handler, request)
                if answer is None:
                    continue
                self.tool_calls.fold_answered(session_id, request.tool_call)
                self._send_answer(
                    request_id, session_id, checked_decision(answer, offered), started
                )
                return
            if self.closed_reason is not None:  # closed by a rule that passed
                self._queue(_permission_answer(request_id, _CANCELLED))
                return
            size = self._admitted(message, frame, size)
            if size is not None:
                self._pend(
                    request_id, request, session_id, offered, registration, size, frame, understood
                )
            return
        log.warning(
            "no handler for session %s: permission %s answered cancelled",
            brief(session_id),
            brief(request_id),
        )
        self._emit("approval.unrouted", request_id=request_id, session_id=session_id)
        self._queue(_permission_answer(request_id, _CANCELLED))

    def _run_rule(self, rule: Rule, request: PermissionRequest) -> object:
        """What ``rule`` returned (``None``: it passed), unchecked; ``Cancelled`` if it raised."""
        try:
            return rule.function(request)
        except BaseException as exc:
            self.host_code_failed(
                exc, "rule for session %r failed; answered cancelled", request.session_id
            )
            return _CANCELLED

    def _pend(
        self,
        request_id: RequestId | None,
        request: PermissionRequest,
        session_id: str,
        offered: tuple[PermissionOption, ...],
        registration: PermissionRegistration,
        size: int,
        frame: bytes,
        understood: bool = True,
    ) -> None:
        """Hold the question for ``registration``'s handler. The request gets back
        the ``session_id`` and ``offered`` options it arrived with (a rule that
        passed may have changed them): the question is routed, checked and shown
        by those."""
        handler = registration.handler
        raw_params = None
        if type(handler) is Deferred and handler.keeps_raw_params:
            raw_params = _params_of(frame)
            size += len(raw_params)
            why = self._over_budget(size)
            if why is not None:
                self._refuse(Request(request_id, PERMISSION_METHOD, _NO_PARAMS, request), why)
                return
        timeout = registration.timeout
        started = self._clock() if self._telemetry is not None or timeout is not None else 0.0
        many = len(self._questions) >= SHARE_OPTIONS_FROM
        shared = self._share_options(offered) if many else None
        request.options = offered if shared is None else shared.options
        request.session_id = session_id
        own_raw_json(request.tool_call)
        kind = Question if understood else PartlyKnownQuestion
        question = kind(self, request_id, request, started, registration, shared, size)
        question.raw_params = raw_params
        self._pending_bytes += size
        self._questions[request_id] = question
        registration.pending[question] = None
        if timeout is not None:
            question.deadline = started + timeout
            self._timed.add(registration)
        self.tool_calls.begin_approval(question._session_id, request.tool_call)
        if type(handler) is Deferred:
            try:
                handler.function(question)
            except BaseException as exc:
                if not question.done:
                    self._answer(question, _CANCELLED)
                self.host_code_failed(
                    exc, "deferred handler for session %r failed", question.session_id
                )
            return
        # Handed to the driver after the rest of this read is dispatched, in order.
        self._starting.append((question, handler))  # type: ignore[arg-type]

    def _share_options(self, options: tuple[PermissionOption, ...]) -> _SharedOptions | None:
        try:
            shared = self._options_in_use.get(options)
        except TypeError:  # an option carries `_meta` (a dict): not hashable, not shared
            return None
        if shared is None:
            shared = self._options_in_use[options] = _SharedOptions(options)
        shared.uses += 1
        return shared

    def answer(self, question: Question, decision: object) -> None:
        """Answer a pending question (checked: only an offered option is ``selected``).

        Does nothing if it was answered or withdrawn before.
        """
        request_id = question._request_id
        if self._questions.get(request_id) is question:
            offered = question._offered
            if self._telemetry is None:  # (telemetry records the decision: the long way)
                frame = self._selected_frame(request_id, decision, offered)
                if frame is not None:
                    self._retire(question, None)
                    self._queue_frame(frame)
                    return
            decision = checked_decision(decision, offered)
            self._retire(question, None)
            self._send_answer(request_id, question._session_id, decision, question.started)

    def _answer(self, question: Question, decision: Decision) -> None:
        self._retire(question, None)
        self._send_answer(question._request_id, question._session_id, decision, question.started)

    def _send_answer(
        self, request_id: RequestId | None, session_id: str, decision: Decision, started: float
    ) -> None:
        try:
            body = _permission_answer(request_id, decision)
        except LocalProtocolError as exc:
            log.error("answer to %r is not encodable (%s); answered cancelled", request_id, exc)
            decision = _CANCELLED
            body = _permission_answer(request_id, _CANCELLED)
        self._queue(body)
        if self._telemetry is not None:
            selected = isinstance(decision, Selected)
            self._emit(
                "approval.responded",
                request_id=request_id,
                session_id=session_id,
                outcome="selected" if selected else "cancelled",
                option_id=decision.option_id if isinstance(decision, Selected) else None,
                latency_ms=round((self._clock() - started) * 1000, 3),
            )

    def _retire(
        self, question: Question, withdrawn_by: WithdrawnBy | None
    ) -> list[Callable[[WithdrawnBy], object]]:
        """The exactly-once point: forget ``question``; its withdraw callbacks."""
        del self._questions[question._request_id]
        self._pending_bytes -= question._size
        shared = question._shared
        if shared is not None:
            shared.uses -= 1
            if not shared.uses:
                del self._options_in_use[shared.options]
        registration = question._registration
        registration.pending.pop(question, None)
        if question.deadline is not None and not registration.pending:
            self._timed.discard(registration)  # nothing of it left to time
        self.tool_calls.end_approval(question._session_id, question._tool_call_id)
        return question._retire(withdrawn_by)

    def _withdraw(self, questions: list[Question], by: WithdrawnBy) -> None:
        """Answer ``cancelled`` now, then tell whoever holds each question.

        All or nothing: every question of the withdrawal is answered before any
        withdraw callback runs, so no callback can answer a sibling meanwhile.
        """
        told: list[tuple[Question, list[Callable[[WithdrawnBy], object]]]] = []
        for question in questions:
            if self._questions.get(question.request_id) is not question:
                continue
            told.append((question, self._retire(question, by)))
            self._queue(_permission_answer(question.request_id, _CANCELLED))
            if self._telemetry is not None:
                self._emit(
                    "approval.cancelled",
                    request_id=question.request_id,
                    session_id=question.session_id,
                    by=by,
                    latency_ms=round((self._clock() - question.started) * 1000, 3),
                )
        for question, callbacks in told:
            for callback in callbacks:
                try:
                    callback(by)
                except BaseException as exc:
                    self.host_code_failed(exc, "withdraw callback of %r failed", question)

    def cancel_permissions(self, session_id: str) -> int:
        """Answer every pending permission request of ``session_id`` ``cancelled`` now."""
        questions = [q for q in self._questions.values() if q.session_id == session_id]
        self._withdraw(questions, "turn")
        return len(questions)

    def pending_permissions(self, session_id: str | None = None) -> int:
        """How many permission requests (of one session, or in all) await an answer."""
        if session_id is None:
            return len(self._questions)
        return sum(1 for q in self._questions.values() if q.session_id == session_id)

    def pending_questions(self, session_id: str | None = None) -> list[Question]:
        """The pending questions (of one session, or all), in arrival order."""
        return [
            q for q in self._questions.values() if session_id is None or q.session_id == session_id
        ]

    # ---------------------------------------------------------------- timeouts

    @property
    def has_questions(self) -> bool:
        """Whether some permission question is pending (its answer may come from
        any task)."""
        return bool(self._questions)

    @property
    def has_deadlines(self) -> bool:
        """Whether some pending question has a registration timeout."""
        return bool(self._timed)

    def next_deadline(self) -> float:
        """When the earliest registration timeout falls due (``inf`` if none)."""
        earliest = math.inf
        for registration in self._timed:
            for question in registration.pending:  # arrival order: the first is the earliest
                if question.deadline is not None:
                    earliest = min(earliest, question.deadline)
                break
        return earliest

    def expire(self, now: float) -> None:
        """Withdraw every question pending past its registration's timeout at ``now``."""
        due: list[Question] = []
        for registration in list(self._timed):
            for question in registration.pending:  # in arrival order: due ones come first
                if question.deadline is None or question.deadline > now:
                    break
                due.append(question)
        self._withdraw(due, "timeout")
        for registration in list(self._timed):
            if not registration.pending:
                self._timed.discard(registration)

    # ---------------------------------------------------------------- teardown

    def close(self, reason: str) -> None:
        """Fail every pending call, answer every pending request ``cancelled``.

        Idempotent. Handler tasks hear of it through the withdraw callbacks
        (``by="teardown"``) and :attr:`InboundRequest.on_cancel`.
        """
        if self.closed_reason is not None:
            return
        self.closed_reason = reason
        try:
            if not self._dispatching:
                # Requests of a read not yet handled (the driver takes a read in
                # parts): refused now, each answered, rather than left unanswered.
                self.receive_data(b"")
        finally:  # (whatever that raised, what is pending is answered)
            self._starting.clear()  # every one of them is answered below
            log.info("connection closed: %s", reason)
            outbound, self._outbound = self._outbound, {}
            for request_id in outbound:
                self._events.append(ResponseReceived(request_id, None, ConnectionClosed(reason)))
            self._withdraw(list(self._questions.values()), "teardown")
            for inbound in list(self._requests.values()):
                self._cancel_request(inbound, answer_now=True)
            self._event(Closed(reason))

    # --------------------------------------------------------------- telemetry

    def _emit(self, event: str, **fields: Any) -> None:
        if self._telemetry is not None:
            for name, value in fields.items():
                if isinstance(value, str | list):
                    fields[name] = _capped(value)
            try:
                self._telemetry.emit(event, **fields)
            except BaseException as exc:
                # Telemetry proves what happened; it never gets to change an answer.
                self.host_code_failed(exc, "telemetry sink failed on %s", event)

    # -------------------------------------------------------------- statistics

    def statistics(self) -> ConnectionStatistics:
        """What the connection holds now (for tests, monitoring and benchmarks)."""
        return ConnectionStatistics(
            pending_permissions=len(self._questions),
            pending_requests=len(self._requests),
            pending_bytes=self._pending_bytes,
            outbound_requests=len(self._outbound),
            bytes_queued=self._outbuf_size,
            shared_option_sets=len(self._options_in_use),
            held_notifications=len(self._backlog),
            sessions_with_handlers=len(self._stacks),
        )


@dataclass(frozen=True, slots=True)
class ConnectionStatistics:
    """A snapshot of what a connection holds; see :meth:`Client.statistics`."""

    pending_permissions: int
    """Permission requests awaiting an answer."""
    pending_requests: int
    """Other inbound requests awaiting an answer."""
    pending_bytes: int
    """What the pending inbound requests take, decoded (bounded at 128 MiB)."""
    outbound_requests: int
    """Our requests awaiting their response."""
    bytes_queued: int
    """Bytes queued for the peer and not yet taken by the writer."""
    shared_option_sets: int
    """Distinct option sets held once for the pending permission requests (from
    ``SHARE_OPTIONS_FROM`` pending on: below that, each holds its own)."""
    held_notifications: int
    """Notifications held for sessions that have no callback yet."""
    sessions_with_handlers: int
    """Sessions with at least one permission handler registered."""


def _cost(message: Request, frame: bytes) -> int:
    """What a pending request can take once decoded: counted on its whole frame (so
    that the params need no copy), its method (a pending permission request does
    not keep it) and its id."""
    size = json_cost(frame)
    if message.method != PERMISSION_METHOD:
        size += str_cost(message.method)
    if type(message.id) is str:
        size += str_cost(message.id)
    return size


# The objects a plain permission request decodes into, each holding at most
# VALUE_COST besides its text: the params and their 4 fields, the tool call and
# its 9, the options tuple; then per option itself and its 4 fields, and per
# location itself and its 3 (and the list, if any).
_PLAIN_OBJECTS: Final = 1 + 4 + 1 + 9 + 1
_OPTION_OBJECTS: Final = 1 + 4
_LOCATION_OBJECTS: Final = 1 + 3


def _plain_cost(whole: _WholePermissionRequest, frame: bytes) -> int | None:
    """What a pending permission request with no content blocks and no ``_meta``
    can take once decoded, counted from its shape rather than its bytes (in a
    tenth of the time): its text once (the frame is ASCII with no backslash-u
    escape, so a decoded str takes a byte a character, no more than its JSON)
    and VALUE_COST for each object that holds it. ``None`` for any other
    request: :func:`_cost` counts those."""
    if has_unicode_escape(frame):  # may decode wider
        return None
    request = whole.params
    tool_call = request.tool_call
    if request.meta is not None or tool_call.meta is not None or tool_call.content is not None:
        return None
    options = request.options
    for option in options:
        if option.meta is not None:
            return None
    objects = _PLAIN_OBJECTS + _OPTION_OBJECTS * len(options)
    locations = tool_call.locations
    if locations is not None:
        for location in locations:
            if location.meta is not None:
                return None
        objects += 1 + _LOCATION_OBJECTS * len(locations)
    size = len(frame) + VALUE_COST * objects
    if type(whole.id) is str:
        size += str_cost(whole.id)
    return size


def _capped(value: Any) -> Any:
    """A peer's string (or list of them) as telemetry keeps it: cut short, so a record
    never holds megabytes of what a peer sent (sinks bound records, not their size)."""
    if isinstance(value, list):
        return [_capped(item) for item in value[:_TELEMETRY_ITEMS]]
    if isinstance(value, str) and len(value) > _TELEMETRY_CHARS:
        return value[:_TELEMETRY_CHARS] + "..."
    return value


def _add(
    table: dict[str, list[NotificationCallback]], key: str, callback: NotificationCallback
) -> Callable[[], None]:
    table.setdefault(key, []).append(callback)

    def undo() -> None:
        callbacks = table.get(key, [])
        if callback in callbacks:
            callbacks.remove(callback)
        if not callbacks:
            table.pop(key, None)

    return undo


def _first_leaf(exc: BaseException, kind: tuple[type[BaseException], ...]) -> BaseException | None:
    """``exc`` if it is a ``kind``, else the first ``kind`` inside its exception groups."""
    if isinstance(exc, BaseExceptionGroup):
        for inner in exc.exceptions:
            found = _first_leaf(inner, kind)
            if found is not None:
                return found
        return None
    return exc if isinstance(exc, kind) else None


def _cancelled_answer(inbound: InboundRequest) -> bytes:
    if inbound.cancelled_result is NO_RESULT:
        return encode_error(inbound.id, ErrorCode.REQUEST_CANCELLED, "request cancelled")
    try:  # checked at registration, but a dict may have changed since
        return encode_result(inbound.id, inbound.cancelled_result)
    except LocalProtocolError as exc:
        return _unencodable_answer(inbound.id, exc)


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
    log.error("the answer to request %s is not encodable: %s", brief(request_id), exc)
    return encode_error(
        request_id, ErrorCode.INTERNAL_ERROR, "internal error: the response could not be encoded"
    )
