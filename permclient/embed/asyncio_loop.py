"""On a running asyncio loop: :func:`asyncio_client` yields an :class:`AsyncioClient`.

Trio runs in guest mode on the loop (:mod:`.guest`); permission handlers may be
``async def`` coroutine functions, run as asyncio tasks. asyncio itself is imported
only when these are called.
"""

from __future__ import annotations

import contextlib
import functools
import inspect
import logging
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, cast

from .._client import Registration
from .._connection import DialectName
from .._errors import ConnectionClosed
from .._wire import Decision, PermissionRequest
from ._base import Target
from ._handle import (
    Dispatch,
    HandleFunction,
    PermissionHandle,
    callables_of,
    is_async_callable,
)
from .guest import GuestClient, start_guest

__all__ = ["AsyncioClient", "asyncio_client"]

log = logging.getLogger("permclient.embed")


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
        if any(inspect.isasyncgenfunction(f) for f in callables_of(handler)):
            raise TypeError(
                f"asyncio_client.permission_handler: {handler!r} is an async generator "
                "function; a handler is an async def that returns a Decision (or a plain "
                "fn(handle))"
            )
        if not is_async_callable(handler):
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
        host_uses_signal_set_wakeup_fd=_host_has_wakeup_fd(),
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


def _host_has_wakeup_fd() -> bool:
    """Whether the loop's thread already has a ``signal.set_wakeup_fd`` (asyncio sets
    one only with ``loop.add_signal_handler``; ``asyncio.run``'s Ctrl-C handler needs
    none). Without one, trio sets its own: a Ctrl-C the kernel gives to another
    thread (trio's I/O thread, one blocked reading stdin) must still wake the loop,
    or the handler waits for the loop's next event, which may never come."""
    try:
        current = signal.set_wakeup_fd(-1)
    except ValueError:  # not the main thread: signals are not handled here at all
        return True
    signal.set_wakeup_fd(current)
    return current != -1
