"""Hostile review of the core rewrite: each test is an attack (a handler that
changes what it was given, a callback that answers a sibling, a racing thread, a
peer's huge strings) and what must hold against it."""

from __future__ import annotations

import contextvars
import json
from typing import Any

import pytest
import trio
import trio.lowlevel
import trio.testing

import permclient
from permclient import PermissionRequest, Question, Selected
from permclient._connection import Connection
from permclient.framing import NewlineFramer
from tests.support.peer import CANCELLED, connected, selected


def _permission(request_id: Any, session_id: str = "s", tool_call_id: str = "c1") -> bytes:
    params = {
        "sessionId": session_id,
        "toolCall": {"toolCallId": tool_call_id, "title": "t", "kind": "execute"},
        "options": [
            {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
            {"optionId": "deny", "name": "Deny", "kind": "reject_once"},
        ],
    }
    message = {"jsonrpc": "2.0", "id": request_id, "method": "session/request_permission"}
    return NewlineFramer.encode(json.dumps({**message, "params": params}).encode())


def _cancel(request_id: Any, method: str = "$/cancel_request", key: str = "requestId") -> bytes:
    message = {"jsonrpc": "2.0", "method": method, "params": {key: request_id}}
    return NewlineFramer.encode(json.dumps(message).encode())


def _sent(conn: Connection) -> list[dict[str, Any]]:
    framer = NewlineFramer()
    framer.receive_data(bytes(conn.data_to_send()))
    messages = []
    while (frame := framer.next_frame()) is not None:
        messages.append(json.loads(frame))
    return messages


def _deferred_connection(session_id: str = "s") -> tuple[Connection, list[Question]]:
    conn = Connection("acp")
    inbox: list[Question] = []
    conn.add_permission_handler(session_id, permclient.deferred(inbox.append), None)
    return conn, inbox


def _answer(request_id: Any, result: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": request_id, "result": result}


# ------------------------------------------------------------------------- bugs


async def test_async_handler_that_replaces_its_request_tool_call_is_still_answered_once() -> None:
    received: list[dict[str, Any]] = []
    async with connected("acp") as (client, peer):

        async def handler(request: PermissionRequest) -> Selected:
            request.tool_call = None  # type: ignore[assignment]  # "clears" what it showed
            await trio.lowlevel.checkpoint()
            return Selected("allow")

        client.permission_handler("s", handler)
        await peer.ask_permission("s", request_id=1)
        received.append(await peer.receive())
    assert received == [_answer(1, selected("allow"))]


def test_peer_cancel_of_a_question_whose_request_the_handler_changed_is_answered() -> None:
    conn, inbox = _deferred_connection()
    conn.receive_data(_permission(1))
    inbox[0].request.tool_call = None  # type: ignore[assignment]
    conn.receive_data(_cancel(1))
    conn.close("bye")
    assert _sent(conn) == [_answer(1, CANCELLED)]


def test_tool_call_stops_awaiting_approval_even_if_the_handler_changed_its_request() -> None:
    conn, inbox = _deferred_connection()
    conn.receive_data(_permission(1))
    question = inbox[0]
    question.request.tool_call.tool_call_id = "C1"  # the handler's own normalisation
    question.select("allow")
    assert _sent(conn) == [_answer(1, selected("allow"))]
    state = conn.tool_calls.get("s", "c1")
    assert state is None or not state.awaiting_approval


def test_widening_question_offered_cannot_select_an_option_the_agent_did_not_offer() -> None:
    conn, inbox = _deferred_connection()
    conn.receive_data(_permission(1))
    question = inbox[0]
    later = permclient.PermissionOption(option_id="later", name="Later", kind="reject_once")
    with pytest.raises(AttributeError):
        question.offered = (*question.offered, later)  # type: ignore[misc]
    question.request.options = (*question.request.options, later)  # the handler's copy
    question.select("later")
    assert _sent(conn) == [_answer(1, CANCELLED)]


def test_a_questions_routing_attributes_are_read_only_and_teardown_answers_it() -> None:
    conn, inbox = _deferred_connection()
    conn.receive_data(_permission(1))
    with pytest.raises(AttributeError):
        inbox[0].request_id = "1"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        inbox[0].session_id = "other"  # type: ignore[misc]
    conn.close("bye")
    assert _sent(conn) == [_answer(1, CANCELLED)]
    assert conn.statistics().pending_permissions == 0


@pytest.mark.parametrize("withdrawal", ["turn cancel", "registration close", "teardown"])
def test_a_withdraw_callback_cannot_answer_a_sibling_of_the_same_withdrawal(
    withdrawal: str,
) -> None:
    conn = Connection("acp")
    inbox: list[Question] = []
    registration = conn.add_permission_handler("s", permclient.deferred(inbox.append), None)
    conn.receive_data(_permission(1) + _permission(2, tool_call_id="c2"))
    first, second = inbox
    first.on_withdraw(lambda by: second.select("allow"))
    if withdrawal == "turn cancel":
        conn.cancel_permissions("s")
    elif withdrawal == "registration close":
        conn.remove_permission_handler(registration)
    else:
        conn.close("bye")
    assert _sent(conn) == [_answer(1, CANCELLED), _answer(2, CANCELLED)]


def test_the_checked_answer_is_not_the_callers_mutable_object() -> None:
    import sys

    from permclient import _messages

    conn, inbox = _deferred_connection()
    conn.receive_data(_permission(1))
    choice = Selected("allow")
    encode = _messages.encode_result.__code__

    def another_thread_writes(frame: Any, event: str, arg: Any) -> None:
        if event == "call" and frame.f_code is encode:
            choice.option_id = "root"

    sys.setprofile(another_thread_writes)
    try:
        inbox[0].answer(choice)
    finally:
        sys.setprofile(None)
    assert _sent(conn) == [_answer(1, selected("allow"))]


async def test_an_async_handler_is_cancelled_once_its_question_is_answered_elsewhere(
    autojump_clock: trio.abc.Clock,
) -> None:
    handler_started, handler_cancelled = trio.Event(), trio.Event()
    async with connected("acp") as (client, peer):

        async def handler(request: PermissionRequest) -> Selected:
            handler_started.set()
            try:
                await trio.sleep_forever()
            finally:
                handler_cancelled.set()

        client.permission_handler("s", handler)
        await peer.ask_permission("s", request_id=1)
        await handler_started.wait()
        client.pending_questions()[0].select("allow")
        assert await peer.receive() == _answer(1, selected("allow"))
        with trio.move_on_after(2):
            await handler_cancelled.wait()
        assert handler_cancelled.is_set()


def test_each_rule_is_consulted_at_most_once_per_request() -> None:
    conn = Connection("acp")
    consulted: list[str] = []
    inbox: list[Question] = []
    conn.add_permission_handler("s", permclient.deferred(inbox.append), None)
    below = conn.add_permission_handler(
        "s", permclient.rule(lambda request: consulted.append("below")), None
    )

    def closes_the_one_below(request: PermissionRequest) -> None:
        consulted.append("top")
        conn.remove_permission_handler(below)

    conn.add_permission_handler("s", permclient.rule(closes_the_one_below), None)
    conn.receive_data(_permission(1))
    assert consulted == ["top"]
    assert len(inbox) == 1


def test_telemetry_does_not_copy_megabytes_of_peer_strings() -> None:
    telemetry = permclient.MemoryTelemetry()
    conn = Connection("acp", telemetry=telemetry)
    conn.receive_data(_permission(1, session_id="S" * 1_000_000))
    assert telemetry.records
    longest = max(len(str(value)) for record in telemetry.records for value in record.values())
    assert longest <= 4096


# ------------------------------------------------------------- held (guards)


@pytest.mark.parametrize(
    ("method", "key"), [("$/cancelRequest", "id"), ("$/cancel_request", "requestId")]
)
def test_string_and_int_ids_that_print_alike_are_distinct_requests(method: str, key: str) -> None:
    conn, inbox = _deferred_connection()
    conn.receive_data(_permission("1") + _permission(1, tool_call_id="c2"))
    conn.receive_data(_cancel("1", method, key))
    assert _sent(conn) == [_answer("1", CANCELLED)]
    by_id = {type(q.request_id): q for q in inbox}
    assert by_id[int].done is False and by_id[str].withdrawn_by == "peer"
    assert by_id[int].select("allow")
    assert _sent(conn) == [_answer(1, selected("allow"))]


def test_a_settled_question_cannot_answer_a_new_request_that_reuses_its_id() -> None:
    conn, inbox = _deferred_connection()
    conn.receive_data(_permission(7))
    stale = inbox[0]
    stale.cancel()
    conn.receive_data(_permission(7, tool_call_id="c2"))
    fresh = inbox[1]
    assert stale.select("allow") is False
    conn.answer(stale, Selected("allow"))  # as a worker's late `finally` would
    assert not fresh.done
    assert _sent(conn) == [_answer(7, CANCELLED)]
    fresh.select("deny")
    assert _sent(conn) == [_answer(7, selected("deny"))]


var: contextvars.ContextVar[str | None] = contextvars.ContextVar("review_var", default=None)


async def test_context_variables_do_not_leak_between_handlers_on_one_worker() -> None:
    seen: list[str | None] = []
    async with connected("acp") as (client, peer):

        async def handler(request: PermissionRequest) -> Selected:
            seen.append(var.get())
            var.set(request.tool_call.tool_call_id)
            await trio.lowlevel.checkpoint()
            seen.append(var.get())
            return Selected("allow")

        client.permission_handler("s", handler)
        for n in range(3):  # one after the other: the same idle worker runs each
            await peer.ask_permission("s", tool_call_id=f"t{n}", request_id=n)
            assert await peer.receive() == _answer(n, selected("allow"))
    assert seen == [None, "t0", None, "t1", None, "t2"]


async def test_pending_bytes_return_to_zero_whatever_settled_each_request(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with connected("acp") as (client, peer):
        inbox: list[Question] = []

        async def slow(request: PermissionRequest) -> Selected:
            await trio.sleep(100)
            return Selected("allow")

        async def echo(params: Any) -> Any:
            await trio.sleep(50)
            return params

        slow_registration = client.permission_handler("slow", slow)
        client.permission_handler("timed", slow, timeout=5)
        client.permission_handler("d", permclient.deferred(inbox.append))
        client.permission_handler("r", permclient.rule(lambda request: Selected("allow")))
        client.permission_handler("r", permclient.rule(lambda request: None))
        client.on_request("x/echo", echo)
        for n, session_id in enumerate(["slow", "timed", "d", "r", "none", "slow", "d"]):
            await peer.ask_permission(session_id, request_id=n)
        await peer.request("x/echo", {"a": 1}, request_id="e1")
        await peer.request("x/echo", {"a": 2}, request_id="e2")
        await peer.ask_permission("d", request_id=0)  # reuses a pending id
        await trio.sleep(1)
        assert client.statistics().connection.pending_bytes > 0
        await peer.notify("$/cancel_request", {"requestId": 0})
        await peer.notify("$/cancelRequest", {"id": "e1"})
        inbox[0].select("allow")
        await trio.sleep(6)  # "timed" times out
        client.cancel_permissions("d")
        slow_registration.close()
        await trio.sleep(60)  # e2 answers
        answered: dict[Any, list[dict[str, Any]]] = {}
        for _ in range(10):  # 7 permission answers, 1 refusal, e1, e2
            message = await peer.receive()
            answered.setdefault(message["id"], []).append(message)
        assert sorted(map(str, answered)) == ["0", "1", "2", "3", "4", "5", "6", "e1", "e2"]
        assert len(answered[0]) == 2  # the reused id's refusal, then its own answer
        stats = client.statistics().connection
        assert (stats.pending_permissions, stats.pending_requests) == (0, 0)
        assert stats.pending_bytes == 0
        assert stats.shared_option_sets == 0


async def test_async_handler_raising_keyboard_interrupt_answers_all_once_and_reraises() -> None:
    answers: list[dict[str, Any]] = []
    with pytest.raises(KeyboardInterrupt):
        async with connected("acp") as (client, peer):

            async def handler(request: PermissionRequest) -> Selected:
                if request.tool_call.tool_call_id == "boom":
                    await trio.lowlevel.checkpoint()
                    raise KeyboardInterrupt
                await trio.sleep_forever()
                raise AssertionError

            client.permission_handler("s", handler)
            await peer.ask_permission("s", tool_call_id="waits", request_id=1)
            await peer.ask_permission("s", tool_call_id="boom", request_id=2)
            with trio.CancelScope(shield=True):
                answers.append(await peer.receive())
                answers.append(await peer.receive())
            await trio.sleep_forever()
    assert sorted(answers, key=lambda m: m["id"]) == [_answer(1, CANCELLED), _answer(2, CANCELLED)]


def test_a_handle_never_reports_a_selected_subclass_as_the_answer_given() -> None:
    from permclient.embed import PermissionHandle

    class LooksSelected(permclient.Selected):
        pass

    request = permclient.PermissionRequest.from_json(
        json.dumps(
            {
                "sessionId": "s",
                "toolCall": {"toolCallId": "c1"},
                "options": [{"optionId": "allow", "name": "Allow", "kind": "allow_once"}],
            }
        )
    )
    handle = PermissionHandle(request, lambda: None, lambda call: call())
    assert handle.answer(LooksSelected("allow")) is True  # accepted, and failed closed
    assert handle.decision == permclient.Cancelled()  # what the runtime gets, too
