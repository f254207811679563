"""Trio guest mode on any host event loop: :class:`GuestClient`, made by :func:`start_guest`.

The host lends its loop through a thread-safe "call soon"; trio runs on it as a
guest (:func:`trio.lowlevel.start_guest_run`). The asyncio and tkinter adapters
(:mod:`.asyncio_loop`, :mod:`.tk_loop`) are built on this.
"""

from __future__ import annotations

import concurrent.futures
from collections.abc import Callable
from typing import Any, TypeAlias

import trio

from .._client import Registration
from .._connection import DialectName
from ._base import Embedded, Target, connector
from ._handle import Dispatch, HandleFunction, check_handle_function

__all__ = ["DoneCallback", "GuestClient", "start_guest"]

DoneCallback: TypeAlias = Callable[[BaseException | None], object]
"""Told, on the host's thread, that the embedded run finished: ``None`` or its error."""


class GuestClient(Embedded):
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

    def permission_handler(
        self, session_id: str, fn: HandleFunction, *, timeout: float | None = None
    ) -> Registration:
        """Route ``session_id``'s permission requests to ``fn(handle)``, run via ``dispatch``.

        ``fn`` returns ``None`` and the UI answers the handle later, or it returns
        its answer (a ``Decision``); see the module doc. Registered when this
        returns. Returns a :class:`~permclient.Registration`: ``close()`` it (or
        leave its ``with`` block), on the host's loop thread too, to stop routing,
        at once; questions still open with it are then answered ``cancelled`` and
        their handles withdrawn (on the run's next tick). With ``timeout``
        (seconds), a question still open that long after it arrived is answered
        ``cancelled`` and its handle withdrawn. Call on the
        host's loop thread, after the client is ready. Raises :class:`TypeError`
        for an ``async def`` (or not callable) ``fn``, :class:`ValueError` for an
        empty id or a ``timeout`` that is not a positive number of seconds, and
        :class:`~permclient.ConnectionClosed` before the client is connected and
        once :meth:`close` was called.
        """
        check_handle_function(fn, type(self).__name__)
        registration, stop_routing = self._register(session_id, fn, timeout)

        def undo() -> None:
            # No question reaches fn from now on, also one read before the next
            # tick; the open ones are answered inside that tick (answering wakes
            # the writer, which needs the run).
            stop_routing()
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
        connector(target, dialect, open_kwargs), dispatch or run_sync_soon_threadsafe
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
