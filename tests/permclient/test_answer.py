"""permclient.Answer: a one-shot decision a UI gives and a handler awaits."""

from __future__ import annotations

from typing import Any

import pytest
import trio
import trio.testing

import permclient
from permclient import Answer, Cancelled, PermissionRequest, Selected
from tests.support.peer import CANCELLED, connected, selected


async def test_a_decision_given_while_awaited_wakes_the_handler_with_it() -> None:
    answer = Answer()
    got: list[Any] = []

    async def handler() -> None:
        got.append(await answer)

    async with trio.open_nursery() as nursery:
        nursery.start_soon(handler)
        await trio.testing.wait_all_tasks_blocked()
        assert got == [] and answer.decision is None
        assert answer.select("allow") is True
    assert got == [Selected("allow")]


async def test_a_decision_given_before_the_await_is_returned_at_once() -> None:
    answer = Answer()
    assert answer.cancel() is True
    with trio.testing.assert_checkpoints():
        assert await answer == Cancelled()
    assert await answer == Cancelled()  # and again: it stays given


async def test_only_the_first_decision_counts() -> None:
    answer = Answer()
    assert answer.select("allow") is True
    assert answer.select("deny") is False
    assert answer.cancel() is False
    assert answer.decision == Selected("allow")
    assert await answer == Selected("allow")


async def test_anything_but_a_decision_is_refused_with_a_type_error() -> None:
    answer = Answer()
    with pytest.raises(TypeError, match="Selected or Cancelled, not str"):
        answer.set("allow")  # type: ignore[arg-type]
    assert answer.decision is None


async def test_a_cancelled_await_leaves_the_answer_open_for_a_later_one() -> None:
    answer = Answer()
    with trio.move_on_after(1) as timeout:
        await answer
    assert timeout.cancelled_caught
    assert answer.select("allow") is True  # no task is woken: nobody waits any more
    assert await answer == Selected("allow")


async def test_a_second_waiter_is_refused_while_the_first_waits() -> None:
    answer = Answer()
    async with trio.open_nursery() as nursery:

        async def first() -> None:
            await answer

        nursery.start_soon(first)
        await trio.testing.wait_all_tasks_blocked()
        with pytest.raises(RuntimeError, match="one task at a time"):
            await answer
        answer.cancel()


# ------------------------------------------------------------- through a client


@pytest.mark.parametrize("dialect", ["bridge", "acp"])
async def test_a_handler_awaiting_an_answer_sends_what_the_ui_picked(dialect: str) -> None:
    cards: dict[str, Answer] = {}

    async def handler(request: PermissionRequest) -> permclient.Decision:
        answer = cards[request.tool_call.tool_call_id] = Answer()
        return await answer

    async with connected(dialect) as (client, peer):
        with client.permission_handler("s", handler):
            first = await peer.ask_permission("s", "call-1")
            second = await peer.ask_permission("s", "call-2")
            await trio.testing.wait_all_tasks_blocked()
            assert client.pending_permissions("s") == 2
            cards["call-2"].select("deny")
            assert await peer.receive() == {
                "jsonrpc": "2.0",
                "id": second,
                "result": selected("deny"),
            }
            cards["call-1"].select("allow")
            assert await peer.receive() == {
                "jsonrpc": "2.0",
                "id": first,
                "result": selected("allow"),
            }


async def test_an_answer_for_a_withdrawn_question_changes_nothing_on_the_wire() -> None:
    cards: list[Answer] = []
    closed: list[str] = []

    async def handler(request: PermissionRequest) -> permclient.Decision:
        answer = Answer()
        cards.append(answer)
        try:
            return await answer
        finally:
            closed.append(request.tool_call.tool_call_id)  # the card goes away

    async with connected("bridge") as (client, peer):
        with client.permission_handler("s", handler):
            request_id = await peer.ask_permission("s", "call-1")
            await trio.testing.wait_all_tasks_blocked()
            await peer.notify("$/cancelRequest", {"id": request_id})
            assert await peer.receive() == {"jsonrpc": "2.0", "id": request_id, "result": CANCELLED}
            await trio.testing.wait_all_tasks_blocked()
            assert closed == ["call-1"]
            cards[0].select("allow")  # a click that came too late
            await trio.testing.wait_all_tasks_blocked()
            assert client.pending_permissions() == 0
        sentinel = await peer.request("sentinel/ping", {}, request_id="sentinel")
        assert (await peer.receive())["id"] == sentinel  # and nothing was sent before it


async def test_an_option_that_was_not_offered_still_answers_cancelled() -> None:
    async def handler(request: PermissionRequest) -> permclient.Decision:
        answer = Answer()
        answer.select("sudo-allow")
        return await answer

    async with connected("acp") as (client, peer):
        with client.permission_handler("s", handler):
            request_id = await peer.ask_permission("s")
            assert await peer.receive() == {"jsonrpc": "2.0", "id": request_id, "result": CANCELLED}


async def test_giving_and_awaiting_run_protected_from_ctrl_c(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A Ctrl-C between recording the decision and waking the waiter (or between
    # recording the waiter and parking it) would strand the handler: both run with
    # KeyboardInterrupt deferred, which is what trio.Event.set does too.
    protected: dict[str, bool] = {}
    real_current_task = trio.lowlevel.current_task
    real_reschedule = trio.lowlevel.reschedule

    def current_task() -> trio.lowlevel.Task:
        protected["await"] = trio.lowlevel.currently_ki_protected()
        return real_current_task()

    def reschedule(task: trio.lowlevel.Task, next_send: Any = None) -> None:
        protected["set"] = trio.lowlevel.currently_ki_protected()
        real_reschedule(task, next_send)

    answer = Answer()

    async def handler() -> None:
        await answer

    async with trio.open_nursery() as nursery:
        monkeypatch.setattr(trio.lowlevel, "current_task", current_task)
        monkeypatch.setattr(trio.lowlevel, "reschedule", reschedule)
        nursery.start_soon(handler)
        await trio.testing.wait_all_tasks_blocked()
        answer.select("allow")
    assert protected == {"await": True, "set": True}
