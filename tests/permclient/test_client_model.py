"""The client against a model: random interleavings of questions, answers, cancels, turns, time.

Hypothesis drives a scripted peer and the handlers through sequences of operations:
questions for sessions with or without a handler (alone, or several in one write),
handlers that answer at once, raise, pick an option that was not offered, or wait
until released; peer cancels for pending, answered and unknown ids; nested
registrations of each handler shape (async, some waiting on a ``permclient.Answer``
inside a cancel scope of their own; deferred, waiting on their ``Question``; rules,
which pass a waiting question down the stack), some with a timeout; turns ending,
and time passing. A small model says what each question's one answer must be.
Every question must get exactly one answer, that one, after the handlers the model
routes it through (and no other) saw it.

The same model runs against the trio client (over a memory stream, under an
autojump clock) and against the sans-I/O ``Connection`` driven directly, with no
event loop and a hand-moved clock. An async registration is deferred on the
``Connection`` (running an async handler is the driver's job).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

import msgspec
import trio
import trio.testing
from hypothesis import example, given, settings
from hypothesis import strategies as st

import permclient
from permclient import Answer, PermissionRequest, Question, Selected
from permclient._connection import Closed, Connection
from permclient.framing import NewlineFramer
from tests.support.peer import FakePeer, allow_deny
from tests.support.profiles import examples

SESSIONS = ("s-0", "s-1", "s-2")
IMMEDIATE = ("allow_now", "deny_now", "raise", "unoffered")
WAITING = ("wait", "wait_in_own_scope")
SHAPES = ("async", "deferred", "rule")
Behaviour = Literal["allow_now", "deny_now", "raise", "unoffered", "wait", "wait_in_own_scope"]
Shape = Literal["async", "deferred", "rule"]

session_index = st.integers(0, len(SESSIONS) - 1)
behaviour = st.sampled_from([*IMMEDIATE, *WAITING])
operation = st.one_of(
    st.tuples(
        st.just("ask"), st.lists(st.tuples(session_index, behaviour), min_size=1, max_size=4)
    ),
    st.tuples(st.just("release"), st.integers(0, 12)),
    st.tuples(st.just("cancel"), st.integers(0, 12)),
    st.tuples(
        st.just("register"),
        st.tuples(session_index, st.sampled_from([None, 2, 5, 11]), st.sampled_from(SHAPES)),
    ),
    st.tuples(st.just("end_turn"), session_index),
    st.tuples(st.just("sleep"), st.integers(1, 12)),
)

CANCELLED = {"outcome": {"outcome": "cancelled"}}


def selected(option: str) -> dict[str, Any]:
    return {"outcome": {"outcome": "selected", "optionId": option}}


@dataclass
class Model:
    """What must happen: the registration stack per session, and each question's fate."""

    stacks: dict[str, list[int]] = field(default_factory=lambda: {s: [] for s in SESSIONS})
    shapes: dict[int, Shape] = field(default_factory=dict)  # registration -> shape
    timeouts: dict[int, float | None] = field(default_factory=dict)  # registration -> timeout
    expected: dict[int, Any] = field(default_factory=dict)  # id -> result, or None if pending
    seen_by: dict[int, list[tuple[str, int]]] = field(default_factory=dict)  # id -> handlers
    pending_of: dict[int, list[int]] = field(default_factory=dict)  # registration -> ids
    deadline: dict[int, float] = field(default_factory=dict)  # id -> when its timeout ends
    behaviours: dict[int, Behaviour] = field(default_factory=dict)
    next_registration: int = 0
    next_question: int = 0

    def register(self, session: str, timeout: float | None, shape: Shape) -> int:
        registration = self.next_registration
        self.next_registration += 1
        self.shapes[registration] = shape
        self.timeouts[registration] = timeout
        self.stacks[session].append(registration)
        self.pending_of[registration] = []
        return registration

    def end_turn(self, session: str) -> int | None:
        """The registration on top of ``session``'s stack closes (if any)."""
        stack = self.stacks[session]
        if not stack:
            return None
        registration = stack.pop()
        for qid in self.pending_of.pop(registration):
            if self.expected[qid] is None:
                self.expected[qid] = CANCELLED
        return registration

    def ask(self, session: str, how: Behaviour, now: float) -> int:
        """A new question: down the stack, past the rules that pass, to its fate."""
        qid = self.next_question
        self.next_question += 1
        self.behaviours[qid] = how
        seen = self.seen_by[qid] = []
        self.expected[qid] = CANCELLED  # no handler, or every rule passed
        for registration in reversed(self.stacks[session]):
            seen.append((session, registration))
            waits = how in WAITING
            if waits and self.shapes[registration] == "rule":
                continue  # a rule cannot wait: None passes the question down
            if how in ("raise", "unoffered"):
                self.expected[qid] = CANCELLED
            elif how in ("allow_now", "deny_now"):
                self.expected[qid] = selected(how.removesuffix("_now"))
            else:
                self.expected[qid] = None
                self.pending_of[registration].append(qid)
                timeout = self.timeouts[registration]
                if timeout is not None:
                    self.deadline[qid] = now + timeout
            break
        return qid

    def release(self, qid: int) -> None:
        if self.expected.get(qid, CANCELLED) is None:
            self.expected[qid] = selected("allow")

    def cancel(self, qid: int) -> None:
        if qid in self.expected and self.expected[qid] is None:
            self.expected[qid] = CANCELLED

    def expire(self, now: float) -> None:
        """Questions whose registration's timeout passed (the clock moves between ops)."""
        for qid, deadline in self.deadline.items():
            if deadline <= now and self.expected[qid] is None:
                self.expected[qid] = CANCELLED

    def check_answered(self, got: dict[Any, list[Any]]) -> None:
        """Every fate decided so far is on the wire: a peer cancel, a turn, a release or a
        timeout answers at once, not later (e.g. when the registration closes)."""
        for qid, fate in self.expected.items():
            assert fate is None or qid in got, (qid, self.behaviours[qid], fate)

    def check(self, got: dict[Any, list[Any]], seen: dict[int, list[tuple[str, int]]]) -> None:
        for qid, fate in self.expected.items():
            assert got.get(qid) == [CANCELLED if fate is None else fate], (
                qid,
                self.behaviours[qid],
            )
            assert seen.get(qid, []) == self.seen_by[qid], (qid, self.behaviours[qid])
        assert set(got) == set(self.expected)  # nothing for ids never asked


class Handlers:
    """The handlers of every shape, acting as each question's behaviour says."""

    def __init__(self, model: Model) -> None:
        self.model = model
        self.seen: dict[int, list[tuple[str, int]]] = {}
        self.waiting: dict[int, Answer | Question] = {}  # what "release" answers

    def _saw(self, request: PermissionRequest, registration: int) -> Behaviour:
        qid = int(request.tool_call.tool_call_id.removeprefix("q"))
        self.seen.setdefault(qid, []).append((request.session_id, registration))
        return self.model.behaviours[qid]

    def make(self, shape: Shape, registration: int) -> permclient.PermissionHandler:
        if shape == "rule":
            return permclient.rule(lambda request: self._rule(request, registration))
        if shape == "deferred":
            return permclient.deferred(lambda question: self._deferred(question, registration))

        async def handler(request: PermissionRequest) -> permclient.Decision:
            how = self._saw(request, registration)
            if how in IMMEDIATE:
                return _immediate(how)
            qid = int(request.tool_call.tool_call_id.removeprefix("q"))
            answer = self.waiting[qid] = Answer()
            if how == "wait_in_own_scope":
                with trio.CancelScope():
                    return await answer
            return await answer

        return handler

    def _rule(self, request: PermissionRequest, registration: int) -> permclient.Decision | None:
        how = self._saw(request, registration)
        return _immediate(how) if how in IMMEDIATE else None

    def _deferred(self, question: Question, registration: int) -> None:
        how = self._saw(question.request, registration)
        if how in IMMEDIATE:
            question.answer(_immediate(how))
        else:
            self.waiting[int(question.request.tool_call.tool_call_id.removeprefix("q"))] = question

    def release(self, qid: int) -> None:
        if qid in self.waiting:
            self.waiting[qid].select("allow")


def _immediate(how: Behaviour) -> permclient.Decision:
    if how == "raise":
        raise RuntimeError("handler failed")
    if how == "unoffered":
        return Selected("allow-everything")
    return Selected(how.removesuffix("_now"))


def question_frames(questions: list[tuple[int, str]]) -> bytes:
    frames = []
    for qid, session in questions:
        params = {
            "sessionId": session,
            "toolCall": {"toolCallId": f"q{qid}", "title": f"question {qid}"},
            "options": allow_deny(),
        }
        message = {
            "jsonrpc": "2.0",
            "id": qid,
            "method": "session/request_permission",
            "params": params,
        }
        frames.append(NewlineFramer.encode(msgspec.json.encode(message)))
    return b"".join(frames)  # several questions in one read


# ------------------------------------------------------------------- trio client


async def scenario_on_client(ops: list[tuple[str, Any]]) -> None:
    model = Model()
    handlers = Handlers(model)
    ours, theirs = trio.testing.memory_stream_pair()
    peer = FakePeer(theirs, "acp")
    got: dict[Any, list[Any]] = {}

    async def drain() -> None:
        await trio.testing.wait_all_tasks_blocked()
        while (frame := peer.framer.next_frame()) is not None or await _more(peer):
            if frame is None:
                continue
            message = msgspec.json.decode(frame)
            got.setdefault(message["id"], []).append(message.get("result", message))

    async with permclient.open_client(ours, dialect="acp") as client:
        registrations: dict[int, permclient.Registration] = {}
        for op, arg in ops:
            model.expire(trio.current_time())
            if op == "register":
                (index, timeout, shape) = arg
                registration = model.register(SESSIONS[index], timeout, shape)
                handler = handlers.make(shape, registration)
                registrations[registration] = client.permission_handler(
                    SESSIONS[index], handler, timeout=timeout
                )
            elif op == "end_turn":
                closed = model.end_turn(SESSIONS[arg])
                if closed is not None:
                    registrations.pop(closed).close()
            elif op == "ask":
                asked = [
                    (model.ask(SESSIONS[index], how, trio.current_time()), SESSIONS[index])
                    for index, how in arg
                ]
                await peer.send_raw(question_frames(asked))
            elif op == "release":
                handlers.release(arg)
                model.release(arg)
            elif op == "sleep":
                await trio.sleep(arg)
            elif op == "cancel":
                await peer.notify("$/cancel_request", {"requestId": arg})
                model.cancel(arg)
            await drain()
            model.check_answered(got)
        model.expire(trio.current_time())
        for registration in reversed(list(registrations.values())):
            registration.close()
        await drain()
    model.check(got, handlers.seen)


async def _more(peer: FakePeer) -> bool:
    """Read what the client has written so far; False once it has written nothing more.

    (Under the autojump clock, the timeout passes as soon as every task is blocked.)
    """
    with trio.move_on_after(1):
        data = await peer.stream.receive_some(65536)
        peer.framer.receive_data(data)
        return True
    return False


# ---------------------------------------------------------- sans-I/O connection


class _Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def scenario_on_connection(ops: list[tuple[str, Any]]) -> None:
    model = Model()
    handlers = Handlers(model)
    clock = _Clock()
    conn = Connection("acp", clock=clock)
    framer = NewlineFramer()
    got: dict[Any, list[Any]] = {}

    def drain() -> None:
        framer.receive_data(conn.data_to_send())
        while (frame := framer.next_frame()) is not None:
            message = msgspec.json.decode(frame)
            got.setdefault(message["id"], []).append(message.get("result", message))
        assert conn.events() == []  # no async handler, no call of ours: nothing to start

    registrations: dict[int, Any] = {}
    for op, arg in ops:
        model.expire(clock.now)
        if op == "register":
            (index, timeout, shape) = arg
            registration = model.register(SESSIONS[index], timeout, shape)
            # No loop to run an async handler in: it is deferred here.
            handler = handlers.make("deferred" if shape == "async" else shape, registration)
            registrations[registration] = conn.add_permission_handler(
                SESSIONS[index], handler, timeout
            )
        elif op == "end_turn":
            closed = model.end_turn(SESSIONS[arg])
            if closed is not None:
                conn.remove_permission_handler(registrations.pop(closed))
        elif op == "ask":
            asked = [
                (model.ask(SESSIONS[index], how, clock.now), SESSIONS[index]) for index, how in arg
            ]
            conn.receive_data(question_frames(asked))
        elif op == "release":
            handlers.release(arg)
            model.release(arg)
        elif op == "sleep":
            clock.now += arg
            conn.expire(clock.now)  # what the driver does at each deadline
        elif op == "cancel":
            frame = {"jsonrpc": "2.0", "method": "$/cancel_request", "params": {"requestId": arg}}
            conn.receive_data(NewlineFramer.encode(msgspec.json.encode(frame)))
            model.cancel(arg)
        drain()
        model.check_answered(got)
    model.expire(clock.now)
    for registration in reversed(list(registrations.values())):
        conn.remove_permission_handler(registration)
    drain()
    conn.close("done")
    framer.receive_data(conn.data_to_send())
    assert framer.next_frame() is None  # everything was answered before the close
    assert [type(e) for e in conn.events()] == [Closed]
    assert conn.statistics().pending_permissions == 0
    model.check(got, handlers.seen)


# ------------------------------------------------------------------------ tests

EXAMPLES = [
    # Answers given after a timeout passed, and a timeout racing a peer cancel and a turn.
    [("register", (0, 2, "async")), ("ask", [(0, "wait")]), ("sleep", 3), ("release", 0)],
    [
        ("register", (0, 5, "async")),
        ("register", (1, None, "async")),
        ("ask", [(0, "wait_in_own_scope"), (1, "wait"), (0, "wait")]),
        ("sleep", 3),
        ("release", 2),
        ("sleep", 4),
        ("release", 0),
        ("cancel", 1),
        ("end_turn", 0),
    ],
    # A rule in front of a deferred human, and one in front of nobody.
    [
        ("register", (0, 5, "deferred")),
        ("register", (0, None, "rule")),
        ("register", (1, None, "rule")),
        ("ask", [(0, "wait"), (0, "allow_now"), (1, "wait"), (0, "raise")]),
        ("sleep", 6),
        ("release", 0),
    ],
]


def _with_examples(test: Any) -> Any:
    for ops in EXAMPLES:
        test = example(ops)(test)
    return test


@settings(max_examples=examples(300), deadline=None)
@given(st.lists(operation, max_size=25))
@_with_examples
def test_every_question_gets_the_one_answer_the_model_says(ops: list[tuple[str, Any]]) -> None:
    trio.run(scenario_on_client, ops, clock=trio.testing.MockClock(autojump_threshold=0))


@settings(max_examples=examples(500), deadline=None)
@given(st.lists(operation, max_size=25))
@_with_examples
def test_the_connection_without_a_loop_gives_the_answers_the_model_says(
    ops: list[tuple[str, Any]],
) -> None:
    scenario_on_connection(ops)
