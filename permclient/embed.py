"""Embedding permclient in a host that owns the event loop, or has none.

An editor plugin rarely owns the event loop. This module runs a permclient
:class:`~permclient.Client` either

* in trio's *guest mode* on the host's loop (:func:`start_guest`, with ready-made
  adapters :func:`asyncio_client` and :func:`tk_client`; Qt is a recipe in
  docs/embedding.md), or
* in a background thread, behind a synchronous facade (:func:`open_blocking`).

In both, a permission handler is a plain function ``fn(handle)`` run on the thread
the host chooses (its ``dispatch`` callable). It shows a card and returns ``None``;
the UI later completes the :class:`PermissionHandle` (``handle.answer(Selected(id))``
or ``handle.cancel()``) from any thread, exactly once. A handler that knows the
answer at once may return it instead (a ``Selected`` or ``Cancelled``); any other
return value, for a question it did not answer, answers ``cancelled``. An
``async def`` handler is refused at registration (``TypeError``), except by
:class:`AsyncioClient`, which runs it as an asyncio task. When the runtime withdraws
the question (its cancel, a turn cancel, teardown) the handle's ``on_cancelled``
callbacks run through ``dispatch`` so the UI can remove the card. Closing the host
or the plugin answers every open question ``cancelled`` and stops the runtime.

Nothing here imports asyncio or tkinter until their adapter is called.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import inspect
import logging
import math
import os
import socket
import threading
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import TYPE_CHECKING, Any, Final, TypeAlias, TypeVar, cast

import trio

from ._client import Client, Registration, open_client
from ._connection import DialectName
from ._errors import ConnectionClosed
from ._process import open_process
from ._wire import Cancelled, Decision, PermissionRequest, Selected

if TYPE_CHECKING:
    import tkinter

log = logging.getLogger("permclient.embed")

T = TypeVar("T")

Dispatch: TypeAlias = Callable[[Callable[[], object]], object]
"""Runs a callable soon on the thread the host chooses; must be safe from any thread."""
HandleFunction: TypeAlias = Callable[["PermissionHandle"], object]
"""A permission handler for an embedded client: shows ``handle.request``, then returns.

It returns ``None`` (the UI answers the handle later) or, knowing the answer at
once, a :class:`~permclient.Decision`.
"""
DoneCallback: TypeAlias = Callable[[BaseException | None], object]
"""Told, on the host's thread, that the embedded run finished: ``None`` or its error."""
Target: TypeAlias = (
    "Sequence[str] | socket.socket | Callable[[], AbstractAsyncContextManager[Client]]"
)
"""What to connect to: an argv to spawn, a connected socket, or an ``open_*`` factory."""

_CLOSED_REASON: Final = "the client was closed"
_ABANDON_JOIN_S: Final = 10.0
"""How long an interrupted ``open_blocking`` waits for its trio thread to stop."""


# ------------------------------------------------------------------ the handle


class PermissionHandle:
    """One open permission question, as the host's UI sees it.

    ``request`` is the :class:`~permclient.PermissionRequest` to show. The UI
    answers with :meth:`answer` (or :meth:`cancel`) from any thread; only the first
    answer counts, later ones are ignored, logged and return ``False``. If the
    runtime withdraws the question first (its ``$/cancelRequest``, a turn cancel,
    the client closing), :meth:`on_cancelled` callbacks run through ``dispatch``
    and the question is answered ``cancelled``.
    """

    __slots__ = (
        "_callbacks",
        "_consumed",
        "_decision",
        "_deliver",
        "_dispatch",
        "_lock",
        "_offered",
        "_withdrawn",
        "request",
    )

    def __init__(
        self, request: PermissionRequest, deliver: Callable[[], None], dispatch: Dispatch
    ) -> None:
        self.request = request
        self._offered = frozenset(option.option_id for option in request.options)
        self._deliver = deliver
        self._dispatch = dispatch
        self._lock = threading.Lock()
        self._decision: Decision | None = None
        self._withdrawn = False
        self._consumed = False  # the trio side took the decision: it is on its way
        self._callbacks: list[Callable[[PermissionHandle], object]] = []

    def __repr__(self) -> str:
        decision = self._decision
        state = "withdrawn" if self._withdrawn else "open" if decision is None else repr(decision)
        tool_call = self.request.tool_call.tool_call_id
        return f"<PermissionHandle {self.request.session_id}/{tool_call} {state}>"

    @property
    def session_id(self) -> str:
        """The session the question belongs to."""
        return self.request.session_id

    @property
    def done(self) -> bool:
        """True once answered or withdrawn."""
        return self._decision is not None or self._withdrawn

    @property
    def withdrawn(self) -> bool:
        """True if the runtime (or a turn cancel, or teardown) withdrew the question first."""
        return self._withdrawn

    @property
    def decision(self) -> Decision | None:
        """The answer the runtime gets, as far as this handle knows, or None.

        The host's accepted answer; a non-offered choice reads ``Cancelled()``, and
        so does an accepted answer that a withdrawal overtook (``withdrawn`` is
        then True too).
        """
        return self._decision

    def answer(self, decision: Decision) -> bool:
        """Answer the question; safe from any thread; never raises for a bad answer.

        Only ``Selected(option_id)`` with an offered ``str`` id answers
        ``selected``; anything else answers ``cancelled``. Returns ``True`` if this
        call's answer was *accepted for delivery*, ``False`` (and logs a warning)
        if the question was already answered or withdrawn: the first answer is the
        only one. A withdrawal that reaches the trio side before an accepted
        answer still wins: the runtime gets ``cancelled``, the handle becomes
        ``withdrawn`` (``decision`` reads ``Cancelled()``) and the ``on_cancelled``
        callbacks run.
        """
        decision = self._checked(decision)
        with self._lock:
            if self._decision is not None or self._withdrawn:
                log.warning("%r: a second answer (%r) was ignored", self, decision)
                return False
            self._decision = decision
        try:
            self._deliver()
        except Exception:  # pragma: no cover - delivery only schedules a wake-up
            log.exception("delivering an answer failed")
        return True

    def _checked(self, decision: object) -> Decision:
        """``decision`` if it answers ``selected`` or is ``Cancelled``, else ``Cancelled()``."""
        try:
            if isinstance(decision, Selected):
                option_id = decision.option_id
                if type(option_id) is str and option_id in self._offered:
                    return decision
            elif isinstance(decision, Cancelled):
                return decision
            log.warning("answer %r is not an offered choice: answered cancelled", decision)
        except Exception:
            log.exception("answer %r could not be checked: answered cancelled", decision)
        return Cancelled()

    def cancel(self) -> bool:
        """Answer ``cancelled`` (the user dismissed the card); like :meth:`answer`."""
        return self.answer(Cancelled())

    def on_cancelled(self, callback: Callable[[PermissionHandle], object]) -> None:
        """Call ``callback(handle)`` through ``dispatch`` if the question is withdrawn.

        Withdrawn means: before the host answered, the runtime cancelled it, its
        turn was cancelled, or the client closed. Registered after that, the
        callback is dispatched at once. Never called if the host's answer reached
        the runtime (see :meth:`answer` for a click racing a withdrawal).
        """
        with self._lock:
            if not self._withdrawn:
                if not self._consumed:
                    self._callbacks.append(callback)
                return
        self._dispatch(functools.partial(callback, self))

    def _take(self) -> Decision | None:
        """Trio side: the answer goes to the runtime now; None if withdrawn meanwhile."""
        with self._lock:
            if self._withdrawn:
                return None
            self._consumed = True
            self._callbacks = []
            return self._decision

    def _withdraw(self) -> None:
        """Trio side: the runtime gets ``cancelled``; tell the host, unless it already knew."""
        with self._lock:
            if self._withdrawn or self._consumed:
                return
            self._withdrawn = True
            if self._decision is not None:
                self._decision = Cancelled()  # accepted, but overtaken by the withdrawal
            callbacks, self._callbacks = self._callbacks, []
        for callback in callbacks:
            try:
                self._dispatch(functools.partial(callback, self))
            except Exception:
                log.exception("dispatching an on_cancelled callback failed")


# ----------------------------------------------------- the trio side, shared


def _connector(
    target: Target, dialect: DialectName, kwargs: dict[str, Any]
) -> Callable[[], AbstractAsyncContextManager[Client]]:
    if callable(target):
        return target
    if isinstance(target, socket.socket):
        sock = target

        def over_socket() -> AbstractAsyncContextManager[Client]:
            stream = trio.SocketStream(trio.socket.from_stdlib_socket(sock))
            return open_client(stream, dialect=dialect, **kwargs)

        return over_socket
    if isinstance(target, str | bytes | os.PathLike):
        raise TypeError("target must be an argv sequence, a socket or a factory, not a path")
    argv = list(target)
    return functools.partial(open_process, argv, dialect=dialect, **kwargs)


class _Embedded:
    """A client living in a trio run that the host does not run itself.

    Everything trio-side happens on the trio thread (the host's thread in guest
    mode, a background thread for the blocking facade); the host reaches it only
    through the token's thread-safe ``run_sync_soon``.
    """

    def __init__(
        self, connect: Callable[[], AbstractAsyncContextManager[Client]], dispatch: Dispatch
    ):
        self._connect = connect
        self._dispatch = dispatch
        self._token: trio.lowlevel.TrioToken | None = None
        self._nursery: trio.Nursery | None = None
        self._client: Client | None = None
        self._stop = threading.Event()  # set by close(), read on the trio side
        self._stop_event: trio.Event | None = None
        self._connect_scope: trio.CancelScope | None = None
        self._handles: set[PermissionHandle] = set()
        self._finished = threading.Event()
        self._closed_reason: str | None = None
        self._startup_error: BaseException | None = None
        # The open registrations, held here: a generator-based context manager that
        # is garbage collected would unregister itself.
        self._registrations: set[contextlib.AbstractContextManager[object]] = set()

    # --------------------------------------------------------------- trio side

    async def _main(self, ready: Callable[[BaseException | None], None]) -> None:
        # Up to the first checkpoint, so that a _request_stop finds all of these.
        self._token = trio.lowlevel.current_trio_token()
        self._stop_event = trio.Event()
        self._connect_scope = connect_scope = trio.CancelScope()
        if self._stop.is_set():
            self._request_stop()
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                try:
                    with connect_scope:
                        async with self._connect() as client:
                            self._client = client
                            ready(None)
                            await self._stop_event.wait()
                    if self._client is None:  # closed while connecting
                        ready(ConnectionClosed("the client was closed while connecting"))
                except Exception as exc:
                    if self._client is not None:
                        raise
                    # Could not connect: the host hears it from ready(), unwrapped.
                    self._startup_error = exc
                    ready(exc)
                finally:
                    self._closed_reason = (
                        self._client.closed_reason if self._client is not None else None
                    ) or _CLOSED_REASON
                    # The connection is over: what submit() started must not keep the
                    # run alive (its futures fail with ConnectionClosed).
                    nursery.cancel_scope.cancel()
        finally:
            # Teardown already withdrew them (the handlers were cancelled); a handle
            # whose handler never got to run must not stay open either.
            for handle in list(self._handles):
                handle._withdraw()
            self._handles.clear()

    def _request_stop(self) -> None:
        """On the trio thread: leave the connection (or stop connecting)."""
        if self._stop_event is not None:
            self._stop_event.set()
        if self._client is None and self._connect_scope is not None:
            self._connect_scope.cancel()

    def _soon(self, fn: Callable[[], object]) -> bool:
        """Run ``fn`` on the trio thread soon; False if the run is over."""
        token = self._token
        if token is None:
            return False
        try:
            token.run_sync_soon(fn)
        except trio.RunFinishedError:
            return False
        return True

    def submit(
        self, async_fn: Callable[..., Awaitable[T]], *args: Any
    ) -> concurrent.futures.Future[T]:
        """Run ``async_fn(*args)`` in the trio run; returns a future of its result.

        Safe from any thread. Cancelling the future cancels the call (for
        ``client.request`` that sends the dialect's cancel notification). If the
        client is or becomes closed, the future fails with
        :class:`~permclient.ConnectionClosed`. Done-callbacks of the future run on
        the trio thread (the host's thread in guest mode).
        """
        future: concurrent.futures.Future[T] = concurrent.futures.Future()

        def start() -> None:
            if future.cancelled():
                return  # given up before it started: nothing to send
            nursery = self._nursery
            if nursery is None or self._finished.is_set() or nursery.cancel_scope.cancel_called:
                _fail(future, ConnectionClosed(self._closed_reason or _CLOSED_REASON))
                return
            try:
                nursery.start_soon(self._run_submitted, future, async_fn, args)
            except RuntimeError:  # the nursery is closed to new arrivals
                _fail(future, ConnectionClosed(self._closed_reason or _CLOSED_REASON))

        if not self._soon(start):
            _fail(future, ConnectionClosed(self._closed_reason or _CLOSED_REASON))
        return future

    async def _run_submitted(
        self,
        future: concurrent.futures.Future[T],
        async_fn: Callable[..., Awaitable[T]],
        args: tuple[Any, ...],
    ) -> None:
        if future.cancelled():
            return  # cancelled between start_soon and now
        scope = trio.CancelScope()

        def on_done(done: concurrent.futures.Future[T]) -> None:
            if done.cancelled():
                self._soon(scope.cancel)

        future.add_done_callback(on_done)
        with scope:
            try:
                result = await async_fn(*args)
            except Exception as exc:
                _fail(future, exc)
                return
            except BaseException:
                _fail(future, ConnectionClosed(self._closed_reason or _CLOSED_REASON))
                raise
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                future.set_result(result)

    def _wrap(self, fn: HandleFunction) -> Callable[[PermissionRequest], Awaitable[Decision]]:
        async def handler(request: PermissionRequest) -> Decision:
            arrived = trio.Event()

            def deliver() -> None:
                self._soon(arrived.set)  # a finished run answered it already

            handle = PermissionHandle(request, deliver, self._dispatch)
            self._handles.add(handle)
            try:
                try:
                    self._dispatch(functools.partial(_call_handler, fn, handle))
                except Exception:
                    log.exception("dispatch failed; permission answered cancelled")
                    handle.cancel()
                if handle.decision is None:
                    await arrived.wait()
                if trio.current_effective_deadline() == -math.inf:
                    # Withdrawn as the answer arrived (the wake-up won the race, the
                    # cancel came with it): the runtime gets `cancelled`, so must the host.
                    handle._withdraw()
                    return Cancelled()
                decision = handle._take()
                return decision if decision is not None else Cancelled()
            except BaseException:
                handle._withdraw()  # cancelled: by the peer, the turn or teardown
                raise
            finally:
                self._handles.discard(handle)

        return handler

    def _register(
        self, session_id: str, fn: HandleFunction, timeout: float | None
    ) -> Registration:
        """Register on the trio thread (the caller makes sure it is there)."""
        client = self._require_client()
        if self._stop.is_set() or client.closed_reason is not None:
            raise ConnectionClosed(client.closed_reason or _CLOSED_REASON)
        context = client.permission_handler(session_id, self._wrap(fn), timeout=timeout)
        context.__enter__()
        self._registrations.add(context)
        return Registration(functools.partial(self._unregister, context))

    def _unregister(self, context: contextlib.AbstractContextManager[object]) -> None:
        self._registrations.discard(context)
        context.__exit__(None, None, None)

    def _require_client(self) -> Client:
        if self._client is None:
            raise ConnectionClosed("the client is not connected yet")
        return self._client

    @property
    def client(self) -> Client:
        """The trio :class:`~permclient.Client`; use it only from trio code (``submit``)."""
        return self._require_client()

    @property
    def closed_reason(self) -> str | None:
        """Why the connection closed, or ``None`` while it is open."""
        if self._client is not None and self._client.closed_reason is not None:
            return self._client.closed_reason
        return self._closed_reason if self._finished.is_set() else None

    @property
    def finished(self) -> bool:
        """True once the trio run is over: every question answered, the runtime stopped."""
        return self._finished.is_set()


def _calls(fn: object) -> tuple[object, object]:
    """``fn`` and, for an object, the ``__call__`` method that decides what calling it does."""
    return fn, inspect.getattr_static(type(fn), "__call__", None)


def _is_async_callable(fn: object) -> bool:
    """``async def`` functions, async generator functions, and objects whose call is one."""
    return any(
        inspect.iscoroutinefunction(f) or inspect.isasyncgenfunction(f) for f in _calls(fn)
    )


def _check_handle_function(fn: object, registrar: str) -> None:
    """Refuse, at registration, a handler this facade would never get an answer from."""
    if not callable(fn):
        raise TypeError(f"a permission handler must be callable, not {fn!r}")
    if _is_async_callable(fn):
        raise TypeError(
            f"{registrar}.permission_handler: {fn!r} is an async function, and this client "
            "has no event loop to run it on. Pass a plain function fn(handle) that answers "
            "through the handle (or returns a Decision); use asyncio_client() for asyncio "
            "coroutine handlers, or permclient.Client.permission_handler from trio code."
        )


def _call_handler(fn: HandleFunction, handle: PermissionHandle) -> None:
    try:
        returned = fn(handle)
    except Exception:
        log.exception("permission handler %r failed; answered cancelled", fn)
        if not handle.done:
            handle.cancel()
        return
    _answer_from_return(fn, handle, returned)


def _answer_from_return(fn: object, handle: PermissionHandle, returned: object) -> None:
    """What a handler function returned: ``None`` (it answers later) or its answer.

    Once the handler answered through the handle its return value is not an answer
    (``lambda h: h.answer(...)`` returns a bool). Otherwise a ``Decision`` answers
    (checked as any answer); anything else would leave the question open with no
    one to answer it, so it answers ``cancelled``.
    """
    if returned is None or handle.done:
        if inspect.iscoroutine(returned):
            returned.close()  # never awaited, and must not warn so
        return
    if isinstance(returned, Selected | Cancelled):
        handle.answer(returned)
        return
    if inspect.iscoroutine(returned):
        returned.close()
    log.error(
        "permission handler %r returned %r, neither None (answer through the handle later) "
        "nor a Decision; answered cancelled",
        fn,
        returned,
    )
    handle.cancel()


def _fail(future: concurrent.futures.Future[Any], exc: BaseException) -> None:
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        future.set_exception(exc)


# ------------------------------------------------------------------ guest mode


class GuestClient(_Embedded):
    """A permclient client running in trio guest mode on a host's event loop.

    Made by :func:`start_guest` (or the :func:`asyncio_client` / :func:`tk_client`
    adapters). Call its methods on the host's loop thread; handle methods are safe
    from any thread.
    """

    def request(self, method: str, params: Any = None) -> concurrent.futures.Future[Any]:
        """Send a request; returns a future of its result (see :meth:`submit`).

        The future fails with :class:`~permclient.RequestError` for an error
        response and :class:`~permclient.ConnectionClosed` once closed.
        """
        return self.submit(self._call, "request", method, params)

    def notify(self, method: str, params: Any = None) -> concurrent.futures.Future[None]:
        """Send a notification; returns a future done once it is queued."""
        return self.submit(self._call, "notify", method, params)

    async def _call(self, verb: str, method: str, params: Any) -> Any:
        client = self._require_client()
        if verb == "request":
            return await client.request(method, params)
        await client.notify(method, params)
        return None

    def permission_handler(
        self, session_id: str, fn: HandleFunction, *, timeout: float | None = None
    ) -> Registration:
        """Route ``session_id``'s permission requests to ``fn(handle)``, run via ``dispatch``.

        ``fn`` returns ``None`` and the UI answers the handle later, or it returns
        its answer (a ``Decision``); see the module doc. Registered when this
        returns. Returns a :class:`~permclient.Registration`: ``close()`` it (or
        leave its ``with`` block) to stop routing; questions still open with it are
        then answered ``cancelled`` and their handles withdrawn (on the run's next
        tick). With ``timeout`` (seconds), a question still open that long after
        it arrived is answered ``cancelled`` and its handle withdrawn. Call on the
        host's loop thread, after the client is ready. Raises :class:`TypeError`
        for an ``async def`` (or not callable) ``fn``, :class:`ValueError` for an
        empty id or a ``timeout`` that is not a positive number of seconds, and
        :class:`~permclient.ConnectionClosed` before the client is connected and
        once :meth:`close` was called.
        """
        _check_handle_function(fn, type(self).__name__)
        registration = self._register(session_id, fn, timeout)

        # Undone inside a trio tick: answering wakes the writer, which needs the run.
        def undo() -> None:
            self._soon(registration.close)

        return Registration(undo)

    def close(self) -> None:
        """Close the client: open questions answered ``cancelled``, the runtime stopped.

        Safe from any thread and idempotent; returns at once. The run's
        ``done_callback`` tells the host when everything has finished; keep the
        host loop running until then.
        """
        self._stop.set()
        self._soon(self._request_stop)


def start_guest(
    target: Target,
    *,
    run_sync_soon_threadsafe: Callable[[Callable[[], object]], object],
    done_callback: DoneCallback,
    on_ready: Callable[[BaseException | None], object] | None = None,
    dispatch: Dispatch | None = None,
    run_sync_soon_not_threadsafe: Callable[[Callable[[], object]], object] | None = None,
    host_uses_signal_set_wakeup_fd: bool = False,
    dialect: DialectName = "bridge",
    **open_kwargs: Any,
) -> GuestClient:
    """Start a client in trio guest mode on a host loop; returns a :class:`GuestClient`.

    ``target`` is an argv (spawned with :func:`~permclient.open_process`), a
    connected ``socket.socket`` (:func:`~permclient.open_client` over it), or a
    zero-argument factory returning an ``open_*`` context manager.
    ``run_sync_soon_threadsafe`` is the host's thread-safe "call soon" (see
    :func:`trio.lowlevel.start_guest_run`). ``on_ready(None)`` is called on the
    host's thread once connected, or ``on_ready(exc)`` if connecting failed.
    ``done_callback(None or exc)`` is called on the host's thread when the run is
    over, after every question was answered and the runtime stopped; a run ended
    by Ctrl-C passes a plain ``KeyboardInterrupt``, never an exception group.
    ``dispatch`` runs permission handlers and ``on_cancelled`` callbacks
    (default: ``run_sync_soon_threadsafe``, i.e. the host's loop thread).
    ``dialect`` and ``open_kwargs`` go to ``open_process``/``open_client``.
    """
    guest = GuestClient(
        _connector(target, dialect, open_kwargs), dispatch or run_sync_soon_threadsafe
    )

    def ready(error: BaseException | None) -> None:
        if on_ready is not None:
            on_ready(error)

    def done(outcome: Any) -> None:
        guest._finished.set()
        error: BaseException | None = getattr(outcome, "error", None)
        done_callback(_unwrap_interrupt(error) if error is not None else guest._startup_error)

    trio.lowlevel.start_guest_run(
        guest._main,
        ready,
        run_sync_soon_threadsafe=run_sync_soon_threadsafe,
        run_sync_soon_not_threadsafe=run_sync_soon_not_threadsafe,
        done_callback=done,
        host_uses_signal_set_wakeup_fd=host_uses_signal_set_wakeup_fd,
    )
    return guest


def _unwrap_interrupt(error: BaseException) -> BaseException:
    """Ctrl-C as itself: trio's exception groups wrap it on its way out of nurseries."""
    if isinstance(error, BaseExceptionGroup):
        interrupts, rest = error.split(KeyboardInterrupt)
        if interrupts is not None and rest is None:
            return KeyboardInterrupt().with_traceback(error.__traceback__)
    return error


# --------------------------------------------------------------------- asyncio


def _run_as_task(
    coroutine_fn: Callable[[PermissionRequest], Awaitable[Decision]], handle: PermissionHandle
) -> None:
    """Run an asyncio coroutine handler for ``handle``; its result is the answer."""
    import asyncio

    if handle.done:
        return  # withdrawn before its turn on the loop: no task for it
    try:
        task = asyncio.ensure_future(coroutine_fn(handle.request))
    except Exception:  # e.g. it returned no awaitable: exactly one answer, still
        log.exception("permission handler %r failed; answered cancelled", coroutine_fn)
        handle.cancel()
        return

    def finished(task: asyncio.Future[Decision]) -> None:
        if handle.done:
            return
        try:
            if task.cancelled() or task.exception() is not None:
                if not task.cancelled():
                    log.error("permission handler failed", exc_info=task.exception())
                handle.cancel()
            else:
                handle.answer(task.result())
        except Exception:  # exactly one answer, whatever went wrong
            log.exception("answering from a permission handler failed")
            handle.cancel()

    task.add_done_callback(finished)
    handle.on_cancelled(lambda _handle: task.cancel())


class AsyncioClient:
    """The asyncio face of a :class:`GuestClient` (made by :func:`asyncio_client`).

    Permission handlers may be plain functions ``fn(handle)`` (run on the loop; they
    return ``None`` and answer the handle later, or return their ``Decision``) or
    ``async def fn(request) -> Decision`` coroutine functions (run as asyncio tasks,
    cancelled when the question is withdrawn; the result is the answer).
    """

    def __init__(self, guest: GuestClient) -> None:
        self.guest = guest

    async def request(self, method: str, params: Any = None) -> Any:
        """Send a request and await its result; cancelling the awaiting task cancels it.

        Raises :class:`~permclient.RequestError` or :class:`~permclient.ConnectionClosed`.
        """
        import asyncio

        return await asyncio.wrap_future(self.guest.request(method, params))

    async def notify(self, method: str, params: Any = None) -> None:
        """Send a notification. Raises :class:`~permclient.ConnectionClosed` once closed."""
        import asyncio

        await asyncio.wrap_future(self.guest.notify(method, params))

    def permission_handler(
        self,
        session_id: str,
        handler: HandleFunction | Callable[[PermissionRequest], Awaitable[Decision]],
        *,
        timeout: float | None = None,
    ) -> Registration:
        """Route ``session_id``'s permission requests to ``handler``; see the class doc.

        ``timeout`` and the errors raised are those of :meth:`GuestClient.permission_handler`.
        """
        if any(inspect.isasyncgenfunction(f) for f in _calls(handler)):
            raise TypeError(
                f"asyncio_client.permission_handler: {handler!r} is an async generator "
                "function; a handler is an async def that returns a Decision (or a plain "
                "fn(handle))"
            )
        if not _is_async_callable(handler):
            return self.guest.permission_handler(
                session_id,
                cast(HandleFunction, handler),
                timeout=timeout,
            )
        coroutine_fn = cast(Callable[[PermissionRequest], Awaitable[Decision]], handler)
        return self.guest.permission_handler(
            session_id, functools.partial(_run_as_task, coroutine_fn), timeout=timeout
        )

    @property
    def closed_reason(self) -> str | None:
        """Why the connection closed, or ``None`` while it is open."""
        return self.guest.closed_reason

    def close(self) -> None:
        """Start closing (see :meth:`GuestClient.close`); the context exit waits for it."""
        self.guest.close()


@contextlib.asynccontextmanager
async def asyncio_client(
    target: Target,
    *,
    dialect: DialectName = "bridge",
    dispatch: Dispatch | None = None,
    **open_kwargs: Any,
) -> AsyncIterator[AsyncioClient]:
    """Run a client in trio guest mode on the running asyncio loop.

    ``async with asyncio_client([sys.executable, "-m", "simhost", "runtime"]) as c:``
    yields an :class:`AsyncioClient` once connected. Leaving the block (normally,
    by an exception, or by cancellation) answers every open question
    ``cancelled``, stops the runtime and waits until the trio run is over.
    ``dispatch`` defaults to the loop's ``call_soon_threadsafe``. One embedded
    run per loop at a time.

    Raises what connecting raised (e.g. ``FileNotFoundError``).
    """
    import asyncio

    loop = asyncio.get_running_loop()
    ready: asyncio.Future[None] = loop.create_future()
    done: asyncio.Future[BaseException | None] = loop.create_future()

    def on_ready(error: BaseException | None) -> None:
        if not ready.done():
            if error is None:
                ready.set_result(None)
            else:
                ready.set_exception(error)

    def on_done(error: BaseException | None) -> None:
        if not ready.done():
            ready.set_exception(error or ConnectionClosed("the run ended before connecting"))
        if not done.done():
            done.set_result(error)

    guest = start_guest(
        target,
        run_sync_soon_threadsafe=loop.call_soon_threadsafe,
        run_sync_soon_not_threadsafe=loop.call_soon,
        done_callback=on_done,
        on_ready=on_ready,
        dispatch=dispatch,
        host_uses_signal_set_wakeup_fd=True,
        dialect=dialect,
        **open_kwargs,
    )
    body_returned = False
    try:
        await asyncio.shield(ready)
        yield AsyncioClient(guest)
        body_returned = True
    finally:
        guest.close()
        cancelled = False
        while not done.done():
            try:
                await asyncio.shield(done)
            except asyncio.CancelledError:
                cancelled = True  # the trio run must finish before we go
        if ready.done() and not ready.cancelled():
            ready.exception()  # seen: e.g. closed while connecting, when the host was cancelled
        if cancelled:
            raise asyncio.CancelledError
    error = done.result()
    if body_returned and error is not None:
        raise error


# --------------------------------------------------------------------- tkinter


class _TkScheduler:
    """Run callables on Tk's thread: thread-safe through Tcl's ``after`` command."""

    def __init__(self, root: tkinter.Misc) -> None:
        self._root = root
        self._queue: deque[Callable[[], object]] = deque()
        self._command = root.register(self._run_one)

    def __call__(self, fn: Callable[[], object]) -> None:
        self._queue.append(fn)
        self._root.tk.call("after", "idle", self._command)

    def _run_one(self) -> None:
        self._queue.popleft()()


def tk_client(
    root: tkinter.Misc,
    target: Target,
    *,
    on_done: DoneCallback,
    on_ready: Callable[[BaseException | None], object] | None = None,
    dialect: DialectName = "bridge",
    **open_kwargs: Any,
) -> GuestClient:
    """Run a client in trio guest mode on tkinter's event loop.

    Call it on the Tk thread (before or inside ``mainloop``). Handlers and
    ``on_cancelled`` callbacks run on the Tk thread. To quit, call
    ``client.close()`` (e.g. from ``WM_DELETE_WINDOW``) and destroy the root in
    ``on_done``, which runs on the Tk thread once every question was answered and
    the runtime stopped: never destroy the root while the run is alive.
    """
    schedule = _TkScheduler(root)
    return start_guest(
        target,
        run_sync_soon_threadsafe=schedule,
        done_callback=on_done,
        on_ready=on_ready,
        dialect=dialect,
        **open_kwargs,
    )


# ------------------------------------------------------------ blocking facade


class _ThreadDispatch:
    """The default ``dispatch`` of the blocking facade: each call on a fresh worker thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._threads: set[threading.Thread] = set()

    def __call__(self, fn: Callable[[], object]) -> None:
        thread = threading.Thread(
            target=self._run, args=(fn,), name="permclient-handler", daemon=True
        )
        with self._lock:  # started under the lock: join() never sees an unstarted thread
            thread.start()
            self._threads.add(thread)

    def owns_current_thread(self) -> bool:
        """True on one of our worker threads (a handler or callback running)."""
        with self._lock:
            return threading.current_thread() in self._threads

    def _run(self, fn: Callable[[], object]) -> None:
        try:
            fn()
        except Exception:
            log.exception("a dispatched permission callback failed")
        finally:
            with self._lock:
                self._threads.discard(threading.current_thread())

    def join(self) -> None:
        while True:
            with self._lock:
                threads = [t for t in self._threads if t is not threading.current_thread()]
            if not threads:
                return
            for thread in threads:
                thread.join()


class BlockingClient(_Embedded):
    """A synchronous facade: trio in a background thread. Made by :func:`open_blocking`.

    Every method is safe from any thread, several at once. Use it as a context
    manager, or call :meth:`close`.
    """

    def __init__(
        self, connect: Callable[[], AbstractAsyncContextManager[Client]], dispatch: Dispatch | None
    ) -> None:
        self._thread_dispatch: _ThreadDispatch | None = None
        if dispatch is None:
            dispatch = self._thread_dispatch = _ThreadDispatch()
        super().__init__(connect, dispatch)
        self._thread: threading.Thread | None = None

    def _start(self) -> None:
        started = threading.Event()
        error: list[BaseException] = []

        def ready(exc: BaseException | None) -> None:
            if exc is not None:
                error.append(exc)
            started.set()

        def run() -> None:
            try:
                trio.run(self._main, ready)
            except BaseException as exc:
                if not started.is_set():
                    error.append(exc)
                else:
                    log.exception("the permclient thread failed")
            finally:
                self._finished.set()
                started.set()

        self._thread = threading.Thread(target=run, name="permclient-trio", daemon=True)
        self._thread.start()
        try:
            started.wait()
        except BaseException:  # Ctrl-C while connecting: stop the run, leave nothing behind
            self._stop.set()
            self._soon(self._request_stop)
            self._thread.join(_ABANDON_JOIN_S)
            raise
        if error:
            self._thread.join()
            raise error[0]

    def _check_thread(self) -> None:
        if self._thread is threading.current_thread():
            raise RuntimeError("a blocking permclient call on its own trio thread would deadlock")

    def _on_trio_thread(self, fn: Callable[[], T]) -> T:
        if self._thread is threading.current_thread():
            return fn()
        try:
            return trio.from_thread.run_sync(fn, trio_token=self._token)
        except trio.RunFinishedError:
            raise ConnectionClosed(self._closed_reason or _CLOSED_REASON) from None

    def request(self, method: str, params: Any = None, *, timeout: float | None = None) -> Any:
        """Send a request and block until its result.

        With ``timeout`` (seconds), give up after that long: the request is
        cancelled on the wire (the dialect's cancel notification, or the turn's
        cancel) and :class:`TimeoutError` is raised. Raises
        :class:`~permclient.RequestError` for an error response,
        :class:`~permclient.ConnectionClosed` if the connection is or becomes
        closed, and :class:`RuntimeError` on the client's own trio thread.
        """
        self._check_thread()
        future = self.submit(self._call, "request", method, params)
        return self._wait(future, timeout)

    def notify(self, method: str, params: Any = None) -> None:
        """Send a notification (returns once queued). Raises like :meth:`request`."""
        self._check_thread()
        self._wait(self.submit(self._call, "notify", method, params), None)

    async def _call(self, verb: str, method: str, params: Any) -> Any:
        client = self._require_client()
        if verb == "request":
            return await client.request(method, params)
        await client.notify(method, params)
        return None

    @staticmethod
    def _wait(future: concurrent.futures.Future[T], timeout: float | None) -> T:
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            if not future.cancel():  # the result came as the timeout fired: take it
                return future.result(0)
            raise TimeoutError(f"no response in {timeout} s; the request was cancelled") from None
        except BaseException:
            future.cancel()  # KeyboardInterrupt while waiting: give the request up
            raise

    def permission_handler(
        self, session_id: str, fn: HandleFunction, *, timeout: float | None = None
    ) -> Registration:
        """Route ``session_id``'s permission requests to ``fn(handle)``, run via ``dispatch``.

        ``fn`` returns ``None`` and the UI answers the handle later, or it returns
        its answer (a ``Decision``); see the module doc. Registered when this
        returns. The :class:`~permclient.Registration` undoes it (``close()`` or a
        ``with`` block); questions still open with it are then answered
        ``cancelled`` and withdrawn. With ``timeout`` (seconds), a question still
        open that long after it arrived is answered ``cancelled`` and withdrawn.
        Raises :class:`TypeError` for an ``async def`` (or not callable) ``fn``,
        :class:`ValueError` for an empty id or a ``timeout`` that is not a positive
        number of seconds, and :class:`~permclient.ConnectionClosed` once closed or
        closing.
        """
        _check_handle_function(fn, type(self).__name__)
        registration = self._on_trio_thread(lambda: self._register(session_id, fn, timeout))
        return Registration(functools.partial(self._close_registration, registration))

    def _close_registration(self, registration: Registration) -> None:
        with contextlib.suppress(ConnectionClosed):
            self._on_trio_thread(registration.close)

    def cancel_permissions(self, session_id: str) -> None:
        """Answer every open question of ``session_id`` ``cancelled`` now (withdrawn)."""
        self._on_trio_thread(lambda: self._require_client().cancel_permissions(session_id))

    def close(self) -> None:
        """Close: every open question answered ``cancelled``, the runtime stopped.

        Blocks until the trio thread is done and the dispatched ``on_cancelled``
        callbacks have run (handlers should return promptly; a default-dispatch
        handler still running is waited for). Idempotent and safe from any thread
        but the trio thread itself, several at once. Called from a default-dispatch
        worker (a handler, an ``on_cancelled`` callback) it waits only for the
        trio run to finish, never for the workers (itself among them).
        """
        self._check_thread()
        self._stop.set()
        self._soon(self._request_stop)
        # No lock held while waiting: a callback that closes too must not wait on us.
        if self._thread is not None:
            self._thread.join()
        dispatch = self._thread_dispatch
        if dispatch is not None and not dispatch.owns_current_thread():
            dispatch.join()

    def __enter__(self) -> BlockingClient:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()


def open_blocking(
    target: Target,
    *,
    dialect: DialectName = "bridge",
    dispatch: Dispatch | None = None,
    **open_kwargs: Any,
) -> BlockingClient:
    """Connect and return a :class:`BlockingClient` running trio in a background thread.

    ``target`` as for :func:`start_guest`. ``dispatch`` runs permission handlers
    and ``on_cancelled`` callbacks, e.g. a UI toolkit's "run on the main thread"
    (default: each on a fresh worker thread). ``dialect`` and ``open_kwargs`` go
    to ``open_process``/``open_client``. Returns once connected.

    Raises what connecting raised (e.g. ``FileNotFoundError``). A
    ``KeyboardInterrupt`` (or any exception) while waiting for the connection
    cancels the attempt, waits (bounded) for the trio thread to end, and is re-raised.
    """
    client = BlockingClient(_connector(target, dialect, open_kwargs), dispatch)
    client._start()
    return client


__all__ = [
    "AsyncioClient",
    "BlockingClient",
    "Dispatch",
    "DoneCallback",
    "GuestClient",
    "HandleFunction",
    "PermissionHandle",
    "Target",
    "asyncio_client",
    "open_blocking",
    "start_guest",
    "tk_client",
]
