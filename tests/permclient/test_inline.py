"""start(): an async handler runs in its own context, in the calling task (inside
the caller's cancel scope) until it first blocks; the relay runs the rest."""

from __future__ import annotations

import contextvars
from typing import Any

import pytest
import trio
import trio.testing

from permclient._inline import UNANSWERED, start


async def scoped(scope: trio.CancelScope, awaitable: Any) -> Any:
    """What a worker does: inside its scope, start the handler here; if it blocked,
    await the rest. ``UNANSWERED`` if the scope caught a cancellation."""
    result = UNANSWERED
    with scope:
        finished, outcome = start(lambda _: awaitable, None, contextvars.copy_context())
        result = outcome if finished else await outcome
    return result


async def test_a_handler_that_never_blocks_answers_at_once() -> None:
    async def handler() -> str:
        return "allow"

    scope = trio.CancelScope()
    assert await scoped(scope, handler()) == "allow"


async def test_a_handler_that_blocks_returns_its_result() -> None:
    async def handler() -> str:
        await trio.lowlevel.checkpoint()
        await trio.lowlevel.checkpoint()
        return "allow"

    scope = trio.CancelScope()
    assert await scoped(scope, handler()) == "allow"
    assert not scope.cancelled_caught


async def test_values_sent_into_a_blocked_handler_reach_it() -> None:
    send, receive = trio.open_memory_channel[str](1)

    async def handler() -> str:
        return await receive.receive() + "!"

    scope = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(send.send, "allow")
        assert await scoped(scope, handler()) == "allow!"


async def test_cancelling_the_scope_cancels_a_blocked_handler_and_runs_its_cleanup() -> None:
    cleaned_up = []

    async def handler() -> str:
        try:
            await trio.sleep_forever()
        finally:
            cleaned_up.append(True)
        return "allow"  # pragma: no cover - never reached

    scope = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: _cancel_soon(scope))
        assert await scoped(scope, handler()) is UNANSWERED
    assert scope.cancelled_caught
    assert cleaned_up == [True]


async def _cancel_soon(scope: trio.CancelScope) -> None:
    await trio.testing.wait_all_tasks_blocked()
    scope.cancel()


async def test_a_scope_cancelled_before_the_handler_blocks_cancels_it_at_its_first_block() -> None:
    reached = []

    async def handler() -> str:
        reached.append("before")
        await trio.sleep_forever()
        reached.append("after")  # pragma: no cover - never reached
        return "allow"  # pragma: no cover

    scope = trio.CancelScope()
    scope.cancel()
    assert await scoped(scope, handler()) is UNANSWERED
    assert scope.cancelled_caught
    assert reached == ["before"]


async def test_a_handler_blocked_inside_its_own_scope_is_cancelled_through_it() -> None:
    inner: list[trio.CancelScope] = []

    async def handler() -> str:
        with trio.move_on_after(3600) as own:
            inner.append(own)
            await trio.sleep_forever()
        return "the handler's own timeout fired"  # must not happen

    scope = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: _cancel_soon(scope))
        assert await scoped(scope, handler()) is UNANSWERED
    assert scope.cancelled_caught
    assert not inner[0].cancelled_caught  # the cancellation was ours, not its timeout


async def test_a_handler_blocked_in_nested_scopes_and_a_nursery_is_cancelled_whole() -> None:
    child_cancelled = []

    async def child() -> None:
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            child_cancelled.append(True)
            raise

    async def handler() -> str:
        with trio.CancelScope(), trio.CancelScope(deadline=trio.current_time() + 3600):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(child)
                await trio.sleep_forever()
        return "not reached"  # pragma: no cover

    scope = trio.CancelScope()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(lambda: _cancel_soon(scope))
        assert await scoped(scope, handler()) is UNANSWERED
    assert scope.cancelled_caught
    assert child_cancelled == [True]


async def test_a_handler_whose_own_timeout_fires_goes_on_and_can_still_be_cancelled(
    autojump_clock: trio.testing.MockClock,
) -> None:
    steps = []

    async def handler() -> str:
        with trio.move_on_after(1) as own:
            await trio.sleep_forever()
        steps.append(("own timeout caught", own.cancelled_caught))
        await trio.sleep_forever()  # blocks again, now outside its own scope
        return "not reached"  # pragma: no cover

    scope = trio.CancelScope()

    async def cancel_later() -> None:
        await trio.sleep(10)
        scope.cancel()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(cancel_later)
        assert await scoped(scope, handler()) is UNANSWERED
    assert steps == [("own timeout caught", True)]
    assert scope.cancelled_caught


async def test_a_handler_whose_own_timeout_fires_returns_what_it_returns(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async def handler() -> str:
        with trio.move_on_after(1):
            await trio.sleep_forever()
        return "timed out: deny"

    scope = trio.CancelScope()
    assert await scoped(scope, handler()) == "timed out: deny"
    assert not scope.cancelled_caught


async def test_an_outer_cancellation_passes_through_and_is_not_caught_by_the_scope() -> None:
    async def handler() -> str:
        with trio.CancelScope():
            await trio.sleep_forever()
        return "not reached"  # pragma: no cover

    scope = trio.CancelScope()
    with trio.CancelScope() as outer:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(lambda: _cancel_soon(outer))
            await scoped(scope, handler())
    assert outer.cancelled_caught
    assert not scope.cancelled_caught


@pytest.mark.parametrize("blocks_first", [False, True])
async def test_an_exception_from_the_handler_propagates(blocks_first: bool) -> None:
    async def handler() -> str:
        if blocks_first:
            with trio.CancelScope():
                await trio.lowlevel.checkpoint()
                raise ValueError("bad handler")
        raise ValueError("bad handler")

    scope = trio.CancelScope()
    with pytest.raises(ValueError, match="bad handler"):
        await scoped(scope, handler())


async def test_an_awaitable_that_is_not_a_coroutine_runs() -> None:
    class Ready:
        def __await__(self) -> Any:
            yield from trio.lowlevel.checkpoint().__await__()  # noqa: ASYNC105 - awaited by hand
            return "allow"

    scope = trio.CancelScope()
    assert await scoped(scope, Ready()) == "allow"


async def test_something_not_awaitable_raises_type_error() -> None:
    scope = trio.CancelScope()
    with pytest.raises(TypeError):
        await scoped(scope, "allow")  # type: ignore[arg-type]


async def test_the_task_is_left_in_its_own_cancel_scope_afterwards() -> None:
    # A scope left entered would leave the task cancelled or misnested: a later
    # scope of the caller must still open, block, time out and close cleanly.
    async def handler() -> str:
        with trio.move_on_after(3600):
            await trio.lowlevel.checkpoint()
        return "allow"

    assert await scoped(trio.CancelScope(), handler()) == "allow"
    with trio.move_on_after(0.01) as after:
        await trio.sleep_forever()
    assert after.cancelled_caught


async def test_each_handler_runs_in_its_own_copy_of_the_context() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    seen = []

    async def setter() -> str:
        var.set("first handler's")
        await trio.lowlevel.checkpoint()
        seen.append(var.get())  # still its own, after blocking
        return "allow"

    async def reader() -> str:
        seen.append(var.get())
        return "allow"

    # As in the client, a handler that blocked keeps the task it ran in: own task.
    async with trio.open_nursery() as nursery:
        nursery.start_soon(scoped, trio.CancelScope(), setter())
    assert await scoped(trio.CancelScope(), reader()) == "allow"
    assert var.get() == "unset"
    assert seen == ["first handler's", "unset"]


async def test_trio_from_thread_sees_the_threads_context_inside_a_blocked_handler() -> None:
    # trio.from_thread.run swaps the task's context around the callback; the
    # handler's steps must run in the task's context for that to work.
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    seen = []

    async def in_trio() -> None:
        seen.append(("callback sees", var.get()))
        var.set("set by the callback")

    def in_thread() -> None:
        var.set("set in the thread")
        trio.from_thread.run(in_trio)

    async def handler() -> str:
        var.set("the handler's")
        await trio.to_thread.run_sync(in_thread)
        seen.append(("handler after", var.get()))
        return "allow"

    async with trio.open_nursery() as nursery:
        nursery.start_soon(scoped, trio.CancelScope(), handler())
    assert seen == [("callback sees", "set in the thread"), ("handler after", "the handler's")]


async def test_throw_follows_the_generator_conventions() -> None:
    caught = []

    async def handler(_: object) -> str:
        try:
            await trio.lowlevel.checkpoint()
        except ValueError as exc:
            caught.append(repr(exc))
            return "caught"
        return "not thrown"  # pragma: no cover

    finished, relay = start(handler, None, contextvars.copy_context())
    assert not finished
    relay.send(None)  # hands the trap out, as the awaiting coroutine would
    with pytest.raises(StopIteration) as done:
        relay.throw(ValueError, "boom")  # the old three-argument form
    assert done.value.value == "caught"
    assert caught == ["ValueError('boom')"]


async def test_closing_the_relay_closes_the_handler_and_its_scopes() -> None:
    closed = []

    async def handler(_: object) -> str:
        try:
            with trio.move_on_after(3600):
                await trio.sleep_forever()
        finally:
            closed.append(True)
        return "not reached"  # pragma: no cover

    finished, relay = start(handler, None, contextvars.copy_context())
    assert not finished
    relay.send(None)
    relay.close()
    assert closed == [True]
    # The task's cancel scopes are whole again: a new one opens, times out, closes.
    with trio.move_on_after(0.01) as after:
        await trio.sleep_forever()
    assert after.cancelled_caught


async def test_an_awaitable_whose_await_gives_a_plain_iterator_works() -> None:
    class Done:
        def __iter__(self) -> Done:
            return self

        def __next__(self) -> Any:
            raise StopIteration("allow")

    class Ready:
        def __await__(self) -> Any:
            return Done()

    assert await scoped(trio.CancelScope(), Ready()) == "allow"


async def test_a_handler_that_raises_before_blocking_raises_and_leaves_the_scopes_whole() -> None:
    async def handler() -> str:
        raise ValueError("bad handler")

    scope = trio.CancelScope()
    with pytest.raises(ValueError, match="bad handler"):
        await scoped(scope, handler())
    with trio.move_on_after(0.01) as after:  # the task's scopes are whole again
        await trio.sleep_forever()
    assert after.cancelled_caught
