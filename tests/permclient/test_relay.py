"""The relay: its pending registry without an event loop, then the trio API with a client."""

from __future__ import annotations

import json
from typing import Any

import msgspec
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st
from hypothesis.stateful import Bundle, RuleBasedStateMachine, invariant, rule

import permclient
import permclient._registry
from permclient import Cancelled, PermissionOption, Selected
from permclient.relay import (
    REMEMBERED_ENDINGS,
    VIEW_NAME_MAX,
    AnswerRefused,
    PendingRegistry,
    Relay,
    RelayEvent,
    Requested,
    Resolved,
    Subscription,
    Withdrawn,
    decision_of,
)
from tests.support.peer import CANCELLED, FakePeer, connected, permission_params, selected

ALLOW_DENY = (
    PermissionOption("allow", "Allow", "allow_once"),
    PermissionOption("deny", "Deny", "reject_once"),
)


def add(registry: PendingRegistry, session_id: str = "s1", call: str = "c1") -> str:
    event = registry.add(session_id, call, f"run {call}", "execute", ALLOW_DENY, msgspec.Raw(b"{}"))
    return event.question.question_id


# ------------------------------------------------------------- the registry alone


def test_ids_are_stable_unique_and_not_guessable_across_registries() -> None:
    first, second = PendingRegistry(), PendingRegistry()
    ids = [add(first, call=f"c{n}") for n in range(3)]
    assert len(set(ids)) == 3
    assert [event.question.question_id for event in first.pending()] == ids  # replay: same ids
    assert add(second) not in ids  # (each registry's ids carry its own random part)


def test_the_replay_is_what_is_pending_oldest_first() -> None:
    registry = PendingRegistry()
    a, b, c = (add(registry, call=call) for call in ("ca", "cb", "cc"))
    registry.answer(b, {"outcome": "selected", "optionId": "allow"}, "view-1")
    registry.withdraw(c, "peer")
    assert [event.question.question_id for event in registry.pending()] == [a]
    assert registry.pending()[0].question.tool_call_id == "ca"


def test_the_first_valid_answer_wins_and_a_second_changes_nothing() -> None:
    registry = PendingRegistry()
    question_id = add(registry)
    result = registry.answer(question_id, {"outcome": "selected", "optionId": "deny"}, "A")
    assert result == (Selected("deny"), Resolved(question_id, "selected", "deny", "A"))
    again = registry.answer(question_id, {"outcome": "selected", "optionId": "allow"}, "B")
    assert again == AnswerRefused(question_id, "already answered by A")
    assert registry.ending(question_id) == Resolved(question_id, "selected", "deny", "A")


@pytest.mark.parametrize(
    "answer",
    [
        {"outcome": "selected", "optionId": "other"},
        {"outcome": "selected"},
        {"outcome": "selected", "optionId": None},
        {"outcome": "selected", "optionId": ["allow"]},
        {"outcome": "allow"},
        {"outcome": "cancelled"},
        {"optionId": "allow"},
        None,
        "allow",
        ["selected", "allow"],
        Selected("other"),
        Cancelled(),
    ],
    ids=repr,
)
def test_anything_but_an_offered_option_id_resolves_cancelled(answer: Any) -> None:
    registry = PendingRegistry()
    question_id = add(registry)
    result = registry.answer(question_id, answer, "A")
    assert result == (Cancelled(), Resolved(question_id, "cancelled", None, "A"))


class _Str(str):
    def __eq__(self, other: object) -> bool:
        return True

    __hash__ = str.__hash__


@given(
    answer=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda inner: (
            st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=9), inner, max_size=3)
        ),
        max_leaves=8,
    )
    | st.fixed_dictionaries({"outcome": st.just("selected"), "optionId": st.text(max_size=6)})
)
def test_only_an_exact_offered_selection_is_selected(answer: Any) -> None:
    options = PendingRegistry().add("s", "c", None, None, ALLOW_DENY, msgspec.Raw(b"{}"))
    decision = decision_of(answer, options.question.options)
    exact = (
        type(answer) is dict
        and answer.get("outcome") == "selected"
        and answer.get("optionId") in ("allow", "deny")
        and type(answer.get("optionId")) is str
    )
    assert decision == (Selected(answer["optionId"]) if exact else Cancelled())


def test_an_option_id_that_is_a_str_subclass_is_cancelled() -> None:
    options = PendingRegistry().add("s", "c", None, None, ALLOW_DENY, msgspec.Raw(b"{}"))
    tricky = {"outcome": "selected", "optionId": _Str("anything")}
    assert decision_of(tricky, options.question.options) == Cancelled()


def test_answers_naming_nothing_or_another_session_are_refused_and_change_nothing() -> None:
    registry = PendingRegistry()
    question_id = add(registry, session_id="s1")
    allow = {"outcome": "selected", "optionId": "allow"}
    assert registry.answer("q-nope", allow, "A") == AnswerRefused("q-nope", "no such question")
    assert registry.answer(7, allow, "A") == AnswerRefused("", "the answer names no question")
    refused = registry.answer(question_id, allow, "A", session_id="s2")
    assert refused == AnswerRefused(question_id, "the answer names another session")
    long_id = "q" * 100_000
    assert registry.answer(long_id, allow, "A") == AnswerRefused(
        long_id[:VIEW_NAME_MAX], "no such question"
    )
    assert question_id in registry and len(registry) == 1
    assert isinstance(registry.answer(question_id, allow, "A", session_id="s1"), tuple)


def test_a_question_is_withdrawn_exactly_once_and_never_after_its_answer() -> None:
    registry = PendingRegistry()
    withdrawn_id, answered_id = add(registry, call="c1"), add(registry, call="c2")
    assert registry.withdraw(withdrawn_id, "peer") == Withdrawn(withdrawn_id, "peer")
    assert registry.withdraw(withdrawn_id, "teardown") is None
    refused = registry.answer(withdrawn_id, {"outcome": "cancelled"}, "A")
    assert refused == AnswerRefused(withdrawn_id, "withdrawn (peer)")
    registry.answer(answered_id, {"outcome": "cancelled"}, "A")
    assert registry.withdraw(answered_id, "timeout") is None
    assert registry.withdraw_all("shutdown") == []


def test_withdraw_all_withdraws_every_pending_question() -> None:
    registry = PendingRegistry()
    ids = [add(registry, call=f"c{n}") for n in range(3)]
    assert registry.withdraw_all("shutdown") == [Withdrawn(i, "shutdown") for i in ids]
    assert len(registry) == 0 and registry.pending() == []


def test_endings_are_kept_for_the_latest_questions_only() -> None:
    registry = PendingRegistry()
    ids = [add(registry, call=f"c{n}") for n in range(REMEMBERED_ENDINGS + 1)]
    for question_id in ids:
        registry.withdraw(question_id, "turn")
    assert registry.ending(ids[0]) is None  # forgotten: the memory is bounded
    assert registry.ending(ids[-1]) == Withdrawn(ids[-1], "turn")
    assert registry.answer(ids[0], None, "A") == AnswerRefused(ids[0], "no such question")


def test_a_view_name_is_cut_short() -> None:
    registry = PendingRegistry()
    question_id = add(registry)
    result = registry.answer(question_id, None, "v" * 10_000)
    assert isinstance(result, tuple) and result[1].by == "v" * VIEW_NAME_MAX


def test_events_encode_with_their_type() -> None:
    registry = PendingRegistry()
    requested = registry.add("s", "c", "t", "execute", ALLOW_DENY, msgspec.Raw(b'{"x":1}'))
    wire = msgspec.json.decode(msgspec.json.encode(requested))
    assert wire["type"] == "requested"
    assert wire["question"]["options"][0] == {
        "optionId": "allow",
        "name": "Allow",
        "kind": "allow_once",
    }
    assert wire["question"]["request"] == {"x": 1}


# ------------------------------------------------------------- the relay, with a client


async def next_events(subscription: Subscription, count: int) -> list[RelayEvent]:
    with trio.fail_after(5):
        return [await subscription.receive() for _ in range(count)]


async def test_every_view_sees_a_question_and_the_first_answer_resolves_it_for_all() -> None:
    relay = Relay()
    async with connected("acp") as (client, peer):
        with (
            client.permission_handler("s1", relay.handler),
            relay.subscribe("A") as a,
            relay.subscribe("B") as b,
        ):
            request_id = await peer.ask_permission("s1", "c1")
            [requested] = await next_events(a, 1)
            assert await next_events(b, 1) == [requested]
            assert isinstance(requested, Requested)
            question_id = requested.question.question_id
            assert requested.question.session_id == "s1"
            assert requested.question.tool_call_id == "c1"
            allow = {"outcome": "selected", "optionId": "allow"}
            resolved = relay.answer(question_id, allow, view="A")
            assert resolved == Resolved(question_id, "selected", "allow", "A")
            assert await peer.receive() == {
                "jsonrpc": "2.0",
                "id": request_id,
                "result": selected("allow"),
            }
            assert await next_events(a, 1) == [resolved]
            assert await next_events(b, 1) == [resolved]
            late = relay.answer(question_id, {"outcome": "cancelled"}, view="B")
            assert late == AnswerRefused(question_id, "already answered by A")
            assert relay.pending() == []


async def test_a_view_that_subscribes_late_gets_exactly_what_is_still_pending() -> None:
    relay = Relay()
    async with connected("acp") as (client, peer):
        with client.permission_handler("s1", relay.handler):
            for call in ("c1", "c2", "c3"):
                await peer.ask_permission("s1", call)
            await trio.testing.wait_all_tasks_blocked()
            first, second, third = relay.pending()
            relay.answer(second.question_id, {"outcome": "cancelled"}, view="A")
            assert (await peer.receive())["result"] == CANCELLED
            with relay.subscribe("reloaded") as view:
                replay = await next_events(view, 2)
                assert replay == [Requested(first), Requested(third)]
                relay.answer(first.question_id, Selected("deny"), view="reloaded")
                assert await next_events(view, 1) == [
                    Resolved(first.question_id, "selected", "deny", "reloaded")
                ]
            assert (await peer.receive())["result"] == selected("deny")


async def test_a_peer_cancel_withdraws_the_question_for_every_view_once() -> None:
    relay = Relay()
    async with connected("acp") as (client, peer):
        with client.permission_handler("s1", relay.handler), relay.subscribe("A") as view:
            request_id = await peer.ask_permission("s1", "c1")
            [requested] = await next_events(view, 1)
            assert isinstance(requested, Requested)
            question_id = requested.question.question_id
            await peer.notify("$/cancel_request", {"requestId": request_id})
            assert await next_events(view, 1) == [Withdrawn(question_id, "peer")]
            assert (await peer.receive())["result"] == CANCELLED
            refused = relay.answer(question_id, Selected("allow"), view="A")
            assert refused == AnswerRefused(question_id, "withdrawn (peer)")
            assert await relay.wait(question_id) == Withdrawn(question_id, "peer")


async def test_an_answer_naming_no_offered_option_answers_the_agent_cancelled() -> None:
    relay = Relay()
    async with connected("acp") as (client, peer):
        with client.permission_handler("s1", relay.handler):
            await peer.ask_permission("s1", "c1")
            await trio.testing.wait_all_tasks_blocked()
            [question] = relay.pending()
            resolved = relay.answer(
                question.question_id, {"outcome": "selected", "optionId": "yolo"}, view="A"
            )
            assert resolved == Resolved(question.question_id, "cancelled", None, "A")
            assert (await peer.receive())["result"] == CANCELLED


async def test_closing_the_relay_cancels_what_is_pending_and_what_comes_later() -> None:
    relay = Relay()
    async with connected("acp") as (client, peer):
        with client.permission_handler("s1", relay.handler), relay.subscribe("A") as view:
            await peer.ask_permission("s1", "c1")
            [requested] = await next_events(view, 1)
            assert isinstance(requested, Requested)
            relay.close()
            assert (await peer.receive())["result"] == CANCELLED
            question_id = requested.question.question_id
            assert await next_events(view, 1) == [Withdrawn(question_id, "shutdown")]
            with pytest.raises(trio.EndOfChannel):
                await view.receive()
            await peer.ask_permission("s1", "c2")
            assert (await peer.receive())["result"] == CANCELLED  # refused at once
            with relay.subscribe("B") as late, pytest.raises(trio.EndOfChannel):
                await late.receive()


async def test_the_client_closing_withdraws_every_question_and_selects_nothing() -> None:
    relay = Relay()
    ours, theirs = trio.testing.memory_stream_pair()
    peer = FakePeer(theirs, "acp")  # type: ignore[arg-type]
    with relay.subscribe("A") as view:
        async with permclient.open_client(ours, dialect="acp") as client:  # type: ignore[arg-type]
            client.permission_handler("s1", relay.handler)
            await peer.ask_permission("s1", "c1")
            [requested] = await next_events(view, 1)
        assert isinstance(requested, Requested)
        question_id = requested.question.question_id
        assert await next_events(view, 1) == [Withdrawn(question_id, "teardown")]
        assert (await peer.receive())["result"] == CANCELLED
        assert relay.pending() == []


async def test_a_view_that_falls_behind_is_dropped_and_the_others_go_on() -> None:
    relay = Relay(view_buffer=2)
    async with connected("acp") as (client, peer):
        with client.permission_handler("s1", relay.handler):
            with relay.subscribe("slow") as slow, relay.subscribe("fast") as fast:
                for n in range(3):
                    await peer.ask_permission("s1", f"c{n}")
                    await next_events(fast, 1)
                assert slow.dropped and not fast.dropped
                assert len(await next_events(slow, 2)) == 2  # what it had, then the end
                with pytest.raises(trio.EndOfChannel):
                    await slow.receive()
            assert len(relay.pending()) == 2 + 1  # nothing was failed by the drop


async def test_wait_returns_an_ending_that_came_before_it_was_awaited() -> None:
    relay = Relay()
    async with connected("acp") as (client, peer):
        with client.permission_handler("s1", relay.handler):
            await peer.ask_permission("s1", "c1")
            await peer.ask_permission("s1", "c2")
            await trio.testing.wait_all_tasks_blocked()
            early, later = relay.pending()
            relay.answer(early.question_id, Selected("allow"), view="A")
            assert await relay.wait(early.question_id) == Resolved(
                early.question_id, "selected", "allow", "A"
            )
            async with trio.open_nursery() as nursery:
                endings: list[Any] = []

                async def wait_for_later() -> None:
                    endings.append(await relay.wait(later.question_id))

                nursery.start_soon(wait_for_later)
                await trio.testing.wait_all_tasks_blocked()
                assert endings == []
                relay.answer(later.question_id, Cancelled(), view="B")
            assert endings == [Resolved(later.question_id, "cancelled", None, "B")]
            with pytest.raises(KeyError):
                await relay.wait("q-unknown")


async def test_fifty_sessions_pending_at_once_each_answer_reaches_its_own_session() -> None:
    relay = Relay()
    sessions = [f"sess-{n}" for n in range(50)]
    async with connected("acp") as (client, peer):
        for session_id in sessions:
            client.permission_handler(session_id, relay.handler)
        ids = {
            await peer.ask_permission(
                s,
                f"call-{s}",
                options=[
                    {"optionId": f"allow-{s}", "name": "Allow", "kind": "allow_once"},
                    {"optionId": "deny", "name": "Deny", "kind": "reject_once"},
                ],
            ): s
            for s in sessions
        }
        await trio.testing.wait_all_tasks_blocked()
        pending = relay.pending()
        assert len(pending) == 50
        for question in reversed(pending):
            option = f"allow-{question.session_id}"
            assert question.tool_call_id == f"call-{question.session_id}"
            relay.answer(
                question.question_id, Selected(option), view="A", session_id=question.session_id
            )
        for _ in sessions:
            answer = await peer.receive()
            assert answer["result"] == selected(f"allow-{ids[answer['id']]}")


async def test_a_request_is_kept_verbatim_with_what_the_client_does_not_know() -> None:
    relay = Relay()
    extra = {"futureField": {"nested": [1, "two", None]}, "_meta": {"vendor": "x"}}
    async with connected("acp") as (client, peer):
        with client.permission_handler("s1", relay.handler), relay.subscribe("A") as view:
            await peer.ask_permission("s1", "c1", **extra)
            [requested] = await next_events(view, 1)
    assert isinstance(requested, Requested)
    assert bytes(requested.question.request) == msgspec.json.encode(
        permission_params("s1", "c1", **extra)
    )


async def test_only_a_deferred_handler_that_asks_for_them_keeps_the_raw_params() -> None:
    kept: list[permclient.Question] = []
    async with connected("acp") as (client, peer):
        plain_handler = permclient.deferred(kept.append)
        raw_handler = permclient.deferred(kept.append, raw_params=True)
        with (
            client.permission_handler("s-plain", plain_handler),
            client.permission_handler("s-raw--", raw_handler),  # (names of one length)
        ):
            await peer.ask_permission("s-plain", "c1", futureField=1)
            await peer.ask_permission("s-raw--", "c2", futureField=2)
            await trio.testing.wait_all_tasks_blocked()
            plain, raw = kept
            assert plain.raw_params is None
            assert raw.raw_params is not None
            assert msgspec.json.decode(raw.raw_params)["futureField"] == 2
            freed = []
            for question in (plain, raw):
                before = client.statistics().connection.pending_bytes
                question.cancel()
                freed.append(before - client.statistics().connection.pending_bytes)
            assert freed[1] - freed[0] == len(raw.raw_params)  # counted against the budget


async def test_a_question_host_code_answered_itself_leaves_the_relay_and_every_view() -> None:
    relay = Relay()
    async with connected("acp") as (client, peer):
        with client.permission_handler("s1", relay.handler), relay.subscribe("A") as view:
            await peer.ask_permission("s1", "c1")
            [requested] = await next_events(view, 1)
            assert isinstance(requested, Requested)
            [question] = client.pending_questions()
            assert question.select("deny")  # not through the relay
            assert (await peer.receive())["result"] == selected("deny")
            question_id = requested.question.question_id
            refused = relay.answer(question_id, Selected("allow"), view="A")
            assert refused == AnswerRefused(question_id, "withdrawn (answered elsewhere)")
            assert await next_events(view, 1) == [Withdrawn(question_id, "answered elsewhere")]
            assert relay.pending() == []
            assert await relay.wait(question_id) == Withdrawn(question_id, "answered elsewhere")
            await assert_no_more_answers(peer)


async def test_closing_reports_a_question_host_code_answered_as_answered_elsewhere() -> None:
    relay = Relay()
    async with connected("acp") as (client, peer):
        with client.permission_handler("s1", relay.handler), relay.subscribe("A") as view:
            await peer.ask_permission("s1", "c1")
            [requested] = await next_events(view, 1)
            assert isinstance(requested, Requested)
            [question] = client.pending_questions()
            question.cancel()
            relay.close()
            question_id = requested.question.question_id
            assert await next_events(view, 1) == [Withdrawn(question_id, "answered elsewhere")]
            assert (await peer.receive())["result"] == CANCELLED
            await assert_no_more_answers(peer)


async def assert_no_more_answers(peer: FakePeer) -> None:
    """Nothing else was written: the next message answers a sentinel request."""
    await peer.request("sentinel/ping", {}, request_id="sentinel")
    assert (await peer.receive())["id"] == "sentinel"


async def test_a_replay_longer_than_the_view_buffer_still_reaches_a_new_view() -> None:
    relay = Relay(view_buffer=2)
    async with connected("acp") as (client, peer):
        with client.permission_handler("s1", relay.handler):
            for n in range(5):
                await peer.ask_permission("s1", f"c{n}")
            await trio.testing.wait_all_tasks_blocked()
            with relay.subscribe("reloaded") as view:
                replay = await next_events(view, 5)
                assert [event.question.tool_call_id for event in replay] == [  # type: ignore[union-attr]
                    f"c{n}" for n in range(5)
                ]
                assert not view.dropped


async def test_a_waiter_gets_its_ending_even_once_the_registry_forgot_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(permclient._registry, "REMEMBERED_ENDINGS", 1)
    relay = Relay()
    async with connected("acp") as (client, peer):
        with client.permission_handler("s1", relay.handler):
            await peer.ask_permission("s1", "c1")
            await peer.ask_permission("s1", "c2")
            await trio.testing.wait_all_tasks_blocked()
            first, _ = relay.pending()
            endings: list[Any] = []

            async def wait_first() -> None:
                endings.append(await relay.wait(first.question_id))

            async with trio.open_nursery() as nursery:
                nursery.start_soon(wait_first)
                await trio.testing.wait_all_tasks_blocked()
                relay.close()  # both end; only the second's ending is remembered
            assert endings == [Withdrawn(first.question_id, "shutdown")]


async def test_a_request_with_line_breaks_reaches_views_on_one_line() -> None:
    relay = Relay()
    params = permission_params("s1", "c1", futureField={"a": [1, 2]})
    pretty = json.dumps(params, indent=2).replace("\n", "\r\n").encode()
    body = b'{"jsonrpc": "2.0", "id": 1, "method": "session/request_permission",\n "params": '
    async with connected("bridge") as (client, peer):
        with client.permission_handler("s1", relay.handler), relay.subscribe("A") as view:
            message = body + pretty + b"}"
            await peer.send_raw(b"Content-Length: %d\r\n\r\n%b" % (len(message), message))
            [requested] = await next_events(view, 1)
    assert isinstance(requested, Requested)
    wire = msgspec.json.encode(requested)
    assert b"\n" not in wire and b"\r" not in wire
    assert msgspec.json.decode(requested.question.request) == params


@pytest.mark.parametrize("raw_params", [False, True])
async def test_kept_raw_params_count_against_the_pending_budget(raw_params: bool) -> None:
    # The request alone fits the budget; with its params kept besides, it does not.
    kept: list[permclient.Question] = []
    handler = permclient.deferred(kept.append, raw_params=raw_params)
    async with connected("acp", max_pending_bytes=30_000) as (client, peer):
        with client.permission_handler("s1", handler):
            request_id = await peer.ask_permission("s1", "c1", futureField="x" * 16_000)
            await trio.testing.wait_all_tasks_blocked()
            if raw_params:
                assert kept == []
                assert await peer.receive() == {
                    "jsonrpc": "2.0",
                    "id": request_id,
                    "result": CANCELLED,
                }
            else:
                [question] = kept
                question.cancel()


# ------------------------------------------------- the registry, as a state machine


class RegistryMachine(RuleBasedStateMachine):
    """Random adds, answers (valid or not), withdrawals and closes: every question
    ends once, the replay is exactly what is pending, and only an offered option
    is ever selected."""

    def __init__(self) -> None:
        super().__init__()
        self.registry = PendingRegistry()
        self.pending: dict[str, str] = {}  # question id -> session
        self.ended: dict[str, object] = {}  # question id -> its one ending

    questions = Bundle("questions")

    @rule(target=questions, session=st.sampled_from(["s1", "s2"]))
    def add(self, session: str) -> str:
        question_id = add(self.registry, session_id=session)
        assert question_id not in self.pending and question_id not in self.ended
        self.pending[question_id] = session
        return question_id

    @rule(
        question_id=questions | st.text(max_size=4),
        answer=st.sampled_from(
            [
                {"outcome": "selected", "optionId": "allow"},
                {"outcome": "selected", "optionId": "deny"},
                {"outcome": "selected", "optionId": "other"},
                {"outcome": "cancelled"},
                None,
            ]
        ),
        session=st.sampled_from([None, "s1", "s2"]),
    )
    def answer(self, question_id: str, answer: Any, session: str | None) -> None:
        result = self.registry.answer(question_id, answer, "view", session)
        mine = self.pending.get(question_id)
        if mine is None or (session is not None and session != mine):
            assert isinstance(result, AnswerRefused)
            return
        assert isinstance(result, tuple)
        decision, resolved = result
        offered = isinstance(answer, dict) and answer.get("optionId") in ("allow", "deny")
        assert (decision == Selected(answer["optionId"])) if offered else decision == Cancelled()
        del self.pending[question_id]
        self.ended[question_id] = resolved

    @rule(question_id=questions, reason=st.sampled_from(["peer", "turn", "timeout"]))
    def withdraw(self, question_id: str, reason: Any) -> None:
        withdrawn = self.registry.withdraw(question_id, reason)
        if question_id in self.pending:
            assert withdrawn == Withdrawn(question_id, reason)
            del self.pending[question_id]
            self.ended[question_id] = withdrawn
        else:
            assert withdrawn is None

    @rule()
    def close(self) -> None:
        withdrawn = self.registry.withdraw_all("shutdown")
        assert [w.question_id for w in withdrawn] == list(self.pending)
        for w in withdrawn:
            self.ended[w.question_id] = w
        self.pending.clear()

    @invariant()
    def the_replay_is_what_is_pending_and_endings_are_kept(self) -> None:
        assert [e.question.question_id for e in self.registry.pending()] == list(self.pending)
        for question_id, ending in self.ended.items():
            assert self.registry.ending(question_id) == ending


TestRegistryMachine = RegistryMachine.TestCase


def _with_tool_call(**fields: Any) -> dict[str, Any]:
    params = permission_params("s1", "c1")
    params["toolCall"].update(fields)
    return params


NEWER_RUNTIME = [
    {"kind": "teleport"},
    {"status": "dreaming"},
    {"content": [{"type": "hologram", "frames": 3}]},
    {"content": [{"type": "content", "content": {"type": "smell", "notes": "pine"}}]},
]


@pytest.mark.parametrize("unknown", NEWER_RUNTIME, ids=lambda unknown: json.dumps(unknown))
async def test_a_request_of_a_newer_runtime_reaches_a_raw_params_handler_as_it_arrived(
    unknown: dict[str, Any],
) -> None:
    """A tool kind, status or content type this version does not know: a handler that
    can show the raw request gets it (``understood`` False), and the relay forwards it
    verbatim, answerable only with an offered option."""
    relay = Relay()
    params = _with_tool_call(**unknown)
    async with connected("acp") as (client, peer):
        with client.permission_handler("s1", relay.handler), relay.subscribe("A") as view:
            request_id = await peer.request("session/request_permission", params)
            [requested] = await next_events(view, 1)
            assert isinstance(requested, Requested)
            question = requested.question
            assert not question.understood
            assert bytes(question.request) == msgspec.json.encode(params)
            assert (question.session_id, question.tool_call_id) == ("s1", "c1")
            assert question.title == "run c1" and question.kind is None
            relay.answer(
                question.question_id, {"outcome": "selected", "optionId": "allow"}, view="A"
            )
            reply = await peer.receive()
    assert reply["id"] == request_id and reply["result"] == selected("allow")


@pytest.mark.parametrize(
    "handler",
    [
        permclient.deferred(lambda question: question.answer(Selected("allow"))),
        permclient.rule(lambda request: Selected("allow")),
    ],
    ids=["deferred without raw params", "rule"],
)
async def test_a_request_of_a_newer_runtime_is_cancelled_for_any_other_handler(
    handler: Any,
) -> None:
    async with connected("acp") as (client, peer):
        with client.permission_handler("s1", handler):
            for unknown in NEWER_RUNTIME:
                await peer.request("session/request_permission", _with_tool_call(**unknown))
                assert (await peer.receive())["result"] == CANCELLED


async def test_a_raw_params_handler_gets_no_request_that_is_wrong_in_another_way() -> None:
    """Only an unknown kind, status or content type is let through: an unknown option
    kind (answers are checked against the options), a missing field or a wrong type
    is malformed as before."""
    kept: list[permclient.Question] = []
    async with connected("acp") as (client, peer):
        with client.permission_handler("s1", permclient.deferred(kept.append, raw_params=True)):
            for params in (
                permission_params("s1", options=[{"optionId": "a", "name": "A", "kind": "x"}]),
                _with_tool_call(content=[{"type": "diff"}]),
                _with_tool_call(locations=[{"path": 5}]),
                {**_with_tool_call(kind="teleport"), "sessionId": ""},
            ):
                await peer.request("session/request_permission", params)
                assert (await peer.receive())["result"] == CANCELLED
        assert kept == []


async def test_a_rule_in_front_of_a_raw_params_handler_never_sees_a_request_it_cannot_type() -> (
    None
):
    seen: list[Any] = []
    kept: list[permclient.Question] = []
    async with connected("acp") as (client, peer):
        with (
            client.permission_handler("s1", permclient.deferred(kept.append, raw_params=True)),
            client.permission_handler("s1", permclient.rule(seen.append)),
        ):
            await peer.request("session/request_permission", _with_tool_call(kind="teleport"))
            assert (await peer.receive())["result"] == CANCELLED
    assert seen == [] and kept == []
