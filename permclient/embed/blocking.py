"""Hosts with no event loop: :func:`open_blocking` returns a :class:`BlockingClient`.

Trio runs in a background thread behind a synchronous facade whose methods are
safe from any thread. By default each permission handler runs on a fresh worker
thread; pass ``dispatch`` to run them on a UI toolkit's main thread instead.
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import functools
import logging
import threading
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any, Final, TypeVar

import trio

from .._client import Client, Registration
from .._connection import DialectName
from .._errors import ConnectionClosed
from ._base import CLOSED_REASON, Embedded, Target, connector
from ._handle import Dispatch, HandleFunction, check_handle_function

__all__ = ["BlockingClient", "open_blocking"]

log = logging.getLogger("permclient.embed")

T = TypeVar("T")

_ABANDON_JOIN_S: Final = 10.0
"""How long an interrupted ``open_blocking`` waits for its trio thread to stop."""


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


class BlockingClient(Embedded):
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
        try:
            self._thread.start()  # (a Ctrl-C may land in start() itself)
            started.wait()
        except BaseException:  # Ctrl-C while connecting: stop the run, leave nothing behind
            self._stop.set()
            self._soon(self._request_stop)
            if self._thread.ident is not None:  # (started: a Ctrl-C in start() may be before)
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
            raise ConnectionClosed(self._closed_reason or CLOSED_REASON) from None

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
        check_handle_function(fn, type(self).__name__)
        registration, _ = self._on_trio_thread(lambda: self._register(session_id, fn, timeout))
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
    client = BlockingClient(connector(target, dialect, open_kwargs), dispatch)
    client._start()
    return client
