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


@trio.lowlevel.enable_ki_protection  # a Ctrl-C half way would leave the statuses torn
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
    that at once, in this same task, runs the rest inside ``owner.scope`` (entered
    on that first await) and in the handler's own context (which becomes the
    task's: the task belongs to the handler from then on), and returns the result,
    or ``None`` if the scope caught a cancellation (callers check for their own
    cancel before trusting a result). A handler that raises before blocking raises
    here.
    """
    context = contextvars.copy_context()
    awaitable = context.run(handler, arg)
    if not SPLICE_SUPPORTED or type(awaitable) is not types.CoroutineType:
        # Taken as blocking: its scope is entered before it starts, the plain way.
        return False, Relay(_await(awaitable), owner, context, None, _NOT_STARTED)
    base = trio.lowlevel.current_task()._cancel_status
    try:
        yielded = context.run(awaitable.send, None)
    except StopIteration as done:
        return True, done.value
    return False, Relay(awaitable, owner, context, base, yielded)


class Relay(Generator[Any, Any, T]):
    """The rest of a blocked handler, inside its scope (``await`` delegates here).

    A small object rather than a generator: one is alive per pending request, and
    a generator frame is several times its size.
    """

    __slots__ = ("_base", "_context", "_coro", "_owner", "_yielded")

    def __init__(
        self,
        coro: Coroutine[Any, Any, T] | Generator[Any, Any, T],
        owner: ScopeOwner,
        context: contextvars.Context,
        base: Any,
        yielded: Any,
    ) -> None:
        self._coro = coro
        self._owner = owner
        # Until the first send: what entering the scope needs.
        self._context: contextvars.Context | None = context
        self._base = base  # the task's cancel status when the handler started
        self._yielded = yielded  # the trap it blocked on, or _NOT_STARTED

    @property
    def owner(self) -> ScopeOwner:
        """What :func:`start` was given: the owner of the scope the rest runs in."""
        return self._owner

    def __await__(self) -> Generator[Any, Any, T]:
        return self

    def send(self, value: Any) -> Any:
        if self._context is not None:
            return self._begin()
        return self._step(self._coro.send, value)

    def throw(self, typ: Any, value: Any = None, traceback: Any = None) -> Any:
        exc = _exception(typ, value, traceback)
        if self._context is not None:  # never awaited: no scope to leave
            self._context = None
            return self._coro.throw(exc)
        return self._step(self._coro.throw, exc)

    def _begin(self) -> Any:
        context, self._context = self._context, None
        assert context is not None
        task = trio.lowlevel.current_task()
        # From here on trio runs each step of the task in the handler's context
        # (and trio.from_thread can swap it, as in any task).
        task.context = context
        yielded, self._yielded = self._yielded, None
        if yielded is _NOT_STARTED:
            self._owner.scope.__enter__()
            return self._step(context.run, self._coro.send, None)
        _enter_outside_handler(task, self._base, self._owner.scope)
        self._base = None
        return yielded

    def _step(self, call: Callable[..., Any], *args: Any) -> Any:
        try:
            return call(*args)
        except StopIteration:
            self._owner.scope.__exit__(None, None, None)
            raise
        except BaseException as exc:
            if self._owner.scope.__exit__(type(exc), exc, exc.__traceback__):
                raise StopIteration(None) from None  # the scope caught a cancellation
            raise


_NOT_STARTED: Any = object()


def _exception(typ: Any, value: Any, traceback: Any) -> BaseException:
    """The exception ``throw(typ, value, traceback)`` means, as generators read it."""
    if isinstance(typ, BaseException):
        exc = typ
    elif isinstance(value, typ):
        exc = value
    elif value is None:
        exc = typ()
    elif isinstance(value, tuple):
        exc = typ(*value)
    else:
        exc = typ(value)
    return exc if traceback is None else exc.with_traceback(traceback)


def _await(awaitable: Awaitable[T]) -> Generator[Any, Any, T]:
    try:
        method = type(awaitable).__await__
    except AttributeError:
        raise TypeError(
            f"a handler must return an awaitable, not {type(awaitable).__name__}"
        ) from None
    steps = method(awaitable)
    if isinstance(steps, types.GeneratorType | types.CoroutineType):
        return steps
    return _as_generator(steps)  # `await` takes any iterator; give it send and throw


def _as_generator(steps: Any) -> Generator[Any, Any, T]:
    return (yield from steps)  # type: ignore[no-any-return]
