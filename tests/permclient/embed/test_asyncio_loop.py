"""Trio guest mode on asyncio: the core's routing, cancel and teardown cases, run
through :func:`permclient.embed.asyncio_client` against a scripted peer and the
reference runtime."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import pytest
import trio

from permclient import ConnectionClosed, Decision, PermissionRequest, Selected
from permclient.embed import AsyncioClient, PermissionHandle, asyncio_client, start_guest
from tests.support.embed import LoopCards, run_on_asyncio
from tests.support.peer import CANCELLED, TIMEOUT_S, SyncPeer, selected, socket_pair


@asynccontextmanager
async def connected(dialect: str = "bridge") -> AsyncIterator[tuple[AsyncioClient, SyncPeer]]:
    ours, theirs = socket_pair()
    peer = SyncPeer(theirs, dialect)
    try:
        async with asyncio_client(ours, dialect=dialect) as client:  # type: ignore[arg-type]
            yield client, peer
    finally:
        peer.close()


async def receive(peer: SyncPeer) -> dict[str, Any]:
    """The peer's next message, read off the loop so the guest run keeps going."""
    return await asyncio.to_thread(peer.receive)


# ------------------------------------------------------------------ 1. routing


@pytest.mark.parametrize("dialect", ["bridge", "acp"])
def test_two_sessions_each_get_only_their_own_requests(dialect: str) -> None:
    async def scenario() -> None:
        async with connected(dialect) as (client, peer):
            seen: dict[str, list[str]] = {"s-A": [], "s-B": []}

            async def allow(req: PermissionRequest) -> Decision:  # an asyncio coroutine
                seen["s-A"].append(req.session_id)
                await asyncio.sleep(0)
                return Selected("allow")

            def deny(handle: PermissionHandle) -> None:  # a plain function
                seen["s-B"].append(handle.session_id)
                handle.answer(Selected("deny"))

            with client.permission_handler("s-A", allow), client.permission_handler("s-B", deny):
                sessions = {}
                for n in range(6):
                    session = "s-A" if n % 2 == 0 else "s-B"
                    sessions[peer.ask_permission(session, f"call-{n}", n)] = session
                peer.ask_permission("s-C", "call-x", "x")
                answers = {}
                for _ in range(7):
                    message = await receive(peer)
                    answers[message["id"]] = message["result"]
            assert seen == {"s-A": ["s-A"] * 3, "s-B": ["s-B"] * 3}
            for request_id, session in sessions.items():
                assert answers[request_id] == selected("allow" if session == "s-A" else "deny")
            assert answers["x"] == CANCELLED

    run_on_asyncio(scenario)


def test_a_closed_registration_takes_no_question_even_before_the_next_tick() -> None:
    # Closing routes nothing more to it at once, on the loop; only the answers of
    # its open questions wait for the run's next tick. A request read in between
    # must not reach the closed handler.
    async def scenario() -> None:
        async with connected() as (client, peer):
            stats = client.guest.client.statistics
            registration = client.permission_handler("s-1", LoopCards())
            assert stats().connection.sessions_with_handlers == 1
            registration.close()
            assert stats().connection.sessions_with_handlers == 0  # no tick has run

    run_on_asyncio(scenario)


def test_a_session_whose_registration_closed_answers_cancelled_not_latest_handler() -> None:
    async def scenario() -> None:
        async with connected() as (client, peer):
            cards = LoopCards()
            with client.permission_handler("s-1", cards):
                pass
            with client.permission_handler("s-2", cards):
                peer.ask_permission("s-1", "call-1", 1)
                assert await receive(peer) == {"jsonrpc": "2.0", "id": 1, "result": CANCELLED}
            assert cards.handles.empty()

    run_on_asyncio(scenario)


def test_handlers_run_on_the_loop_thread_and_requests_return_results() -> None:
    async def scenario() -> None:
        async with connected() as (client, peer):
            cards = LoopCards()
            with client.permission_handler("s", cards):
                call = asyncio.ensure_future(client.request("sessionRead", {"sessionId": "s"}))
                sent = await receive(peer)
                peer.ask_permission("s", "call-1", 1)
                handle = await cards.handles.get()
                assert handle.answer(Selected("allow")) is True
                assert handle.answer(Selected("deny")) is False  # exactly once
                assert await receive(peer) == {
                    "jsonrpc": "2.0",
                    "id": 1,
                    "result": selected("allow"),
                }
                peer.respond(sent["id"], {"title": "t"})
                assert await call == {"title": "t"}
            assert cards.threads == [threading.get_ident()]

    run_on_asyncio(scenario)


# ------------------------------------------------- 3. cancel scopes / withdrawal


@pytest.mark.parametrize(
    ("method", "key"), [("$/cancelRequest", "id"), ("$/cancel_request", "requestId")]
)
def test_a_peer_cancel_withdraws_the_card_and_answers_cancelled(method: str, key: str) -> None:
    async def scenario() -> None:
        async with connected() as (client, peer):
            cards = LoopCards()
            with client.permission_handler("s", cards):
                peer.ask_permission("s", "call-1", 7)
                handle = await cards.handles.get()
                peer.notify(method, {key: 7})
                assert await receive(peer) == {"jsonrpc": "2.0", "id": 7, "result": CANCELLED}
                assert await cards.withdrawn.get() is handle
                assert handle.answer(Selected("allow")) is False

    run_on_asyncio(scenario)


def test_a_peer_cancel_cancels_an_async_handlers_task() -> None:
    async def scenario() -> None:
        async with connected() as (client, peer):
            started = asyncio.Event()
            cancelled = asyncio.Event()

            async def waits(req: PermissionRequest) -> Decision:
                started.set()
                try:
                    await asyncio.Event().wait()
                except asyncio.CancelledError:
                    cancelled.set()
                    raise
                return Selected("allow")  # pragma: no cover - never reached

            with client.permission_handler("s", waits):
                peer.ask_permission("s", "call-1", 1)
                await started.wait()
                peer.notify("$/cancelRequest", {"id": 1})
                assert await receive(peer) == {"jsonrpc": "2.0", "id": 1, "result": CANCELLED}
                await cancelled.wait()

    run_on_asyncio(scenario)


def test_cancelling_the_awaiting_task_puts_a_cancel_on_the_wire() -> None:
    async def scenario() -> None:
        async with connected() as (client, peer):
            call = asyncio.ensure_future(client.request("slow/thing", {"x": 1}))
            sent = await receive(peer)
            call.cancel()
            with pytest.raises(asyncio.CancelledError):
                await call
            assert await receive(peer) == {
                "jsonrpc": "2.0",
                "method": "$/cancelRequest",
                "params": {"id": sent["id"]},
            }
            assert client.closed_reason is None

    run_on_asyncio(scenario)


# ------------------------------------------------------------------- 7. teardown


def test_the_peer_dying_fails_pending_requests_and_withdraws_open_cards() -> None:
    async def scenario() -> None:
        async with connected() as (client, peer):
            cards = LoopCards()
            with client.permission_handler("s", cards):
                call = asyncio.ensure_future(
                    client.request("chatSend", {"sessionId": "s", "text": "go"})
                )
                assert (await receive(peer))["method"] == "chatSend"
                peer.ask_permission("s", "call-1", 1)
                handle = await cards.handles.get()
                peer.close()
                with pytest.raises(ConnectionClosed, match="peer closed"):
                    await call
                assert await cards.withdrawn.get() is handle
            with pytest.raises(ConnectionClosed):
                await client.request("anything", {})
            with pytest.raises(ConnectionClosed):
                await client.notify("anything", {})

    run_on_asyncio(scenario)


def test_leaving_the_block_answers_every_open_question_cancelled_once() -> None:
    async def scenario() -> None:
        ours, theirs = socket_pair()
        peer = SyncPeer(theirs)
        cards = LoopCards()
        async with asyncio_client(ours) as client:
            client.permission_handler("s", cards)  # left open: the exit must answer
            ids = [peer.ask_permission("s", f"c{n}", n) for n in range(3)]
            handles = [await cards.handles.get() for _ in ids]
        assert client.guest.finished
        answers = [await receive(peer) for _ in ids]
        assert sorted(a["id"] for a in answers) == ids
        assert all(a["result"] == CANCELLED for a in answers)
        assert await asyncio.to_thread(peer.receive_eof) == b""
        await asyncio.sleep(0)  # the withdrawals were dispatched with call_soon
        withdrawn = [cards.withdrawn.get_nowait() for _ in ids]
        assert sorted(h.request.tool_call.tool_call_id for h in withdrawn) == ["c0", "c1", "c2"]
        assert all(h.withdrawn for h in handles)
        peer.close()

    run_on_asyncio(scenario)


def test_an_exception_in_the_block_still_tears_down_and_is_raised_as_is() -> None:
    async def scenario() -> None:
        ours, theirs = socket_pair()
        peer = SyncPeer(theirs)
        with pytest.raises(KeyError):
            async with asyncio_client(ours) as client:
                raise KeyError("boom")
        assert client.guest.finished
        assert await asyncio.to_thread(peer.receive_eof) == b""
        peer.close()

    run_on_asyncio(scenario)


# ------------------------------------------------------ end to end: simhost runtime


# ---------------------------------------------------------- 8. review regressions


def test_leaving_the_block_ends_a_submitted_task_that_never_ends() -> None:
    """B2: the exit cancels what submit() started; its future fails with ConnectionClosed.

    The exit shields itself until the trio run is over, so a run that never ends
    would hang ``run_on_asyncio()``'s own timeout too: the loop runs in a thread, joined with
    a bound.
    """
    outcome: list[BaseException | None] = []

    async def scenario() -> None:
        ours, theirs = socket_pair()
        peer = SyncPeer(theirs)
        async with asyncio_client(ours) as client:
            future = client.guest.submit(trio.sleep_forever)
        assert client.guest.finished
        with pytest.raises(ConnectionClosed):
            future.result(0)
        peer.close()

    def in_thread() -> None:
        try:
            run_on_asyncio(scenario)
        except BaseException as exc:  # reported to the test below
            outcome.append(exc)
        else:
            outcome.append(None)

    loop_thread = threading.Thread(target=in_thread, name="asyncio-host", daemon=True)
    loop_thread.start()
    loop_thread.join(TIMEOUT_S * 2)
    assert not loop_thread.is_alive(), "leaving asyncio_client waited for a submitted task"
    assert outcome == [None], outcome


def test_an_async_handler_returning_a_non_str_option_id_answers_cancelled_at_once() -> None:
    """B4: an unhashable id from a coroutine handler answers cancelled, not never."""

    async def scenario() -> None:
        async with connected() as (client, peer):

            async def decide(request: PermissionRequest) -> Decision:
                return Selected(option_id=["allow"])  # type: ignore[arg-type]

            with client.permission_handler("s", decide):
                peer.ask_permission("s", "call-1", 1)
                assert await receive(peer) == {"jsonrpc": "2.0", "id": 1, "result": CANCELLED}

    run_on_asyncio(scenario)


def test_ctrl_c_in_a_guest_run_reaches_done_callback_as_a_plain_keyboard_interrupt() -> None:
    @asynccontextmanager
    async def interrupted_connection() -> AsyncIterator[Any]:
        async def press_ctrl_c() -> None:
            raise KeyboardInterrupt

        async with trio.open_nursery() as nursery:  # trio wraps it in a group here
            nursery.start_soon(press_ctrl_c)
            await trio.sleep_forever()
        yield  # pragma: no cover - never reached

    async def scenario() -> None:
        loop = asyncio.get_running_loop()
        ended: asyncio.Future[BaseException | None] = loop.create_future()
        start_guest(
            interrupted_connection,
            run_sync_soon_threadsafe=loop.call_soon_threadsafe,
            done_callback=ended.set_result,
        )
        error = await ended
        assert type(error) is KeyboardInterrupt

    run_on_asyncio(scenario)


