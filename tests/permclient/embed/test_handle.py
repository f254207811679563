"""Handler shapes and timeouts in every embedding facade: no question is left open.

A handler function that returns its answer (the core's style) is answered with it;
one that returns anything else, for a question it did not answer, answers
``cancelled``; an ``async def`` handler is refused at registration where there is
no loop to run it (the blocking facade, plain guest mode) and run as a task by the
asyncio client. ``timeout=`` answers a question still open after that long
``cancelled`` and withdraws its handle.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import queue
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest

from permclient import Cancelled, Decision, PermissionRequest, Selected
from permclient.embed import AsyncioClient, BlockingClient, PermissionHandle, open_blocking
from tests.support.peer import CANCELLED, TIMEOUT_S, SyncPeer, selected, socket_pair


@contextmanager
def blocking() -> Iterator[tuple[BlockingClient, SyncPeer]]:
    ours, theirs = socket_pair()
    peer = SyncPeer(theirs)
    client = open_blocking(ours)
    try:
        yield client, peer
    finally:
        client.close()
        peer.close()


@asynccontextmanager
async def on_asyncio() -> AsyncIterator[tuple[AsyncioClient, SyncPeer]]:
    from permclient.embed import asyncio_client

    ours, theirs = socket_pair()
    peer = SyncPeer(theirs)
    try:
        async with asyncio_client(ours) as client:
            yield client, peer
    finally:
        peer.close()


def run_on_asyncio(scenario: Callable[[], Awaitable[None]]) -> None:
    async def bounded() -> None:
        await asyncio.wait_for(scenario(), TIMEOUT_S * 3)

    asyncio.run(bounded())


async def _never_awaited(handle: PermissionHandle) -> Decision:
    return Selected("allow")  # pragma: no cover - the coroutine is closed, never run


# What a handler function returns, for a question it did not answer through the
# handle, and what the runtime gets.
RETURNS = [
    pytest.param(lambda handle: Selected("allow"), selected("allow"), id="Selected-offered"),
    pytest.param(lambda handle: Selected("deny"), selected("deny"), id="Selected-other"),
    pytest.param(lambda handle: Cancelled(), CANCELLED, id="Cancelled"),
    pytest.param(lambda handle: Selected("sudo"), CANCELLED, id="Selected-not-offered"),
    pytest.param(lambda handle: "allow", CANCELLED, id="a-bare-option-id"),
    pytest.param(lambda handle: True, CANCELLED, id="True"),
    pytest.param(lambda handle: 1, CANCELLED, id="a-number"),
    pytest.param(lambda handle: {"outcome": "selected"}, CANCELLED, id="a-dict"),
    pytest.param(_never_awaited, CANCELLED, id="a-coroutine"),
]


def _returning(make: Callable[[PermissionHandle], object]) -> Callable[[PermissionHandle], object]:
    # Wrapped, so that an async def (returning a coroutine) registers as a plain function.
    return lambda handle: make(handle)


@pytest.mark.parametrize(("make", "expected"), RETURNS)
def test_blocking_a_returned_answer_is_the_answer_and_anything_else_cancels(
    make: Callable[[PermissionHandle], object], expected: dict[str, Any]
) -> None:
    with blocking() as (client, peer), client.permission_handler("s", _returning(make)):
        peer.ask_permission("s", "call-1", 1)
        assert peer.receive() == {"jsonrpc": "2.0", "id": 1, "result": expected}


@pytest.mark.parametrize(("make", "expected"), RETURNS)
def test_guest_a_returned_answer_is_the_answer_and_anything_else_cancels(
    make: Callable[[PermissionHandle], object], expected: dict[str, Any]
) -> None:
    async def scenario() -> None:
        async with on_asyncio() as (client, peer):
            with client.permission_handler("s", _returning(make)):
                peer.ask_permission("s", "call-1", 1)
                reply = await asyncio.to_thread(peer.receive)
                assert reply == {"jsonrpc": "2.0", "id": 1, "result": expected}

    run_on_asyncio(scenario)


def test_an_unexpected_return_value_is_logged_with_the_handler(
    caplog: pytest.LogCaptureFixture,
) -> None:
    def show_card(handle: PermissionHandle) -> str:
        return "card-17"  # e.g. a toolkit's widget id, returned by mistake

    with (
        caplog.at_level(logging.ERROR, "permclient.embed"),
        blocking() as (client, peer),
        client.permission_handler("s", show_card),
    ):
        peer.ask_permission("s", "call-1", 1)
        assert peer.receive()["result"] == CANCELLED
    assert any(
        "show_card" in r.getMessage() and "'card-17'" in r.getMessage() for r in caplog.records
    )


def test_a_handler_that_answered_through_the_handle_keeps_that_answer_whatever_it_returns() -> None:
    # handle.answer() returns a bool: a one-line lambda returns it, and it is no answer.
    with (
        blocking() as (client, peer),
        client.permission_handler("s", lambda handle: handle.answer(Selected("allow"))),
        client.permission_handler("t", lambda handle: (handle.cancel(), Selected("allow"))[1]),
    ):
        peer.ask_permission("s", "call-1", 1)
        assert peer.receive()["result"] == selected("allow")
        peer.ask_permission("t", "call-2", 2)
        assert peer.receive()["result"] == CANCELLED


async def _async_handler(request: PermissionRequest) -> Decision:
    return Selected("allow")  # pragma: no cover - refused at registration


class _AsyncCallable:
    async def __call__(self, request: PermissionRequest) -> Decision:
        return Selected("allow")  # pragma: no cover - refused at registration


async def _async_generator(request: PermissionRequest) -> AsyncIterator[Decision]:
    yield Selected("allow")  # pragma: no cover - refused at registration


ASYNC_HANDLERS = [
    pytest.param(_async_handler, id="async-def"),
    pytest.param(_AsyncCallable(), id="async-__call__"),
    pytest.param(functools.partial(_async_handler), id="partial-of-async-def"),
    pytest.param(_async_generator, id="async-generator"),
]


@pytest.mark.parametrize("handler", ASYNC_HANDLERS)
def test_blocking_refuses_an_async_handler_at_registration(handler: Any) -> None:
    with blocking() as (client, peer):
        with pytest.raises(TypeError, match=r"async function.*plain function fn\(handle\)"):
            client.permission_handler("s", handler)
        peer.ask_permission("s", "call-1", 1)  # nothing was registered: no handler
        assert peer.receive()["result"] == CANCELLED


@pytest.mark.parametrize("handler", ASYNC_HANDLERS)
def test_plain_guest_mode_refuses_an_async_handler_at_registration(handler: Any) -> None:
    async def scenario() -> None:
        async with on_asyncio() as (client, _peer):
            with pytest.raises(TypeError, match="async function"):
                client.guest.permission_handler("s", handler)

    run_on_asyncio(scenario)


@pytest.mark.parametrize("handler", [1, None, "allow"])
def test_a_handler_that_is_not_callable_is_refused_at_registration(handler: Any) -> None:
    with blocking() as (client, _peer), pytest.raises(TypeError, match="callable"):
        client.permission_handler("s", handler)


def test_the_asyncio_client_runs_an_async_callable_object_as_a_task() -> None:
    async def scenario() -> None:
        class Approver:
            async def __call__(self, request: PermissionRequest) -> Decision:
                await asyncio.sleep(0)
                return Selected("deny")

        async with on_asyncio() as (client, peer):
            with client.permission_handler("s", Approver()):
                peer.ask_permission("s", "call-1", 1)
                assert (await asyncio.to_thread(peer.receive))["result"] == selected("deny")

    run_on_asyncio(scenario)


def test_the_asyncio_client_refuses_an_async_generator_handler_at_registration() -> None:
    async def scenario() -> None:
        async def generator(request: PermissionRequest) -> AsyncIterator[Decision]:
            yield Selected("allow")

        class GeneratorObject:
            async def __call__(self, request: PermissionRequest) -> AsyncIterator[Decision]:
                yield Selected("allow")

        async with on_asyncio() as (client, _peer):
            for handler in (generator, GeneratorObject()):
                with pytest.raises(TypeError, match="async generator"):
                    client.permission_handler("s", handler)  # type: ignore[arg-type]

    run_on_asyncio(scenario)


# ------------------------------------------------------------------ timeouts


def test_blocking_timeout_answers_a_question_left_open_cancelled_and_withdraws_it() -> None:
    withdrawn: queue.Queue[PermissionHandle] = queue.Queue()

    def never_answers(handle: PermissionHandle) -> None:
        handle.on_cancelled(withdrawn.put)

    with (
        blocking() as (client, peer),
        client.permission_handler("s", never_answers, timeout=0.05),
    ):
        peer.ask_permission("s", "call-1", 1)
        assert peer.receive() == {"jsonrpc": "2.0", "id": 1, "result": CANCELLED}
        handle = withdrawn.get(timeout=TIMEOUT_S)
        assert handle.withdrawn and handle.decision is None
        assert handle.answer(Selected("allow")) is False  # too late: changes nothing


def test_guest_timeout_answers_a_question_left_open_cancelled_and_cancels_its_task() -> None:
    async def scenario() -> None:
        task_cancelled = asyncio.Event()

        async def waits_forever(request: PermissionRequest) -> Decision:
            try:
                await asyncio.Event().wait()
            finally:
                task_cancelled.set()
            raise AssertionError("unreachable")  # pragma: no cover

        withdrawn: asyncio.Queue[PermissionHandle] = asyncio.Queue()
        async with on_asyncio() as (client, peer):
            with (
                client.permission_handler("s", waits_forever, timeout=0.05),
                client.permission_handler(
                    "t", lambda h: h.on_cancelled(withdrawn.put_nowait), timeout=0.05
                ),
            ):
                peer.ask_permission("s", "call-1", 1)
                peer.ask_permission("t", "call-2", 2)
                replies = [await asyncio.to_thread(peer.receive) for _ in range(2)]
                assert sorted(r["id"] for r in replies) == [1, 2]
                assert all(r["result"] == CANCELLED for r in replies)
                await asyncio.wait_for(task_cancelled.wait(), TIMEOUT_S)
                handle = await asyncio.wait_for(withdrawn.get(), TIMEOUT_S)
                assert handle.withdrawn

    run_on_asyncio(scenario)


def test_an_answer_before_the_timeout_is_the_answer() -> None:
    with (
        blocking() as (client, peer),
        client.permission_handler("s", lambda handle: Selected("allow"), timeout=TIMEOUT_S),
    ):
        peer.ask_permission("s", "call-1", 1)
        assert peer.receive()["result"] == selected("allow")


@pytest.mark.parametrize("timeout", [0, -1, float("nan"), float("inf"), "5", True])
def test_every_facade_refuses_a_timeout_that_is_not_a_positive_number(timeout: Any) -> None:
    with blocking() as (client, _peer), pytest.raises(ValueError, match="timeout"):
        client.permission_handler("s", lambda handle: None, timeout=timeout)

    async def scenario() -> None:
        async with on_asyncio() as (aclient, _peer):
            with pytest.raises(ValueError, match="timeout"):
                aclient.permission_handler("s", lambda handle: None, timeout=timeout)

    run_on_asyncio(scenario)
