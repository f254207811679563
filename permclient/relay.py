"""Approvals from anywhere: a relay whose pending questions outlive every view.

A :class:`Relay` is a deferred permission handler (register ``relay.handler`` for
any session) that puts each question into a :class:`PendingRegistry` under a stable
id, and a small trio API for the views that answer them, wherever they are (a web
page, a phone, a second window, a terminal on another machine):

* :meth:`Relay.subscribe` gives a view the replay of every question still pending,
  then live events: :class:`Requested`, :class:`Resolved` (by which view) and
  :class:`Withdrawn`. A view that drops and comes back subscribes again and sees
  exactly what is still pending: a dropped view never fails a question.
* :meth:`Relay.answer` answers by id. The first valid answer wins and every view
  is told; an answer for an unknown, resolved or withdrawn question, or naming
  another session, is refused and changes nothing. Only an offered option id is
  ``selected``: anything else an answer says is ``cancelled``.
* A question withdrawn (the runtime cancelled it, the turn was cancelled, a
  timeout, the client closed) or left pending when the relay closes answers the
  runtime ``cancelled`` exactly once, and every view is told.

The events and the question are msgspec Structs, ready to encode for any wire
(``msgspec.json.encode(event)``). Call everything from the trio thread that runs
the client. No web framework is imported: ``simhost serve`` builds on this.
"""

from __future__ import annotations

import functools
from collections.abc import AsyncIterator, Callable
from types import TracebackType
from typing import Any, Final

import msgspec
import trio

from ._handlers import Deferred, Question, deferred
from ._registry import (
    REMEMBERED_ENDINGS,
    VIEW_NAME_MAX,
    AnswerRefused,
    PendingRegistry,
    RelayEvent,
    RelayOption,
    RelayQuestion,
    Requested,
    Resolved,
    Withdrawn,
    WithdrawnReason,
    decision_of,
)

__all__ = [
    "REMEMBERED_ENDINGS",
    "VIEW_NAME_MAX",
    "AnswerRefused",
    "PendingRegistry",
    "Relay",
    "RelayEvent",
    "RelayOption",
    "RelayQuestion",
    "Requested",
    "Resolved",
    "Subscription",
    "Withdrawn",
    "WithdrawnReason",
    "decision_of",
]

# Events a view may fall behind by before it is dropped (it subscribes again and
# gets the replay): a view that stops reading never holds up the relay or the others.
DEFAULT_VIEW_BUFFER: Final = 1024


class Subscription:
    """One view's events: the replay of what was pending when it subscribed, then
    live events, in order. Iterate it (``async for event in subscription``); the
    iteration ends when the relay closes, or when the view fell more than the
    relay's ``view_buffer`` events behind (:attr:`dropped` says so). Use it as a
    context manager, or call :meth:`close` (after which it cannot be read)."""

    def __init__(self, relay: Relay, view: str, buffer: int) -> None:
        self.view = view
        self.replayed = 0
        """How many of the first events are the replay."""
        self.dropped = False
        """Whether the relay dropped the view for falling behind."""
        self._relay = relay
        self._send, self._receive = trio.open_memory_channel[RelayEvent](buffer)

    def _deliver(self, event: RelayEvent) -> bool:
        """Queue ``event``; ``False`` if this view is gone or too far behind."""
        try:
            self._send.send_nowait(event)
        except trio.WouldBlock:
            self.dropped = True
            self._send.close()
            return False
        except (trio.BrokenResourceError, trio.ClosedResourceError):
            return False
        return True

    async def receive(self) -> RelayEvent:
        """The next event; raises :class:`trio.EndOfChannel` once the subscription ended."""
        return await self._receive.receive()

    def __aiter__(self) -> AsyncIterator[RelayEvent]:
        return self._receive.__aiter__()

    def close(self) -> None:
        """Stop receiving events (idempotent)."""
        self._relay._unsubscribe(self)
        self._send.close()
        self._receive.close()

    def __enter__(self) -> Subscription:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


class _Ending:
    __slots__ = ("ending", "event")

    def __init__(self) -> None:
        self.ending: Resolved | Withdrawn | None = None
        self.event = trio.Event()


class Relay:
    """A pending registry behind a deferred handler, and the views that answer it.

    ``view_buffer``: how many events a view may fall behind by before it is dropped.
    ``on_event``: called with every event as it happens, before any view gets it
    (an audit trail: it never falls behind); it must not block.
    """

    def __init__(
        self,
        *,
        view_buffer: int = DEFAULT_VIEW_BUFFER,
        on_event: Callable[[RelayEvent], None] | None = None,
    ) -> None:
        if view_buffer < 1:
            raise ValueError("view_buffer must be at least 1")
        self._view_buffer = view_buffer
        self.on_event = on_event
        """Called with every event before any view gets it (settable)."""
        self._registry = PendingRegistry()
        self._questions: dict[str, Question] = {}
        self._subscriptions: list[Subscription] = []
        self._waiters: dict[str, _Ending] = {}  # questions someone waits on
        self._closed = False
        self.handler: Deferred = deferred(self._ask, raw_params=True)
        """The deferred permission handler: register it for the sessions to relay."""

    @property
    def closed(self) -> bool:
        return self._closed

    def pending(self) -> list[RelayQuestion]:
        """Every question still pending, oldest first."""
        self._sweep()
        return [event.question for event in self._registry.pending()]

    def subscribe(self, view: str) -> Subscription:
        """A new view: it first gets a :class:`Requested` for every question still
        pending (the replay), then every event. ``view`` names it to the others (cut
        to VIEW_NAME_MAX characters) when it answers."""
        self._sweep()
        replay = self._registry.pending()
        # Room for the whole replay besides what a view may fall behind by: a long
        # replay never locks a view out.
        subscription = Subscription(self, view[:VIEW_NAME_MAX], len(replay) + self._view_buffer)
        if self._closed:
            subscription._send.close()  # (its iteration ends at once)
            return subscription
        subscription.replayed = len(replay)
        for event in replay:
            subscription._deliver(event)
        self._subscriptions.append(subscription)
        return subscription

    def answer(
        self,
        question_id: Any,
        answer: Any,
        *,
        view: str,
        session_id: Any = None,
        reason: str | None = None,
    ) -> Resolved | AnswerRefused:
        """Answer the question ``question_id`` for the view named ``view``.

        ``answer`` is a :class:`permclient.Selected`, or what a view sent, e.g.
        ``{"outcome": "selected", "optionId": "allow"}`` or ``{"outcome":
        "cancelled"}``: only an offered option id is ``selected``, anything else
        ``cancelled``. Returns the :class:`Resolved` every view is told, or why the
        answer changed nothing (:class:`AnswerRefused`, told to no one else).
        ``session_id``, if given, must be the question's. ``reason`` (the person's
        words) goes to the agent in the answer's ``_meta`` when the answer selects a
        ``reject_*`` option (:func:`permclient.rules.with_reason`), and is ignored
        otherwise.
        """
        if type(question_id) is str:
            self._notice(question_id)
        question = self._questions.get(question_id) if type(question_id) is str else None
        result = self._registry.answer(
            question_id, answer, view[:VIEW_NAME_MAX], session_id, reason
        )
        if isinstance(result, AnswerRefused):
            return result
        decision, resolved = result
        del self._questions[resolved.question_id]
        assert question is not None
        question.answer(decision)  # (checked again against what the runtime offered)
        self._ended_now(resolved)
        return resolved

    async def wait(self, question_id: str) -> Resolved | Withdrawn:
        """How the question ended, once it has: at once if it already did (the
        ending is kept, for the REMEMBERED_ENDINGS latest questions). Raises
        :class:`KeyError` for a question the relay does not know."""
        self._notice(question_id)
        ending = self._registry.ending(question_id)
        if ending is not None:
            return ending
        if question_id not in self._registry:
            raise KeyError(question_id)
        waiter = self._waiters.get(question_id)
        if waiter is None:
            waiter = self._waiters[question_id] = _Ending()
        await waiter.event.wait()
        assert waiter.ending is not None  # (set before the event)
        return waiter.ending

    def close(self) -> None:
        """Withdraw every pending question (the runtime gets ``cancelled``, every view
        is told), refuse every question that comes later, and end every subscription."""
        if self._closed:
            return
        self._sweep()
        self._closed = True
        for withdrawn in self._registry.withdraw_all("shutdown"):
            self._questions.pop(withdrawn.question_id).cancel()
            self._ended_now(withdrawn)
        subscriptions, self._subscriptions = self._subscriptions, []
        for subscription in subscriptions:
            subscription._send.close()

    def __enter__(self) -> Relay:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    # ---------------------------------------------------------------- internals

    def _ask(self, question: Question) -> None:
        if self._closed:
            question.cancel()
            return
        tool_call = question.request.tool_call
        raw = question.raw_params  # (fields the client does not know kept)
        if raw is not None:  # compacted: no line break or CR of the peer's reaches a view
            raw = msgspec.Raw(msgspec.json.format(raw, indent=-1))
        requested = self._registry.add(
            question.session_id,
            tool_call.tool_call_id,
            tool_call.title,
            tool_call.kind,
            question.offered,
            raw if raw is not None else msgspec.Raw(msgspec.json.encode(question.request)),
            question.understood,
        )
        question_id = requested.question.question_id
        self._questions[question_id] = question
        question.on_withdraw(functools.partial(self._withdrawn, question_id))
        self._broadcast(requested)

    def _withdrawn(self, question_id: str, by: WithdrawnReason) -> None:
        withdrawn = self._registry.withdraw(question_id, by)
        if withdrawn is not None:
            del self._questions[question_id]
            self._ended_now(withdrawn)

    def _ended_now(self, ending: Resolved | Withdrawn) -> None:
        self._broadcast(ending)
        waiter = self._waiters.pop(ending.question_id, None)
        if waiter is not None:
            waiter.ending = ending
            waiter.event.set()

    def _sweep(self) -> None:
        """:meth:`_notice` every question (linear in what is pending: run when a view
        subscribes, on ``pending()`` and on ``close()``, never per answer)."""
        for question_id in list(self._questions):
            self._notice(question_id)

    def _notice(self, question_id: str) -> None:
        """Withdraw the question if host code answered it without the relay (through
        ``client.pending_questions()``, say): no view may answer it again."""
        question = self._questions.get(question_id)
        if question is not None and question.done:
            self._withdrawn(question_id, "answered elsewhere")

    def _broadcast(self, event: RelayEvent) -> None:
        if self.on_event is not None:
            self.on_event(event)
        self._subscriptions = [s for s in self._subscriptions if s._deliver(event)]

    def _unsubscribe(self, subscription: Subscription) -> None:
        if subscription in self._subscriptions:
            self._subscriptions.remove(subscription)
