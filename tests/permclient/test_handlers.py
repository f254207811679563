"""The three handler shapes through the trio client: rule, deferred, async.

Each shape obeys every invariant of DESIGN.md: exactly its session, exactly one
answer, fail closed, cancel honoured. (The connection's rules themselves are tested
without an event loop in test_connection.py.)
"""

from __future__ import annotations

import contextvars
import logging
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

import permclient
from permclient import (
    Cancelled,
    Decision,
    PermissionRequest,
    Question,
    Selected,
    WithdrawnBy,
    _client,
)
from tests.support.peer import CANCELLED, connected, permission_params, selected

DIALECTS = ["bridge", "acp"]


class Inbox:
    """A deferred handler: keeps its questions, and what withdrew each."""

    def __init__(self) -> None:
        self.questions: list[Question] = []
        self.withdrawn: list[tuple[str, WithdrawnBy]] = []
        self.arrived = trio.Event()

    def __call__(self, question: Question) -> None:
        self.questions.append(question)
        question.on_withdraw(
            lambda by: self.withdrawn.append((question.request.tool_call.tool_call_id, by))
        )
        self.arrived.set()

    async def next(self) -> Question:
        while not self.questions:
            self.arrived = trio.Event()
            await self.arrived.wait()
        return self.questions.pop(0)


# ----------------------------------------------------------------------- shapes


def test_a_client_is_made_by_open_client_only() -> None:
    with pytest.raises(TypeError, match="open_client"):
        permclient.Client(object(), None, None, None)  # type: ignore[arg-type]


def test_a_handler_must_be_declared_with_a_callable() -> None:
    with pytest.raises(TypeError):
        permclient.rule("allow")  # type: ignore[arg-type]
    with pytest.raises(TypeError):
        permclient.deferred(None)  # type: ignore[arg-type]


async def test_every_registration_is_a_context_manager_with_close() -> None:
    async with connected() as (client, peer):
        registration = client.permission_handler("s", permclient.deferred(Inbox()))
        assert isinstance(registration, permclient.Registration)
        with registration as entered:
            assert entered is registration
            assert client.statistics().connection.sessions_with_handlers == 1
        assert client.statistics().connection.sessions_with_handlers == 0
        registration.close()  # again: nothing happens
        for made in (
            client.on_request("x/y", _echo),
            client.on_notification("x/z", print),
            client.on_session_notification("s", print),
        ):
            assert isinstance(made, permclient.Registration)
            made.close()
        await peer.request("x/y", {}, request_id=1)
        assert (await peer.receive())["error"]["code"] == -32601  # closed: no handler


async def _echo(params: Any) -> Any:
    return params


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_rule_answers_in_front_and_passes_what_it_does_not_decide(dialect: str) -> None:
    asked: list[str] = []

    async def person(request: PermissionRequest) -> Decision:
        asked.append(request.tool_call.tool_call_id)
        return Selected("allow")

    @permclient.rule
    def deny_rm(request: PermissionRequest) -> Decision | None:
        return Selected("deny") if request.tool_call.tool_call_id == "rm" else None

    async with connected(dialect) as (client, peer):
        with client.permission_handler("s", person), client.permission_handler("s", deny_rm):
            await peer.ask_permission("s", "rm", request_id=1)
            assert await peer.receive() == {"jsonrpc": "2.0", "id": 1, "result": selected("deny")}
            await peer.ask_permission("s", "ls", request_id=2)
            assert await peer.receive() == {"jsonrpc": "2.0", "id": 2, "result": selected("allow")}
    assert asked == ["ls"]  # the rule's question never reached the person


@pytest.mark.parametrize(
    "verdict",
    [RuntimeError("bug"), "allow", Selected("not-offered"), 1],
    ids=["raises", "a string", "an option not offered", "an int"],
)
async def test_a_rule_that_raises_or_returns_junk_answers_cancelled_and_asks_no_one(
    verdict: Any, caplog: pytest.LogCaptureFixture
) -> None:
    asked: list[PermissionRequest] = []

    async def person(request: PermissionRequest) -> Decision:
        asked.append(request)
        return Selected("allow")

    def judge(request: PermissionRequest) -> Any:
        if isinstance(verdict, Exception):
            raise verdict
        return verdict

    caplog.set_level(logging.WARNING, "permclient")
    async with connected() as (client, peer):
        rule = permclient.rule(judge)
        with client.permission_handler("s", person), client.permission_handler("s", rule):
            await peer.ask_permission("s", request_id=1)
            assert (await peer.receive())["result"] == CANCELLED
    assert asked == []


async def test_rules_that_all_pass_leave_the_question_unrouted() -> None:
    async with connected() as (client, peer):
        with client.permission_handler("s", permclient.rule(lambda request: None)):
            await peer.ask_permission("s", request_id=1)
            assert (await peer.receive())["result"] == CANCELLED
            assert client.pending_permissions() == 0


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_deferred_question_is_answered_later_from_another_task(dialect: str) -> None:
    inbox = Inbox()
    async with connected(dialect) as (client, peer):
        with client.permission_handler("s", permclient.deferred(inbox)):
            await peer.ask_permission("s", request_id=1)
            question = await inbox.next()
            assert question.session_id == "s" and not question.done
            assert client.pending_questions("s") == [question]
            assert question.select("allow") is True
            assert await peer.receive() == {"jsonrpc": "2.0", "id": 1, "result": selected("allow")}
            assert question.done and question.withdrawn_by is None
            assert question.select("deny") is False  # one answer only
            assert question.cancel() is False
    assert inbox.withdrawn == []


async def test_a_deferred_answer_is_checked_against_what_was_offered() -> None:
    inbox = Inbox()
    async with connected() as (client, peer):
        with client.permission_handler("s", permclient.deferred(inbox)):
            await peer.ask_permission("s", request_id=1)
            question = await inbox.next()
            question.request.options = ()  # the handler's copy: what was offered stays
            assert question.answer(Selected("maybe")) is True  # taken, and failed closed
            assert (await peer.receive())["result"] == CANCELLED


@pytest.mark.parametrize("spelling", [("$/cancelRequest", "id"), ("$/cancel_request", "requestId")])
async def test_a_peer_cancel_withdraws_a_deferred_question_and_refuses_a_late_answer(
    spelling: tuple[str, str],
) -> None:
    method, key = spelling
    inbox = Inbox()
    async with connected() as (client, peer):
        with client.permission_handler("s", permclient.deferred(inbox)):
            await peer.ask_permission("s", "c1", request_id=7)
            question = await inbox.next()
            await peer.notify(method, {key: 7})
            assert await peer.receive() == {"jsonrpc": "2.0", "id": 7, "result": CANCELLED}
            assert inbox.withdrawn == [("c1", "peer")]
            assert question.withdrawn_by == "peer" and question.done
            assert question.select("allow") is False
            late: list[WithdrawnBy] = []
            question.on_withdraw(late.append)  # after the fact: runs at once
            assert late == ["peer"]
            assert client.pending_permissions() == 0


async def test_a_deferred_question_is_withdrawn_by_a_turn_cancel_a_timeout_and_teardown(
    autojump_clock: trio.abc.Clock,
) -> None:
    inbox = Inbox()
    async with connected("acp") as (client, peer):
        with client.permission_handler("s", permclient.deferred(inbox)):
            await peer.ask_permission("s", "turn", request_id=1)
            await inbox.next()
            await client.notify("session/cancel", {"sessionId": "s"})
            assert (await peer.receive())["method"] == "session/cancel"
            assert (await peer.receive())["result"] == CANCELLED
        with client.permission_handler("s", permclient.deferred(inbox), timeout=5):
            await peer.ask_permission("s", "timeout", request_id=2)
            await inbox.next()
            with trio.fail_after(10):  # the registration's timeout (5 s) comes first
                assert (await peer.receive())["result"] == CANCELLED
            assert trio.current_time() >= 5
        with client.permission_handler("s", permclient.deferred(inbox)):
            await peer.ask_permission("s", "teardown", request_id=3)
            await inbox.next()
            await peer.stream.send_eof()
            await client.wait_closed()
            assert (await peer.receive())["result"] == CANCELLED
    assert inbox.withdrawn == [("turn", "turn"), ("timeout", "timeout"), ("teardown", "teardown")]


async def test_a_deferred_handler_that_raises_answers_cancelled() -> None:
    def broken(question: Question) -> None:
        raise RuntimeError("the card could not be drawn")

    async with connected() as (client, peer):
        with client.permission_handler("s", permclient.deferred(broken)):
            await peer.ask_permission("s", request_id=1)
            assert (await peer.receive())["result"] == CANCELLED
            assert client.pending_permissions() == 0


async def test_a_deferred_question_holds_no_task(autojump_clock: trio.abc.Clock) -> None:
    inbox = Inbox()
    async with connected() as (client, peer):
        with client.permission_handler("s", permclient.deferred(inbox)):
            before = trio.lowlevel.current_statistics().tasks_living
            for k in range(50):
                await peer.ask_permission("s", f"c{k}", request_id=k)
            while len(inbox.questions) < 50:
                await trio.testing.wait_all_tasks_blocked()
            after = trio.lowlevel.current_statistics().tasks_living
            assert after == before
            for question in inbox.questions:
                question.cancel()
            assert {(await peer.receive())["id"] for _ in range(50)} == set(range(50))


async def test_a_plain_function_not_declared_a_rule_answers_cancelled_and_says_how(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def looks_like_a_rule(request: PermissionRequest) -> Decision:
        return Selected("allow")

    async with connected() as (client, peer):
        with client.permission_handler("s", looks_like_a_rule):  # type: ignore[arg-type]
            await peer.ask_permission("s", request_id=1)
            assert (await peer.receive())["result"] == CANCELLED
    assert "permclient.rule()" in caplog.text


class _Ready:
    """An awaitable that is not a coroutine: it blocks once, then allows."""

    def __await__(self) -> Any:
        yield from trio.lowlevel.checkpoint().__await__()  # noqa: ASYNC105 - awaited by hand
        return Selected("allow")


@pytest.mark.parametrize("first_on_its_worker", [True, False])
async def test_what_a_handler_returns_is_awaited_alike_on_a_new_worker_and_an_idle_one(
    first_on_its_worker: bool, caplog: pytest.LogCaptureFixture
) -> None:
    # A worker's first handler is started by hand; a worker that waited idle
    # runs the next one directly: both take any awaitable, and refuse the rest.
    async def warm_up(request: PermissionRequest) -> Decision:
        await trio.lowlevel.checkpoint()
        return Selected("allow")

    def returns(request: PermissionRequest) -> Any:
        return _Ready() if request.tool_call.tool_call_id == "awaitable" else Selected("allow")

    async with connected() as (client, peer):
        if not first_on_its_worker:
            with client.permission_handler("s", warm_up):
                await peer.ask_permission("s", request_id=0)
                assert (await peer.receive())["result"] == selected("allow")
            await trio.testing.wait_all_tasks_blocked()  # its worker waits idle
        with client.permission_handler("s", returns):  # type: ignore[arg-type]
            await peer.ask_permission("s", request_id=1, tool_call_id="awaitable")
            assert (await peer.receive())["result"] == selected("allow")
            await trio.testing.wait_all_tasks_blocked()
            await peer.ask_permission("s", request_id=2, tool_call_id="plain")
            assert (await peer.receive())["result"] == CANCELLED
    assert "permclient.rule()" in caplog.text


_var: contextvars.ContextVar[str] = contextvars.ContextVar("_var", default="clean")


class _ReadsOnAwait:
    """An awaitable whose ``__await__`` (a plain method, not a generator) reads a
    ContextVar at once, then blocks once and allows."""

    def __init__(self, seen: list[str]) -> None:
        self.seen = seen

    def __await__(self) -> Any:
        self.seen.append(_var.get())
        return self._steps()

    def _steps(self) -> Any:
        yield from trio.lowlevel.checkpoint().__await__()  # noqa: ASYNC105 - awaited by hand
        return Selected("allow")


@pytest.mark.parametrize("setter_blocks", [False, True])
async def test_an_awaitables_own_code_never_sees_the_previous_handlers_context(
    setter_blocks: bool,
) -> None:
    # One read asks twice: a worker woken for the first handler, which sets a
    # ContextVar, then runs the second, whose __await__ runs at once.
    seen: list[str] = []

    def handler(request: PermissionRequest) -> Any:
        tool_call_id = request.tool_call.tool_call_id
        if tool_call_id.startswith("sets"):

            async def sets() -> Decision:
                _var.set(tool_call_id)
                if setter_blocks:
                    await trio.lowlevel.checkpoint()
                return Selected("allow")

            return sets()
        return _ReadsOnAwait(seen)

    async with connected() as (client, peer):
        with client.permission_handler("s", handler):  # type: ignore[arg-type]
            for n in range(10):
                await trio.testing.wait_all_tasks_blocked()  # the workers wait idle
                await peer.send_raw(
                    b"".join(
                        peer.framer_type.encode(
                            msgspec.json.encode(
                                {
                                    "jsonrpc": "2.0",
                                    "id": f"{n}-{tool_call_id}",
                                    "method": "session/request_permission",
                                    "params": permission_params("s", f"{tool_call_id}{n}"),
                                }
                            )
                        )
                        for tool_call_id in ("sets", "reads")
                    )
                )
                for _ in range(2):
                    assert (await peer.receive())["result"] == selected("allow")
    assert seen == ["clean"] * 10


def ask_many(peer: Any, count: int, session_id: str = "s") -> bytes:
    """``count`` permission requests (ids 0..count-1) in one read."""
    return b"".join(
        peer.framer_type.encode(
            msgspec.json.encode(
                {
                    "jsonrpc": "2.0",
                    "id": n,
                    "method": "session/request_permission",
                    "params": permission_params(session_id, f"call-{n}"),
                }
            )
        )
        for n in range(count)
    )


async def test_each_queued_async_handler_starts_while_the_busy_ones_wait_for_people() -> None:
    # Beyond the workers woken at once, handlers wait for a busy worker to finish;
    # when none does for a round (each waits for a person), each still gets one.
    count = 3 * _client._EAGER_WORKERS
    started: list[str] = []
    release = trio.Event()

    async def waits_for_a_person(request: PermissionRequest) -> Decision:
        started.append(request.tool_call.tool_call_id)
        await release.wait()
        return Selected("allow")

    async with connected() as (client, peer):
        with client.permission_handler("s", waits_for_a_person):
            await peer.send_raw(ask_many(peer, count))
            with trio.fail_after(5):
                while len(started) < count:
                    await trio.testing.wait_all_tasks_blocked()
            assert sorted(started) == sorted(f"call-{n}" for n in range(count))
            release.set()
            with trio.fail_after(5):
                ids = [(await peer.receive())["id"] for _ in range(count)]
            assert sorted(ids) == list(range(count))


async def test_handlers_waiting_for_people_get_one_worker_each_and_no_more() -> None:
    count = 10 * _client._EAGER_WORKERS
    release = trio.Event()

    class Spawned(trio.abc.Instrument):
        workers = 0

        def task_spawned(self, task: trio.lowlevel.Task) -> None:
            self.workers += task.name == _client._PERMISSION_TASK

    async def waits_for_a_person(request: PermissionRequest) -> Decision:
        await release.wait()
        return Selected("allow")

    spawned = Spawned()
    trio.lowlevel.add_instrument(spawned)
    try:
        async with connected() as (client, peer):
            with client.permission_handler("s", waits_for_a_person):
                await peer.send_raw(ask_many(peer, count))
                await trio.testing.wait_all_tasks_blocked()
                release.set()
                with trio.fail_after(5):
                    ids = [(await peer.receive())["id"] for _ in range(count)]
                assert sorted(ids) == list(range(count))
    finally:
        trio.lowlevel.remove_instrument(spawned)
    assert spawned.workers == count  # (none woken twice for the same handler)


async def test_queued_async_handlers_are_taken_by_busy_workers_and_all_answered() -> None:
    # Handlers that only checkpoint keep their workers busy round after round:
    # the queued ones are taken as those finish, each started once, in order.
    count = 5 * _client._EAGER_WORKERS
    started: list[int] = []

    async def checkpoints(request: PermissionRequest) -> Decision:
        started.append(int(request.tool_call.tool_call_id.removeprefix("call-")))
        for _ in range(3):
            await trio.lowlevel.checkpoint()
        return Selected("allow")

    async with connected() as (client, peer):
        with client.permission_handler("s", checkpoints):
            await peer.send_raw(ask_many(peer, count))
            with trio.fail_after(5):
                answers = [await peer.receive() for _ in range(count)]
            assert sorted(answer["id"] for answer in answers) == list(range(count))
            assert all(answer["result"] == selected("allow") for answer in answers)
            assert started == list(range(count))
            assert client.pending_questions() == []


async def test_leaving_the_client_with_async_handlers_queued_answers_each_once() -> None:
    count = 3 * _client._EAGER_WORKERS

    async def waits(request: PermissionRequest) -> Decision:
        await trio.sleep_forever()
        raise AssertionError("unreachable")  # pragma: no cover

    with trio.fail_after(10):  # (teardown waits for nothing the handlers hold)
        async with connected() as (client, peer):
            client.permission_handler("s", waits)
            await peer.send_raw(ask_many(peer, count))
            await trio.testing.wait_all_tasks_blocked()
    answers = [await peer.receive() for _ in range(count)]
    assert sorted(answer["id"] for answer in answers) == list(range(count))
    assert all(answer["result"] == CANCELLED for answer in answers)


async def test_an_async_handler_is_cancelled_by_its_withdrawal() -> None:
    cancelled = trio.Event()

    async def waits(request: PermissionRequest) -> Decision:
        try:
            await trio.sleep_forever()
        finally:
            cancelled.set()
        return Cancelled()  # pragma: no cover

    async with connected() as (client, peer):
        with client.permission_handler("s", waits):
            await peer.ask_permission("s", request_id=1)
            await trio.testing.wait_all_tasks_blocked()
            await peer.notify("$/cancelRequest", {"id": 1})
            assert (await peer.receive())["result"] == CANCELLED
            with trio.fail_after(5):
                await cancelled.wait()


@pytest.mark.parametrize("swallows_the_cancel", [False, True])
async def test_a_cancellation_meant_for_one_handler_never_reaches_the_next(
    swallows_the_cancel: bool,
) -> None:
    # Workers run handler after handler. A read that withdraws one question and
    # asks the next wakes the cancelled handler's worker and a new one together;
    # whichever trio runs first takes the new question (both orders come up over
    # the rounds). The new handler must never run in the cancelled one's scope,
    # even when that handler ignored its cancellation and returned.
    rounds = 16
    blocked = trio.Event()

    async def handler(request: PermissionRequest) -> Decision:
        if request.tool_call.tool_call_id.startswith("blocks"):
            try:
                blocked.set()
                await trio.sleep_forever()
            except trio.Cancelled:
                if not swallows_the_cancel:
                    raise
            return Selected("allow")
        await trio.lowlevel.checkpoint()
        return Selected("allow")

    answers: dict[int, Any] = {}
    async with connected() as (client, peer):
        with client.permission_handler("s", handler):
            for n in range(rounds):
                blocked = trio.Event()
                await peer.ask_permission("s", request_id=2 * n, tool_call_id=f"blocks{n}")
                with trio.fail_after(5):
                    await blocked.wait()
                await trio.testing.wait_all_tasks_blocked()
                await peer.send_raw(
                    peer.framer_type.encode(
                        msgspec.json.encode(
                            {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 2 * n}}
                        )
                    )
                    + peer.framer_type.encode(
                        msgspec.json.encode(
                            {
                                "jsonrpc": "2.0",
                                "id": 2 * n + 1,
                                "method": "session/request_permission",
                                "params": permission_params("s", f"asks{n}"),
                            }
                        )
                    )
                )
                for _ in range(2):
                    message = await peer.receive()
                    answers[message["id"]] = message["result"]
    assert {i: answers[i] for i in range(0, 2 * rounds, 2)} == dict.fromkeys(
        range(0, 2 * rounds, 2), CANCELLED
    )
    assert {i: answers[i] for i in range(1, 2 * rounds, 2)} == dict.fromkeys(
        range(1, 2 * rounds, 2), selected("allow")
    )
