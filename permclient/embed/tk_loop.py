"""On tkinter's event loop: :func:`tk_client` returns a :class:`~.guest.GuestClient`.

Trio runs in guest mode on Tk's loop (:mod:`.guest`); handlers and ``on_cancelled``
callbacks run on the Tk thread. tkinter itself is never imported here.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .._connection import DialectName
from ._base import Target
from .guest import DoneCallback, GuestClient, start_guest

if TYPE_CHECKING:
    import tkinter

__all__ = ["tk_client"]


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
