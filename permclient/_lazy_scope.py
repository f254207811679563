"""Run a handler coroutine inside a cancel scope that is entered only if it blocks.

Entering and leaving a ``trio.CancelScope`` costs about as much as everything else
an approval does. A handler that answers without blocking (a policy, a cache hit, an
auto-approver) can never be cancelled, because nothing can run while it runs: it
does not need the scope. So :func:`run_scoped` steps the handler once by hand; if
it finishes, that is the answer and no scope was ever entered. If it blocks, the
scope is entered right there, before the blocking trap reaches trio, and the
rest of the handler runs inside it exactly as if it had been entered first.

One case needs trio's internals: a handler that blocks while a cancel scope or
nursery of its own is open (``with trio.move_on_after(60): await ask()``). Our
scope must then sit *outside* the handler's, so its cancel status is spliced in
between the task's and the handler's outermost one. This relies on trio's
``Task._cancel_status`` / ``CancelStatus.parent``; :data:`SPLICE_SUPPORTED` is
checked once at import and, on a trio without them, every handler simply runs
inside the scope from the start (the plain, slower path).
"""

from __future__ import annotations

import types
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, TypeVar

import trio

T = TypeVar("T")


def _splice_supported() -> bool:
    def fields(cls: object) -> set[str]:
        return {field.name for field in getattr(cls, "__attrs_attrs__", ())}

    run = getattr(getattr(trio, "_core", None), "_run", None)
    parent = getattr(getattr(run, "CancelStatus", None), "parent", None)
    return (
        "_cancel_status" in fields(trio.lowlevel.Task)
        and "_cancel_status" in fields(trio.CancelScope)
        and callable(getattr(trio.lowlevel.Task, "_activate_cancel_status", None))
        and isinstance(parent, property)
        and parent.fset is not None
    )


SPLICE_SUPPORTED: bool = _splice_supported()
"""Whether this trio lets :func:`run_scoped` skip the scope of a handler that never blocks."""


@types.coroutine
def _resume(coro: Coroutine[Any, Any, T], yielded: Any) -> Generator[Any, Any, T]:
    """Go on running ``coro``, already started and suspended on ``yielded``."""
    while True:
        try:
            sent = yield yielded
        except BaseException as exc:
            try:
                yielded = coro.throw(exc)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]
        else:
            try:
                yielded = coro.send(sent)
            except StopIteration as done:
                return done.value  # type: ignore[no-any-return]


def _enter_outside_handler(task: Any, base: Any, scope: trio.CancelScope) -> None:
    """Enter ``scope`` in ``task`` as if before the handler's own open scopes."""
    top = task._cancel_status
    if top is base:  # the usual case: the handler holds no scope of its own
        scope.__enter__()
        return
    outermost = top
    while outermost.parent is not base:
        outermost = outermost.parent
    task._activate_cancel_status(base)
    scope.__enter__()
    outermost.parent = scope._cancel_status
    task._activate_cancel_status(top)


async def run_scoped(scope: trio.CancelScope, call: Callable[[], Awaitable[T]]) -> T:
    """Return ``await call()`` run inside ``scope``, entering it only if ``call`` blocks.

    Behaves like ``with scope: return await call()``: if ``scope`` catches a
    cancellation, this returns ``None``, so callers check ``scope.cancel_called``
    before trusting the result. A call that finishes without blocking never
    enters ``scope`` (it could not have been cancelled while it ran).
    """
    awaitable = call()
    if not SPLICE_SUPPORTED or not isinstance(awaitable, types.CoroutineType):
        with scope:
            return await awaitable
        return None  # type: ignore[return-value]  # the scope caught a cancellation
    task = trio.lowlevel.current_task()
    base = task._cancel_status
    coro: Coroutine[Any, Any, T] = awaitable
    try:
        yielded = coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    _enter_outside_handler(task, base, scope)
    try:
        result = await _resume(coro, yielded)
    except BaseException as exc:
        if scope.__exit__(type(exc), exc, exc.__traceback__):
            return None  # type: ignore[return-value]  # the scope caught a cancellation
        raise
    scope.__exit__(None, None, None)
    return result
