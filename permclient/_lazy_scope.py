"""Run a handler coroutine inside a cancel scope that is entered only if it blocks.

Entering and leaving a ``trio.CancelScope`` costs about as much as everything else
an approval does. A handler that answers without blocking (a policy, a cache hit, an
auto-approver) can never be cancelled, because nothing can run while it runs: it
does not need the scope. So :func:`scoped` steps the handler once by hand; if
it finishes, that is the answer and no scope was ever entered. If it blocks, the
scope is entered right there, before the blocking trap reaches trio, and the
rest of the handler runs inside it exactly as if it had been entered first.
The scope itself is created only then, too.

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
from collections.abc import Awaitable, Coroutine, Generator
from typing import Any, Protocol, TypeVar

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
"""Whether this trio lets :func:`scoped` skip the scope of a handler that never blocks."""


class ScopeOwner(Protocol):
    """What :func:`scoped` runs a handler for: something owning its cancel scope."""

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


def scoped(owner: ScopeOwner, awaitable: Awaitable[T]) -> Awaitable[T | None]:
    """Await ``awaitable`` inside ``owner.scope``, entering the scope only if it blocks.

    ``await scoped(owner, handler(arg))`` behaves like ``with owner.scope: return
    await handler(arg)``: if the scope catches a cancellation it returns ``None``, so
    callers check for their own cancel before trusting the result. A handler that
    finishes without blocking never touches ``owner.scope`` (nothing could have
    cancelled it while it ran).
    """
    if SPLICE_SUPPORTED and type(awaitable) is types.CoroutineType:
        return _Relay(owner, awaitable)
    return _plain(owner, awaitable)


class _Relay(Generator[Any, Any, T]):
    """Steps a handler coroutine for the task awaiting it (``await`` delegates here).

    A small object rather than a generator: one is alive per pending request, and
    a generator frame is four times its size.
    """

    __slots__ = ("_coro", "_owner", "_scope")

    def __init__(self, owner: ScopeOwner, coro: Coroutine[Any, Any, T]) -> None:
        self._owner = owner
        self._coro = coro
        self._scope: trio.CancelScope | None = None

    def __await__(self) -> Generator[Any, Any, T]:
        return self

    def send(self, value: Any) -> Any:
        scope = self._scope
        if scope is None:
            return self._first_step()
        try:
            return self._coro.send(value)
        except StopIteration:
            scope.__exit__(None, None, None)
            raise
        except BaseException as exc:
            if scope.__exit__(type(exc), exc, exc.__traceback__):
                raise StopIteration(None) from None  # the scope caught a cancellation
            raise

    def throw(self, typ: Any, value: Any = None, traceback: Any = None) -> Any:
        exc = typ if isinstance(typ, BaseException) else (value or typ())
        scope = self._scope
        if scope is None:  # never started: nothing to unwind but the coroutine
            return self._coro.throw(exc)
        try:
            return self._coro.throw(exc)
        except StopIteration:
            scope.__exit__(None, None, None)
            raise
        except BaseException as raised:
            if scope.__exit__(type(raised), raised, raised.__traceback__):
                raise StopIteration(None) from None
            raise

    def close(self) -> None:
        self._coro.close()

    def _first_step(self) -> Any:
        # In the awaiting task, before anything can have cancelled the request.
        task = trio.lowlevel.current_task()
        base = task._cancel_status
        yielded = self._coro.send(None)  # StopIteration: answered without blocking
        scope = self._owner.scope
        _enter_outside_handler(task, base, scope)
        self._scope = scope
        return yielded


@types.coroutine
def _plain(owner: ScopeOwner, awaitable: Awaitable[T]) -> Generator[Any, Any, T | None]:
    with owner.scope:
        return (yield from _await(awaitable))
    return None  # the scope caught a cancellation


def _await(awaitable: Awaitable[T]) -> Generator[Any, Any, T]:
    try:
        method = type(awaitable).__await__
    except AttributeError:
        raise TypeError(
            f"a handler must return an awaitable, not {type(awaitable).__name__}"
        ) from None
    return method(awaitable)
