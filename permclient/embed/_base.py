"""What every embedding shares: a trio run the host does not run itself, holding one client.

:class:`Embedded` connects, keeps the client and the open permission handles, runs
what the host submits, and tears everything down; :mod:`.guest` and
:mod:`.blocking` decide where its trio run lives (the host's loop, or a thread).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import os
import socket
import threading
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from typing import Any, Final, TypeAlias, TypeVar

import trio

from .._client import Client, Registration, open_client
from .._connection import DialectName
from .._errors import ConnectionClosed
from .._process import open_process
from ._handle import Dispatch, HandleFunction, PermissionHandle, handler_for, withdraw_all

__all__ = ["CLOSED_REASON", "Embedded", "Target", "connector", "fail_future"]

T = TypeVar("T")

Target: TypeAlias = (
    "Sequence[str] | socket.socket | Callable[[], AbstractAsyncContextManager[Client]]"
)
"""What to connect to: an argv to spawn, a connected socket, or an ``open_*`` factory."""

CLOSED_REASON: Final = "the client was closed"


def connector(
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


class Embedded:
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
                    ) or CLOSED_REASON
                    # The connection is over: what submit() started must not keep the
                    # run alive (its futures fail with ConnectionClosed).
                    nursery.cancel_scope.cancel()
        finally:
            # Teardown already withdrew them (the handlers were cancelled); a handle
            # whose handler never got to run must not stay open either.
            withdraw_all(self._handles)

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
                fail_future(future, ConnectionClosed(self._closed_reason or CLOSED_REASON))
                return
            try:
                nursery.start_soon(self._run_submitted, future, async_fn, args)
            except RuntimeError:  # the nursery is closed to new arrivals
                fail_future(future, ConnectionClosed(self._closed_reason or CLOSED_REASON))

        if not self._soon(start):
            fail_future(future, ConnectionClosed(self._closed_reason or CLOSED_REASON))
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
                fail_future(future, exc)
                return
            except BaseException:
                fail_future(future, ConnectionClosed(self._closed_reason or CLOSED_REASON))
                raise
            with contextlib.suppress(concurrent.futures.InvalidStateError):
                future.set_result(result)

    def _register(
        self, session_id: str, fn: HandleFunction, timeout: float | None
    ) -> tuple[Registration, Callable[[], None]]:
        """Register on the trio thread (the caller makes sure it is there).

        Returns the registration, and a call that stops routing to it at once
        without answering anything (see ``Client._permission_handler``).
        """
        client = self._require_client()
        if self._stop.is_set() or client.closed_reason is not None:
            raise ConnectionClosed(client.closed_reason or CLOSED_REASON)
        context, stop_routing = client._permission_handler(
            session_id,
            handler_for(fn, dispatch=self._dispatch, soon=self._soon, open_handles=self._handles),
            timeout,
        )
        self._registrations.add(context)
        return Registration(functools.partial(self._unregister, context)), stop_routing

    def _unregister(self, context: contextlib.AbstractContextManager[object]) -> None:
        self._registrations.discard(context)
        context.__exit__(None, None, None)

    async def _call(self, verb: str, method: str, params: Any) -> Any:
        """A request's result, or ``None`` once a notification is queued (on the trio thread)."""
        client = self._require_client()
        if verb == "request":
            return await client.request(method, params)
        await client.notify(method, params)
        return None

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


def fail_future(future: concurrent.futures.Future[Any], exc: BaseException) -> None:
    with contextlib.suppress(concurrent.futures.InvalidStateError):
        future.set_exception(exc)
