"""The three shapes of a permission handler, and the one-shot question a deferred one answers.

Sans-I/O: nothing here imports trio. Which shape a handler has is declared when it
is registered: :func:`rule` and :func:`deferred` wrap a plain function; anything
else is an async handler, ``async (PermissionRequest) -> Decision``.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from typing import TYPE_CHECKING, ClassVar, Final, Generic, Literal, TypeAlias, TypeVar

import msgspec

from ._messages import RequestId
from ._wire import Cancelled, Decision, PermissionOption, PermissionRequest, Selected

if TYPE_CHECKING:
    from ._connection import Connection, PermissionRegistration, _SharedOptions

log = logging.getLogger("permclient")

F = TypeVar("F")

WithdrawnBy = Literal["peer", "turn", "timeout", "teardown"]
"""Why a question was withdrawn: the runtime cancelled it, the turn was cancelled
(or its registration closed), its registration's timeout passed, or the connection
closed."""

RuleFunction: TypeAlias = Callable[[PermissionRequest], Decision | None]
DeferredFunction: TypeAlias = Callable[["Question"], None]
AsyncHandler: TypeAlias = Callable[[PermissionRequest], Awaitable[Decision]]

_CANCELLED: Final = Cancelled()


class _Declared(Generic[F]):
    __slots__ = ("function",)

    def __init__(self, function: F) -> None:
        if not callable(function):
            raise TypeError(f"a handler must be callable, not {type(function).__name__}")
        self.function = function

    def __repr__(self) -> str:
        return f"{type(self).__name__.lower()}({self.function!r})"


class Rule(_Declared[RuleFunction]):
    """A rule handler: see :func:`rule`."""

    __slots__ = ()


class Deferred(_Declared[DeferredFunction]):
    """A deferred handler: see :func:`deferred`."""

    __slots__ = ("keeps_raw_params",)

    def __init__(self, function: DeferredFunction, *, keeps_raw_params: bool = False) -> None:
        super().__init__(function)
        self.keeps_raw_params = keeps_raw_params


PermissionHandler: TypeAlias = Rule | Deferred | AsyncHandler
"""What :meth:`Client.permission_handler` takes: a :func:`rule`, a :func:`deferred`
handler, or an async function ``async (PermissionRequest) -> Decision``."""


def rule(function: RuleFunction) -> Rule:
    """Declare ``function(request) -> Decision | None`` a rule handler.

    It runs in the reader as the request arrives, with no task and no cancel
    scope, and must not block. ``None`` passes the question to the next
    registration down the session's stack (so a rule can sit in front of a
    human); a decision answers it (checked like any answer: only an offered
    option is ``selected``). A rule that raises or returns anything else answers
    ``cancelled``. Usable as a decorator.
    """
    return Rule(function)


def deferred(function: DeferredFunction, *, raw_params: bool = False) -> Deferred:
    """Declare ``function(question) -> None`` a deferred handler.

    It is called as the request arrives and returns at once; the answer comes
    later, from anywhere in the trio thread (a UI callback, another task, a
    remote approver), through :meth:`Question.select`, :meth:`Question.cancel` or
    :meth:`Question.answer`. No task and no cancel scope is held while the
    question waits. A peer cancel, a turn cancel, a timeout or teardown withdraws
    it: the callbacks given to :meth:`Question.on_withdraw` run and any later
    answer is refused. A function that raises before answering answers
    ``cancelled``. Usable as a decorator.

    With ``raw_params=True`` each question also keeps the request's params exactly
    as they arrived (:attr:`Question.raw_params`), fields the client does not know
    included: for a handler that stores or forwards requests (a relay). They count
    against the client's ``max_pending_bytes``.
    """
    return Deferred(function, keeps_raw_params=raw_params)


class Question:
    """One pending permission request, answered exactly once.

    A deferred handler gets it; the client makes one for every request a
    non-rule handler takes (only the client makes them: its constructor is not
    public). Call its methods from the trio thread that runs the client (from
    other threads, go through :mod:`permclient.embed`).
    """

    __slots__ = (
        "_connection",
        "_offered",
        "_on_settled",
        "_on_withdraw",
        "_registration",
        "_request_id",
        "_session_id",
        "_shared",
        "_size",
        "_tool_call_id",
        "deadline",
        "raw_params",
        "request",
        "started",
        "withdrawn_by",
    )

    understood: ClassVar[bool] = True
    """``False`` for a request this version types only in part (its tool call has a
    kind, status or content type it does not know): :attr:`request` then holds the
    session, the tool call's id and title, and the options; show the person
    :attr:`raw_params`. Only a ``raw_params=True`` handler gets one. (A class
    attribute: a question costs nothing more for it.)"""

    def __init__(
        self,
        connection: Connection,
        request_id: RequestId | None,
        request: PermissionRequest,
        started: float,
        registration: PermissionRegistration,
        shared: _SharedOptions | None,
        size: int,
    ) -> None:
        self._connection: Connection | None = connection  # None once answered
        # What the connection routes, checks and retires by: kept apart from the
        # request, which the handler may change, and read-only from outside.
        self._request_id = request_id
        self._session_id = request.session_id
        self._tool_call_id = request.tool_call.tool_call_id
        self._offered = request.options
        self.request = request
        """The request as the runtime sent it (decoded once): the handler's to read."""
        self.started = started  # the connection's clock at arrival
        self.deadline: float | None = None
        self.withdrawn_by: WithdrawnBy | None = None
        """Why the question was withdrawn, or ``None``."""
        self.raw_params: msgspec.Raw | None = None
        """The request's params as they arrived (JSON), for a handler declared with
        ``deferred(fn, raw_params=True)``; ``None`` for any other."""
        self._on_withdraw: list[Callable[[WithdrawnBy], object]] | None = None
        # The driver's hook, called however the question is settled (it cancels an
        # async handler's scope: its answer is no longer wanted).
        self._on_settled: Callable[[], object] | None = None
        # The connection's bookkeeping: where the question is held, its share of an
        # option set held once, what it counts against the pending bytes.
        self._registration = registration
        self._shared = shared
        self._size = size

    @property
    def request_id(self) -> RequestId | None:
        """The JSON-RPC id of the runtime's request (unique among pending ones)."""
        return self._request_id

    @property
    def session_id(self) -> str:
        """The session the question belongs to, as routed."""
        return self._session_id

    @property
    def offered(self) -> tuple[PermissionOption, ...]:
        """The options offered, as received: an answer is checked against these."""
        return self._offered

    def __repr__(self) -> str:
        state = "open" if self._connection is not None else self.withdrawn_by or "answered"
        return f"<Question {self.request_id!r} session={self.session_id!r} {state}>"

    @property
    def done(self) -> bool:
        """Whether the question has its answer (given, or by withdrawal)."""
        return self._connection is None

    def answer(self, decision: Decision) -> bool:
        """Answer with ``decision``; ``False`` (and nothing is sent) if it was answered
        or withdrawn before. Only ``Selected`` of an offered option answers
        ``selected``; anything else answers ``cancelled``."""
        connection = self._connection
        if connection is None:
            return False
        connection.answer(self, decision)
        return True

    def select(self, option_id: str) -> bool:
        """``answer(Selected(option_id))``: the human picked this option."""
        return self.answer(Selected(option_id))

    def cancel(self) -> bool:
        """``answer(Cancelled())``: the human dismissed the question."""
        return self.answer(_CANCELLED)

    def on_withdraw(self, callback: Callable[[WithdrawnBy], object]) -> None:
        """Call ``callback(by)`` once if the question is withdrawn before it is answered.

        Runs synchronously where the withdrawal happens (the reader, a cancel, a
        timeout, teardown); it must not block. An exception in it is logged.
        Registered after the question was already withdrawn, it runs at once (and
        what it raises reaches the caller).
        """
        if self.withdrawn_by is not None:
            callback(self.withdrawn_by)
        elif self._connection is not None:
            if self._on_withdraw is None:
                self._on_withdraw = []
            self._on_withdraw.append(callback)

    def _retire(self, withdrawn_by: WithdrawnBy | None) -> list[Callable[[WithdrawnBy], object]]:
        """Refuse later answers; the withdraw callbacks to run, if it was withdrawn."""
        self._connection = None
        callbacks, self._on_withdraw = self._on_withdraw, None
        settled, self._on_settled = self._on_settled, None
        if settled is not None:
            settled()
        if withdrawn_by is None:
            return []
        self.withdrawn_by = withdrawn_by
        return callbacks or []


class PartlyKnownQuestion(Question):
    """A :class:`Question` whose request this version types only in part (see
    :attr:`Question.understood`); only the client makes one."""

    __slots__ = ()
    understood: ClassVar[bool] = False


def checked_decision(answer: object, offered: tuple[PermissionOption, ...]) -> Decision:
    """Accept ``Selected`` of an offered option or ``Cancelled``; anything else is ``Cancelled``.

    Exact types: ``isinstance`` would run the answer's own ``__class__`` (and a
    subclass its own ``option_id``), and nothing the handler returned may raise here.
    """
    if type(answer) is Selected:
        try:
            chosen, meta = answer.option_id, answer.meta
        except AttributeError:  # a field the handler deleted (a Struct allows it)
            log.warning("handler returned a Selected with a field deleted; answered cancelled")
            return _CANCELLED
        # An exact str: a subclass could compare equal to anything.
        if type(chosen) is str:
            for option in offered:
                if option.option_id == chosen:
                    # Built from the offered option: the caller's object (another
                    # thread may hold it) is never what gets encoded.
                    return Selected(option.option_id, meta=meta)
        log.warning(
            "handler chose option %r, which was not offered (%s); answered cancelled",
            chosen if type(chosen) is str else type(chosen).__qualname__,
            ", ".join(option.option_id for option in offered),
        )
        return _CANCELLED
    if type(answer) is not Cancelled:
        log.warning(
            "handler returned a %s, not a Selected or Cancelled; answered cancelled",
            type(answer).__qualname__,  # not the object: its repr is the handler's code too
        )
    return _CANCELLED
