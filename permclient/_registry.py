"""The pending registry of a relay: questions by stable id, for views that come and go.

Sans-I/O: nothing here imports trio. The registry holds what is pending and
decides every rule (stable ids, replay, first valid answer wins, resolving twice is
a no-op, withdrawal exactly once, the affirmative allowlist); :mod:`permclient.relay`
connects it to a client's deferred handler and to views.
"""

from __future__ import annotations

import itertools
import secrets
from collections import OrderedDict
from typing import Any, Final, Literal, TypeAlias

import msgspec

from ._wire import Cancelled, Decision, PermissionOption, Selected
from .rules import reason_of, with_reason

# How the latest questions ended, kept (so a late answer is told how its question
# ended rather than "no such question", and a late waiter gets the ending), the
# oldest forgotten first.
REMEMBERED_ENDINGS: Final = 4096
# A view's name, as the views are told who answered: peers choose it.
VIEW_NAME_MAX: Final = 64


class RelayOption(msgspec.Struct, rename="camel", frozen=True):
    """An offered option, as views see it."""

    option_id: str
    name: str
    kind: str


class RelayQuestion(msgspec.Struct, rename="camel", frozen=True):
    """A pending question as every view sees it.

    ``question_id`` is the registry's own, stable for the question's life (a
    number and a random part per registry: ids of another registry, or of an
    earlier run, name nothing here); ``request`` is the ``session/request_permission``
    params as the client received them (JSON, fields it does not know included,
    whitespace between tokens removed), for a view that shows more than the summary
    or forwards the request. ``understood`` is ``False`` when the client could type
    it only in part (the tool call has a kind, status or content type it does not
    know): show ``request`` itself, as a generic question.
    """

    question_id: str
    session_id: str
    tool_call_id: str
    title: str | None
    kind: str | None
    options: tuple[RelayOption, ...]
    request: msgspec.Raw
    understood: bool = True


class Requested(msgspec.Struct, tag="requested", tag_field="type", rename="camel", frozen=True):
    """A question is pending (live, or replayed to a view that just subscribed)."""

    question: RelayQuestion


class Resolved(
    msgspec.Struct,
    tag="resolved",
    tag_field="type",
    rename="camel",
    frozen=True,
    omit_defaults=True,
):
    """A view answered: ``outcome`` is what the agent got; ``by`` names the view;
    ``reason`` is the person's reason for a denial, sent to the agent (absent if none)."""

    question_id: str
    outcome: Literal["selected", "cancelled"]
    option_id: str | None
    by: str
    reason: str | None = None


WithdrawnReason: TypeAlias = Literal[
    "peer", "turn", "timeout", "teardown", "shutdown", "answered elsewhere"
]


class Withdrawn(msgspec.Struct, tag="withdrawn", tag_field="type", rename="camel", frozen=True):
    """The question went before anyone answered it; the agent got ``cancelled``."""

    question_id: str
    reason: WithdrawnReason


class AnswerRefused(
    msgspec.Struct, tag="answer_refused", tag_field="type", rename="camel", frozen=True
):
    """An answer that changed nothing, and why (told to the view that gave it)."""

    question_id: str
    reason: str


RelayEvent: TypeAlias = Requested | Resolved | Withdrawn
"""What every view is told."""


def decision_of(answer: Any, options: tuple[RelayOption, ...]) -> Decision:
    """The affirmative allowlist: ``selected`` only for an offered option id the
    answer names as ``{"outcome": "selected", "optionId": ID}`` (or a :class:`Selected`
    naming one); anything else, whatever its shape, is ``cancelled``."""
    if isinstance(answer, Selected):
        chosen: object = answer.option_id
    elif type(answer) is dict and answer.get("outcome") == "selected":
        chosen = answer.get("optionId")
    else:
        return Cancelled()
    if type(chosen) is str and any(option.option_id == chosen for option in options):
        return Selected(chosen)
    return Cancelled()


def relay_options(offered: tuple[PermissionOption, ...]) -> tuple[RelayOption, ...]:
    return tuple(RelayOption(o.option_id, o.name, o.kind) for o in offered)


class PendingRegistry:
    """The questions pending for views, by stable id, in the order they came.

    Every method returns what the views must be told (or, for an answer, what the
    answering view is told if it changed nothing); the caller delivers it. The
    registry never answers the agent itself: :meth:`answer` and :meth:`withdraw`
    say when to, exactly once per question.
    """

    def __init__(self) -> None:
        self._pending: dict[str, RelayQuestion] = {}
        self._ended: OrderedDict[str, Resolved | Withdrawn] = OrderedDict()
        self._prefix = secrets.token_hex(8)  # ids of this registry are its own
        self._numbers = itertools.count(1)

    def __len__(self) -> int:
        return len(self._pending)

    def __contains__(self, question_id: object) -> bool:
        return question_id in self._pending

    def add(
        self,
        session_id: str,
        tool_call_id: str,
        title: str | None,
        kind: str | None,
        offered: tuple[PermissionOption, ...],
        request: msgspec.Raw,
        understood: bool = True,
    ) -> Requested:
        """A new pending question, with its stable id."""
        question = RelayQuestion(
            question_id=f"q{next(self._numbers)}-{self._prefix}",
            session_id=session_id,
            tool_call_id=tool_call_id,
            title=title,
            kind=kind,
            options=relay_options(offered),
            request=request,
            understood=understood,
        )
        self._pending[question.question_id] = question
        return Requested(question)

    def pending(self) -> list[Requested]:
        """The replay: every question still pending, oldest first, as first told."""
        return [Requested(question) for question in self._pending.values()]

    def get(self, question_id: str) -> RelayQuestion | None:
        return self._pending.get(question_id)

    def ending(self, question_id: str) -> Resolved | Withdrawn | None:
        """How the question ended (``None`` while pending, or if it is not known or
        ended too long ago): kept whether or not anyone asked before."""
        return self._ended.get(question_id)

    def answer(
        self,
        question_id: Any,
        answer: Any,
        view: str,
        session_id: Any = None,
        reason: str | None = None,
    ) -> tuple[Decision, Resolved] | AnswerRefused:
        """The first valid answer to a pending question resolves it: the decision to
        give the agent (``selected`` only for an offered option id, see
        :func:`decision_of`) and what every view is told. Anything else changes
        nothing and says why: an id that is not a string or names no question, a
        question already resolved or withdrawn (resolving twice is a no-op), or a
        ``session_id`` that is given and is not the question's. ``reason`` goes with
        a denial only (an offered ``reject_*`` option, see :func:`with_reason`)."""
        if type(question_id) is not str:
            return AnswerRefused("", "the answer names no question")
        question = self._pending.get(question_id)
        if question is None:
            ending = self._ended.get(question_id)
            if isinstance(ending, Resolved):
                return AnswerRefused(question_id, f"already answered by {ending.by}")
            if isinstance(ending, Withdrawn):
                return AnswerRefused(question_id, f"withdrawn ({ending.reason})")
            return AnswerRefused(question_id[:VIEW_NAME_MAX], "no such question")
        if session_id is not None and session_id != question.session_id:
            return AnswerRefused(question_id, "the answer names another session")
        decision = decision_of(answer, question.options)
        del self._pending[question_id]
        by = view[:VIEW_NAME_MAX]
        if isinstance(decision, Selected):
            chosen = next(o for o in question.options if o.option_id == decision.option_id)
            if reason and chosen.kind.startswith("reject"):
                decision = with_reason(decision, reason)
            given = reason_of(decision.meta)
            resolved = Resolved(question_id, "selected", decision.option_id, by, given)
        else:
            resolved = Resolved(question_id, "cancelled", None, by)
        self._remember(resolved)
        return decision, resolved

    def withdraw(self, question_id: str, reason: WithdrawnReason) -> Withdrawn | None:
        """The question went unanswered (the agent gets ``cancelled``); ``None`` if it
        was resolved or withdrawn before: withdrawal happens exactly once."""
        if self._pending.pop(question_id, None) is None:
            return None
        withdrawn = Withdrawn(question_id, reason)
        self._remember(withdrawn)
        return withdrawn

    def withdraw_all(self, reason: WithdrawnReason) -> list[Withdrawn]:
        """Withdraw every pending question (e.g. the server shuts down)."""
        return [
            withdrawn
            for question_id in list(self._pending)
            if (withdrawn := self.withdraw(question_id, reason)) is not None
        ]

    def _remember(self, ending: Resolved | Withdrawn) -> None:
        self._ended[ending.question_id] = ending
        if len(self._ended) > REMEMBERED_ENDINGS:
            self._ended.popitem(last=False)
