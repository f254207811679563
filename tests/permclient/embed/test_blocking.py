"""The blocking facade (trio in a background thread): the core's routing, cancel and
teardown cases, plus threads: 8 at once, answers from anywhere, dispatch honoured."""

from __future__ import annotations

import functools
import queue
import signal
import threading
import time
from collections.abc import AsyncIterator, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import asynccontextmanager, contextmanager
from typing import Any

import pytest
import trio

from permclient import Cancelled, ConnectionClosed, Selected
from permclient.embed import BlockingClient, PermissionHandle, open_blocking
from tests.support.embed import ThreadCards
from tests.support.peer import CANCELLED, TIMEOUT_S, SyncPeer, selected, socket_pair


@contextmanager
def connected(dialect: str = "bridge", **kwargs: Any) -> Iterator[tuple[BlockingClient, SyncPeer]]:
    ours, theirs = socket_pair()
    peer = SyncPeer(theirs, dialect)
    client = open_blocking(ours, dialect=dialect, **kwargs)  # type: ignore[arg-type]
    try:
        yield client, peer
    finally:
        client.close()
        peer.close()


def assert_nothing_more(peer: SyncPeer) -> None:
    """The client wrote nothing since the last receive: a sentinel request is answered next."""
    peer.request("sentinel/ping", {}, "sentinel")
    reply = peer.receive()
    assert reply["id"] == "sentinel" and reply["error"]["code"] == -32601


def answer_by_tool_call(handle: PermissionHandle) -> bool:
    return handle.answer(
        Selected("allow" if handle.request.tool_call.tool_call_id.endswith("a") else "deny")
    )


# ------------------------------------------------------------------ 1. routing


@pytest.mark.parametrize("dialect", ["bridge", "acp"])
def test_two_sessions_each_get_only_their_own_requests(dialect: str) -> None:
    with connected(dialect) as (client, peer):
        seen: dict[str, list[str]] = {"s-A": [], "s-B": []}

        def handler_for(session: str, option: str) -> Any:
            def handler(handle: PermissionHandle) -> None:
                seen[session].append(handle.session_id)
                handle.answer(Selected(option))

            return handler

        with (
            client.permission_handler("s-A", handler_for("s-A", "allow")),
            client.permission_handler("s-B", handler_for("s-B", "deny")),
        ):
            sessions = {}
            for n in range(6):
                session = "s-A" if n % 2 == 0 else "s-B"
                sessions[peer.ask_permission(session, f"call-{n}", n)] = session
            peer.ask_permission("s-C", "call-x", "x")
            answers = {(m := peer.receive())["id"]: m["result"] for _ in range(7)}
        assert seen == {"s-A": ["s-A"] * 3, "s-B": ["s-B"] * 3}
        for request_id, session in sessions.items():
            assert answers[request_id] == selected("allow" if session == "s-A" else "deny")
        assert answers["x"] == CANCELLED


def test_a_session_whose_registration_closed_answers_cancelled_not_latest_handler() -> None:
    with connected() as (client, peer):
        cards = ThreadCards()
        with client.permission_handler("s-1", cards):
            pass
        with client.permission_handler("s-2", cards):
            peer.ask_permission("s-1", "call-1", 1)
            assert peer.receive() == {"jsonrpc": "2.0", "id": 1, "result": CANCELLED}
        assert cards.handles.empty()


def test_only_an_offered_choice_answers_selected_and_a_failing_handler_answers_cancelled() -> None:
    with connected() as (client, peer):

        def picks(handle: PermissionHandle) -> None:
            option = {"a": "allow", "b": "maybe", "c": None}[handle.request.tool_call.tool_call_id]
            if option is None:
                raise RuntimeError("the card could not be shown")
            handle.answer(Selected(option))

        with client.permission_handler("s", picks):
            for name in "abc":
                peer.ask_permission("s", name, name)
            answers = {(m := peer.receive())["id"]: m["result"] for _ in range(3)}
        assert answers == {"a": selected("allow"), "b": CANCELLED, "c": CANCELLED}


# ------------------------------------------------- 3. cancel scopes / withdrawal


@pytest.mark.parametrize(
    ("method", "key"), [("$/cancelRequest", "id"), ("$/cancel_request", "requestId")]
)
def test_a_peer_cancel_withdraws_the_card_and_answers_cancelled(method: str, key: str) -> None:
    with connected() as (client, peer):
        cards = ThreadCards()
        with client.permission_handler("s", cards):
            peer.ask_permission("s", "call-1", 7)
            handle = cards.next()
            peer.notify(method, {key: 7})
            assert peer.receive() == {"jsonrpc": "2.0", "id": 7, "result": CANCELLED}
            assert cards.withdrawn.get(timeout=TIMEOUT_S) is handle
            assert handle.withdrawn and handle.done
            # The user's late click is ignored, and nothing more goes on the wire.
            assert handle.answer(Selected("allow")) is False
            assert_nothing_more(peer)


def test_cancel_permissions_withdraws_every_open_card_of_that_session_only() -> None:
    with connected() as (client, peer):
        cards = ThreadCards()
        with client.permission_handler("s", cards), client.permission_handler("t", cards):
            peer.ask_permission("s", "s1", 1)
            peer.ask_permission("t", "t1", 2)
            first, second = cards.next(), cards.next()
            handles = {first.session_id: first, second.session_id: second}
            client.cancel_permissions("s")
            assert peer.receive() == {"jsonrpc": "2.0", "id": 1, "result": CANCELLED}
            assert cards.withdrawn.get(timeout=TIMEOUT_S) is handles["s"]
            assert handles["t"].answer(Selected("allow")) is True
            assert peer.receive() == {"jsonrpc": "2.0", "id": 2, "result": selected("allow")}


@pytest.mark.parametrize("trio_thread_late", [False, True], ids=["in-time", "late"])
def test_a_timed_out_request_is_cancelled_on_the_wire(trio_thread_late: bool) -> None:
    with connected() as (client, peer):
        if trio_thread_late:  # it gets no CPU for longer than the timeout
            holding = threading.Event()
            client.submit(_hold_the_trio_thread, holding, 0.2)
            assert holding.wait(TIMEOUT_S)
        with pytest.raises(TimeoutError):
            client.request("slow/thing", {"x": 1}, timeout=0.05)
        # Sent, then cancelled; or, when the trio thread had not started it within the
        # timeout, never sent at all. Either way nothing stays pending on the wire. (The
        # sentinel's answer and the cancel may come in either order.)
        peer.request("sentinel/ping", {}, "sentinel")
        seen: list[dict[str, Any]] = []
        while not _wire_settled(seen):
            seen.append(peer.receive())
        sent = [m for m in seen if m.get("method") == "slow/thing"]
        if trio_thread_late:
            assert sent == []
        if sent:
            cancel = {
                "jsonrpc": "2.0",
                "method": "$/cancelRequest",
                "params": {"id": sent[0]["id"]},
            }
            assert seen.index(sent[0]) < seen.index(cancel)
        assert len(seen) == 1 + 2 * len(sent)


async def _hold_the_trio_thread(holding: threading.Event, seconds: float) -> None:
    holding.set()
    time.sleep(seconds)  # noqa: ASYNC251 - on purpose: a trio thread that gets no CPU


def _wire_settled(seen: list[dict[str, Any]]) -> bool:
    """The sentinel was answered, and a request sent was cancelled."""
    answered = any(m.get("id") == "sentinel" and "method" not in m for m in seen)
    sent = any(m.get("method") == "slow/thing" for m in seen)
    cancelled = any(m.get("method") == "$/cancelRequest" for m in seen)
    return answered and cancelled == sent


# -------------------------------------------------------------- 4. exactly once


def test_an_answer_counts_once_from_any_thread_and_later_ones_are_ignored(
    caplog: pytest.LogCaptureFixture,
) -> None:
    with connected() as (client, peer):
        cards = ThreadCards()
        with client.permission_handler("s", cards):
            peer.ask_permission("s", "call-1", 1)
            handle = cards.next()
            with ThreadPoolExecutor(8) as pool:  # eight threads race to answer
                results = list(
                    pool.map(
                        lambda n: handle.answer(Selected("allow" if n == 0 else "deny")), range(8)
                    )
                )
            assert results.count(True) == 1
            assert results.count(False) == 7
            winner = handle.decision
            assert peer.receive() == {
                "jsonrpc": "2.0",
                "id": 1,
                "result": {"outcome": {"outcome": "selected", "optionId": winner.option_id}},
            }  # type: ignore[union-attr]
            assert handle.cancel() is False
        assert "a second answer" in caplog.text
        # Exactly one response: the next thing on the wire is the answer to a new question.
        with client.permission_handler("s", answer_by_tool_call):
            peer.ask_permission("s", "call-a", 2)
            assert peer.receive() == {"jsonrpc": "2.0", "id": 2, "result": selected("allow")}


def test_dispatch_runs_handlers_and_withdrawals_on_the_hosts_thread() -> None:
    ui_queue: queue.Queue[Any] = queue.Queue()
    ui_thread_names: list[str] = []

    def ui_loop() -> None:
        while (fn := ui_queue.get()) is not None:
            ui_thread_names.append(threading.current_thread().name)
            fn()

    ui = threading.Thread(target=ui_loop, name="ui-main")
    ui.start()
    try:
        with connected(dispatch=ui_queue.put) as (client, peer):
            cards = ThreadCards()
            with client.permission_handler("s", cards):
                peer.ask_permission("s", "call-1", 1)
                peer.ask_permission("s", "call-2", 2)
                first, second = cards.next(), cards.next()
                peer.notify(
                    "$/cancelRequest",
                    {"id": 2 if second.request.tool_call.tool_call_id == "call-2" else 1},
                )
                peer.receive()
                withdrawn = cards.withdrawn.get(timeout=TIMEOUT_S)
                other = first if withdrawn is second else second
                assert other.answer(Selected("deny"))  # answered from the test's thread
                peer.receive()
        assert cards.threads == ["ui-main", "ui-main"]
        assert set(ui_thread_names) == {"ui-main"} and len(ui_thread_names) == 3
    finally:
        ui_queue.put(None)
        ui.join(TIMEOUT_S)


def test_default_dispatch_is_a_worker_thread() -> None:
    with connected() as (client, peer):
        cards = ThreadCards()
        with client.permission_handler("s", cards):
            peer.ask_permission("s", "call-1", 1)
            cards.next().cancel()
            assert peer.receive()["result"] == CANCELLED
        assert cards.threads == ["permclient-handler"]


# ------------------------------------------------------------------- 7. teardown


def test_the_peer_dying_fails_pending_requests_and_withdraws_open_cards() -> None:
    with connected() as (client, peer):
        cards = ThreadCards()
        errors: list[BaseException] = []
        with client.permission_handler("s", cards):

            def call() -> None:
                try:
                    client.request("chatSend", {"sessionId": "s", "text": "go"})
                except ConnectionClosed as exc:
                    errors.append(exc)

            caller = threading.Thread(target=call)
            caller.start()
            assert peer.receive()["method"] == "chatSend"
            peer.ask_permission("s", "call-1", 1)
            handle = cards.next()
            peer.close()
            caller.join(TIMEOUT_S)
            assert cards.withdrawn.get(timeout=TIMEOUT_S) is handle
        assert len(errors) == 1 and "peer closed" in str(errors[0])
        with pytest.raises(ConnectionClosed):
            client.request("anything", {})
        with pytest.raises(ConnectionClosed):
            client.notify("anything", {})


def test_closing_answers_every_open_question_cancelled_once_and_withdraws_the_cards() -> None:
    ours, theirs = socket_pair()
    peer = SyncPeer(theirs)
    cards = ThreadCards()
    client = open_blocking(ours)
    client.permission_handler("s", cards)  # left open: close() must answer
    ids = [peer.ask_permission("s", f"c{n}", n) for n in range(3)]
    handles = [cards.next() for _ in ids]
    client.close()
    assert client.finished
    answers = [peer.receive() for _ in ids]
    assert sorted(a["id"] for a in answers) == ids
    assert all(a["result"] == CANCELLED for a in answers)
    assert peer.receive_eof() == b""  # the stream closed, nothing else written
    # close() returned after the on_cancelled callbacks ran.
    assert sorted(h.request.tool_call.tool_call_id for h in _drain(cards.withdrawn)) == [
        "c0",
        "c1",
        "c2",
    ]
    assert all(h.withdrawn for h in handles)
    assert handles[0].answer(Selected("allow")) is False
    with pytest.raises(ConnectionClosed):
        client.request("anything", {})
    client.close()  # idempotent
    peer.close()


def _drain(q: queue.Queue[PermissionHandle]) -> list[PermissionHandle]:
    out = []
    while not q.empty():
        out.append(q.get_nowait())
    return out


# ------------------------------------------------------------------- threads


class EchoPeer(threading.Thread):
    """A runtime stand-in: each request ``ask {sessionId, n}`` asks one permission of
    that session and answers the request with the permission's outcome. Records every
    answer it gets, so a lost or doubled answer is seen."""

    def __init__(self, peer: SyncPeer) -> None:
        super().__init__(name="echo-peer", daemon=True)
        self.peer = peer
        self.answers: dict[str, list[Any]] = {}
        self.error: BaseException | None = None

    def run(self) -> None:
        owed: dict[str, Any] = {}
        try:
            while True:
                try:
                    message = self.peer.receive()
                except (AssertionError, OSError):
                    return
                if message.get("method") == "ask":
                    params = message["params"]
                    permission_id = f"p-{params['n']}"
                    owed[permission_id] = message["id"]
                    self.peer.ask_permission(params["sessionId"], params["n"], permission_id)
                elif "result" in message and isinstance(message["id"], str):
                    self.answers.setdefault(message["id"], []).append(message["result"])
                    self.peer.respond(owed.pop(message["id"]), message["result"])
        except BaseException as exc:  # surfaced by the test
            self.error = exc


def test_eight_threads_at_once_every_answer_correct_none_lost_or_doubled() -> None:
    threads, per_thread = 8, 25
    with connected() as (client, peer):
        echo = EchoPeer(peer)
        echo.start()
        answerers = ThreadPoolExecutor(4, thread_name_prefix="clicker")
        seen_sessions: list[tuple[str, str]] = []
        clicks: list[Future[bool]] = []
        lock = threading.Lock()

        def card(handle: PermissionHandle) -> None:
            with lock:
                seen_sessions.append((handle.session_id, handle.request.tool_call.tool_call_id))
            # Answered twice at once from two other threads: exactly one counts.
            for _ in range(2):
                clicks.append(answerers.submit(answer_by_tool_call, handle))

        registrations = [client.permission_handler(f"s-{t}", card) for t in range(threads)]

        def hammer(t: int) -> list[tuple[str, Any]]:
            results = []
            for k in range(per_thread):
                n = f"{t}-{k}-{'a' if k % 2 else 'd'}"
                results.append((n, client.request("ask", {"sessionId": f"s-{t}", "n": n})))
            return results

        with ThreadPoolExecutor(threads) as pool:
            outcomes = [r for rs in pool.map(hammer, range(threads)) for r in rs]
        answerers.shutdown(wait=True)
        for registration in registrations:
            registration.close()
    echo.join(TIMEOUT_S)
    assert echo.error is None
    assert len(outcomes) == threads * per_thread
    for n, result in outcomes:
        assert result == selected("allow" if n.endswith("a") else "deny"), n
    assert len(echo.answers) == threads * per_thread
    assert [click.result() for click in clicks].count(True) == threads * per_thread
    assert all(len(answers) == 1 for answers in echo.answers.values())
    assert sorted(seen_sessions) == sorted((f"s-{n.split('-')[0]}", n) for n, _ in outcomes)


# ------------------------------------------------------ end to end: simhost runtime


# ---------------------------------------------------------- 8. review regressions


def test_close_from_an_on_cancelled_callback_while_another_thread_closes_returns() -> None:
    """B1: a callback that closes while the host closes must not wait for the host's join."""
    ours, theirs = socket_pair()
    peer = SyncPeer(theirs)
    client = open_blocking(ours)
    handles: queue.Queue[PermissionHandle] = queue.Queue()
    closed_in_callback = threading.Event()

    def close_from_callback(_handle: PermissionHandle) -> None:
        client.close()  # "the question went away: shut the plugin down"
        closed_in_callback.set()

    def card(handle: PermissionHandle) -> None:
        handle.on_cancelled(close_from_callback)
        handles.put(handle)

    client.permission_handler("s", card)
    peer.ask_permission("s", "c1", 1)
    handle = handles.get(timeout=TIMEOUT_S)
    closer = threading.Thread(target=client.close, name="host-quits", daemon=True)
    closer.start()
    closer.join(TIMEOUT_S)
    assert not closer.is_alive(), "close() deadlocked with a closing on_cancelled callback"
    assert closed_in_callback.is_set()  # the host's close() waited for the callback
    assert handle.withdrawn
    assert peer.receive() == {"jsonrpc": "2.0", "id": 1, "result": CANCELLED}
    peer.close()


def test_a_submitted_task_that_never_ends_does_not_keep_close_waiting() -> None:
    """B2: close() cancels what submit() started; its future fails with ConnectionClosed."""
    ours, theirs = socket_pair()
    peer = SyncPeer(theirs)
    client = open_blocking(ours)
    future = client.submit(trio.sleep_forever)  # e.g. a status poll against client.client
    closer = threading.Thread(target=client.close, name="host-quits", daemon=True)
    closer.start()
    closer.join(TIMEOUT_S)
    assert not closer.is_alive(), "close() waited for a submitted task for ever"
    with pytest.raises(ConnectionClosed):
        future.result(TIMEOUT_S)
    peer.close()


@pytest.mark.parametrize("click_first", [False, True], ids=["cancel-first", "click-first"])
def test_a_click_and_a_withdrawal_racing_give_the_first_to_reach_the_trio_side(
    click_first: bool,
) -> None:
    """B3: whichever reaches the trio thread first decides, and the handle agrees.

    The trio thread is held (a submitted task blocking on an Event, no sleep) while
    the user clicks, so the click's delivery and the withdrawal reach the trio side
    in a fixed order: the withdrawal before the click's delivery is processed (the
    runtime gets `cancelled`, the handle reads withdrawn and on_cancelled runs), or
    queued behind it (the click was first: the runtime gets the human's choice).
    """
    with connected() as (client, peer):
        cards = ThreadCards()
        with client.permission_handler("s", cards):
            peer.ask_permission("s", "c1", 1)
            handle = cards.next()
            holding, release = threading.Event(), threading.Event()

            async def hold_then_withdraw() -> None:
                holding.set()
                assert release.wait(TIMEOUT_S)  # blocks the trio thread on purpose
                withdraw = functools.partial(client.client.cancel_permissions, "s")
                if click_first:
                    trio.lowlevel.current_trio_token().run_sync_soon(withdraw)
                else:
                    withdraw()

            held = client.submit(hold_then_withdraw)
            assert holding.wait(TIMEOUT_S)
            assert handle.answer(Selected("allow")) is True  # accepted for delivery
            release.set()
            held.result(TIMEOUT_S)
            if click_first:
                assert peer.receive() == {"jsonrpc": "2.0", "id": 1, "result": selected("allow")}
                assert not handle.withdrawn and handle.done
                assert handle.decision == Selected("allow")
            else:
                assert peer.receive() == {"jsonrpc": "2.0", "id": 1, "result": CANCELLED}
                assert cards.withdrawn.get(timeout=TIMEOUT_S) is handle
                assert handle.withdrawn and handle.done
                assert handle.decision == Cancelled()
            assert handle.answer(Selected("allow")) is False
            assert_nothing_more(peer)


class _LooksLikeAllow(str):
    """A str subclass equal to "allow": not a plain str, so not an offered id."""

    __hash__ = str.__hash__


@pytest.mark.parametrize("option_id", [["allow"], {"id": "allow"}, _LooksLikeAllow("allow"), 1])
def test_an_option_id_that_is_not_a_str_answers_cancelled_and_never_raises(
    option_id: Any,
) -> None:
    """B4: a UI passing a list (unhashable) or another non-str id: answered cancelled."""
    with connected() as (client, peer):
        cards = ThreadCards()
        with client.permission_handler("s", cards):
            peer.ask_permission("s", "c1", 1)
            handle = cards.next()
            assert handle.answer(Selected(option_id)) is True
            assert handle.decision == Cancelled()
            assert peer.receive() == {"jsonrpc": "2.0", "id": 1, "result": CANCELLED}
            assert handle.answer(Selected("allow")) is False


def test_ctrl_c_while_open_blocking_connects_stops_the_trio_thread() -> None:
    """B5: KeyboardInterrupt during open_blocking() leaves no trio thread (nor runtime)."""
    if threading.current_thread() is not threading.main_thread():
        pytest.skip("SIGINT reaches the main thread only")
    trio_threads: list[threading.Thread] = []
    connect_left = threading.Event()
    main_thread = threading.main_thread().ident
    assert main_thread is not None

    @asynccontextmanager
    async def never_connects() -> AsyncIterator[Any]:
        trio_threads.append(threading.current_thread())
        try:
            # Give open_blocking() the moment to block in its wait for the connection
            # (a signal earlier would still interrupt the same call, just elsewhere).
            await trio.sleep(0.2)
            signal.pthread_kill(main_thread, signal.SIGINT)  # the user presses Ctrl-C
            await trio.sleep_forever()
            yield None  # pragma: no cover - never connects
        finally:
            connect_left.set()

    with pytest.raises(KeyboardInterrupt):
        open_blocking(never_connects)
    assert len(trio_threads) == 1
    trio_threads[0].join(TIMEOUT_S)
    assert not trio_threads[0].is_alive(), "the trio thread outlived open_blocking()"
    assert connect_left.is_set()  # the connection attempt was cancelled, not abandoned


def test_ctrl_c_inside_starting_the_trio_thread_stops_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A KeyboardInterrupt that lands in ``Thread.start()`` itself (after the thread
    began) still stops the connection attempt and the thread."""
    trio_threads: list[threading.Thread] = []
    connect_left = threading.Event()
    real_start = threading.Thread.start

    def start_then_interrupted(thread: threading.Thread) -> None:
        real_start(thread)
        if thread.name == "permclient-trio":
            raise KeyboardInterrupt

    @asynccontextmanager
    async def never_connects() -> AsyncIterator[Any]:
        trio_threads.append(threading.current_thread())
        try:
            await trio.sleep_forever()
            yield None  # pragma: no cover - never connects
        finally:
            connect_left.set()

    monkeypatch.setattr(threading.Thread, "start", start_then_interrupted)
    with pytest.raises(KeyboardInterrupt):
        open_blocking(never_connects)
    monkeypatch.undo()
    assert connect_left.wait(TIMEOUT_S)  # the connection attempt was cancelled
    assert len(trio_threads) == 1
    trio_threads[0].join(TIMEOUT_S)
    assert not trio_threads[0].is_alive(), "the trio thread outlived open_blocking()"


def test_close_never_joins_a_dispatch_thread_before_it_started(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """B6: a callback dispatched (from a UI thread) while close() joins the workers."""
    ours, theirs = socket_pair()
    peer = SyncPeer(theirs)
    client = open_blocking(ours)
    cards = ThreadCards()
    client.permission_handler("s", cards)
    peer.ask_permission("s", "c1", 1)
    handle = cards.next()
    peer.notify("$/cancelRequest", {"id": 1})
    assert peer.receive() == {"jsonrpc": "2.0", "id": 1, "result": CANCELLED}
    assert cards.withdrawn.get(timeout=TIMEOUT_S) is handle

    real_start = threading.Thread.start
    starting = threading.Event()

    def late_start(self: threading.Thread) -> None:
        if self.name == "permclient-handler":
            starting.set()
            # Widen the window on purpose: start the worker only once close() has
            # stopped the run and gone on to join the workers.
            deadline = time.monotonic() + TIMEOUT_S
            while not client.finished and time.monotonic() < deadline:
                time.sleep(0.01)
            time.sleep(0.2)
        real_start(self)

    monkeypatch.setattr(threading.Thread, "start", late_start)
    ui = threading.Thread(target=handle.on_cancelled, args=(cards.withdrawn.put,), name="ui")
    ui.start()
    assert starting.wait(TIMEOUT_S)  # the UI thread is inside dispatch now
    client.close()  # must neither raise nor skip the worker
    assert cards.withdrawn.get(timeout=TIMEOUT_S) is handle
    ui.join(TIMEOUT_S)
    assert not ui.is_alive()
    peer.close()
