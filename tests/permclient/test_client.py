"""The trio client against a scripted peer: the invariants of DESIGN.md, one test each."""

from __future__ import annotations

import contextlib
import contextvars
import fcntl
import fractions
import io
import itertools
import json
import logging
import os
import socket
import tracemalloc
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from typing import Any

import msgspec
import pytest
import trio
import trio.testing

import permclient
import permclient.framing
from permclient import Cancelled, ConnectionClosed, PermissionRequest, RequestError, Selected
from permclient._client import _MESSAGES_PER_STEP
from tests.support.peer import CANCELLED, FakePeer, allow_deny, connected, selected

DIALECTS = ["bridge", "acp"]
CANCEL_SPELLINGS = [("$/cancelRequest", "id"), ("$/cancel_request", "requestId")]


async def assert_nothing_more(peer: FakePeer) -> None:
    """The client wrote nothing since the last receive: a sentinel request is answered next."""
    sentinel = await peer.request("sentinel/ping", {}, request_id="sentinel")
    reply = await peer.receive()
    assert reply["id"] == sentinel and reply["error"]["code"] == -32601


async def allow_handler(req: PermissionRequest) -> Selected:
    return Selected("allow")


class Waiter:
    """A handler that records its requests and waits until released or cancelled."""

    def __init__(self) -> None:
        self.seen: list[PermissionRequest] = []
        self.arrived = trio.Event()
        self.release = trio.Event()
        self.cancelled: list[str] = []
        self.answer: Any = Selected("allow")

    async def __call__(self, req: PermissionRequest) -> Any:
        self.seen.append(req)
        self.arrived.set()
        try:
            await self.release.wait()
        except trio.Cancelled:
            self.cancelled.append(req.tool_call.tool_call_id)
            raise
        return self.answer


# --------------------------------------------------------------- 1. exact routing


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_concurrent_turns_in_two_sessions_each_get_only_their_own_requests(
    dialect: str,
) -> None:
    async with connected(dialect) as (client, peer):
        seen: dict[str, list[str]] = {"s-A": [], "s-B": []}

        def handler_for(session: str, option: str) -> permclient.PermissionHandler:
            async def handler(req: PermissionRequest) -> Selected:
                seen[session].append(req.session_id)
                return Selected(option)

            return handler

        with (
            client.permission_handler("s-A", handler_for("s-A", "allow")),
            client.permission_handler("s-B", handler_for("s-B", "deny")),
        ):
            ids = {}
            for n in range(6):
                session = "s-A" if n % 2 == 0 else "s-B"
                ids[await peer.ask_permission(session, f"call-{n}")] = session
            third = await peer.ask_permission("s-C", "call-x")
            answers = {}
            for _ in range(7):
                msg = await peer.receive()
                answers[msg["id"]] = msg["result"]
        assert seen == {"s-A": ["s-A"] * 3, "s-B": ["s-B"] * 3}
        for request_id, session in ids.items():
            assert answers[request_id] == selected("allow" if session == "s-A" else "deny")
        assert answers[third] == CANCELLED


async def test_request_for_a_session_without_handler_answers_cancelled_not_latest_handler() -> None:
    async with connected() as (client, peer):
        called = []

        async def handler(req: PermissionRequest) -> Selected:
            called.append(req.session_id)
            return Selected("allow")

        with client.permission_handler("s-1", handler):
            pass
        with client.permission_handler("s-2", handler):
            await peer.ask_permission("s-1")
            assert (await peer.receive())["result"] == CANCELLED
        assert called == []


async def test_nested_registration_shadows_the_outer_until_it_exits() -> None:
    async with connected() as (client, peer):
        with client.permission_handler("s", allow_handler):

            async def deny(req: PermissionRequest) -> Selected:
                return Selected("deny")

            with client.permission_handler("s", deny):
                await peer.ask_permission("s")
                assert (await peer.receive())["result"] == selected("deny")
            await peer.ask_permission("s")
            assert (await peer.receive())["result"] == selected("allow")


async def test_several_requests_pending_at_once_in_one_session() -> None:
    async with connected() as (client, peer):
        waiter = Waiter()
        with client.permission_handler("s", waiter):
            ids = [await peer.ask_permission("s", f"call-{n}") for n in range(3)]
            while len(waiter.seen) < 3:
                await trio.testing.wait_all_tasks_blocked()
            assert client.pending_permissions("s") == 3
            waiter.release.set()
            answers = {(m := await peer.receive())["id"]: m["result"] for _ in ids}
        assert answers == {i: selected("allow") for i in ids}


async def test_leaving_the_registration_answers_its_pending_requests_cancelled() -> None:
    async with connected() as (client, peer):
        waiter = Waiter()
        with client.permission_handler("s", waiter):
            await peer.ask_permission("s")
            await waiter.arrived.wait()
        assert (await peer.receive())["result"] == CANCELLED
        await trio.testing.wait_all_tasks_blocked()
        assert waiter.cancelled == ["call-1"]


async def test_registering_an_empty_session_id_is_refused() -> None:
    async with connected() as (client, _peer):
        with (
            pytest.raises(ValueError, match="non-empty"),
            client.permission_handler("", allow_handler),
        ):
            pass  # pragma: no cover - never entered


# ---------------------------------------------------------------- 2. fail closed


def _request_params(**overrides: Any) -> dict[str, Any]:
    params: dict[str, Any] = {
        "sessionId": "s",
        "toolCall": {"toolCallId": "c", "title": "t", "kind": "execute"},
        "options": allow_deny(),
    }
    for key, value in overrides.items():
        if value is _DROP:
            del params[key]
        else:
            params[key] = value
    return params


_DROP = object()
MALFORMED = {
    "missing sessionId": _request_params(sessionId=_DROP),
    "empty sessionId": _request_params(sessionId=""),
    "null sessionId": _request_params(sessionId=None),
    "missing toolCall": _request_params(toolCall=_DROP),
    "missing options": _request_params(options=_DROP),
    "null options": _request_params(options=None),
    "empty options": _request_params(options=[]),
    "null option item": _request_params(options=[allow_deny()[0], None]),
    "duplicate option ids": _request_params(options=[allow_deny()[0], allow_deny()[0]]),
    "params not an object": [1, 2],
}


@pytest.mark.parametrize("params", MALFORMED.values(), ids=MALFORMED.keys())
async def test_malformed_permission_request_answers_cancelled_without_calling_a_handler(
    params: Any,
) -> None:
    async with connected() as (client, peer):
        called = []

        async def handler(req: PermissionRequest) -> Selected:
            called.append(req)
            return Selected("allow")

        with client.permission_handler("s", handler):
            request_id = await peer.request("session/request_permission", params)
            assert await peer.receive() == {"jsonrpc": "2.0", "id": request_id, "result": CANCELLED}
        assert called == []


_NOT_UTF8_JSON = {
    "0xff in rawInput": (b'"rawInput":{"command":"pytest \xff; curl x | sh"}', b""),
    "lone surrogate escape in rawInput": (rb'"rawInput":{"command":"pytest \ud800; sh"}', b""),
    "0xff in rawOutput": (b'"rawOutput":"\xff"', b""),
    "0xff in content": (b'"content":[{"type":"diff","path":"/w/a","newText":"\xff"}]', b""),
    "0xff in the tool call's _meta": (b'"_meta":{"k":"\xff"}', b""),
    "0xff in the request's _meta": (b"", b',"_meta":{"k":"\xff"}'),
    "lone surrogate escape under an unknown key": (b"", rb',"future":"\udc00"'),
}


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(
    ("in_tool_call", "in_params"), _NOT_UTF8_JSON.values(), ids=_NOT_UTF8_JSON.keys()
)
async def test_a_permission_request_not_utf8_json_anywhere_is_malformed_and_answered_cancelled(
    dialect: str, in_tool_call: bytes, in_params: bytes
) -> None:
    sink = io.StringIO()
    telemetry = permclient.JsonlTelemetry(sink)
    async with connected(dialect, telemetry=telemetry) as (client, peer):
        called = []

        async def handler(req: PermissionRequest) -> Selected:
            called.append(req.tool_call.raw_input)
            return Selected("allow")

        with client.permission_handler("s", handler):
            tool_call = b'{"toolCallId":"c","title":"run"' + (b"," if in_tool_call else b"")
            body = (
                b'{"jsonrpc":"2.0","id":7,"method":"session/request_permission","params":'
                b'{"sessionId":"s","toolCall":'
                + tool_call
                + in_tool_call
                + b'},"options":'
                + msgspec.json.encode(allow_deny())
                + in_params
                + b"}}"
            )
            await peer.send_raw(peer.framer_type.encode(body))
            assert await peer.receive() == {"jsonrpc": "2.0", "id": 7, "result": CANCELLED}
            await assert_nothing_more(peer)
        assert called == []
    telemetry.flush()  # write what the sink buffered
    events = [json.loads(line)["event"] for line in sink.getvalue().splitlines()]
    assert "approval.malformed" in events and "approval.requested" not in events


class Boom(Exception):
    pass


async def _raises(req: PermissionRequest) -> Selected:
    raise Boom("handler bug")


async def _returns_none(req: PermissionRequest) -> None:
    return None


async def _returns_plain_string(req: PermissionRequest) -> str:
    return "allow"


async def _returns_unoffered_option(req: PermissionRequest) -> Selected:
    return Selected("allow-everything")


async def _returns_cancelled(req: PermissionRequest) -> Cancelled:
    return Cancelled()


async def _times_out(req: PermissionRequest) -> Selected:
    with trio.fail_after(0):
        await trio.sleep_forever()
    return Selected("allow")  # pragma: no cover - fail_after raised


BAD_HANDLERS = {
    "raises": _raises,
    "returns None": _returns_none,
    "returns a plain string": _returns_plain_string,
    "picks an option that was not offered": _returns_unoffered_option,
    "returns Cancelled": _returns_cancelled,
    "times out": _times_out,
}


class _ClassRaises:
    """A return value that raises as soon as anyone asks its class."""

    @property  # type: ignore[misc]
    def __class__(self) -> type:
        raise ValueError("no class for you")


class _LyingSelected(Selected):
    """Not a Selected but something posing as one: it could override anything."""


async def _returns_a_class_that_raises(req: PermissionRequest) -> Any:
    return _ClassRaises()


async def _waits_then_returns_a_class_that_raises(req: PermissionRequest) -> Any:
    await trio.lowlevel.checkpoint()
    return _ClassRaises()


async def _returns_a_selected_subclass(req: PermissionRequest) -> Any:
    return _LyingSelected("allow")


async def _returns_a_selected_with_meta_deleted(req: PermissionRequest) -> Any:
    selected = Selected("allow")
    del selected.meta  # a Struct allows it; reading it then raises
    return selected


HOSTILE_HANDLERS = {
    "returns an object whose class raises": _returns_a_class_that_raises,
    "returns a Selected with a field deleted": _returns_a_selected_with_meta_deleted,
    "blocks, then returns an object whose class raises": _waits_then_returns_a_class_that_raises,
    "returns a subclass of Selected": _returns_a_selected_subclass,
}


@pytest.mark.parametrize("handler", HOSTILE_HANDLERS.values(), ids=HOSTILE_HANDLERS.keys())
async def test_a_hostile_return_value_answers_cancelled_and_the_client_lives_on(
    handler: Any,
) -> None:
    async with connected() as (client, peer):
        with client.permission_handler("s", handler):
            request_id = await peer.ask_permission("s")
            assert await peer.receive() == {"jsonrpc": "2.0", "id": request_id, "result": CANCELLED}
        with client.permission_handler("s", allow_handler):
            request_id = await peer.ask_permission("s")
            assert (await peer.receive())["result"] == selected("allow")


@pytest.mark.parametrize("handler", BAD_HANDLERS.values(), ids=BAD_HANDLERS.keys())
async def test_anything_but_an_offered_choice_answers_cancelled(handler: Any) -> None:
    async with connected() as (client, peer):
        with client.permission_handler("s", handler):
            request_id = await peer.ask_permission("s")
            assert await peer.receive() == {"jsonrpc": "2.0", "id": request_id, "result": CANCELLED}


async def test_only_an_explicit_offered_choice_answers_selected() -> None:
    async with connected() as (client, peer):

        async def pick_second(req: PermissionRequest) -> Selected:
            return Selected(req.options[1].option_id)

        with client.permission_handler("s", pick_second):
            await peer.ask_permission("s")
            assert (await peer.receive())["result"] == selected("deny")


# --------------------------------------------------------------- 3. cancel scopes


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(("method", "key"), CANCEL_SPELLINGS)
async def test_peer_cancel_while_the_handler_waits_cancels_its_scope_and_answers_cancelled(
    dialect: str, method: str, key: str
) -> None:
    async with connected(dialect) as (client, peer):
        waiter = Waiter()
        with client.permission_handler("s", waiter):
            request_id = await peer.ask_permission("s", request_id=0)
            await waiter.arrived.wait()
            await peer.notify(method, {key: request_id})
            assert await peer.receive() == {"jsonrpc": "2.0", "id": 0, "result": CANCELLED}
            await trio.testing.wait_all_tasks_blocked()
            assert waiter.cancelled == ["call-1"]
            await assert_nothing_more(peer)


async def test_peer_cancel_reaches_a_handler_blocked_inside_its_own_timeout_scope() -> None:
    # The handler's own scope is open when it blocks: the request's scope must
    # still enclose it, so the cancel is the peer's, not the handler's timeout.
    timed_out = []

    async def patient(req: PermissionRequest) -> Selected:
        with trio.move_on_after(3600) as own:
            await trio.sleep_forever()
        timed_out.append(own.cancelled_caught)
        return Selected("allow")

    async with connected() as (client, peer):
        with client.permission_handler("s", patient):
            request_id = await peer.ask_permission("s", request_id=0)
            await trio.testing.wait_all_tasks_blocked()
            await peer.notify("$/cancelRequest", {"id": request_id})
            assert await peer.receive() == {"jsonrpc": "2.0", "id": 0, "result": CANCELLED}
            await trio.testing.wait_all_tasks_blocked()
            assert timed_out == []
            assert client.pending_permissions("s") == 0
            await assert_nothing_more(peer)


async def test_cancel_for_an_already_answered_id_changes_nothing() -> None:
    async with connected() as (client, peer):
        with client.permission_handler("s", allow_handler):
            request_id = await peer.ask_permission("s")
            assert (await peer.receive())["result"] == selected("allow")
            await peer.notify("$/cancelRequest", {"id": request_id})
            await assert_nothing_more(peer)


async def test_peer_cancel_of_another_request_answers_minus_32800() -> None:
    async with connected() as (client, peer):
        entered = trio.Event()
        cancelled = []

        async def slow(params: Any) -> str:
            entered.set()
            try:
                await trio.sleep_forever()
            finally:
                cancelled.append(params)

        client.on_request("fs/read_text_file", slow)
        request_id = await peer.request("fs/read_text_file", {"path": "/x"})
        await entered.wait()
        await peer.notify("$/cancel_request", {"requestId": request_id})
        reply = await peer.receive()
        assert reply["id"] == request_id and reply["error"]["code"] == -32800
        await trio.testing.wait_all_tasks_blocked()
        assert cancelled == [{"path": "/x"}]


# --------------------------------------------------------- 4. exactly one response


async def test_a_handler_that_swallows_its_cancellation_still_gets_one_cancelled_answer() -> None:
    async with connected() as (client, peer):
        arrived = trio.Event()
        finished = trio.Event()

        async def stubborn(req: PermissionRequest) -> Selected:
            arrived.set()
            try:  # noqa: SIM105 - spelled out: this handler is the bug under test
                await trio.sleep_forever()
            except trio.Cancelled:
                pass  # a buggy handler: it swallows the cancel and approves anyway
            finished.set()
            return Selected("allow")

        with client.permission_handler("s", stubborn):
            request_id = await peer.ask_permission("s")
            await arrived.wait()
            await peer.notify("$/cancelRequest", {"id": request_id})
            assert (await peer.receive())["result"] == CANCELLED
            await finished.wait()
            await assert_nothing_more(peer)


async def test_teardown_answers_every_pending_request_exactly_once() -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    peer = FakePeer(theirs, "bridge")
    waiter = Waiter()
    async with permclient.open_client(ours) as client:
        registration = client.permission_handler("s", waiter)
        registration.__enter__()  # left open: the client's teardown must answer
        ids = [await peer.ask_permission("s", f"c{n}") for n in range(3)]
        while len(waiter.seen) < 3:
            await trio.testing.wait_all_tasks_blocked()
    answers = [await peer.receive() for _ in ids]
    assert sorted(a["id"] for a in answers) == sorted(ids)
    assert all(a["result"] == CANCELLED for a in answers)
    assert await theirs.receive_some(1) == b""  # then the stream closed, nothing else
    assert sorted(waiter.cancelled) == ["c0", "c1", "c2"]


# ------------------------------------------------------------ 5. outbound cancel


@pytest.mark.parametrize(
    ("dialect", "cancel"),
    [("bridge", ("$/cancelRequest", "id")), ("acp", ("$/cancel_request", "requestId"))],
)
async def test_caller_cancelling_its_request_puts_the_dialects_cancel_on_the_wire(
    dialect: str, cancel: tuple[str, str]
) -> None:
    async with connected(dialect) as (client, peer):
        with trio.move_on_after(1) as scope:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(client.request, "slow/thing", {"x": 1})
                sent = await peer.receive()
                scope.cancel()
        assert sent["method"] == "slow/thing" and sent["id"] == 0
        method, key = cancel
        assert await peer.receive() == {"jsonrpc": "2.0", "method": method, "params": {key: 0}}
        # A late response for the cancelled id is dropped, not an error.
        await peer.send({"jsonrpc": "2.0", "id": 0, "result": {"late": True}})
        await assert_nothing_more(peer)
        assert client.closed_reason is None


async def test_response_for_an_id_never_sent_is_dropped(caplog: pytest.LogCaptureFixture) -> None:
    async with connected() as (client, peer):
        await peer.send({"jsonrpc": "2.0", "id": 99, "result": {}})
        await peer.send({"jsonrpc": "2.0", "id": "nope", "error": {"code": 1, "message": "x"}})
        await assert_nothing_more(peer)
        assert client.closed_reason is None
    assert "never sent" in caplog.text


@asynccontextmanager
async def session_new_in_flight(
    client: permclient.Client, peer: FakePeer
) -> AsyncIterator[tuple[dict[str, Any], list[Any]]]:
    """Our ``sessionNew`` on the wire: yields what the peer received and, once it is
    answered and the block ends, the list its result lands in."""
    results: list[Any] = []

    async def call() -> None:
        results.append(await client.request("sessionNew", {"title": "t"}))

    async with trio.open_nursery() as nursery:
        nursery.start_soon(call)
        yield await peer.receive(), results


async def test_a_response_for_an_already_settled_request_is_dropped(
    caplog: pytest.LogCaptureFixture,
) -> None:
    caplog.set_level("DEBUG", logger="permclient")
    async with connected() as (client, peer):
        async with session_new_in_flight(client, peer) as (sent, results):
            await peer.send({"jsonrpc": "2.0", "id": sent["id"], "result": {"sessionId": "s-1"}})
        # The same id again, as a result and as an error: the request is settled.
        await peer.send({"jsonrpc": "2.0", "id": sent["id"], "result": {"sessionId": "s-2"}})
        await peer.send(
            {"jsonrpc": "2.0", "id": sent["id"], "error": {"code": -32603, "message": "late"}}
        )
        await assert_nothing_more(peer)
        assert results == [{"sessionId": "s-1"}] and client.closed_reason is None
    assert caplog.text.count(f"dropped a late response for settled request {sent['id']!r}") == 2


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_an_inbound_request_may_reuse_the_id_of_one_of_ours(dialect: str) -> None:
    # Ids are per direction: a request from the runtime with the id of our pending
    # request is a request (it has a method), and our request still gets its response.
    async with connected(dialect) as (client, peer):
        async with session_new_in_flight(client, peer) as (sent, results):
            with client.permission_handler("s", allow_handler):
                await peer.ask_permission("s", request_id=sent["id"])
                assert await peer.receive() == {
                    "jsonrpc": "2.0",
                    "id": sent["id"],
                    "result": selected("allow"),
                }
            await peer.send({"jsonrpc": "2.0", "id": sent["id"], "result": {"sessionId": "s-1"}})
        assert results == [{"sessionId": "s-1"}]


async def test_request_returns_result_and_raises_request_error_for_error_responses() -> None:
    async with connected() as (client, peer):
        async with trio.open_nursery() as nursery:
            results: list[Any] = []

            async def call() -> None:
                results.append(await client.request("sessionNew", {"title": "t"}))
                with pytest.raises(RequestError) as info:
                    await client.request("sessionLoad", {"sessionId": "zz"})
                results.append((info.value.code, info.value.message))

            nursery.start_soon(call)
            first = await peer.receive()
            await peer.send({"jsonrpc": "2.0", "id": first["id"], "result": {"sessionId": "s-9"}})
            second = await peer.receive()
            await peer.send(
                {"jsonrpc": "2.0", "id": second["id"], "error": {"code": -32602, "message": "no"}}
            )
        assert results == [{"sessionId": "s-9"}, (-32602, "no")]


# ---------------------------------------------------------------- 6. turn cancel


async def test_cancelling_a_bridge_chat_send_answers_that_sessions_permissions_at_once() -> None:
    async with connected("bridge") as (client, peer):
        waiter_a, waiter_b = Waiter(), Waiter()
        with (
            client.permission_handler("s-A", waiter_a),
            client.permission_handler("s-B", waiter_b),
        ):
            with trio.CancelScope() as turn:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(
                        client.request, "chatSend", {"sessionId": "s-A", "text": "x"}
                    )
                    chat = await peer.receive()
                    a = await peer.ask_permission("s-A", "a")
                    b = await peer.ask_permission("s-B", "b")
                    await waiter_a.arrived.wait()
                    await waiter_b.arrived.wait()
                    turn.cancel()
            got = [await peer.receive(), await peer.receive()]
            assert {
                "jsonrpc": "2.0",
                "method": "$/cancelRequest",
                "params": {"id": chat["id"]},
            } in got
            assert {"jsonrpc": "2.0", "id": a, "result": CANCELLED} in got
            assert client.pending_permissions("s-B") == 1  # the other session's turn goes on
            waiter_b.release.set()
            assert await peer.receive() == {"jsonrpc": "2.0", "id": b, "result": selected("allow")}


async def test_cancelling_an_acp_prompt_sends_session_cancel_and_answers_its_permissions() -> None:
    async with connected("acp") as (client, peer):
        waiter = Waiter()
        with client.permission_handler("s-A", waiter):
            with trio.CancelScope() as turn:
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(
                        client.request, "session/prompt", {"sessionId": "s-A", "prompt": []}
                    )
                    await peer.receive()
                    a = await peer.ask_permission("s-A", "a")
                    await waiter.arrived.wait()
                    turn.cancel()
            got = [await peer.receive(), await peer.receive()]
            # ACP cancels a turn with session/cancel, not with a request cancel.
            assert {
                "jsonrpc": "2.0",
                "method": "session/cancel",
                "params": {"sessionId": "s-A"},
            } in got
            assert {"jsonrpc": "2.0", "id": a, "result": CANCELLED} in got
            await assert_nothing_more(peer)


@pytest.mark.parametrize(("dialect", "method"), [("bridge", "chatSend"), ("acp", "session/prompt")])
async def test_turn_running_follows_the_turn_request_of_that_session(
    dialect: str, method: str
) -> None:
    async with connected(dialect) as (client, peer):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.request, method, {"sessionId": "s-A"})
            turn = await peer.receive()
            assert client.turn_running("s-A")
            assert not client.turn_running("s-B")
            await peer.send({"jsonrpc": "2.0", "id": turn["id"], "result": {}})
        assert not client.turn_running("s-A")
        async with trio.open_nursery() as nursery:
            nursery.start_soon(client.request, "other/method", {"sessionId": "s-A"})
            await peer.receive()
            assert not client.turn_running("s-A")  # not a turn request
            nursery.cancel_scope.cancel()


async def test_cancel_requests_cancels_that_sessions_requests_even_before_they_start() -> None:
    async with connected("acp") as (client, peer):
        started: list[int] = []
        counted: list[int] = []

        async def turn(params: Any) -> dict[str, str]:
            started.append(params["n"])
            await trio.sleep_forever()
            raise AssertionError("not reached")  # pragma: no cover

        def on_cancel(notification: permclient.InboundNotification) -> None:
            # In the reader, in wire order: prompt 2 has arrived, its handler not started.
            counted.append(client.cancel_requests("session/prompt", "s-A"))

        cancelled = {"stopReason": "cancelled"}
        with (
            client.on_request("session/prompt", turn, cancelled_result=cancelled),
            client.on_notification("x/cancel", on_cancel),
        ):
            await peer.request("session/prompt", {"sessionId": "s-A", "n": 1}, request_id=1)
            await peer.request("session/prompt", {"sessionId": "s-B", "n": 3}, request_id=3)
            await trio.testing.wait_all_tasks_blocked()  # 1 and 3 have started
            messages = [
                {"jsonrpc": "2.0", "id": 2, "method": "session/prompt",
                 "params": {"sessionId": "s-A", "n": 2}},
                {"jsonrpc": "2.0", "method": "x/cancel", "params": {}},
            ]  # fmt: skip
            await peer.send_raw(
                b"".join(peer.framer_type.encode(json.dumps(m).encode()) for m in messages)
            )
            replies = [await peer.receive() for _ in range(2)]
            assert sorted((r["id"], r["result"]["stopReason"]) for r in replies) == [
                (1, "cancelled"),
                (2, "cancelled"),
            ]
            assert counted == [2]
            assert sorted(started) == [1, 3]  # 2 never ran; s-B's turn goes on
            assert client.cancel_requests("session/prompt", "s-A") == 0


async def test_acp_session_cancel_answers_that_sessions_permissions_at_once() -> None:
    async with connected("acp") as (client, peer):
        waiter = Waiter()
        with client.permission_handler("s", waiter):
            ids = [await peer.ask_permission("s", f"c{n}") for n in range(2)]
            while len(waiter.seen) < 2:
                await trio.testing.wait_all_tasks_blocked()
            await client.notify("session/cancel", {"sessionId": "s"})
            got = [await peer.receive() for _ in range(3)]
        assert {"jsonrpc": "2.0", "method": "session/cancel", "params": {"sessionId": "s"}} in got
        for request_id in ids:
            assert {"jsonrpc": "2.0", "id": request_id, "result": CANCELLED} in got


# ------------------------------------------------------------------ 7. teardown


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_peer_dying_mid_approval_cancels_handlers_and_fails_pending_requests(
    dialect: str,
) -> None:
    async with connected(dialect) as (client, peer):
        waiter = Waiter()
        failures: list[BaseException] = []

        async def call() -> None:
            try:
                await client.request("chatSend", {"sessionId": "s", "text": "go"})
            except ConnectionClosed as exc:
                failures.append(exc)

        with client.permission_handler("s", waiter):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(call)
                await peer.receive()
                await peer.ask_permission("s")
                await waiter.arrived.wait()
                await peer.stream.aclose()
        assert len(failures) == 1 and "peer closed" in str(failures[0])
        await trio.testing.wait_all_tasks_blocked()
        assert waiter.cancelled == ["call-1"]
        with pytest.raises(ConnectionClosed):
            await client.request("anything", {})
        with pytest.raises(ConnectionClosed):
            await client.notify("anything", {})


async def test_body_exception_is_not_wrapped_in_an_exception_group() -> None:
    ours, _theirs = trio.testing.memory_stream_pair()
    with pytest.raises(Boom):
        async with permclient.open_client(ours):
            raise Boom


# ------------------------------------------------------------- 8. bounded input


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_invalid_json_gets_parse_error_with_null_id_and_the_connection_lives(
    dialect: str,
) -> None:
    async with connected(dialect) as (_client, peer):
        await peer.send_raw(peer.framer_type.encode(b'{"jsonrpc": "2.0", "id": 1, "method"'))
        reply = await peer.receive()
        assert reply["id"] is None and reply["error"]["code"] == -32700
        await assert_nothing_more(peer)


@pytest.mark.parametrize(
    "body", [b"[]", b'[{"jsonrpc":"2.0","id":1,"method":"x"}]', b"42", b'"str"', b"null"]
)
async def test_non_object_or_batch_gets_invalid_request(body: bytes) -> None:
    async with connected() as (_client, peer):
        await peer.send_raw(peer.framer_type.encode(body))
        reply = await peer.receive()
        assert reply == {
            "jsonrpc": "2.0",
            "id": None,
            "error": {"code": -32600, "message": reply["error"]["message"]},
        }
        await assert_nothing_more(peer)


async def test_invalid_request_with_a_readable_id_is_answered_with_that_id() -> None:
    async with connected() as (_client, peer):
        await peer.send({"jsonrpc": "2.0", "id": 5, "method": 12})
        reply = await peer.receive()
        assert reply["id"] == 5 and reply["error"]["code"] == -32600


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_oversized_frame_is_skipped_without_buffering_and_the_connection_lives(
    dialect: str,
) -> None:
    async with connected(dialect, max_frame_size=1024) as (client, peer):
        with client.permission_handler("s", allow_handler):
            big = b'{"pad":"' + b"x" * 4096 + b'"}'
            await peer.send_raw(peer.framer_type.encode(big))
            await peer.ask_permission("s")
            assert (await peer.receive())["result"] == selected("allow")
            assert client.closed_reason is None


async def test_malformed_header_closes_the_connection_and_fails_pending_calls() -> None:
    async with connected("bridge") as (client, peer):
        errors: list[BaseException] = []

        async def call() -> None:
            with pytest.raises(ConnectionClosed) as info:
                await client.request("x", {})
            errors.append(info.value)

        async with trio.open_nursery() as nursery:
            nursery.start_soon(call)
            await peer.receive()
            await peer.send_raw(b"Content-Length: -5\r\n\r\n")
        assert "protocol error" in str(errors[0])
        assert client.closed_reason is not None


# ------------------------------------------------------------- other requests


async def test_unregistered_reverse_request_gets_method_not_found() -> None:
    async with connected("acp") as (_client, peer):
        request_id = await peer.request("terminal/create", {"command": "ls"})
        reply = await peer.receive()
        assert reply["id"] == request_id and reply["error"]["code"] == -32601


async def test_on_request_answers_results_errors_and_internal_errors() -> None:
    async with connected() as (client, peer):

        async def echo(params: Any) -> Any:
            if params["mode"] == "error":
                raise RequestError(-32602, "bad path", {"path": "/etc"})
            if params["mode"] == "bug":
                raise Boom
            return {"echo": params}

        with client.on_request("x/echo", echo):
            await peer.request("x/echo", {"mode": "ok"}, request_id=1)
            await peer.request("x/echo", {"mode": "error"}, request_id=2)
            await peer.request("x/echo", {"mode": "bug"}, request_id=3)
            replies = {(m := await peer.receive())["id"]: m for _ in range(3)}
        assert replies[1]["result"] == {"echo": {"mode": "ok"}}
        assert replies[2]["error"] == {
            "code": -32602,
            "message": "bad path",
            "data": {"path": "/etc"},
        }
        assert replies[3]["error"]["code"] == -32603
        with pytest.raises(ValueError, match="permission_handler"):
            client.on_request("session/request_permission", echo)


# ------------------------------------------------------------- notifications


NEW_SESSION = {
    "acp": ("session/new", {"cwd": "/w", "mcpServers": []}),
    "bridge": ("sessionNew", {"title": "t"}),
}


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_notifications_sent_before_session_new_returns_are_not_lost(dialect: str) -> None:
    async with connected(dialect) as (client, peer):
        seen: list[Any] = []
        async with trio.open_nursery() as nursery:
            result: dict[str, Any] = {}

            async def new_session() -> None:
                result.update(await client.request(*NEW_SESSION[dialect]))

            nursery.start_soon(new_session)
            sent = await peer.receive()
            assert sent["method"] == NEW_SESSION[dialect][0]
            for n in range(3):
                await peer.notify(
                    "session/update",
                    {
                        "sessionId": "s-new",
                        "update": {
                            "sessionUpdate": "agent_message_chunk",
                            "content": {"type": "text", "text": str(n)},
                        },
                    },
                )
            await peer.send({"jsonrpc": "2.0", "id": sent["id"], "result": {"sessionId": "s-new"}})
        with client.on_session_notification(result["sessionId"], seen.append):
            await peer.notify(
                "session/update",
                {
                    "sessionId": "s-new",
                    "update": {
                        "sessionUpdate": "agent_message_chunk",
                        "content": {"type": "text", "text": "3"},
                    },
                },
            )
            await assert_nothing_more(peer)
        texts = [n.params["update"]["content"]["text"] for n in seen]
        assert texts == ["0", "1", "2", "3"]
        assert {n.session_id for n in seen} == {"s-new"}


async def test_a_notification_a_method_callback_took_is_not_held_for_the_session() -> None:
    async with connected("acp") as (client, peer):
        seen: list[str | None] = []
        with client.on_notification("session/cancel", lambda n: seen.append(n.session_id)):
            await peer.notify("session/cancel", {"sessionId": "s-1"})
            await assert_nothing_more(peer)
        assert seen == ["s-1"]
        later: list[str] = []
        with client.on_session_notification("s-1", lambda n: later.append(n.method)):
            pass
        assert later == []  # it was taken, not held for the session's callback


async def test_notification_callbacks_run_in_order_and_a_failing_one_is_contained() -> None:
    async with connected() as (client, peer):
        seen: list[int] = []

        def broken(n: permclient.InboundNotification) -> None:
            raise Boom

        with (
            client.on_notification("tick", broken),
            client.on_notification("tick", lambda n: seen.append(n.params["n"])),
        ):
            for n in range(5):
                await peer.notify("tick", {"n": n})
            await assert_nothing_more(peer)
        assert seen == [0, 1, 2, 3, 4]


# ------------------------------------------------------------ 9. tool calls


async def test_tool_call_status_never_rewinds_and_tracks_pending_approval() -> None:
    async with connected("acp") as (client, peer):

        def update(kind: str, **fields: Any) -> dict[str, Any]:
            return {
                "sessionId": "s",
                "update": {"sessionUpdate": kind, "toolCallId": "c", **fields},
            }

        waiter = Waiter()
        with client.permission_handler("s", waiter):
            await peer.notify("session/update", update("tool_call", title="ls", status="pending"))
            await peer.ask_permission("s", "c")
            await waiter.arrived.wait()
            state = client.tool_calls.get("s", "c")
            assert state is not None and state.awaiting_approval
            waiter.release.set()
            await peer.receive()
            assert not state.awaiting_approval
            await peer.notify("session/update", update("tool_call_update", status="in_progress"))
            await peer.notify("session/update", update("tool_call_update", status="pending"))
            await assert_nothing_more(peer)
            assert state.status == "in_progress"
            await peer.notify("session/update", update("tool_call_update", status="completed"))
            await peer.notify("session/update", update("tool_call_update", status="failed"))
            await peer.notify("session/update", update("tool_call_update", status="bogus"))
            await assert_nothing_more(peer)
            assert state.status == "completed" and state.is_final


# ----------------------------------------------------------------- telemetry


async def test_telemetry_records_every_approval_path() -> None:
    sink = io.StringIO()
    telemetry = permclient.JsonlTelemetry(sink)
    async with connected(telemetry=telemetry) as (client, peer):
        waiter = Waiter()
        with client.permission_handler("s", waiter):
            await peer.ask_permission("s", request_id=1)
            await waiter.arrived.wait()
            waiter.release.set()
            await peer.receive()
            waiter.release = trio.Event()
            await peer.ask_permission("s", request_id=2)
            while len(waiter.seen) < 2:
                await trio.testing.wait_all_tasks_blocked()
            await peer.notify("$/cancelRequest", {"id": 2})
            await peer.receive()
            await peer.ask_permission("other", request_id=3)
            await peer.receive()
            await peer.request("session/request_permission", {"sessionId": "s"}, request_id=4)
            await peer.receive()
    telemetry.flush()  # write what the sink buffered
    events = [json.loads(line) for line in sink.getvalue().splitlines()]
    by_event: dict[str, list[dict[str, Any]]] = {}
    for event in events:
        by_event.setdefault(event["event"], []).append(event)
        assert isinstance(event["ts"], float)
        assert "request_id" in event and "session_id" in event, event
        if event["event"] in ("approval.responded", "approval.cancelled"):
            assert event["latency_ms"] >= 0
    starts = by_event["server_request.start"]
    assert [(e["request_id"], e["session_id"]) for e in starts] == [
        (1, "s"),
        (2, "s"),
        (3, "other"),
        (4, "s"),
    ]
    assert [e["request_id"] for e in by_event["approval.requested"]] == [1, 2]
    (responded,) = by_event["approval.responded"]
    assert responded["outcome"] == "selected" and responded["option_id"] == "allow"
    assert responded["session_id"] == "s" and responded["latency_ms"] >= 0
    (cancelled,) = by_event["approval.cancelled"]
    assert cancelled["by"] == "peer" and cancelled["request_id"] == 2
    assert by_event["approval.unrouted"][0]["session_id"] == "other"
    assert by_event["approval.malformed"][0]["request_id"] == 4


async def test_telemetry_says_who_cancelled_a_pending_request() -> None:
    sink = io.StringIO()
    telemetry = permclient.JsonlTelemetry(sink)
    ours, theirs = trio.testing.memory_stream_pair()
    peer = FakePeer(theirs, "bridge")
    async with permclient.open_client(ours, dialect="bridge", telemetry=telemetry) as client:
        waiter = Waiter()
        with client.permission_handler("s", waiter):
            await peer.ask_permission("s", request_id="turn")
            await waiter.arrived.wait()
        assert (await peer.receive())["result"] == CANCELLED
        with client.permission_handler("s", waiter):
            await peer.ask_permission("s", request_id="teardown")
            while len(waiter.seen) < 2:
                await trio.testing.wait_all_tasks_blocked()
            await theirs.aclose()  # the runtime goes away with a question open
            await client.wait_closed()
    telemetry.flush()  # write what the sink buffered
    cancelled = [json.loads(line) for line in sink.getvalue().splitlines()]
    assert [
        (e["request_id"], e["by"]) for e in cancelled if e["event"] == "approval.cancelled"
    ] == [
        ("turn", "turn"),
        ("teardown", "teardown"),
    ]
    assert waiter.cancelled == ["call-1", "call-1"]


# ------------------------------------------------------------ registration timeout


async def test_a_registration_timeout_answers_a_waiting_request_cancelled(
    autojump_clock: trio.abc.Clock,
) -> None:
    sink = io.StringIO()
    telemetry = permclient.JsonlTelemetry(sink)
    async with connected(telemetry=telemetry) as (client, peer):
        waiter = Waiter()
        with client.permission_handler("s", waiter, timeout=30):
            start = trio.current_time()
            request_id = await peer.ask_permission("s")
            assert await peer.receive() == {"jsonrpc": "2.0", "id": request_id, "result": CANCELLED}
            assert trio.current_time() - start == pytest.approx(30)
            assert waiter.cancelled == ["call-1"]  # the handler was cancelled, its card closed
            await assert_nothing_more(peer)
    telemetry.flush()  # write what the sink buffered
    events = [json.loads(line) for line in sink.getvalue().splitlines()]
    (cancelled,) = [e for e in events if e["event"] == "approval.cancelled"]
    assert cancelled["by"] == "timeout" and cancelled["request_id"] == request_id
    assert cancelled["latency_ms"] == pytest.approx(30_000)


async def test_an_answer_before_the_timeout_is_the_only_answer(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with connected() as (client, peer):
        waiter = Waiter()
        with client.permission_handler("s", waiter, timeout=30):
            request_id = await peer.ask_permission("s")
            await waiter.arrived.wait()
            await trio.sleep(29)
            waiter.release.set()
            assert await peer.receive() == {
                "jsonrpc": "2.0",
                "id": request_id,
                "result": selected("allow"),
            }
            await trio.sleep(60)  # well past the deadline
            await assert_nothing_more(peer)


async def test_a_handler_that_ignores_its_timeout_still_answers_cancelled_once(
    autojump_clock: trio.abc.Clock,
) -> None:
    async def stubborn(req: PermissionRequest) -> Selected:
        with contextlib.suppress(trio.Cancelled):  # swallowed: bad manners, changes nothing
            await trio.sleep_forever()
        return Selected("allow")

    async with connected() as (client, peer):
        with client.permission_handler("s", stubborn, timeout=5):
            request_id = await peer.ask_permission("s")
            assert await peer.receive() == {"jsonrpc": "2.0", "id": request_id, "result": CANCELLED}
            await assert_nothing_more(peer)


async def test_a_timeout_reaches_a_handler_waiting_inside_a_scope_of_its_own(
    autojump_clock: trio.abc.Clock,
) -> None:
    unwound = trio.Event()

    async def patient(req: PermissionRequest) -> Selected:
        try:
            with trio.move_on_after(3600):
                await trio.sleep_forever()
            return Selected("allow")  # pragma: no cover - the timeout comes first
        finally:
            unwound.set()

    async with connected() as (client, peer):
        with client.permission_handler("s", patient, timeout=10):
            start = trio.current_time()
            await peer.ask_permission("s")
            assert (await peer.receive())["result"] == CANCELLED
            assert trio.current_time() - start == pytest.approx(10)
            await unwound.wait()


async def test_a_timeout_answers_at_the_deadline_even_if_the_handler_is_slow_to_unwind(
    autojump_clock: trio.abc.Clock,
) -> None:
    # A handler shielded from cancellation, or slow to close its card: the agent is
    # not kept waiting for it, the answer goes at the deadline as a withdrawal would.
    released = trio.Event()

    async def shielded(req: PermissionRequest) -> Selected:
        with trio.CancelScope(shield=True):
            await released.wait()
        return Selected("allow")

    async def slow_cleanup(req: PermissionRequest) -> Selected:
        try:
            await trio.sleep_forever()
        finally:
            with trio.CancelScope(shield=True):
                await released.wait()
        return Selected("allow")  # pragma: no cover

    async with connected() as (client, peer):
        try:
            with (
                client.permission_handler("a", shielded, timeout=5),
                client.permission_handler("b", slow_cleanup, timeout=8),
            ):
                start = trio.current_time()
                first = await peer.ask_permission("b")
                second = await peer.ask_permission("a")
                for request_id, after in ((second, 5), (first, 8)):  # in deadline order
                    with trio.fail_after(30):  # not when the handlers are done: never
                        reply = await peer.receive()
                    assert reply == {"jsonrpc": "2.0", "id": request_id, "result": CANCELLED}
                    assert trio.current_time() - start == pytest.approx(after)
                assert client.pending_permissions() == 0
                released.set()
                await trio.testing.wait_all_tasks_blocked()
                await assert_nothing_more(peer)  # what the handlers returned changes nothing
        finally:
            released.set()  # so that a failure above fails, rather than hangs at teardown
        assert not client.statistics().timeout_task_running  # nothing to time: the task is gone


async def test_a_handler_that_answers_at_once_is_not_touched_by_a_timeout(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with connected() as (client, peer):
        with client.permission_handler("s", allow_handler, timeout=1):
            await peer.ask_permission("s")
            assert (await peer.receive())["result"] == selected("allow")
            await trio.sleep(5)
            await assert_nothing_more(peer)


async def test_any_real_number_of_seconds_is_a_timeout(autojump_clock: trio.abc.Clock) -> None:
    async with connected() as (client, peer):
        with client.permission_handler("s", Waiter(), timeout=fractions.Fraction(3, 2)):  # type: ignore[arg-type]
            start = trio.current_time()
            await peer.ask_permission("s")
            assert (await peer.receive())["result"] == CANCELLED
            assert trio.current_time() - start == pytest.approx(1.5)


@pytest.mark.parametrize("bad", [0, -1, float("nan"), float("inf"), True, "5", 1j])
async def test_a_timeout_must_be_a_positive_number_of_seconds(bad: Any) -> None:
    async with connected() as (client, _):
        with pytest.raises(ValueError, match="timeout must be a positive number"):
            client.permission_handler("s", allow_handler, timeout=bad)
        assert client.pending_permissions() == 0


async def test_peer_cancel_can_answer_with_a_result_for_turn_like_requests() -> None:
    async with connected() as (client, peer):
        entered = trio.Event()

        async def turn(params: Any) -> dict[str, str]:
            entered.set()
            await trio.sleep_forever()
            return {"stopReason": "end_turn"}  # pragma: no cover - cancelled

        with client.on_request("chatSend", turn, cancelled_result={"stopReason": "cancelled"}):
            request_id = await peer.request("chatSend", {"sessionId": "s", "text": "x"})
            await entered.wait()
            await peer.notify("$/cancelRequest", {"id": request_id})
            assert await peer.receive() == {
                "jsonrpc": "2.0",
                "id": request_id,
                "result": {"stopReason": "cancelled"},
            }
            await assert_nothing_more(peer)


async def test_a_failing_telemetry_sink_never_changes_or_loses_an_answer() -> None:
    class BrokenSink:
        def emit(self, event: str, /, **fields: Any) -> None:
            raise OSError("disk full")

    async with connected(telemetry=BrokenSink()) as (client, peer):
        waiter = Waiter()
        with client.permission_handler("s", waiter):
            await peer.ask_permission("s", "a", request_id=1)
            await waiter.arrived.wait()
            waiter.release.set()
            assert await peer.receive() == {"jsonrpc": "2.0", "id": 1, "result": selected("allow")}
            waiter.release = trio.Event()
            await peer.ask_permission("s", "b", request_id=2)
            while len(waiter.seen) < 2:
                await trio.testing.wait_all_tasks_blocked()
            await peer.notify("$/cancelRequest", {"id": 2})
            assert await peer.receive() == {"jsonrpc": "2.0", "id": 2, "result": CANCELLED}
            await peer.ask_permission("nobody", request_id=3)
            assert await peer.receive() == {"jsonrpc": "2.0", "id": 3, "result": CANCELLED}


async def test_wait_closed_returns_when_the_peer_goes_away() -> None:
    async with connected() as (client, peer):
        async with trio.open_nursery() as nursery:
            reasons: list[str] = []

            async def wait() -> None:
                reasons.append(await client.wait_closed())

            nursery.start_soon(wait)
            await trio.testing.wait_all_tasks_blocked()
            assert reasons == []
            await peer.stream.aclose()
        assert reasons == ["the peer closed the connection"]


# ------------------------------------------------------------ review findings


async def test_owed_answers_are_written_even_when_an_outer_scope_cancels_the_client() -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    peer = FakePeer(theirs, "bridge")
    waiter = Waiter()
    with trio.CancelScope() as outer:
        async with permclient.open_client(ours) as client:
            with client.permission_handler("s", waiter):
                await peer.ask_permission("s", request_id=0)
                await waiter.arrived.wait()
                outer.cancel()
                await trio.sleep_forever()
    assert outer.cancelled_caught
    assert await peer.receive() == {"jsonrpc": "2.0", "id": 0, "result": CANCELLED}


async def test_deeply_nested_json_is_a_parse_error_for_its_id_not_a_dead_connection() -> None:
    async with connected() as (client, peer):
        deep = b'{"jsonrpc":"2.0","id":1,"method":"m","params":' + b"[" * 5000 + b"]" * 5000 + b"}"
        await peer.send_raw(peer.framer_type.encode(deep))
        reply = await peer.receive()
        assert reply["id"] == 1 and reply["error"]["code"] == -32700
        await assert_nothing_more(peer)
        assert client.closed_reason is None


def _too_deep_permission_request(request_id: Any, deep: bytes) -> bytes:
    # msgspec stops near 1,000 levels; the members around the deep value still read.
    return (
        b'{"jsonrpc":"2.0","params":{"sessionId":"s","toolCall":{"toolCallId":"c","rawInput":'
        + deep
        + b'},"options":[{"optionId":"allow","name":"Allow","kind":"allow_once"}]},'
        + b'"id":'
        + msgspec.json.encode(request_id)
        + b',"method":"session/request_permission"}'
    )


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize(
    "deep",
    [
        b"[" * 5000 + b"]" * 5000,
        b'{"a":' * 3000 + b'"}]\\"[{"' + b"}" * 3000,  # brackets and escapes in a string
        b"[" * 2000 + b'"]]]",{"x":"{{"}' + b"]" * 2000,
    ],
    ids=["lists", "objects", "strings"],
)
async def test_a_permission_request_nested_too_deep_is_answered_cancelled_for_its_id(
    dialect: str, deep: bytes
) -> None:
    async with connected(dialect) as (client, peer):
        with client.permission_handler("s", allow_handler):
            for request_id in (7, "seven"):
                frame = _too_deep_permission_request(request_id, deep)
                await peer.send_raw(peer.framer_type.encode(frame))
                assert await peer.receive() == {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "result": CANCELLED,
                }
            await assert_nothing_more(peer)
        assert client.closed_reason is None


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_response_nested_too_deep_fails_the_request_it_answers(dialect: str) -> None:
    async with connected(dialect) as (client, peer):
        async with trio.open_nursery() as nursery:
            failures: list[RequestError] = []

            async def ask() -> None:
                with pytest.raises(RequestError) as caught:
                    await client.request("deep/thing", {})
                failures.append(caught.value)

            nursery.start_soon(ask)
            sent = await peer.receive()
            deep = b"[" * 5000 + b"]" * 5000
            frame = b'{"jsonrpc":"2.0","id":%d,"result":%s}' % (sent["id"], deep)
            await peer.send_raw(peer.framer_type.encode(frame))
        assert [failure.code for failure in failures] == [-32700]


@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("way", ["error message", "error data and message", "result"])
async def test_an_unencodable_handler_answer_gets_a_fixed_error_and_the_client_lives(
    dialect: str, way: str
) -> None:
    async with connected(dialect) as (client, peer):

        async def handler(params: Any) -> Any:
            if way == "result":
                return {"path": "/w/\udcff-missing"}  # e.g. a path that is not UTF-8
            data = {"path": "\udcff"} if way == "error data and message" else None
            raise RequestError(-32002, "no such file: /w/\udcff-missing", data)

        with client.on_request("fs/read_text_file", handler):
            for request_id in range(3):
                await peer.request("fs/read_text_file", {"path": "/w/link"}, request_id=request_id)
                assert await peer.receive() == {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "error": {
                        "code": -32603,
                        "message": "internal error: the response could not be encoded",
                    },
                }
            await assert_nothing_more(peer)
        assert client.closed_reason is None


async def test_an_unencodable_decision_answers_cancelled_and_keeps_the_client_alive() -> None:
    async with connected() as (client, peer):

        async def odd_meta(req: PermissionRequest) -> Selected:
            return Selected("allow", meta={"ui": object()})

        with client.permission_handler("s", odd_meta):
            await peer.ask_permission("s", request_id=0)
            assert await peer.receive() == {"jsonrpc": "2.0", "id": 0, "result": CANCELLED}
            await assert_nothing_more(peer)


async def test_an_unencodable_cancelled_result_is_refused_at_registration() -> None:
    async with connected() as (client, _peer):

        async def turn(params: Any) -> None:
            return None

        with pytest.raises(permclient.LocalProtocolError):
            client.on_request("chatSend", turn, cancelled_result={"x": object()})


async def test_a_peer_that_never_reads_cannot_grow_our_write_buffer_without_end(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from permclient import _client

    monkeypatch.setattr(_client, "_OUTBUF_HIGH_WATER", 2000)
    ours, theirs = trio.testing.lockstep_stream_pair()
    peer = FakePeer(theirs, "bridge")
    async with permclient.open_client(ours) as client, trio.open_nursery() as nursery:
        sent = 0

        async def flood() -> None:
            nonlocal sent
            for n in range(500):
                await peer.request("no/such/method", {}, request_id=n)
                sent += 1

        nursery.start_soon(flood)
        await trio.testing.wait_all_tasks_blocked()
        assert sent < 500  # the client stopped reading: the flood is held back
        assert client.statistics().connection.bytes_queued < 2000 + 1000
        answered: set[Any] = set()
        while len(answered) < 500:
            answered.add((await peer.receive())["id"])
        assert answered == set(range(500))


async def test_past_max_pending_a_permission_request_is_answered_cancelled_at_once() -> None:
    sink = io.StringIO()
    telemetry = permclient.JsonlTelemetry(sink)
    async with connected(max_pending=2, telemetry=telemetry) as (client, peer):
        waiter = Waiter()
        with client.permission_handler("s", waiter):
            for n in range(3):
                await peer.ask_permission("s", f"c{n}", request_id=n)
            assert await peer.receive() == {"jsonrpc": "2.0", "id": 2, "result": CANCELLED}
            await trio.testing.wait_all_tasks_blocked()
            assert sorted(r.tool_call.tool_call_id for r in waiter.seen) == ["c0", "c1"]
    telemetry.flush()  # write what the sink buffered
    refused = [e for e in map(json.loads, sink.getvalue().splitlines()) if "refused" in e["event"]]
    assert [(e["event"], e["request_id"], e["session_id"]) for e in refused] == [
        ("approval.refused", 2, "s")
    ]
    assert "more than 2" in refused[0]["reason"]


async def test_held_notifications_are_bounded_and_the_newest_are_kept(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    from permclient import _connection

    monkeypatch.setattr(_connection, "_BACKLOG_LIMIT", 3)
    async with connected() as (client, peer):
        for n in range(5):
            await peer.notify("session/update", {"sessionId": "late", "n": n})
        await assert_nothing_more(peer)
        seen: list[int] = []
        with client.on_session_notification("late", lambda note: seen.append(note.params["n"])):
            pass
    assert seen == [2, 3, 4]
    assert "dropped a held 'session/update'" in caplog.text


@asynccontextmanager
async def pipes(
    capacity: int | None = None,
) -> AsyncIterator[tuple[trio.StapledStream[Any, Any], trio.StapledStream[Any, Any]]]:
    """A client's end and a peer's end over two OS pipes, as ``open_process`` has
    (``capacity``: what the client's outgoing pipe holds, rounded up to a page)."""
    to_client_r, to_client_w = os.pipe()
    to_peer_r, to_peer_w = os.pipe()
    if capacity is not None:
        fcntl.fcntl(to_peer_w, fcntl.F_SETPIPE_SZ, capacity)
    fd_stream = trio.lowlevel.FdStream  # (each owns its descriptor and closes it)
    ours = trio.StapledStream(fd_stream(to_peer_w), fd_stream(to_client_r))
    theirs = trio.StapledStream(fd_stream(to_client_w), fd_stream(to_peer_r))
    try:
        yield ours, theirs
    finally:
        await ours.aclose()
        await theirs.aclose()


@pytest.mark.skipif(not hasattr(fcntl, "F_SETPIPE_SZ"), reason="needs Linux pipes")
async def test_answers_to_a_pipe_the_peer_is_slow_to_read_arrive_whole_and_in_order() -> None:
    # The reader writes a read's answers to the pipe itself when the writer is
    # idle; what a full pipe leaves is the writer's, and goes before anything newer.
    async with pipes(capacity=4096) as (ours, theirs):
        peer = FakePeer(theirs, "acp")
        async with permclient.open_client(ours, dialect="acp") as client:
            with client.permission_handler("s", permclient.rule(lambda r: Selected("allow"))):
                for n in range(400):  # ~36 KB of answers: the pipe fills many times over
                    await peer.ask_permission("s", request_id=n)
                with trio.fail_after(10):  # (an answer lost would leave the peer waiting)
                    answers = [await peer.receive() for _ in range(400)]
                assert [answer["id"] for answer in answers] == list(range(400))
                assert all(answer["result"] == selected("allow") for answer in answers)
                await assert_nothing_more(peer)


@pytest.mark.skipif(not hasattr(fcntl, "F_SETPIPE_SZ"), reason="needs Linux pipes")
async def test_answers_another_task_gives_over_a_slow_pipe_arrive_whole_and_in_order() -> None:
    # The writer writes what a pipe takes at once itself, and leaves the rest of a
    # batch to send_all, which waits for room: nothing is lost or reordered.
    async with pipes(capacity=4096) as (ours, theirs):
        peer = FakePeer(theirs, "acp")
        questions: list[permclient.Question] = []
        async with permclient.open_client(ours, dialect="acp") as client:
            with client.permission_handler("s", permclient.deferred(questions.append)):
                for n in range(400):
                    await peer.ask_permission("s", request_id=n)
                await trio.testing.wait_all_tasks_blocked()
                assert len(questions) == 400
                for question in questions:  # ~36 KB of answers at once: a full pipe
                    assert question.select("allow")
                with trio.fail_after(10):  # (an answer lost would leave the peer waiting)
                    answers = [await peer.receive() for _ in range(400)]
                assert [answer["id"] for answer in answers] == list(range(400))
                assert all(answer["result"] == selected("allow") for answer in answers)
                await assert_nothing_more(peer)


async def test_a_reader_write_to_a_pipe_nobody_reads_closes_the_connection() -> None:
    async with pipes() as (ours, theirs):
        peer = FakePeer(theirs, "acp")
        async with permclient.open_client(ours, dialect="acp") as client:
            with client.permission_handler("s", permclient.rule(lambda r: Selected("allow"))):
                await theirs.receive_stream.aclose()  # the peer stops reading: EPIPE
                await peer.ask_permission("s", request_id=0)
                with trio.fail_after(5):
                    await client.wait_closed()
                assert client.closed_reason is not None
                assert "write failed" in client.closed_reason


async def test_after_a_write_failure_no_new_handler_starts() -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    peer = FakePeer(theirs, "bridge")
    waiter = Waiter()
    async with permclient.open_client(ours) as client:
        with client.permission_handler("s", waiter):
            await theirs.receive_stream.aclose()  # the peer stops reading: our writes fail
            await client.notify("ping", {})  # queues a write that fails
            await client.wait_closed()
            await peer.ask_permission("s")
            await trio.testing.wait_all_tasks_blocked()
            assert waiter.seen == []


async def test_a_handler_that_changes_the_request_cannot_widen_the_offer() -> None:
    async with connected() as (client, peer):

        async def sneaky(req: PermissionRequest) -> Selected:
            extra = permclient.PermissionOption("allow-all", "All", "allow_always")
            req.options = (*req.options, extra)  # rebinding is possible; it changes nothing
            return Selected("allow-all")

        with client.permission_handler("s", sneaky):
            await peer.ask_permission("s", request_id=0)
            assert (await peer.receive())["result"] == CANCELLED


async def test_requests_offering_the_same_options_share_them_and_answers_stay_exact(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(permclient._connection, "SHARE_OPTIONS_FROM", 0)  # from the first
    async with connected() as (client, peer):
        waiter = Waiter()
        with client.permission_handler("s", waiter):
            await peer.ask_permission("s", request_id=0)
            await peer.ask_permission("s", request_id=1)
            await trio.testing.wait_all_tasks_blocked()
            first, second = waiter.seen
            assert first.options is second.options  # one copy for both pending requests
            assert first.session_id is second.session_id
            with pytest.raises(AttributeError):
                first.options[0].option_id = "allow-all"  # type: ignore[misc]
            waiter.release.set()
            answers = {(await peer.receive())["id"] for _ in range(2)}
            assert answers == {0, 1}
            assert not client.statistics().connection.shared_option_sets  # only while pending


async def test_sharing_never_rewrites_the_session_a_request_named(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Were routing ever wrong, the handler must still see the session the request
    # named (a scenario runner's routing check depends on it), not its own.
    async with connected() as (client, peer):
        waiter = Waiter()
        with client.permission_handler("s-A", waiter):
            stacks = client._conn._stacks  # private on purpose: routing sabotaged
            monkeypatch.setitem(stacks, "s-B", stacks["s-A"])  # sabotage: B routed to A
            await peer.ask_permission("s-B", request_id=0)
            await waiter.arrived.wait()
            assert waiter.seen[0].session_id == "s-B"
            waiter.release.set()
            await peer.receive()


async def test_a_rule_also_sees_the_session_a_request_named_whatever_the_routing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[str] = []

    def allow(request: PermissionRequest) -> Selected:
        seen.append(request.session_id)
        return Selected("allow")

    async with connected() as (client, peer):
        with client.permission_handler("s-A", permclient.rule(allow)):
            stacks = client._conn._stacks  # private on purpose: routing sabotaged
            monkeypatch.setitem(stacks, "s-B", stacks["s-A"])  # sabotage: B routed to A
            await peer.ask_permission("s-B", request_id=0)
            assert (await peer.receive())["result"]["outcome"]["optionId"] == "allow"
            assert seen == ["s-B"]


async def test_options_carrying_meta_are_not_shared_and_still_answer_exactly() -> None:
    options = [
        {"optionId": "allow", "name": "Allow", "kind": "allow_once", "_meta": {"k": [1]}},
        {"optionId": "deny", "name": "Deny", "kind": "reject_once"},
    ]
    async with connected() as (client, peer):
        with client.permission_handler("s", allow_handler):
            await peer.ask_permission("s", options=options, request_id=0)
            assert (await peer.receive())["result"] == selected("allow")


async def test_a_request_withdrawn_in_the_same_read_never_reaches_its_handler() -> None:
    async with connected() as (client, peer):
        waiter = Waiter()
        with client.permission_handler("s", waiter):
            ask = {"jsonrpc": "2.0", "id": 1, "method": "session/request_permission"}
            params = {
                "sessionId": "s",
                "toolCall": {"toolCallId": "c1"},
                "options": allow_deny(),
            }
            cancel = {"jsonrpc": "2.0", "method": "$/cancelRequest", "params": {"id": 1}}
            await peer.send_raw(
                peer.framer_type.encode(json.dumps({**ask, "params": params}).encode())
                + peer.framer_type.encode(json.dumps(cancel).encode())
            )
            assert await peer.receive() == {"jsonrpc": "2.0", "id": 1, "result": CANCELLED}
            await assert_nothing_more(peer)
            assert waiter.seen == []


async def test_a_session_callback_registered_by_a_method_callback_gets_that_notification() -> None:
    async with connected() as (client, peer):
        seen: list[int] = []
        registrations: list[Any] = []

        def first_sight(note: permclient.InboundNotification) -> None:
            if not registrations and note.session_id:
                registrations.append(
                    client.on_session_notification(
                        note.session_id, lambda n: seen.append(n.params["n"])
                    )
                )

        with client.on_notification("session/update", first_sight):
            for n in range(3):
                await peer.notify("session/update", {"sessionId": "s", "n": n})
            await assert_nothing_more(peer)
        assert seen == [0, 1, 2]


async def test_a_cancel_without_an_id_cancels_nothing() -> None:
    async with connected() as (client, peer):
        waiter = Waiter()
        with client.permission_handler("s", waiter):
            params = {"sessionId": "s", "toolCall": {"toolCallId": "n"}, "options": allow_deny()}
            await peer.send(
                {
                    "jsonrpc": "2.0",
                    "id": None,
                    "method": "session/request_permission",
                    "params": params,
                }
            )
            await waiter.arrived.wait()
            await peer.notify("$/cancel_request", {})
            await peer.notify("$/cancelRequest", {"id": None})
            await assert_nothing_more(peer)
            assert client.pending_permissions("s") == 1
            assert waiter.cancelled == []


async def test_a_peer_cancelled_turn_withdraws_its_own_questions_before_answering() -> None:
    async with connected() as (client, peer):
        asked = trio.Event()

        async def turn(params: Any) -> dict[str, str]:
            asked.set()
            await client.request("session/request_permission", {"sessionId": "s"})
            return {"stopReason": "end_turn"}  # pragma: no cover - cancelled

        with client.on_request("chatSend", turn, cancelled_result={"stopReason": "cancelled"}):
            turn_id = await peer.request("chatSend", {"sessionId": "s", "text": "x"}, "turn")
            question = await peer.receive()
            assert question["method"] == "session/request_permission"
            await peer.notify("$/cancelRequest", {"id": turn_id})
            assert await peer.receive() == {
                "jsonrpc": "2.0",
                "method": "$/cancelRequest",
                "params": {"id": question["id"]},
            }
            assert await peer.receive() == {
                "jsonrpc": "2.0",
                "id": turn_id,
                "result": {"stopReason": "cancelled"},
            }


def _asks(peer: FakePeer, *asks: tuple[int, str]) -> bytes:
    """Several permission requests (id, session) as the bytes of one write."""
    return b"".join(
        peer.framer_type.encode(
            json.dumps(
                {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "method": "session/request_permission",
                    "params": {
                        "sessionId": session,
                        "toolCall": {"toolCallId": f"c{request_id}"},
                        "options": allow_deny(),
                    },
                }
            ).encode()
        )
        for request_id, session in asks
    )


@pytest.mark.parametrize("dialect", DIALECTS)
async def test_a_handler_that_blocks_holds_up_none_of_the_requests_read_with_it(
    dialect: str,
) -> None:
    # One read, five requests: the handlers that answer at once are answered, in
    # order, while two that wait (one of them raising later) keep their requests
    # open; each is then answered for itself.
    async with connected(dialect) as (client, peer):
        slow = Waiter()

        async def failing(req: PermissionRequest) -> Selected:
            raise Boom("handler bug")

        with (
            client.permission_handler("fast", allow_handler),
            client.permission_handler("slow", slow),
            client.permission_handler("broken", failing),
        ):
            await peer.send_raw(
                _asks(peer, (0, "fast"), (1, "slow"), (2, "broken"), (3, "slow"), (4, "fast"))
            )
            answers = [await peer.receive() for _ in range(3)]
            assert [(a["id"], a["result"]) for a in answers] == [
                (0, selected("allow")),
                (2, CANCELLED),
                (4, selected("allow")),
            ]
            await trio.testing.wait_all_tasks_blocked()
            assert [r.tool_call.tool_call_id for r in slow.seen] == ["c1", "c3"]
            assert client.pending_permissions("slow") == 2
            await peer.notify("$/cancelRequest", {"id": 3})
            assert await peer.receive() == {"jsonrpc": "2.0", "id": 3, "result": CANCELLED}
            await trio.testing.wait_all_tasks_blocked()
            assert slow.cancelled == ["c3"]
            slow.release.set()
            assert await peer.receive() == {"jsonrpc": "2.0", "id": 1, "result": selected("allow")}
            await assert_nothing_more(peer)


async def test_a_large_read_lets_its_first_answers_out_before_it_handles_the_rest() -> None:
    # One read of 100 requests: the reader lets the writer (and the peer) run
    # between parts of it, so the peer holds answers before the last is decided.
    received: list[Any] = []
    answers_out_when_the_last_was_decided: list[int] = []

    def decide(request: PermissionRequest) -> Selected:
        if request.tool_call.tool_call_id == "c99":
            answers_out_when_the_last_was_decided.append(len(received))
        return Selected("allow")

    async def read_answers(peer: FakePeer) -> None:
        while len(received) < 100:
            received.append(await peer.receive())

    async with connected() as (client, peer):
        with client.permission_handler("s", permclient.rule(decide)):
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read_answers, peer)
                await peer.send_raw(_asks(peer, *((n, "s") for n in range(100))))
    assert [answer["id"] for answer in received] == list(range(100))
    assert answers_out_when_the_last_was_decided[0] > 0


async def test_a_large_read_over_a_pipe_still_lets_the_other_tasks_run_between_steps() -> None:
    # Over a pipe the reader writes each part's answers itself and need not let
    # the writer run; it still lets the other tasks (a host's UI among them) run
    # after every _MESSAGES_PER_STEP messages of a read.
    ticks = 0
    ticks_when_decided: list[int] = []

    async def tick() -> None:
        nonlocal ticks
        while True:
            await trio.lowlevel.checkpoint()
            ticks += 1

    def decide(request: PermissionRequest) -> Selected:
        ticks_when_decided.append(ticks)
        return Selected("allow")

    async with pipes() as (ours, theirs):
        peer = FakePeer(theirs, "acp")
        async with permclient.open_client(ours, dialect="acp") as client:
            with client.permission_handler("s", permclient.rule(decide)):
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(tick)
                    await peer.send_raw(_asks(peer, *((n, "s") for n in range(200))))
                    with trio.fail_after(10):
                        answers = [await peer.receive() for _ in range(200)]
                    nursery.cancel_scope.cancel()
    assert [answer["id"] for answer in answers] == list(range(200))
    decided_between_ticks = [len(list(run)) for _, run in itertools.groupby(ticks_when_decided)]
    assert len(ticks_when_decided) == 200
    # (Tasks run in random order within a round of trio's scheduler: the ticker
    # may run just before one step of the reader and just after the next.)
    assert max(decided_between_ticks) <= 2 * _MESSAGES_PER_STEP


@pytest.mark.parametrize("how", ["leaves", "interrupted"])
async def test_a_client_closed_between_parts_of_a_read_answers_every_request_of_it(
    how: str,
) -> None:
    # 40 requests in one read, handled 16 at a time: the client closes after the
    # first part (its body leaves, or a rule is interrupted); every request of
    # the read still gets exactly one answer.
    decided: list[str] = []
    first_decided = trio.Event()

    def decide(request: PermissionRequest) -> Selected:
        decided.append(request.tool_call.tool_call_id)
        first_decided.set()
        if how == "interrupted" and len(decided) == 3:
            raise KeyboardInterrupt
        return Selected("allow")

    ours, theirs = trio.testing.memory_stream_pair()
    peer = FakePeer(theirs, "bridge")  # type: ignore[arg-type]
    with contextlib.suppress(KeyboardInterrupt):
        async with permclient.open_client(ours) as client:  # type: ignore[arg-type]
            client.permission_handler("s", permclient.rule(decide))
            await peer.send_raw(_asks(peer, *((n, "s") for n in range(40))))
            await first_decided.wait()  # the reader is in its first part: leave now
    answers: dict[int, Any] = {}
    while True:
        frame = peer.framer.next_frame()
        if frame is None:
            data = await theirs.receive_some(65536)
            if not data:
                break
            peer.framer.receive_data(data)
            continue
        message = msgspec.json.decode(frame)
        assert message["id"] not in answers  # exactly one answer each
        answers[message["id"]] = message["result"]
    assert sorted(answers) == list(range(40))
    assert len(decided) < 40  # the rest were refused, not decided


async def test_handlers_started_together_each_see_only_their_own_context() -> None:
    var: contextvars.ContextVar[str] = contextvars.ContextVar("var", default="unset")
    seen: list[str] = []

    async def leaky(req: PermissionRequest) -> Selected:
        seen.append(var.get())
        var.set(req.tool_call.tool_call_id)
        return Selected("allow")

    async with connected() as (client, peer):
        with client.permission_handler("s", leaky):
            await peer.send_raw(_asks(peer, (0, "s"), (1, "s"), (2, "s")))
            for _ in range(3):
                await peer.receive()
    assert seen == ["unset", "unset", "unset"]


# ------------------------------------------------- teardown at the default max_pending


class _SlowReader:
    """The peer's reading side: takes 64 KiB at most, then waits half a second (virtual time).

    That is 128 KiB/s: slower than a 2 s teardown could drain 16,384 answers, faster
    than the 64 KiB/s the client waits for. On the autojump clock time passes only
    when every task waits, so how busy the machine is changes nothing.
    """

    def __init__(self, stream: trio.abc.ReceiveStream, dialect: str) -> None:
        self.stream = stream
        self.framer = FakePeer(stream, dialect).framer  # type: ignore[arg-type]
        self.answers: list[dict[str, Any]] = []

    async def read_until_closed(self) -> None:
        while data := await self.stream.receive_some(65536):
            self.framer.receive_data(data)
            while (frame := self.framer.next_frame()) is not None:
                self.answers.append(msgspec.json.decode(frame))
            await trio.sleep(0.5)


def _socket_stream_pair() -> tuple[trio.SocketStream, trio.SocketStream]:
    """A real socket pair with small buffers: unlike a memory stream, what a cancelled
    send_all did not hand to the kernel is lost, as on a pipe to a real agent."""
    pair = trio.socket.socketpair()
    for sock in pair:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 32 * 1024)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 32 * 1024)
    return trio.SocketStream(pair[0]), trio.SocketStream(pair[1])


def _permission_requests(dialect: str, count: int) -> bytes:
    encode = (
        permclient.framing.ContentLengthFramer.encode
        if dialect == "bridge"
        else (permclient.framing.NewlineFramer.encode)
    )
    params = {
        "sessionId": "s",
        "toolCall": {"toolCallId": "c", "title": "run", "rawInput": {"command": "ls"}},
        "options": allow_deny(),
    }
    return b"".join(
        encode(
            msgspec.json.encode(
                {
                    "jsonrpc": "2.0",
                    "id": n,
                    "method": "session/request_permission",
                    "params": params,
                }
            )
        )
        for n in range(count)
    )


@pytest.mark.parametrize(
    ("dialect", "closing"),
    [("bridge", "the client context exits"), ("acp", "the peer closes its side")],
)
async def test_teardown_writes_every_answer_of_the_default_max_pending_then_cancels(
    dialect: str, closing: str, autojump_clock: trio.abc.Clock
) -> None:
    count = permclient._connection.DEFAULT_MAX_PENDING
    assert count == 16384
    ours, theirs = _socket_stream_pair()
    reader = _SlowReader(theirs, dialect)
    blocked = trio.Semaphore(0)
    cancelled = 0
    all_cancelled = trio.Event()

    async def handler(req: PermissionRequest) -> Selected:
        nonlocal cancelled
        blocked.release()
        try:
            await trio.sleep_forever()
        finally:
            cancelled += 1
            if cancelled == count:
                all_cancelled.set()
        return Selected("allow")  # pragma: no cover

    # Virtual time: a hang fails at once instead of waiting for pytest's timeout.
    with trio.fail_after(3600), contextlib.closing(theirs.socket):
        async with (
            trio.open_nursery() as peer_side,
            permclient.open_client(ours, dialect=dialect) as client,  # type: ignore[arg-type]
        ):
            registration = client.permission_handler("s", handler)
            registration.__enter__()  # left open: the teardown must answer
            await theirs.send_all(_permission_requests(dialect, count))
            for _ in range(count):
                await blocked.acquire()
            peer_side.start_soon(reader.read_until_closed)
            if closing == "the peer closes its side":
                await theirs.send_eof()  # it still reads
                await all_cancelled.wait()  # by the client itself, its context still open

    ids = [answer["id"] for answer in reader.answers]
    assert sorted(ids) == list(range(count)), "every request answered exactly once"
    assert all(answer["result"] == CANCELLED for answer in reader.answers)
    assert cancelled == count


async def test_teardown_gives_up_two_seconds_after_the_peer_stops_reading(
    autojump_clock: trio.abc.Clock,
) -> None:
    ours, theirs = _socket_stream_pair()
    with contextlib.closing(theirs.socket):
        async with permclient.open_client(ours) as client:
            waiter = Waiter()
            registration = client.permission_handler("s", waiter)
            registration.__enter__()
            await theirs.send_all(_permission_requests("bridge", 5000))
            while len(waiter.seen) < 5000:
                await trio.testing.wait_all_tasks_blocked()
            started = trio.current_time()
        assert trio.current_time() - started == 2.0
        assert len(waiter.cancelled) == 5000


async def test_teardown_waits_for_a_slow_reader_in_proportion_to_the_bytes_queued(
    autojump_clock: trio.abc.Clock,
) -> None:
    ours, theirs = _socket_stream_pair()
    answer = permclient.framing.ContentLengthFramer.encode(
        msgspec.json.encode({"jsonrpc": "2.0", "id": 1000, "result": CANCELLED})
    )
    received = 0

    async def read_48_kib_per_second() -> None:
        nonlocal received
        while data := await theirs.receive_some(16 * 1024):
            received += len(data)
            await trio.sleep(1 / 3)

    with contextlib.closing(theirs.socket):
        async with trio.open_nursery() as peer_side:
            async with permclient.open_client(ours) as client:
                waiter = Waiter()
                registration = client.permission_handler("s", waiter)
                registration.__enter__()
                await theirs.send_all(_permission_requests("bridge", 5000))
                while len(waiter.seen) < 5000:
                    await trio.testing.wait_all_tasks_blocked()
                peer_side.start_soon(read_48_kib_per_second)
                started = trio.current_time()
            # Progress every 64 KiB (4/3 s) keeps it going, past the 2 s a stall
            # gets, until 2 s + 1 s per 64 KiB queued.
            deadline = 2.0 + 5000 * len(answer) / (64 * 1024)
            assert trio.current_time() - started == pytest.approx(deadline, abs=1.5)
            assert 0 < received < 5000 * len(answer)


# ------------------------------------------- BaseException from the host's own code


class _Fabricated(BaseException):
    """A BaseException of the host's own (neither Exception nor a way to stop)."""


@contextlib.contextmanager
def _no_stray_cancelled() -> Iterator[None]:
    # pytest-trio would take a stray Cancelled out of a test quietly.
    try:
        yield
    except trio.Cancelled as exc:
        raise AssertionError("a trio.Cancelled escaped open_client") from exc


def _raising(exc_type: type[BaseException], *, blocks_first: bool) -> Any:
    async def handler(req: PermissionRequest) -> Selected:
        if blocks_first:
            await trio.lowlevel.checkpoint()
        if exc_type is trio.Cancelled:
            # Not caused by any scope: made by hand, as a buggy handler might.
            raise trio.Cancelled._create()  # type: ignore[attr-defined]
        raise exc_type("from the handler")

    return handler


@pytest.mark.parametrize("blocks_first", [False, True], ids=["at once", "after blocking"])
@pytest.mark.parametrize("exc_type", [SystemExit, KeyboardInterrupt])
async def test_a_handler_raising_system_exit_or_keyboard_interrupt_answers_then_raises_it_plain(
    exc_type: type[BaseException], blocks_first: bool
) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    peer = FakePeer(theirs, "bridge")
    waiter = Waiter()
    body_went_on = False
    with pytest.raises(exc_type) as raised:  # the exception itself, not a group
        async with permclient.open_client(ours) as client:
            with (
                client.permission_handler("other", waiter),
                client.permission_handler("s", _raising(exc_type, blocks_first=blocks_first)),
            ):
                await peer.ask_permission("other", request_id="waiting")
                await waiter.arrived.wait()
                await peer.ask_permission("s", request_id="raises")
                await client.wait_closed()
                await trio.sleep_forever()  # the client cancels its body
                body_went_on = True  # pragma: no cover
    assert type(raised.value) is exc_type and not body_went_on
    answers = {(await peer.receive())["id"]: CANCELLED for _ in range(2)}
    assert answers == {"waiting": CANCELLED, "raises": CANCELLED}
    assert await theirs.receive_some(1) == b""  # nothing else, then closed
    assert waiter.cancelled == ["call-1"]


@pytest.mark.parametrize("blocks_first", [False, True], ids=["at once", "after blocking"])
@pytest.mark.parametrize("exc_type", [trio.Cancelled, _Fabricated, GeneratorExit])
async def test_a_handler_raising_a_fabricated_cancelled_or_other_base_exception_answers_cancelled(
    exc_type: type[BaseException], blocks_first: bool, caplog: pytest.LogCaptureFixture
) -> None:
    lived_on = False
    with _no_stray_cancelled():
        async with connected() as (client, peer):
            with client.permission_handler("s", _raising(exc_type, blocks_first=blocks_first)):
                await peer.ask_permission("s", request_id=1)
                assert (await peer.receive())["result"] == CANCELLED
            await trio.sleep(0.01)  # a checkpoint after the handler's task has ended
            with client.permission_handler("s", allow_handler):
                await peer.ask_permission("s", request_id=2)
                assert (await peer.receive())["result"] == selected("allow")
            assert client.closed_reason is None
            lived_on = True
    assert lived_on
    assert "permission handler for session 's' failed; answered cancelled" in caplog.text


@pytest.mark.parametrize(
    ("exc_type", "code"),
    [(trio.Cancelled, -32800), (_Fabricated, -32603), (SystemExit, -32603)],
)
async def test_a_request_handler_raising_a_base_exception_answers_and_only_stops_for_exit(
    exc_type: type[BaseException], code: int
) -> None:
    ours, theirs = trio.testing.memory_stream_pair()
    peer = FakePeer(theirs, "bridge")
    stops = exc_type is SystemExit
    lived_on = False
    with _no_stray_cancelled(), pytest.raises(SystemExit) if stops else contextlib.nullcontext():
        async with permclient.open_client(ours) as client:

            async def handler(params: Any) -> Any:
                await _raising(exc_type, blocks_first=True)(params)

            client.on_request("x/y", handler)
            await peer.request("x/y", {}, request_id=1)
            assert (await peer.receive())["error"]["code"] == code
            await trio.sleep(0.01)  # a checkpoint after the handler's task has ended
            assert not stops
            assert client.closed_reason is None
            lived_on = True
    assert lived_on or stops


@pytest.mark.parametrize("how", ["peer cancel", "teardown"])
async def test_a_request_handler_whose_nursery_groups_its_cancellation_is_no_failure(
    how: str, caplog: pytest.LogCaptureFixture
) -> None:
    # Tasks in a handler's nursery each raise Cancelled: trio groups them on the way out.
    ours, theirs = trio.testing.memory_stream_pair()
    peer = FakePeer(theirs, "bridge")
    started = trio.Event()

    async def handler(params: Any) -> Any:
        async with trio.open_nursery() as nursery:
            for _ in range(2):
                nursery.start_soon(trio.sleep_forever)
            started.set()

    with _no_stray_cancelled():
        async with permclient.open_client(ours) as client:
            client.on_request("x/y", handler)
            await peer.request("x/y", {}, request_id=1)
            await started.wait()
            if how == "peer cancel":
                await peer.notify("$/cancelRequest", {"id": 1})
                assert (await peer.receive())["error"]["code"] == -32800
            else:
                await theirs.send_eof()  # the peer goes away: teardown cancels the handler
                await client.wait_closed()
                assert (await peer.receive())["error"]["code"] == -32800
    assert "failed" not in caplog.text and "Traceback" not in caplog.text


@pytest.mark.parametrize("exc_type", [trio.Cancelled, _Fabricated, SystemExit])
@pytest.mark.parametrize("where", ["notification callback", "telemetry sink"])
async def test_a_callback_or_telemetry_sink_raising_a_base_exception_never_escapes_as_a_group(
    exc_type: type[BaseException], where: str
) -> None:
    def hostile(*args: object, **kwargs: object) -> None:
        if exc_type is trio.Cancelled:
            raise trio.Cancelled._create()  # type: ignore[attr-defined]
        raise exc_type("from the host")

    telemetry = None
    if where == "telemetry sink":
        telemetry = permclient.JsonlTelemetry(io.StringIO())
        telemetry.emit = hostile  # type: ignore[method-assign]
    ours, theirs = trio.testing.memory_stream_pair()
    peer = FakePeer(theirs, "bridge")
    stops = exc_type is SystemExit
    lived_on = False
    waiter = Waiter()
    with _no_stray_cancelled(), pytest.raises(SystemExit) if stops else contextlib.nullcontext():
        async with permclient.open_client(ours, telemetry=telemetry) as client:
            client.on_notification("note", hostile)
            with client.permission_handler("s", waiter):
                await peer.ask_permission("s", request_id="pending")
                await peer.notify("note", {})
                if stops:
                    await trio.sleep_forever()
                await waiter.arrived.wait()
                waiter.release.set()
                assert (await peer.receive())["result"] == selected("allow")
            await trio.sleep(0.01)
            assert client.closed_reason is None
            lived_on = True
    assert lived_on or stops
    if stops:
        assert (await peer.receive()) == {"jsonrpc": "2.0", "id": "pending", "result": CANCELLED}


# --------------------------------------------------- every peer-fed store, in bytes


async def test_held_notifications_are_kept_undecoded_so_their_memory_is_their_bytes() -> None:
    # 384 KiB of "{}," decode into 128 Ki dicts, some 13 MiB: held four times over,
    # that would be 50 MiB for 1.5 MiB of input.
    params = b'{"sessionId":"late","x":[' + b"{}," * (128 * 1024) + b"{}]}"
    note = b'{"jsonrpc":"2.0","method":"session/update","params":' + params + b"}"
    async with connected() as (client, peer):
        tracemalloc.start()
        try:
            before = tracemalloc.get_traced_memory()[0]
            for _ in range(4):
                await peer.send_raw(permclient.framing.ContentLengthFramer.encode(note))
            await assert_nothing_more(peer)
            held = tracemalloc.get_traced_memory()[0] - before
        finally:
            tracemalloc.stop()
        assert held < 4 * len(params) + 1024 * 1024
        seen: list[int] = []
        with client.on_session_notification(
            "late", lambda note: seen.append(len(note.params["x"]))
        ):
            pass
    assert seen == [128 * 1024 + 1] * 4


async def test_pending_requests_are_bounded_by_what_they_cost_decoded_even_alone(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sink = io.StringIO()
    telemetry = permclient.JsonlTelemetry(sink)
    async with connected(telemetry=telemetry, max_pending_bytes=100_000) as (client, peer):
        waiter = Waiter()
        with client.permission_handler("s", waiter):
            # 30 KB of JSON that decodes into 10,000 lists: refused though nothing is pending.
            await peer.ask_permission("s", "bomb", request_id="bomb", _meta={"x": [[]] * 10_000})
            assert await peer.receive() == {"jsonrpc": "2.0", "id": "bomb", "result": CANCELLED}
            for n in range(6):  # about 11 KB each once decoded: all six fit
                await peer.ask_permission("s", f"c{n}", request_id=n, _meta={"pad": "y" * 10_000})
            await waiter.arrived.wait()
            await peer.ask_permission("s", "late", request_id="late", _meta={"pad": "z" * 40_000})
            assert await peer.receive() == {"jsonrpc": "2.0", "id": "late", "result": CANCELLED}
            assert client.statistics().connection.pending_bytes <= 100_000
            waiter.release.set()
            assert sorted([(await peer.receive())["id"] for _ in range(6)]) == list(range(6))
    assert len(waiter.seen) == 6
    telemetry.flush()  # write what the sink buffered
    refused = [json.loads(line) for line in sink.getvalue().splitlines()]
    refused = [event for event in refused if event["event"] == "approval.refused"]
    assert [event["request_id"] for event in refused] == ["bomb", "late"]
    assert all("bytes of (decoded) requests pending" in event["reason"] for event in refused)


@pytest.mark.parametrize(
    "meta",
    [
        {"x": [[]] * 3000},  # the hostile review's amplifier: 3 bytes of JSON, 64 of list
        {"x": [{"a": []}] * 1000},
        {"x": ["\u0100\u0100"] * 2000},  # short non-ASCII strings
        {"x": [1.5] * 3000},
        {"x": "a" * 8000 + "\U0001f600"},  # one astral character: 4 bytes a character
    ],
    ids=["lists", "dicts", "strings", "floats", "astral"],
)
async def test_the_memory_pending_requests_hold_stays_within_their_byte_budget(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, meta: dict[str, Any]
) -> None:
    caplog.set_level(logging.ERROR, "permclient")  # no captured records in the measure
    budget = 1024 * 1024
    async with connected(dialect="acp", max_pending_bytes=budget) as (client, peer):
        waiter = Waiter()
        with client.permission_handler("s", waiter):
            await peer.ask_permission("s", "warm", request_id="warm")
            await waiter.arrived.wait()
            tracemalloc.start()
            try:
                before = tracemalloc.get_traced_memory()[0]
                for n in range(200):
                    await peer.ask_permission("s", f"c{n}", request_id=n, _meta=meta)
                await trio.testing.wait_all_tasks_blocked()
                held = tracemalloc.get_traced_memory()[0] - before
            finally:
                tracemalloc.stop()
            pending = client.pending_permissions()
            assert 1 < pending < 200  # some were let in, the rest refused
            assert client.statistics().connection.pending_bytes <= budget
            # What they hold (requests, tasks, answers of the refused) is within the budget,
            # with some 5 KB a request for what is not their params (see pending_memory.py).
            assert held < budget + 5_000 * pending
            waiter.release.set()


async def test_an_unknown_method_is_not_echoed_back_whole() -> None:
    async with connected() as (_, peer):
        await peer.request("x" * 1_000_000, {}, request_id=1)
        reply = await peer.receive()
        assert reply["error"]["code"] == -32601 and len(reply["error"]["message"]) < 200
