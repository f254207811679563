"""Start an async handler in its own context, in the calling task.

:func:`start` steps the handler once by hand in the context it is given (a
task's context only takes effect at its next step, and a worker task runs one
handler after another: each must start in a fresh copy, so context variables one
handler sets never reach the next). If it finishes, that is the answer. If it
blocks, the returned :class:`Relay` runs the rest of it, with that context made
the task's.

Only public APIs: the relay passes the handler's yields to trio and trio's
replies back, as ``await`` does; the caller's cancel scope is the handler's.
A worker that waited idle needs none of this (the step that wakes it already
runs in a fresh context): :func:`awaitable` turns what the handler returned into
something to ``await``.
"""

from __future__ import annotations

import contextvars
import types
from collections.abc import Awaitable, Callable, Coroutine, Generator
from typing import Any, Final, TypeVar

import trio

A = TypeVar("A")

UNANSWERED: Final[Any] = object()
"""What a handler that gave no answer (it raised) leaves as its result."""


def start(
    handler: Callable[[A], Awaitable[Any]], arg: A, context: contextvars.Context
) -> tuple[bool, Any]:
    """Call ``handler(arg)`` in ``context``, and run it until it first blocks.

    Returns ``(True, result)`` if it finished, or ``(False, relay)``: awaiting
    ``relay`` at once, in this same task, runs the rest and returns the result. A
    handler that raises before blocking raises here.
    """
    # An awaitable's __await__ is the handler's code too: it runs in its context.
    steps = context.run(_first_call, handler, arg)
    try:
        yielded = context.run(steps.send, None)
    except StopIteration as done:
        return True, done.value
    return False, Relay(steps, context, yielded)


def _first_call(handler: Callable[[A], Awaitable[Any]], arg: A) -> Any:
    result = handler(arg)
    return result if type(result) is types.CoroutineType else _await(result)


def awaitable(result: object) -> Awaitable[Any]:
    """What a handler returned, as ``await`` takes it: a coroutine as it is, another
    awaitable through its ``__await__``; anything else raises a ``TypeError`` that
    says how to declare a plain function."""
    if type(result) is types.CoroutineType:
        return result
    return _Steps(_await(result))


class _Steps:
    __slots__ = ("_steps",)

    def __init__(self, steps: Generator[Any, Any, Any]) -> None:
        self._steps = steps

    def __await__(self) -> Generator[Any, Any, Any]:
        return self._steps


class Relay(Generator[Any, Any, Any]):
    """The rest of a blocked handler (``await`` delegates here).

    A small object rather than a generator: one is alive per pending request, and
    a generator frame is several times its size.
    """

    __slots__ = ("_context", "_coro", "_yielded")

    def __init__(
        self,
        coro: Coroutine[Any, Any, Any] | Generator[Any, Any, Any],
        context: contextvars.Context,
        yielded: Any,
    ) -> None:
        self._coro = coro
        self._context = context
        self._yielded = yielded  # the trap it blocked on, until trio gets it

    def __await__(self) -> Generator[Any, Any, Any]:
        return self

    def send(self, value: Any) -> Any:
        yielded = self._yielded
        if yielded is not _PASSED:
            # From here on the task is the handler's: trio runs each of its steps
            # in the handler's context (and trio.from_thread can swap it, as in
            # any task).
            trio.lowlevel.current_task().context = self._context
            self._yielded = _PASSED
            return yielded
        return self._coro.send(value)

    def throw(self, typ: Any, value: Any = None, traceback: Any = None) -> Any:
        return self._coro.throw(_exception(typ, value, traceback))


_PASSED: Final[Any] = object()


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


def _await(awaitable: object) -> Generator[Any, Any, Any]:
    try:
        method = type(awaitable).__await__  # type: ignore[attr-defined]
    except AttributeError:
        raise TypeError(
            f"an async handler must return an awaitable, not {type(awaitable).__name__} "
            "(declare a plain function with permclient.rule() or permclient.deferred())"
        ) from None
    steps = method(awaitable)
    if isinstance(steps, types.GeneratorType | types.CoroutineType):
        return steps  # type: ignore[return-value]  # both have send and throw
    return _as_generator(steps)  # `await` takes any iterator; give it send and throw


def _as_generator(steps: Any) -> Generator[Any, Any, Any]:
    return (yield from steps)
