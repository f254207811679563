"""Start a handler without a task or cancel scope of its own, and give it both if it blocks.

Entering and leaving a ``trio.CancelScope`` costs about as much as everything else
an approval does, and so does a trio task. A handler that answers without
blocking (a policy, a cache hit, an auto-approver) needs neither: nothing can run
while it runs, so nothing can cancel it. :func:`start` steps the handler once, by
hand, in the calling task; if it finishes, that is the answer. If it blocks, the
request's scope is entered right there, before the blocking trap reaches trio,
and the returned :class:`Relay` runs the rest of the handler inside it, exactly as
if it had been entered first; the calling task must then stay with that handler
(the client hands the rest of its work to a new task). The scope itself is
created only then, too. Each handler runs in a copy of the caller's context, so
context variables one handler sets never reach the next.

One case needs trio's internals: a handler that blocks while a cancel scope or
nursery of its own is open (``with trio.move_on_after(60): await ask()``). Our
scope must then sit *outside* the handler's, so its cancel status is spliced in
between the task's and the handler's outermost one. This relies on trio's
``Task._cancel_status`` / ``CancelStatus.parent``; :data:`SPLICE_SUPPORTED` is
checked once at import and, on a trio without them, every handler is treated as
blocking and runs inside its scope from the start (the plain, slower path).
"""

from __future__ import annotations

import contextvars
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, Protocol, TypeVar

import trio

T = TypeVar("T")
A = TypeVar("A")


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
"""Whether this trio lets :func:`start` run a handler that blocks with scopes of its own."""


class ScopeOwner(Protocol):
    """What :func:`start` runs a handler for: something owning its cancel scope."""

    @property
    def scope(self) -> trio.CancelScope:
        """The scope; created on first use, so a handler that never blocks never makes one."""
        ...


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


def start(owner: ScopeOwner, handler: Callable[[A], Awaitable[T]], arg: A) -> tuple[bool, Any]:
    """Call ``handler(arg)`` and run it until it first blocks.

    Returns ``(True, result)`` if it finished, or ``(False, awaitable)``: awaiting
    that (in this same task) runs the rest inside ``owner.scope`` and returns the
    result, or ``None`` if the scope caught a cancellation (callers check for their
    own cancel before trusting a result). A handler that raises before blocking
    raises here.
    """
    context = contextvars.copy_context()
    awaitable = context.run(handler, arg)
    if not SPLICE_SUPPORTED or type(awaitable) is not types.CoroutineType:
        # Taken as blocking: its scope is entered before it starts, the plain way.
        steps = _await(awaitable)
        scope = owner.scope
        scope.__enter__()
        return False, Relay(context, steps, scope, _GONE)
    task = trio.lowlevel.current_task()
    base = task._cancel_status
    try:
        yielded = context.run(awaitable.send, None)
    except StopIteration as done:
        return True, done.value
    scope = owner.scope
    _enter_outside_handler(task, base, scope)
    return False, Relay(context, awaitable, scope, yielded)


class Relay(Generator[Any, Any, T]):
    """The rest of a blocked handler, inside its entered scope (``await`` delegates here).

    A small object rather than a generator: one is alive per pending request, and
    a generator frame is four times its size.
    """

    __slots__ = ("_context", "_coro", "_scope", "_yielded")

    def __init__(
        self,
        context: contextvars.Context,
        coro: Coroutine[Any, Any, T] | Generator[Any, Any, T],
        scope: trio.CancelScope,
        yielded: Any,
    ) -> None:
        self._context = context
        self._coro = coro
        self._scope = scope
        self._yielded = yielded  # the trap it blocked on, not yet handed to trio (or _GONE)

    def __await__(self) -> Generator[Any, Any, T]:
        return self

    def send(self, value: Any) -> Any:
        if self._yielded is not _GONE:
            yielded, self._yielded = self._yielded, _GONE
            return yielded
        try:
            return self._context.run(self._coro.send, value)
        except StopIteration:
            self._scope.__exit__(None, None, None)
            raise
        except BaseException as exc:
            if self._scope.__exit__(type(exc), exc, exc.__traceback__):
                raise StopIteration(None) from None  # the scope caught a cancellation
            raise

    def throw(self, typ: Any, value: Any = None, traceback: Any = None) -> Any:
        exc = typ if isinstance(typ, BaseException) else (value or typ())
        self._yielded = _GONE
        try:
            return self._context.run(self._coro.throw, exc)
        except StopIteration:
            self._scope.__exit__(None, None, None)
            raise
        except BaseException as raised:
            if self._scope.__exit__(type(raised), raised, raised.__traceback__):
                raise StopIteration(None) from None
            raise

    def close(self) -> None:
        self._coro.close()


_GONE: Any = object()


def _await(awaitable: Awaitable[T]) -> Generator[Any, Any, T]:
    try:
        method = type(awaitable).__await__
    except AttributeError:
        raise TypeError(
            f"a handler must return an awaitable, not {type(awaitable).__name__}"
        ) from None
    return method(awaitable)
