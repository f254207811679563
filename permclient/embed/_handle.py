"""The permission handle, and how a question reaches the host's handler function and back.

:class:`PermissionHandle` is one open question as the host's UI sees it. Every
embedding (guest mode, asyncio, tkinter, the blocking facade) routes a question the
same way, through :func:`handler_for`: it makes a handle, runs the host's
``fn(handle)`` through ``dispatch``, and waits on the trio side until the handle is
answered or the question is withdrawn.
"""

from __future__ import annotations

import functools
import inspect
import logging
import threading
from collections.abc import Callable
from typing import TypeAlias

from .._handlers import Deferred, Question, WithdrawnBy, deferred
from .._wire import Cancelled, Decision, PermissionRequest, Selected

__all__ = [
    "Dispatch",
    "HandleFunction",
    "PermissionHandle",
    "answer_from_return",
    "call_handler",
    "callables_of",
    "check_handle_function",
    "handler_for",
    "is_async_callable",
    "withdraw_all",
]

log = logging.getLogger("permclient.embed")

Dispatch: TypeAlias = Callable[[Callable[[], object]], object]
"""Runs a callable soon on the thread the host chooses; must be safe from any thread."""
HandleFunction: TypeAlias = Callable[["PermissionHandle"], object]
"""A permission handler for an embedded client: shows ``handle.request``, then returns.

It returns ``None`` (the UI answers the handle later) or, knowing the answer at
once, a :class:`~permclient.Decision`.
"""


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
        self, request: PermissionRequest, deliver: Callable[[], object], dispatch: Dispatch
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
            # Exact types, as the core checks them: a subclass is not an answer there,
            # so the handle must not report one as given.
            if type(decision) is Selected:
                option_id = decision.option_id
                if type(option_id) is str and option_id in self._offered:
                    return decision
            elif type(decision) is Cancelled:
                return decision
            log.warning(
                "answer of type %s is not an offered choice: answered cancelled",
                type(decision).__qualname__,
            )
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


def handler_for(
    fn: HandleFunction,
    *,
    dispatch: Dispatch,
    soon: Callable[[Callable[[], object]], object],
    open_handles: set[PermissionHandle],
) -> Deferred:
    """The deferred permission handler that asks ``fn`` through a :class:`PermissionHandle`.

    ``dispatch`` runs ``fn(handle)`` (and ``on_cancelled`` callbacks) on the host's
    thread; ``soon`` runs a callable on the trio thread from any thread (a no-op
    once the run is over). Each open handle is in ``open_handles`` while its
    question waits. No task waits for the answer: it reaches the question through
    ``soon``, and a withdrawal reaches the handle through the question.
    """

    def ask(question: Question) -> None:
        handle = PermissionHandle(question.request, lambda: soon(deliver), dispatch)

        def deliver() -> None:  # on the trio thread: the host answered
            open_handles.discard(handle)
            if question.done:
                return  # withdrawn first: the handle was told then
            decision = handle._take()
            question.answer(decision if decision is not None else Cancelled())

        def withdrawn(by: WithdrawnBy) -> None:
            open_handles.discard(handle)
            handle._withdraw()

        open_handles.add(handle)
        question.on_withdraw(withdrawn)
        try:
            dispatch(functools.partial(call_handler, fn, handle))
        except Exception:
            log.exception("dispatch failed; permission answered cancelled")
            handle.cancel()

    return deferred(ask)


def withdraw_all(handles: set[PermissionHandle]) -> None:
    """Withdraw every handle in ``handles`` (the run is over) and empty the set."""
    for handle in list(handles):
        handle._withdraw()
    handles.clear()


def callables_of(fn: object) -> tuple[object, object]:
    """``fn`` and, for an object, the ``__call__`` method that decides what calling it does."""
    return fn, inspect.getattr_static(type(fn), "__call__", None)


def is_async_callable(fn: object) -> bool:
    """``async def`` functions, async generator functions, and objects whose call is one."""
    return any(
        inspect.iscoroutinefunction(f) or inspect.isasyncgenfunction(f) for f in callables_of(fn)
    )


def check_handle_function(fn: object, registrar: str) -> None:
    """Refuse, at registration, a handler this facade would never get an answer from."""
    if not callable(fn):
        raise TypeError(f"a permission handler must be callable, not {fn!r}")
    if is_async_callable(fn):
        raise TypeError(
            f"{registrar}.permission_handler: {fn!r} is an async function, and this client "
            "has no event loop to run it on. Pass a plain function fn(handle) that answers "
            "through the handle (or returns a Decision); use asyncio_client() for asyncio "
            "coroutine handlers, or permclient.Client.permission_handler from trio code."
        )


def call_handler(fn: HandleFunction, handle: PermissionHandle) -> None:
    try:
        returned = fn(handle)
    except Exception:
        log.exception("permission handler %r failed; answered cancelled", fn)
        if not handle.done:
            handle.cancel()
        return
    answer_from_return(fn, handle, returned)


def answer_from_return(fn: object, handle: PermissionHandle, returned: object) -> None:
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
