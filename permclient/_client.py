"""The trio driver: one reader, one writer, handler tasks and their cancel scopes.

Every protocol rule lives in :class:`~permclient._connection.Connection`; this
module only moves bytes and runs what needs a task. The reader feeds the
connection each read and acts on its events (start handlers, wake callers); the
writer owns the stream's send side and writes whatever the connection has queued
since its last write (batched writes; queueing a frame is a synchronous append,
so a cancelled caller can never leave half a frame on the wire). Async permission
handlers run in worker tasks that outlive them, each handler inside a cancel scope
that is its alone while it runs; rule and deferred handlers need no task at all.
"""

from __future__ import annotations

import contextvars
import functools
import logging
import math
import os
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any, Final, TypeAlias, TypeVar, overload

import msgspec
import trio

from ._connection import (
    DEFAULT_MAX_PENDING,
    DEFAULT_MAX_PENDING_BYTES,
    NO_RESULT,
    Closed,
    Connection,
    ConnectionStatistics,
    DialectName,
    Event,
    InboundRequest,
    NotificationCallback,
    ResponseReceived,
    StartPermissionHandlers,
    StartRequestHandler,
    Stopped,
)
from ._errors import RemoteProtocolError, RequestError
from ._handlers import AsyncHandler, PermissionHandler, Question
from ._inline import UNANSWERED, awaitable, start
from ._messages import DECODE_ERRORS, RequestId
from ._telemetry import RunsInBackground, Telemetry
from ._tracker import ToolCallTracker
from ._wire import Cancelled
from .framing import DEFAULT_MAX_FRAME_SIZE

log = logging.getLogger("permclient")

T = TypeVar("T")

RequestHandler: TypeAlias = Callable[[Any], Awaitable[Any]]

_RECEIVE_SIZE: Final = 256 * 1024
# The reader writes the answers of a read after every _MESSAGES_PER_WRITE of its
# messages, so the peer works on them while it handles the rest; after
# _MESSAGES_PER_STEP it lets the other tasks run (a host's UI thread, in guest
# mode, gets its turn too), or at once when another task has work from it (see
# _others_wait). A trip through trio's scheduler costs as much as a few approvals:
# it is not made for every write.
_MESSAGES_PER_WRITE: Final = 16
_MESSAGES_PER_STEP: Final = 64
# Teardown waits for queued answers while the peer takes them: it gives up after
# _FLUSH_STALL_S without progress, and after _FLUSH_STALL_S plus one second per
# _FLUSH_MIN_RATE bytes queued in all (a peer that reads, however slowly, at that
# rate gets every answer; one that stopped reading holds us _FLUSH_STALL_S).
_FLUSH_STALL_S: Final = 2.0
_FLUSH_MIN_RATE: Final = 64 * 1024
# The writer sends at most this much per send_all, so a slow reader shows progress.
_WRITE_CHUNK: Final = 64 * 1024
# Past this many queued bytes the reader stops reading until the writer catches
# up: a peer that never reads cannot make us buffer its answers without end.
_OUTBUF_HIGH_WATER: Final = 16 * 1024 * 1024
_PERMISSION_TASK: Final = "permclient.permission"
# Workers left waiting for the next async handler once theirs answered.
_IDLE_WORKERS: Final = 64
# Workers woken at once for queued async handlers; beyond these, a handler waits
# for a busy worker to finish its own, or for a round in which none did.
_EAGER_WORKERS: Final = 16
_CANCELLED: Final = Cancelled()
_any_decoder: Final = msgspec.json.Decoder()
_CONSTRUCT: Final = object()  # only open_client makes a Client


class Registration:
    """Undoes a registration: call :meth:`close`, or use it as a context manager."""

    __slots__ = ("_undo",)

    def __init__(self, undo: Callable[[], object]) -> None:
        self._undo: Callable[[], object] | None = undo

    def close(self) -> None:
        """Remove the registration; calling it again does nothing."""
        undo, self._undo = self._undo, None
        if undo is not None:
            undo()

    def __enter__(self) -> Registration:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


@dataclass(frozen=True, slots=True)
class ClientStatistics:
    """A snapshot of what a :class:`Client` holds; see :meth:`Client.statistics`."""

    connection: ConnectionStatistics
    """What the protocol state holds: pending requests, queued bytes, ..."""
    bytes_writing: int
    """Bytes the writer has taken and not yet written."""
    timeout_task_running: bool
    """Whether a task waits for a registration timeout (only while one can fall due)."""


class _Waiter:
    __slots__ = ("done", "event")

    def __init__(self) -> None:
        self.event = trio.Event()
        self.done: ResponseReceived | None = None


def _all_leaves(exc: BaseException, kind: type) -> bool:
    """Whether ``exc`` is a ``kind``, or a group (nested or not) of nothing else."""
    if isinstance(exc, BaseExceptionGroup):
        return all(_all_leaves(inner, kind) for inner in exc.exceptions)
    return isinstance(exc, kind)


class Client:
    """A JSON-RPC connection to an agent runtime. Get one from :func:`open_client`
    or :func:`open_process`; it cannot be constructed directly.

    Sends requests and notifications, routes the runtime's permission requests to
    the handlers registered for exactly their ``sessionId``, answers every inbound
    request exactly once, and fails closed: anything but an explicit choice of an
    offered option is answered ``cancelled``.
    """

    def __init__(
        self,
        token: object,
        stream: trio.abc.Stream,
        connection: Connection,
        nursery: trio.Nursery,
    ) -> None:
        if token is not _CONSTRUCT:
            raise TypeError("a Client is made by permclient.open_client() or open_process()")
        self._stream = stream
        self._conn = connection
        self._nursery = nursery
        self._waiters: dict[RequestId, _Waiter] = {}
        self._writer_lot = trio.lowlevel.ParkingLot()
        self._written_lot = trio.lowlevel.ParkingLot()  # woken at each write and when idle
        self._writing = 0  # bytes taken from the connection and not yet written
        self._written = 0  # bytes written in all: teardown watches it move
        self._write_failed = False
        self._pipe = _send_pipe(stream)  # see _write_now
        self._handed_over = b""  # what the reader's write left for the writer
        # The writer outlives an outer cancellation so owed answers still go out;
        # teardown cancels it once they are flushed (or the grace period ends).
        self._writer_scope = trio.CancelScope(shield=True)
        self._body_scope = trio.CancelScope()  # the body of open_client
        self._closed_event = trio.Event()
        # Handler scopes to cancel once teardown's answers are written: thousands of
        # handlers unwinding must not keep the writer from its answers.
        self._cancel_after_flush: list[trio.CancelScope] = []
        # Registration timeouts: one task sleeps until the earliest deadline, and
        # exists only while some question with a timeout is pending.
        self._timeout_wake: trio.CancelScope | None = None
        # Async permission handlers waiting for a worker, and the workers waiting.
        self._jobs: deque[tuple[Question, AsyncHandler]] = deque()
        self._idle: list[trio.lowlevel.Task] = []
        self._workers = 0  # alive: idle, or running a handler
        self._taken = 0  # handlers the workers took from _jobs, in all
        self._waking = 0  # workers woken (or made) that have yet to run
        self._watcher: trio.lowlevel.Task | None = None  # parked in _watch_jobs
        self._watching = False  # _watch_jobs runs
        self._context = contextvars.copy_context()  # each handler starts in a copy
        self.process: trio.Process | None = None
        """The runtime's process when the client came from :func:`open_process`."""

    # ----------------------------------------------------------------- public API

    @property
    def dialect(self) -> DialectName:
        """``"bridge"`` (Content-Length framing) or ``"acp"`` (newline-delimited)."""
        return self._conn.dialect.name

    @property
    def closed_reason(self) -> str | None:
        """Why the connection closed, or ``None`` while it is open."""
        return self._conn.closed_reason

    @property
    def tool_calls(self) -> ToolCallTracker:
        """Per (session, toolCallId) state of every tool call seen (invariant 9)."""
        return self._conn.tool_calls

    async def wait_closed(self) -> str:
        """Wait until the connection closes (peer EOF, transport or protocol error).

        Returns :attr:`closed_reason`. Useful for a program that serves requests
        until its peer goes away.
        """
        await self._closed_event.wait()
        assert self._conn.closed_reason is not None
        return self._conn.closed_reason

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
        request_id = self._conn.send_request(method, params)
        waiter = self._waiters[request_id] = _Waiter()
        try:
            await waiter.event.wait()
        except BaseException:
            if self._waiters.pop(request_id, None) is not None:
                self._conn.abandon_request(request_id)
            raise
        done = waiter.done
        assert done is not None
        if done.error is not None:
            raise done.error
        assert done.result is not None
        try:
            if result_type is Any:
                return _any_decoder.decode(done.result)
            return msgspec.json.decode(done.result, type=result_type)
        except DECODE_ERRORS as exc:
            raise RemoteProtocolError(f"unexpected result for {method}: {exc}") from exc

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification.

        In the ACP dialect, ``session/cancel`` also answers every pending
        permission request of that session ``cancelled`` at once.

        Raises :class:`ConnectionClosed` if the connection is closed and
        :class:`LocalProtocolError` if ``params`` cannot be encoded.
        """
        self._conn.send_notification(method, params)
        await trio.lowlevel.checkpoint()

    def permission_handler(
        self, session_id: str, handler: PermissionHandler, *, timeout: float | None = None
    ) -> Registration:
        """Route ``session/request_permission`` requests of ``session_id`` to ``handler``.

        ``handler`` has one of three shapes, declared when registered:

        * ``permclient.rule(fn)``: ``fn(request) -> Decision | None`` runs as the
          request arrives, with no task; ``None`` passes the question to the
          registration below it in the session's stack.
        * ``permclient.deferred(fn)``: ``fn(question) -> None`` returns at once; the
          answer comes later through the :class:`Question`.
        * an async function ``async (PermissionRequest) -> Decision``, run in a
          cancel scope that is its alone while it runs and that a peer cancel
          cancels.

        Only ``Selected(option_id)`` with an offered id answers ``selected``;
        anything else (``Cancelled()``, an exception, another value, an id that
        was not offered, a cancelled scope) answers ``cancelled``. A newer
        registration for the same session sits on top of this one. Closing the
        returned :class:`Registration` (or leaving it as a context manager)
        answers its pending requests ``cancelled`` at once. With a ``timeout``
        (seconds), a request still pending that long after it arrived is
        withdrawn then, as a peer cancel would (telemetry ``by: "timeout"``).

        Raises :class:`ValueError` if ``session_id`` is empty or ``timeout`` is not
        a positive number of seconds, :class:`TypeError` if ``handler`` is not
        callable.
        """
        return self._permission_handler(session_id, handler, timeout)[0]

    def _permission_handler(
        self, session_id: str, handler: PermissionHandler, timeout: float | None
    ) -> tuple[Registration, Callable[[], None]]:
        """:meth:`permission_handler`, and a call that stops routing to it at once,
        answering nothing (what a guest-mode host can do between two trio ticks)."""
        conn = self._conn
        registration = conn.add_permission_handler(session_id, handler, timeout)
        return (
            Registration(functools.partial(conn.remove_permission_handler, registration)),
            functools.partial(conn.stop_routing, registration),
        )

    def statistics(self) -> ClientStatistics:
        """A snapshot of what the client holds now (as trio's ``statistics()`` methods)."""
        return ClientStatistics(
            connection=self._conn.statistics(),
            bytes_writing=self._writing,
            timeout_task_running=self._timeout_wake is not None,
        )

    def cancel_permissions(self, session_id: str) -> int:
        """Answer every pending permission request of ``session_id`` ``cancelled`` now.

        Use it when a turn is cancelled. Returns how many requests were answered.
        """
        return self._conn.cancel_permissions(session_id)

    def pending_permissions(self, session_id: str | None = None) -> int:
        """How many permission requests (of one session, or in all) await an answer."""
        return self._conn.pending_permissions(session_id)

    def pending_questions(self, session_id: str | None = None) -> list[Question]:
        """The pending permission requests (of one session, or all), in arrival order."""
        return self._conn.pending_questions(session_id)

    def cancel_requests(self, method: str, session_id: str) -> int:
        """Cancel the pending inbound ``method`` requests of ``session_id``, as a peer cancel.

        For a runtime built on permclient: e.g. ACP's ``session/cancel`` for the
        ``session/prompt`` requests of a session, including one that arrived in the
        same read and whose handler has not started (it never starts). Each is
        answered once its handler has unwound, with the ``cancelled_result`` given to
        :meth:`on_request` (else -32800). Returns how many were cancelled.
        """
        return self._conn.cancel_requests(method, session_id)

    def turn_running(self, session_id: str) -> bool:
        """Whether a turn request of ``session_id`` awaits its answer.

        A turn request is the dialect's: bridge ``chatSend``, ACP ``session/prompt``.
        Kept in the order messages arrive: called from a notification callback (or a
        telemetry sink), it says whether the turn's answer had come before that
        message on the wire.
        """
        return self._conn.turn_running(session_id)

    def on_request(
        self, method: str, handler: RequestHandler, *, cancelled_result: Any = NO_RESULT
    ) -> Registration:
        """Answer inbound requests of ``method`` with ``await handler(params)``.

        ``params`` is the decoded JSON. The handler's return value is the result;
        raising :class:`RequestError` answers with that error, any other exception
        answers -32603. A peer cancel cancels the handler's scope and answers once it
        has unwound: -32800, or ``cancelled_result`` as a success result when given
        (e.g. ``{"stopReason": "cancelled"}`` for a turn). Methods with no
        handler get -32601. Returns a :class:`Registration` that removes the handler.

        Raises :class:`ValueError` for ``session/request_permission`` (use
        :meth:`permission_handler`) or a method that already has a handler, and
        :class:`LocalProtocolError` if ``cancelled_result`` cannot be encoded.
        """
        return Registration(self._conn.add_request_handler(method, handler, cancelled_result))

    def on_notification(self, method: str, callback: NotificationCallback) -> Registration:
        """Call ``callback(notification)`` for every inbound notification of ``method``.

        Callbacks run synchronously in the reader, in arrival order: they must
        not block (hand work to a memory channel if it must wait). An exception
        in a callback is logged and does not disturb the connection. Returns a
        :class:`Registration` that removes the callback.
        """
        return Registration(self._conn.add_method_callback(method, callback))

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
        return Registration(self._conn.add_session_callback(session_id, callback))

    # ------------------------------------------------------------------ events

    def _on_output(self) -> None:
        """The connection queued bytes or an event outside a read."""
        self._wake_writer()
        self._pump()

    @trio.lowlevel.enable_ki_protection
    def _write_now(self) -> None:
        """Write what a read queued from the reader itself, when the writer is idle
        and the peer is a pipe: the answers go out without a trip through the
        scheduler. What the pipe does not take at once is left to the writer.

        Protected from Ctrl-C (trio delivers it at the next checkpoint instead):
        bytes taken from the connection are always written or handed over, never
        cut off where the teardown's answers would follow them mid-frame."""
        pipe = self._pipe
        if pipe is None or not self._writer_lot or self._conn.bytes_queued > _WRITE_CHUNK:
            self._wake_writer()
            return
        data = self._conn.data_to_send()
        try:
            # (Asked each time: a closed stream's is -1, never a number reused since.)
            sent = os.write(pipe.fileno(), data)
        except OSError:  # full, or broken: the writer waits, or fails and says so
            sent = 0
        self._written += sent
        if sent < len(data):
            self._handed_over = data[sent:]
            self._writing = len(self._handed_over)
            self._writer_lot.unpark_all()
        elif self._written_lot:
            self._written_lot.unpark_all()

    def _wake_writer(self) -> None:
        if self._writer_lot:  # only when the writer is parked: unpark_all is not free
            self._writer_lot.unpark_all()

    def _pump(self) -> None:
        for event in self._conn.events():
            self._handle(event)

    def _handle(self, event: Event) -> None:
        if type(event) is StartPermissionHandlers:
            self._start_permissions(event.batch)
        elif type(event) is ResponseReceived:
            waiter = self._waiters.pop(event.request_id, None)
            if waiter is not None:
                waiter.done = event
                waiter.event.set()
        elif type(event) is StartRequestHandler:
            self._nursery.start_soon(self._run_request, event.inbound, event.handler, event.params)
        elif type(event) is Closed:
            self._closed_event.set()
            self._nursery.start_soon(self._cancel_when_flushed, name="permclient: teardown")
        elif type(event) is Stopped:
            self._body_scope.cancel()  # open_client raises the connection's stopped_by

    def _host_code_failed(self, exc: BaseException, what: str, *args: object) -> None:
        """Contain what a handler raised; re-raise a real cancellation of this task.

        A ``trio.Cancelled`` that no cancellation caused (made by the host) is
        logged like any error.
        """
        if _all_leaves(exc, trio.Cancelled) and trio.current_effective_deadline() == -math.inf:
            raise exc  # a real cancellation, alone or grouped by the host's nurseries
        self._conn.host_code_failed(exc, what, *args)

    def _cancel_later(self, scope: trio.CancelScope) -> None:
        """Cancel a handler's scope now, or once teardown's answers are written."""
        if self._conn.closed_reason is None:
            scope.cancel()
        else:
            self._cancel_after_flush.append(scope)

    # ------------------------------------------------------- permission handlers

    def _start_permissions(self, batch: list[tuple[Question, AsyncHandler]]) -> None:
        """Queue each async handler of a read for a worker.

        Waking a worker is a trip through trio's scheduler, as much as the rest
        of an approval; a worker that finishes its handler takes the next queued
        one in the same step. So up to _EAGER_WORKERS are busy at once, and
        _watch_jobs wakes more for the handlers still queued after a round in
        which no busy worker took one (they wait for people, or for I/O).
        """
        jobs = self._jobs
        jobs.extend(batch)
        busy = self._workers - len(self._idle)
        self._start_workers(min(len(jobs), _EAGER_WORKERS - busy))
        if len(jobs) > self._waking:  # (each worker woken takes one, if any is left)
            if self._watcher is not None:
                trio.lowlevel.reschedule(self._watcher)
                self._watcher = None
            elif not self._watching:
                self._watching = True
                self._nursery.start_soon(self._watch_jobs, name="permclient: queued handlers")

    def _start_workers(self, count: int) -> None:
        """Wake (or make) ``count`` workers for the queued handlers."""
        idle = self._idle
        for _ in range(count):
            self._waking += 1
            if idle:
                trio.lowlevel.reschedule(idle.pop())
            else:
                self._workers += 1
                self._nursery.start_soon(self._work, name=_PERMISSION_TASK)

    async def _watch_jobs(self) -> None:
        """While handlers are queued, see that each round some worker takes one;
        after a round with none taken, wake a worker for every queued handler."""
        jobs = self._jobs
        task = trio.lowlevel.current_task()
        try:
            while True:
                if not jobs:
                    self._watcher = task
                    await trio.lowlevel.wait_task_rescheduled(self._stop_watching)
                    continue
                taken = self._taken
                await trio.lowlevel.checkpoint()
                # (Workers woken but not yet run, e.g. later in this round, will take some.)
                if jobs and self._taken == taken and not self._waking:
                    self._start_workers(len(jobs))
        finally:
            self._watching = False

    def _stop_watching(self, raise_cancel: object) -> trio.lowlevel.Abort:
        """The parked watcher is cancelled (teardown)."""
        self._watcher = None
        return trio.lowlevel.Abort.SUCCEEDED

    async def _work(self) -> None:
        """Run async handlers one after the other, in the order they arrived.

        A worker outlives its handler and waits for the next, up to _IDLE_WORKERS
        of them: a task made per request costs about as much as the rest of an
        approval. Each handler runs in a fresh copy of the client's context (a
        ``ContextVar`` one handler sets never reaches another).

        Handlers run inside a cancel scope that is the running handler's alone: a
        question settled while its handler runs cancels it, and a cancelled scope
        is left before the next handler starts (the worker goes on in a new one).
        Entering a scope per handler would cost as much as the rest of an
        approval. (One function, not three: every step of a handler resumes each
        coroutine frame between trio and it.)
        """
        self._waking -= 1  # (a new worker: counted when made)
        conn = self._conn
        task = trio.lowlevel.current_task()
        jobs = self._jobs
        idle = self._idle
        abort_idle = functools.partial(_abort_idle, idle, task)
        fresh = False  # whether this step runs in a context no handler has used yet
        while True:
            scope = _HandlerScope(self)
            cancel = scope.cancel
            with scope.scope:
                while not scope.cancelled:
                    if not jobs:
                        if len(idle) >= _IDLE_WORKERS:
                            self._workers -= 1  # (teardown's cancellation ends its use)
                            return
                        # The step that wakes this worker runs in the context it
                        # has now: the next handler's own, from its first line.
                        task.context = self._context.copy()
                        idle.append(task)
                        await trio.lowlevel.wait_task_rescheduled(abort_idle)
                        self._waking -= 1
                        fresh = True
                        continue
                    question, handler = jobs.popleft()
                    self._taken += 1
                    if question._connection is None:  # (done)
                        continue  # withdrawn before its handler ran: no card for it
                    # However the question is settled (withdrawn, or answered by
                    # another view), the handler's answer is no longer wanted.
                    question._on_settled = cancel
                    answer: object = UNANSWERED
                    try:
                        if fresh:
                            fresh = False
                            answer = await awaitable(handler(question.request))
                        else:
                            # Started by hand in a fresh context (see _inline); if
                            # it blocked, the rest of it, in that context.
                            finished, outcome = start(
                                handler, question.request, self._context.copy()
                            )
                            answer = outcome if finished else await outcome
                    except BaseException as exc:
                        question._on_settled = None  # the handler is over
                        conn.answer(question, _CANCELLED)
                        # (Re-raises the scope's own cancellation: the scope catches it.)
                        self._host_code_failed(
                            exc,
                            "permission handler for session %r failed; answered cancelled",
                            question.session_id,
                        )
                    finally:
                        question._on_settled = None
                        # Every path, our own cancellation included: exactly one answer.
                        conn.answer(question, _CANCELLED if answer is UNANSWERED else answer)

    # ---------------------------------------------------------- other requests

    async def _run_request(
        self, inbound: InboundRequest, handler: RequestHandler, params: Any
    ) -> None:
        conn = self._conn
        scope = trio.CancelScope()
        inbound.on_cancel = functools.partial(self._cancel_later, scope)
        try:
            if inbound.cancel_called:
                return  # cancelled before this task started: it never runs
            with scope:
                result = await handler(params)
                conn.answer_request(inbound, result)
        except RequestError as exc:
            conn.fail_request(inbound, exc)
        except BaseException as exc:
            # (A trio.Cancelled is answered as one, by the finally.)
            if not _all_leaves(exc, trio.Cancelled):
                conn.fail_request(inbound, None)
            self._host_code_failed(exc, "request handler for %r failed", inbound.method)
        finally:
            # Every path, our own cancellation included: exactly one answer.
            inbound.cancel_called = True
            conn.answer_request(inbound, None)

    # ------------------------------------------------------------------- writing

    async def _writer_loop(self) -> None:
        with self._writer_scope:
            await self._write_until_failed()

    async def _write_until_failed(self) -> None:
        conn = self._conn
        while True:
            if self._handed_over:  # the rest of the reader's write goes first
                data, self._handed_over = self._handed_over, b""
            else:
                data = conn.data_to_send()
            if not data:
                if self._written_lot:
                    self._written_lot.unpark_all()
                await self._writer_lot.park()
                continue
            self._writing = len(data)
            try:
                if self._pipe is not None and len(data) <= _WRITE_CHUNK:
                    # What a pipe takes at once needs no trip through the scheduler
                    # (send_all makes one before it writes); the rest, if any, does.
                    try:
                        sent = os.write(self._pipe.fileno(), data)
                    except BlockingIOError:
                        sent = 0
                    if sent < len(data):
                        await self._stream.send_all(memoryview(data)[sent:])
                elif len(data) <= _WRITE_CHUNK:
                    await self._stream.send_all(data)
                else:
                    view = memoryview(data)
                    for offset in range(0, len(data), _WRITE_CHUNK):
                        await self._stream.send_all(view[offset : offset + _WRITE_CHUNK])
                        self._progress(min(_WRITE_CHUNK, len(data) - offset))
                    del view
            except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
                self._lose_writer()
                conn.close(f"write failed: {exc or type(exc).__name__}")
                return
            except (KeyboardInterrupt, SystemExit) as exc:
                self._lose_writer()  # perhaps half way through a frame
                conn.host_code_failed(exc, "interrupted while writing")
                return
            finally:
                self._progress(self._writing)  # all of it, or the connection is lost
                del data  # a burst's answers can be megabytes: not held while parked

    def _lose_writer(self) -> None:
        self._write_failed = True
        self._conn.send_failed()
        self._written_lot.unpark_all()

    def _progress(self, sent: int) -> None:
        self._writing -= sent
        self._written += sent
        if self._written_lot:
            self._written_lot.unpark_all()

    def _queued(self) -> int:
        return self._conn.bytes_queued + self._writing

    def _flushed(self) -> bool:
        return self._write_failed or not self._queued()

    async def _wait_flushed(self) -> None:
        while not self._flushed():
            await self._written_lot.park()

    async def _flush(self) -> None:
        """Wait until everything queued is written, within the bounds of _FLUSH_STALL_S."""
        deadline = trio.current_time() + _FLUSH_STALL_S + self._queued() / _FLUSH_MIN_RATE
        while not self._flushed():
            written = self._written
            with trio.move_on_at(min(deadline, trio.current_time() + _FLUSH_STALL_S)):
                while self._written == written and not self._flushed():
                    await self._written_lot.park()
            if self._written == written and not self._flushed():
                log.warning(
                    "gave up writing %d queued bytes: the peer took none for %s s",
                    self._queued(),
                    _FLUSH_STALL_S,
                )
                return
            if trio.current_time() >= deadline and not self._flushed():
                log.warning(
                    "gave up writing %d queued bytes: the peer reads under %d bytes/s",
                    self._queued(),
                    _FLUSH_MIN_RATE,
                )
                return

    # ------------------------------------------------------------------- reading

    async def _reader_loop(self) -> None:
        conn = self._conn
        more = False  # whether the last read has messages left to handle
        handled = 0  # messages handled since the reader last let the others run
        try:
            while conn.closed_reason is None:
                if conn.bytes_queued > _OUTBUF_HIGH_WATER:
                    await self._wait_flushed()
                if more:
                    if handled >= _MESSAGES_PER_STEP or self._others_wait():
                        await trio.lowlevel.checkpoint()
                        handled = 0
                    more = conn.receive_data(b"", _MESSAGES_PER_WRITE)
                    handled += _MESSAGES_PER_WRITE
                else:
                    data = await self._stream.receive_some(_RECEIVE_SIZE)
                    if not data:
                        conn.receive_eof()
                        return
                    more = conn.receive_data(data, _MESSAGES_PER_WRITE)
                    handled = _MESSAGES_PER_WRITE
                if conn.bytes_queued:
                    self._write_now()
                self._pump()
                if conn.has_deadlines:
                    self._watch_deadline(conn.next_deadline())
        except (trio.BrokenResourceError, trio.ClosedResourceError, OSError) as exc:
            conn.close(f"read failed: {exc or type(exc).__name__}")
        except (KeyboardInterrupt, SystemExit) as exc:
            conn.host_code_failed(exc, "interrupted while reading")  # e.g. Ctrl-C here
        except Exception as exc:
            # Never blow up the caller's nursery: a failed reader is a closed connection.
            log.exception("reader failed")
            conn.close(f"internal error in the reader: {exc!r}")
        finally:
            self._pump()

    def _others_wait(self) -> bool:
        """Whether other tasks may have work from a read's part: async handlers for
        the workers, answers for the writer (all but what the reader wrote to a
        pipe itself), or pending questions, which any task may be answering."""
        conn = self._conn
        return bool(self._jobs or self._handed_over or conn.bytes_queued or conn.has_questions)

    # ------------------------------------------------------------------ timeouts

    def _watch_deadline(self, deadline: float) -> None:
        """See that the timeout task wakes by ``deadline``."""
        if self._timeout_wake is None:
            self._timeout_wake = trio.CancelScope(deadline=deadline)
            self._nursery.start_soon(self._expire_timeouts, name="permclient: timeouts")
        elif deadline < self._timeout_wake.deadline:
            self._timeout_wake.deadline = deadline

    async def _expire_timeouts(self) -> None:
        """Withdraw every question pending past its registration's timeout, at its
        deadline, whatever its handler is doing (as a peer cancel does)."""
        conn = self._conn
        while self._timeout_wake is not None:
            with self._timeout_wake:
                await trio.sleep_forever()
            conn.expire(trio.current_time())
            earliest = conn.next_deadline()
            self._timeout_wake = (
                None if earliest == math.inf else trio.CancelScope(deadline=earliest)
            )

    # ------------------------------------------------------------------ teardown

    async def _cancel_when_flushed(self) -> None:
        try:
            await self._flush()
        finally:
            scopes, self._cancel_after_flush = self._cancel_after_flush, []
            for scope in scopes:
                scope.cancel()
            if self._timeout_wake is not None:
                self._timeout_wake.cancel()
                self._timeout_wake = None


class _HandlerScope:
    """A worker's cancel scope, and whether a handler's question cancelled it
    (``CancelScope.cancel_called`` reads the clock each time)."""

    __slots__ = ("_client", "cancelled", "scope")

    def __init__(self, client: Client) -> None:
        self._client = client
        self.scope = trio.CancelScope()
        self.cancelled = False

    def cancel(self) -> None:
        self.cancelled = True
        self._client._cancel_later(self.scope)


def _send_pipe(stream: trio.abc.Stream) -> Any:
    """The pipe ``stream`` sends on (an ``FdStream``, as from ``open_process``), or ``None``."""
    send = stream.send_stream if isinstance(stream, trio.StapledStream) else stream
    fd_stream = getattr(trio.lowlevel, "FdStream", None)  # (not on Windows)
    return send if fd_stream is not None and isinstance(send, fd_stream) else None


def _abort_idle(
    idle: list[trio.lowlevel.Task], task: trio.lowlevel.Task, raise_cancel: object
) -> trio.lowlevel.Abort:
    """An idle worker is cancelled (teardown): it is no longer waiting."""
    idle.remove(task)
    return trio.lowlevel.Abort.SUCCEEDED


@asynccontextmanager
async def open_client(
    stream: trio.abc.Stream,
    *,
    dialect: DialectName = "bridge",
    telemetry: Telemetry | None = None,
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    max_pending: int = DEFAULT_MAX_PENDING,
    max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
) -> AsyncIterator[Client]:
    """Open a :class:`Client` over any ``trio.abc.Stream``.

    ``dialect`` is ``"bridge"`` (Content-Length framing, ``$/cancelRequest``) or
    ``"acp"`` (newline-delimited, ``$/cancel_request``). Leaving the context
    answers every pending permission request ``cancelled`` (other inbound
    requests get -32800, or their ``cancelled_result``), fails pending requests
    with :class:`ConnectionClosed`, writes the queued answers (shielded, also when
    an outer scope cancelled the client, for as long as the peer takes them: it
    gives up after 2 s without progress, or once the peer reads under 64 KiB/s),
    then cancels the handlers and closes the stream. A telemetry sink with a
    ``run()`` task (:class:`RunsInBackground`, e.g. :class:`JsonlTelemetry`) writes
    from that task while the client is open, and is flushed when it closes. A ``SystemExit`` or
    ``KeyboardInterrupt`` raised by a handler, callback or telemetry sink closes the
    client in the same way, cancels the body, and is raised from here as itself.

    ``max_frame_size`` caps one inbound frame (larger ones are skipped);
    ``max_pending`` caps inbound requests awaiting an answer: past it a new
    permission request is answered ``cancelled`` at once, any other -32603, and so
    past ``max_pending_bytes`` (128 MiB) of pending requests, counted as an upper
    bound of what their frames take once decoded.

    Raises :class:`ValueError` for an unknown dialect.
    """
    client: Client | None = None

    def on_output() -> None:
        if client is not None:
            client._on_output()

    connection = Connection(
        dialect,
        max_frame_size=max_frame_size,
        max_pending=max_pending,
        max_pending_bytes=max_pending_bytes,
        telemetry=telemetry,
        clock=trio.current_time,
        on_output=on_output,
    )
    # The body runs inside our nursery, but its own exception is re-raised
    # outside it, so callers never have to unwrap an ExceptionGroup.
    body_error: BaseException | None = None
    async with trio.open_nursery() as nursery:
        client = Client(_CONSTRUCT, stream, connection, nursery)
        nursery.start_soon(client._reader_loop)
        nursery.start_soon(client._writer_loop)
        if isinstance(telemetry, RunsInBackground):
            nursery.start_soon(telemetry.run, name="permclient: telemetry")
        try:
            with client._body_scope:
                yield client
        except BaseException as exc:
            body_error = exc
        finally:
            connection.close("the client was closed")
            with trio.CancelScope(shield=True):
                await client._flush()
            client._writer_scope.cancel()
            nursery.cancel_scope.cancel()
            with trio.CancelScope(shield=True):
                await stream.aclose()
    if isinstance(telemetry, RunsInBackground):
        telemetry.flush()  # what its task had no time to write
    if connection.stopped_by is not None:
        raise connection.stopped_by
    if body_error is not None:
        raise body_error
