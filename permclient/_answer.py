"""A decision a UI gives later, for a handler to await: the trio side of a card.

A permission handler that asks a human shows something (a card, a prompt) and
waits until the human picks. :class:`Answer` is what it waits on: the UI's
callbacks call :meth:`Answer.select` or :meth:`Answer.cancel`, the handler
``return await answer``. It is a one-shot ``trio.Event`` that carries the
decision, and lighter than one: a question can stay open for minutes, and an
editor may hold thousands of them.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import outcome
import trio

from ._wire import Cancelled, Decision, Selected

_CANCELLED = Cancelled()


class Answer:
    """A one-shot decision: given once by :meth:`set`, awaited by a handler.

    ``await answer`` returns the decision, at once if it was already given; it is a
    checkpoint, and cancelling it (the runtime withdrew the question, the turn
    ended, the handler's own timeout) leaves the answer as it was: a later
    :meth:`set` still succeeds, and a later ``await`` still returns it. One task
    at a time may await it.

    Its methods are protected from Ctrl-C while they change it. (What is left, as
    in ``trio.Event.wait``, are the few bytecodes of trio's own
    ``wait_task_rescheduled`` before it parks the task: a Ctrl-C there, caught and
    survived by the awaiting task, would leave it recorded as the waiter.) Like a
    ``trio.Event``, call it from the trio thread; from another thread use
    ``trio.from_thread.run_sync(answer.select, option_id)``, or
    :mod:`permclient.embed`. What the runtime gets is still checked by the client:
    an option that was not offered answers ``cancelled``.
    """

    __slots__ = ("_decision", "_waiter")

    def __init__(self) -> None:
        self._decision: Decision | None = None
        self._waiter: trio.lowlevel.Task | None = None

    def __repr__(self) -> str:
        return f"<Answer {'open' if self._decision is None else repr(self._decision)}>"

    @property
    def decision(self) -> Decision | None:
        """The decision given, or ``None`` while there is none."""
        return self._decision

    @trio.lowlevel.enable_ki_protection  # a Ctrl-C half way would lose the wake-up
    def set(self, decision: Decision) -> bool:
        """Give the decision; ``False`` (and nothing changes) if one was given before.

        Raises :class:`TypeError` for anything but a ``Selected`` or ``Cancelled``.
        """
        if not isinstance(decision, Selected | Cancelled):
            raise TypeError(f"a decision is Selected or Cancelled, not {type(decision).__name__}")
        if self._decision is not None:
            return False
        self._decision = decision
        waiter, self._waiter = self._waiter, None
        if waiter is not None:
            trio.lowlevel.reschedule(waiter, outcome.Value(decision))
        return True

    def select(self, option_id: str) -> bool:
        """``set(Selected(option_id))``: the human picked this option."""
        return self.set(Selected(option_id))

    def cancel(self) -> bool:
        """``set(Cancelled())``: the human dismissed the question."""
        return self.set(_CANCELLED)

    @trio.lowlevel.enable_ki_protection  # a Ctrl-C half way would leave a stale waiter
    def __await__(self) -> Generator[Any, Any, Decision]:
        if self._decision is not None:
            return _given(self._decision).__await__()
        if self._waiter is not None:
            raise RuntimeError("an Answer is awaited by one task at a time")
        self._waiter = trio.lowlevel.current_task()
        # No generator of our own: the await is trio's, one fewer frame per open question.
        return trio.lowlevel.wait_task_rescheduled(self._abort).__await__()  # noqa: ASYNC105

    def _abort(self, _: Any) -> trio.lowlevel.Abort:
        self._waiter = None
        return trio.lowlevel.Abort.SUCCEEDED


async def _given(decision: Decision) -> Decision:
    await trio.lowlevel.checkpoint()
    return decision
