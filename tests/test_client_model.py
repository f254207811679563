"""The client against a model: random interleavings of questions, answers, cancels, turns, time.

Hypothesis drives a scripted peer and the client's handlers through sequences of
operations: questions for sessions with or without a handler (alone, or several in
one write), handlers that answer at once, raise, pick an option that was not
offered, or wait (on a ``permclient.Answer``, some inside a cancel scope of their
own) until released; peer cancels for pending, answered and unknown ids; nested
registrations (some with a timeout) and turns ending, and time passing. A small model
says what each question's one answer
must be. Every question must get exactly one answer, that one, after its handler
(and no other) saw it.
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
from permclient import Answer, PermissionRequest, Selected

from .peer import FakePeer, allow_deny

SESSIONS = ("s-0", "s-1", "s-2")
IMMEDIATE = ("allow_now", "deny_now", "raise", "unoffered")
WAITING = ("wait", "wait_in_own_scope")
Behaviour = Literal["allow_now", "deny_now", "raise", "unoffered", "wait", "wait_in_own_scope"]

session_index = st.integers(0, len(SESSIONS) - 1)
behaviour = st.sampled_from([*IMMEDIATE, *WAITING])
operation = st.one_of(
    st.tuples(
        st.just("ask"), st.lists(st.tuples(session_index, behaviour), min_size=1, max_size=4)
    ),
    st.tuples(st.just("release"), st.integers(0, 12)),
    st.tuples(st.just("cancel"), st.integers(0, 12)),
    st.tuples(st.just("register"), st.tuples(session_index, st.sampled_from([None, 2, 5, 11]))),
    st.tuples(st.just("end_turn"), session_index),
    st.tuples(st.just("sleep"), st.integers(1, 12)),
)


@dataclass
class Model:
    """What must happen: the registration stack per session, and each question's fate."""

    stacks: dict[str, list[int]] = field(default_factory=lambda: {s: [] for s in SESSIONS})
    expected: dict[int, Any] = field(default_factory=dict)  # id -> result, or None if pending
    routed_to: dict[int, int | None] = field(default_factory=dict)  # id -> registration
    pending_of: dict[int, list[int]] = field(default_factory=dict)  # registration -> ids
    deadline: dict[int, float] = field(default_factory=dict)  # id -> when its timeout ends

    def expire(self, now: float) -> None:
        """Questions whose registration's timeout passed (the clock moves between ops)."""
        for qid, deadline in self.deadline.items():
            if deadline <= now and self.expected[qid] is None:
                self.expected[qid] = CANCELLED


CANCELLED = {"outcome": {"outcome": "cancelled"}}


def selected(option: str) -> dict[str, Any]:
    return {"outcome": {"outcome": "selected", "optionId": option}}


async def scenario(ops: list[tuple[str, Any]]) -> None:
    model = Model()
    behaviours: dict[int, Behaviour] = {}
    seen: dict[int, list[tuple[str, int]]] = {}
    answers: dict[int, Answer] = {}
    ours, theirs = trio.testing.memory_stream_pair()
    peer = FakePeer(theirs, "acp")
    got: dict[int, list[Any]] = {}

    def make_handler(session: str, registration: int) -> permclient.PermissionHandler:
        async def handler(request: PermissionRequest) -> permclient.Decision:
            qid = int(request.tool_call.tool_call_id.removeprefix("q"))
            seen.setdefault(qid, []).append((request.session_id, registration))
            how = behaviours[qid]
            if how == "allow_now":
                return Selected("allow")
            if how == "deny_now":
                return Selected("deny")
            if how == "raise":
                raise RuntimeError("handler failed")
            if how == "unoffered":
                return Selected("allow-everything")
            answer = answers[qid] = Answer()
            if how == "wait_in_own_scope":
                with trio.CancelScope():
                    return await answer
            return await answer

        return handler

    async def drain() -> None:
        await trio.testing.wait_all_tasks_blocked()
        while (frame := peer.framer.next_frame()) is not None or await _more(peer):
            if frame is None:
                continue
            message = msgspec.json.decode(frame)
            got.setdefault(message["id"], []).append(message.get("result", message))

    async with permclient.open_client(ours, dialect="acp") as client:
        registrations: dict[int, Any] = {}
        timeouts: dict[int, float | None] = {}
        next_id = next_registration = 0
        for op, arg in ops:
            model.expire(trio.current_time())
            if op == "register":
                session, timeouts[next_registration] = SESSIONS[arg[0]], arg[1]
                registration = next_registration
                next_registration += 1
                handler = make_handler(session, registration)
                context = client.permission_handler(session, handler, timeout=arg[1])
                context.__enter__()
                registrations[registration] = context
                model.stacks[session].append(registration)
                model.pending_of[registration] = []
            elif op == "end_turn":
                stack = model.stacks[SESSIONS[arg]]
                if stack:
                    registration = stack.pop()
                    registrations.pop(registration).__exit__(None, None, None)
                    for qid in model.pending_of.pop(registration):
                        if model.expected[qid] is None:
                            model.expected[qid] = CANCELLED
            elif op == "ask":
                writes = []
                for index, how in arg:
                    qid, next_id = next_id, next_id + 1
                    session = SESSIONS[index]
                    behaviours[qid] = how
                    stack = model.stacks[session]
                    route = stack[-1] if stack else None
                    model.routed_to[qid] = route
                    if route is None or how in ("raise", "unoffered"):
                        model.expected[qid] = CANCELLED
                    elif how in ("allow_now", "deny_now"):
                        model.expected[qid] = selected(how.removesuffix("_now"))
                    else:
                        model.expected[qid] = None
                        model.pending_of[route].append(qid)
                        timeout = timeouts[route]
                        if timeout is not None:
                            model.deadline[qid] = trio.current_time() + timeout
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
                    writes.append(peer.framer_type.encode(msgspec.json.encode(message)))
                await peer.send_raw(b"".join(writes))  # several questions in one read
            elif op == "release":
                if arg in answers:
                    answers[arg].select("allow")
                    if model.expected.get(arg, CANCELLED) is None:
                        model.expected[arg] = selected("allow")
            elif op == "sleep":
                await trio.sleep(arg)
            elif op == "cancel":
                await peer.notify("$/cancel_request", {"requestId": arg})
                if arg in model.expected and model.expected[arg] is None:
                    model.expected[arg] = CANCELLED
            await drain()
        model.expire(trio.current_time())
        for context in reversed(list(registrations.values())):
            context.__exit__(None, None, None)
        await drain()
    for qid, fate in model.expected.items():
        assert got.get(qid) == [CANCELLED if fate is None else fate], (qid, behaviours[qid])
        route = model.routed_to[qid]
        assert seen.get(qid, []) == ([] if route is None else [(_session_of(qid, ops), route)])
    assert set(got) == set(model.expected)  # nothing for ids never asked


async def _more(peer: FakePeer) -> bool:
    """Read what the client has written so far; False once it has written nothing more.

    (Under the autojump clock, the timeout passes as soon as every task is blocked.)
    """
    with trio.move_on_after(1):
        data = await peer.stream.receive_some(65536)
        peer.framer.receive_data(data)
        return True
    return False


def _session_of(qid: int, ops: list[tuple[str, Any]]) -> str:
    questions = [index for op, arg in ops if op == "ask" for index, _ in arg]
    return SESSIONS[questions[qid]]


@settings(max_examples=300, deadline=None)
@given(st.lists(operation, max_size=25))
# Answers given after a timeout passed, and a timeout racing a peer cancel and a turn.
@example([("register", (0, 2)), ("ask", [(0, "wait")]), ("sleep", 3), ("release", 0)])
@example(
    [
        ("register", (0, 5)),
        ("register", (1, None)),
        ("ask", [(0, "wait_in_own_scope"), (1, "wait"), (0, "wait")]),
        ("sleep", 3),
        ("release", 2),
        ("sleep", 4),
        ("release", 0),
        ("cancel", 1),
        ("end_turn", 0),
    ]
)
def test_every_question_gets_the_one_answer_the_model_says(ops: list[tuple[str, Any]]) -> None:
    trio.run(scenario, ops, clock=trio.testing.MockClock(autojump_threshold=0))
