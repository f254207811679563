"""``simhost approve`` against a real server on a real socket: a relay, served by
``serve_relay``, whose questions a real permclient client gets from a scripted agent.
The approver reads its answers as lines from a pipe and prints to a console the test
watches; its controller's keyboard rules are tested on their own, with a mock clock.

Editor rules, receipts, reasons and batches: against ``simhost serve`` in a child
process with the reference runtime (another view prompts it), or a serve host in this
process on a scripted agent; once in a pty, keys and all. The server keeps its rules
and audit trail in the test's own folders (``XDG_CONFIG_HOME`` and ``XDG_STATE_HOME``
too)."""

from __future__ import annotations

import functools
import json
import re
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
import trio.testing
import typer
from hypercorn.config import Config
from rich.console import Console
from rich.text import Text
from typer.testing import CliRunner

from permclient import Client, Question, deferred
from permclient.relay import (
    Relay,
    RelayOption,
    RelayQuestion,
    Requested,
    Resolved,
    Withdrawn,
)
from simhost.approve.app import OFFERS_WAIT_S, Approver
from simhost.approve.cli import approve_command
from simhost.approve.link import FIRST_RETRY_S, LAST_RETRY_S
from simhost.approve.target import TOKEN_ENV, Target, TargetError, default_view_name, target_of
from simhost.audit import AUDIT_NAME
from simhost.chat.backends import AcpBackend
from simhost.chat.keys import Key
from simhost.chat.screen import PlainScreen, View
from simhost.chat.terminal import InputEvent, Line
from simhost.rulebook import open_rules
from simhost.serve.host import ServeHost
from simhost.serve.protocol import (
    Answer,
    AnswerBatch,
    AnswerRefused,
    BatchAnswered,
    BatchItem,
    BatchPreview,
    Error,
    ListRules,
    PreviewBatch,
    RevokeRule,
    RuleOffer,
    RuleOffers,
    RuleReceipt,
    RuleRevoked,
    RuleRow,
    Rules,
    RuleSaved,
    SaveRule,
    SessionEvent,
    SessionInfo,
    Sessions,
    ViewMessage,
)
from simhost.serve.server import Gate, serve_relay
from tests.support.approver import Watched, approving, watched_console
from tests.support.peer import (
    CANCELLED,
    FakePeer,
    allow_deny,
    connected,
    permission_params,
    selected,
)
from tests.support.serving import (
    TOKEN,
    WAIT_S,
    Places,
    freed_quietly,
    next_message,
    opened,
    send,
    sockets_freed_quietly,
    view,
)

sockets_freed_quietly = pytest.fixture(autouse=True)(sockets_freed_quietly)


async def serve_until(
    relay: Relay,
    stop: trio.Event,
    port: int = 0,
    *,
    task_status: trio.TaskStatus[str] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Serve ``relay`` on 127.0.0.1 (``port``, or a free one) until ``stop`` is set;
    ``task_status`` gets ``host:port``."""
    await serve_relay(relay, Gate(TOKEN), "127.0.0.1", port, stop.wait, task_status=task_status)


@asynccontextmanager
async def serving(relay: Relay) -> AsyncIterator[str]:
    """The relay served for the block; yields ``host:port``."""
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        authority = await nursery.start(serve_until, relay, stop)
        try:
            yield authority
        finally:
            stop.set()


@asynccontextmanager
async def relayed(**kwargs: Any) -> AsyncIterator[tuple[Client, FakePeer, Relay, str]]:
    """A client whose session ``s1`` is relayed, its agent, the relay and the server."""
    relay = Relay()
    async with connected("acp", **kwargs) as (client, peer), serving(relay) as authority:
        with client.permission_handler("s1", relay.handler):
            yield client, peer, relay, authority


async def asked(peer: FakePeer, relay: Relay, tool_call_id: str, **extra: Any) -> Any:
    """The agent asks; returns the request's id once the relay holds the question."""
    request_id = await peer.ask_permission("s1", tool_call_id, **extra)
    with trio.fail_after(WAIT_S):
        while not any(q.tool_call_id == tool_call_id for q in relay.pending()):
            await trio.testing.wait_all_tasks_blocked()
    return request_id


async def test_the_replay_shows_the_oldest_question_first_and_lines_answer_them() -> None:
    async with relayed() as (_, peer, relay, authority):
        first = await asked(peer, relay, "c1")
        second = await asked(peer, relay, "c2")
        async with approving(authority) as approver:
            await approver.out.wait_for("Answer with a line: 1-2")
            assert "connected to " + authority + " as term: 2 questions pending" in approver.text
            assert "Permission request  1 of 2" in approver.text
            assert "run c1" in approver.text and "(s1)" in approver.text
            assert "python3" in approver.text  # the agent's whole request: its command
            assert "run c2" not in approver.text.partition("Answer with a line")[0]
            await approver.answer("2")
            assert await peer.receive() == {
                "jsonrpc": "2.0",
                "id": first,
                "result": selected("deny"),
            }
            await approver.out.wait_for("→ Deny  reject_once · run c1 · (s1)")
            await approver.out.wait_for("Answer with a line: 1-2", count=2)
            await approver.answer("")  # an empty line: cancelled
            assert await peer.receive() == {"jsonrpc": "2.0", "id": second, "result": CANCELLED}
            await approver.out.wait_for("→ cancelled · run c2 · (s1)")
        assert approver.code == 0
        assert TOKEN not in approver.text + approver.err.getvalue()


async def test_a_question_answered_by_another_view_leaves_with_a_notice_naming_it() -> None:
    async with relayed() as (_, peer, relay, authority), approving(authority) as approver:
        await approver.out.wait_for("0 questions pending")
        await asked(peer, relay, "c1")
        await approver.out.wait_for("Permission request")
        async with view(authority) as tab:
            (requested,) = await opened(tab, "tab B")
            question = requested["question"]
            await send(
                tab,
                {
                    "type": "answer",
                    "questionId": question["questionId"],
                    "sessionId": "s1",
                    "decision": {"outcome": "selected", "optionId": "allow"},
                },
            )
            assert (await next_message(tab))["type"] == "resolved"
        await approver.out.wait_for("✓ answered by tab B: Allow  allow_once · run c1 · (s1)")
        assert (await peer.receive())["result"] == selected("allow")
        await approver.answer("1")  # too late: nothing is up
        await approver.out.wait_for("no question is waiting: '1' ignored")


async def test_a_withdrawn_question_leaves_with_its_reason() -> None:
    async with relayed() as (_, peer, relay, authority), approving(authority) as approver:
        request_id = await asked(peer, relay, "c1")
        await approver.out.wait_for("Permission request")
        await peer.notify("$/cancel_request", {"requestId": request_id})
        await approver.out.wait_for("⊘ withdrawn (peer) · run c1 · (s1)")
        assert (await peer.receive())["result"] == CANCELLED


async def ended_alone(authority: str, token: str = TOKEN) -> str:
    """Run the approver until it gives up; what it said on stderr (one line, exit 1)."""
    async with approving(authority, token) as approver:
        with trio.fail_after(WAIT_S):
            await approver.ended.wait()
    err = approver.err.getvalue()
    assert approver.code == 1 and err.count("\n") == 1, err
    assert token not in err + approver.text
    return err


async def test_a_wrong_token_is_one_line_on_stderr_and_exit_1() -> None:
    async with serving(Relay()) as authority:
        err = await ended_alone(authority, "w" * len(TOKEN))
    assert err.startswith(f"simhost approve: {authority} refused this view (HTTP 403)")


async def test_a_server_that_is_not_there_is_one_line_on_stderr_and_exit_1() -> None:
    async with serving(Relay()) as authority:
        pass  # (its port is free now)
    err = await ended_alone(authority)
    assert err == f"simhost approve: cannot connect to {authority}: Connection refused\n"


@pytest.mark.parametrize(
    "raw",
    [
        b'{"sessionId": "s1", "toolCall": "not a tool call"}',
        msgspec.json.encode(
            {**permission_params("s1", "c1"), "toolCall": {"toolCallId": "c1", "kind": "x"}}
        ),
        msgspec.json.encode(
            permission_params(
                "s1", "c1", [{"optionId": "yolo", "name": "Run anything", "kind": "allow_always"}]
            )
        ),
    ],
    ids=[
        "does not decode",
        "a newer agent's tool kind",
        "disagrees with the question",
    ],
)
async def test_a_request_that_cannot_be_shown_whole_shows_its_summary_and_offered_options(
    raw: bytes,
) -> None:
    relay = Relay()

    def relayed_as_raw(question: Question) -> None:
        question.raw_params = msgspec.Raw(raw)  # what the views get as the request
        relay.handler.function(question)

    async with connected("acp") as (client, peer), serving(relay) as authority:
        with client.permission_handler("s1", deferred(relayed_as_raw, raw_params=True)):
            async with approving(authority) as approver:
                await asked(peer, relay, "c1")
                await approver.out.wait_for("shown as it arrived")
                assert "run c1" in approver.text and "Allow" in approver.text
                assert "The request as it arrived" in approver.text  # (all of it, as text)
                await approver.answer("3")
                await approver.out.wait_for("there is no option 3: choose 1-2")
                await approver.answer("yolo")
                await approver.out.wait_for("answer 1-2, or c (cancelled): got 'yolo'")
                await approver.answer("1")
                assert (await peer.receive())["result"] == selected("allow")


@pytest.fixture
def clock() -> trio.testing.MockClock:
    """Real time, which a test can jump ahead of (past the approver's back-off)."""
    return trio.testing.MockClock(rate=1)


async def test_a_dropped_connection_is_made_again_and_its_replay_replaces_the_queue(
    clock: trio.testing.MockClock,
) -> None:
    relay = Relay()
    # The server closes the first connection: trio-websocket leaves its socket to the
    # garbage collector.
    with freed_quietly():
        async with connected("acp") as (client, peer), trio.open_nursery() as servers:
            with client.permission_handler("s1", relay.handler):
                code = await _drop_and_come_back(clock, relay, peer, servers)
    assert code == 0


async def test_the_end_of_input_ends_it_while_the_server_is_away(
    clock: trio.testing.MockClock,
) -> None:
    with freed_quietly():  # (the server closes the connection: see above)
        async with trio.open_nursery() as servers:
            stop = trio.Event()
            authority = await servers.start(serve_until, Relay(), stop)
            async with approving(authority) as approver:
                await approver.out.wait_for("connected to " + authority)
                stop.set()
                await trio.testing.wait_all_tasks_blocked()
                clock.jump(Config.graceful_timeout)  # hypercorn's grace for open connections
                await approver.out.wait_for(f"trying again in {FIRST_RETRY_S:g} s")
            # (the block's end closed its stdin: it had to leave at once)
    assert approver.code == 0


async def _drop_and_come_back(
    clock: trio.testing.MockClock, relay: Relay, peer: FakePeer, servers: trio.Nursery
) -> int | None:
    first_stop, first_stopped = trio.Event(), trio.Event()

    async def first(task_status: trio.TaskStatus[str]) -> None:
        await serve_until(relay, first_stop, task_status=task_status)
        first_stopped.set()

    authority = await servers.start(first)
    second_stop = trio.Event()
    async with approving(authority) as approver:
        await asked(peer, relay, "c1")
        await approver.out.wait_for("Permission request")
        first_stop.set()
        await trio.testing.wait_all_tasks_blocked()
        clock.jump(Config.graceful_timeout)  # hypercorn's grace for open connections
        await approver.out.wait_for(f"trying again in {FIRST_RETRY_S:g} s")
        await first_stopped.wait()
        # While it is away: c1 is answered elsewhere, c2 is asked.
        (c1,) = relay.pending()
        relay.answer(c1.question_id, {"outcome": "cancelled"}, view="tab B")
        assert (await peer.receive())["result"] == CANCELLED
        await asked(peer, relay, "c2")
        await approver.answer("1")  # while away: not held, an answer to nothing
        await approver.out.wait_for("the card cannot be answered now: '1' ignored")
        port = int(authority.rpartition(":")[2])
        await servers.start(serve_until, relay, second_stop, port)
        clock.jump(LAST_RETRY_S)  # past whatever back-off it is in
        await approver.out.wait_for("⊘ ended while disconnected · run c1 · (s1)")
        await approver.out.wait_for("reconnected to " + authority)
        await approver.out.wait_for("Permission request", count=2)
        await approver.answer("1")  # (typed once c2's card is up)
        answer = await peer.receive()
        assert answer["result"] == selected("allow")
        await approver.out.wait_for("→ Allow  allow_once · run c2 · (s1)")
        assert approver.text.count("Permission request") == 2
    second_stop.set()
    return approver.code


# ------------------------------------------------------------------ the controller


def question(
    question_id: str, options: list[dict[str, str]], session_id: str = "s1"
) -> RelayQuestion:
    tool_call_id = f"call-{question_id}"
    return RelayQuestion(
        question_id=question_id,
        session_id=session_id,
        tool_call_id=tool_call_id,
        title=f"run {tool_call_id}",
        kind="execute",
        options=tuple(RelayOption(o["optionId"], o["name"], o["kind"]) for o in options),
        request=msgspec.Raw(
            msgspec.json.encode(permission_params(session_id, tool_call_id, options))
        ),
    )


THREE = [
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "always", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "deny", "name": "Deny", "kind": "reject_once"},
]


class Recording(PlainScreen):
    """A plain screen that keeps the last view it was shown (the live part)."""

    def __init__(self, console: Console) -> None:
        super().__init__(console)
        self.view = View()

    def refresh(self, view: View) -> None:
        self.view = view
        super().refresh(view)


@dataclass
class Controlled:
    """An :class:`Approver` at a keyboard, opened with a replay; what it sent."""

    approver: Approver
    out: Watched
    keys: trio.MemorySendChannel[InputEvent]
    sent: list[ViewMessage]
    screen: Recording

    @property
    def hint(self) -> str:
        """The last line of the card that is up, as drawn now."""
        card = self.screen.view.card
        hint = card.hint if card is not None else None
        return hint.plain if isinstance(hint, Text) else str(hint)

    @property
    def prompt(self) -> str:
        prompt = self.screen.view.prompt
        return prompt.plain if prompt is not None else ""

    async def press(self, *keys: Key) -> None:
        for key in keys:
            await self.keys.send(key)
        await trio.testing.wait_all_tasks_blocked()

    def answers(self) -> list[tuple[str, object]]:
        return [
            (m.question_id, msgspec.to_builtins(m.decision))
            for m in self.sent
            if isinstance(m, Answer)
        ]


@asynccontextmanager
async def controlled(*replay: RelayQuestion) -> AsyncIterator[Controlled]:
    console, out = watched_console()
    screen = Recording(console)
    approver = Approver(screen, "term", input_mode="keys")
    send, receive = trio.open_memory_channel[InputEvent](16)
    sent: list[ViewMessage] = []

    def to_server(message: ViewMessage) -> bool:
        sent.append(message)
        return True

    async with trio.open_nursery() as nursery:
        nursery.start_soon(approver.run, receive)
        await trio.testing.wait_all_tasks_blocked()
        approver.opened(to_server, "host:1", list(replay))
        yield Controlled(approver, out, send, sent, screen)
        approver.quit(0)


def key(char: str) -> Key:
    return Key("char", char, at=trio.current_time())


async def test_a_key_answers_a_card_only_after_half_a_second_and_only_once_in_flight(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with controlled(question("q1", THREE)) as ui:
        await ui.press(key("1"))
        assert ui.answers() == []  # read before the card had been up for half a second
        await trio.sleep(0.5)
        await ui.press(Key("char", "1", at=trio.current_time(), burst=True))
        assert ui.answers() == []  # typed with other characters: never an answer
        await ui.press(key("1"), key("3"))
        assert ui.answers() == [("q1", {"outcome": "selected", "optionId": "allow"})]
        ui.approver.receive(AnswerRefused("q1", "withdrawn (timeout)", ref=ui.sent[-1].ref))
        assert "✗ the server refused the answer: withdrawn (timeout); the card asks again" in (
            ui.out.getvalue()
        )
        await ui.press(key("3"))
        assert len(ui.answers()) == 1  # the card is up again: half a second to look first
        await trio.sleep(0.5)
        await ui.press(key("3"))  # Deny: the prompt takes a reason first
        assert len(ui.answers()) == 1
        await ui.press(Key("enter", at=trio.current_time()))
        assert ui.answers()[1:] == [("q1", {"outcome": "selected", "optionId": "deny"})]


async def test_a_standing_grant_by_key_waits_for_y_and_esc_cancels(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with controlled(question("q1", THREE), question("q2", THREE)) as ui:
        await trio.sleep(0.5)
        await ui.press(key("2"))
        assert ui.answers() == []
        assert "Confirm: Always allow (a standing grant)? y confirms" in ui.out.getvalue()
        await trio.sleep(0.1)
        await ui.press(Key("enter", at=trio.current_time()))  # not Enter: it goes back
        assert ui.answers() == []
        assert "not confirmed: nothing answered, the card still asks" in ui.out.getvalue()
        await trio.sleep(1)  # (the same digit again at once is its auto-repeat)
        await ui.press(key("2"), Key("char", "y", at=trio.current_time(), burst=True))
        assert ui.answers() == []  # read with the digit: not a second look
        assert "read the confirmation first: the next y confirms it" in ui.out.getvalue()
        await trio.sleep(0.1)
        await ui.press(key("y"))
        assert ui.answers() == [("q1", {"outcome": "selected", "optionId": "always"})]
        ui.approver.receive(Resolved("q1", "selected", "always", "term"))
        await trio.sleep(0.5)
        await ui.press(Key("esc", at=trio.current_time()))
        assert ui.answers()[1:] == [("q2", {"outcome": "cancelled"})]
        await ui.press(Key("ctrl_c"))
    assert ui.approver.exit_code == 0
    assert "→ Always allow  allow_always · run call-q1 · (s1)" in ui.out.getvalue()


async def test_a_question_that_cannot_be_summed_up_is_left_to_other_views() -> None:
    odd = msgspec.structs.replace(
        question("q1", THREE), options=(RelayOption("x", "Do it", "allow_sometimes"),)
    )
    async with controlled(odd) as ui:
        assert ui.approver.shown is None
        assert "⚠ a question this terminal cannot show is left to other views" in (
            ui.out.getvalue()
        )
        ui.approver.receive(Requested(question("q2", THREE)))
        assert ui.approver.shown is not None


async def test_strings_from_the_server_are_escaped_and_sessions_are_named() -> None:
    async with controlled(question("q1", THREE)) as ui:
        ui.approver.receive(Sessions([SessionInfo("s1", "Docs\x1b[2J", 1, True)]))
        ui.approver.receive(Resolved("q1", "selected", "deny", "tab\nB \x1b[31m"))
        text = ui.out.getvalue()
        assert "✓ answered by tab\\nB \\x1b[31m: Deny  reject_once · run call-q1 · " in text
        assert "Docs\\x1b[2J (s1)" in text
        assert "\x1b" not in text
        ui.approver.receive(SessionEvent("s2", "created", "Fresh"))
        ui.approver.receive(Requested(question("q2", THREE, "s2")))
        assert "Fresh (s2)" in ui.out.getvalue()


# ----------------------------------------------------------------- the command line


def test_the_url_gives_the_server_and_the_token_and_the_token_is_never_said(
    tmp_path: Path,
) -> None:
    url = f"http://127.0.0.1:8765/?token={TOKEN}"
    assert target_of(url) == Target("127.0.0.1", 8765, TOKEN)
    assert target_of(url).websocket_url == f"ws://127.0.0.1:8765/ws?token={TOKEN}"
    assert target_of(url).origin == "http://127.0.0.1:8765"
    assert target_of("http://localhost:8765/", env_token=TOKEN).token == TOKEN
    token_file = tmp_path / "token"
    token_file.write_text(f"{TOKEN}\n")
    assert target_of("http://localhost:8765/", token_file=token_file).token == TOKEN
    assert TOKEN not in repr(target_of(url))
    for bad, why in [
        ("http://127.0.0.1:8765/", "no token"),
        (f"https://127.0.0.1:8765/?token={TOKEN}", "must start with http://"),
        (f"http://127.0.0.1/?token={TOKEN}", "host and port"),
        (f"http://127.0.0.1:99999/?token={TOKEN}", "not valid"),
        (f"http://[::1]:8765/?token={TOKEN}", "IPv6"),
        (f"http://127.0.0.1:8765/?token={TOKEN}&token=x", "more than one token"),
    ]:
        with pytest.raises(TargetError, match=why) as refused:
            target_of(bad)
        assert TOKEN not in str(refused.value)
    with pytest.raises(TargetError, match="leave out --token-file"):
        target_of(url, token_file=token_file)
    with pytest.raises(TargetError, match="cannot read --token-file"):
        target_of("http://127.0.0.1:8765/", token_file=tmp_path / "missing")


def test_the_default_name_names_this_host_as_a_view_may_be_named() -> None:
    name = default_view_name()
    assert name.startswith("terminal-") and len(name) <= 64 and name.isprintable()


def test_usage_errors_are_one_line_and_exit_2(tmp_path: Path) -> None:
    app = typer.Typer()
    app.command()(approve_command)
    runner = CliRunner()
    for args, why in [
        (["http://127.0.0.1:8765/"], "no token"),
        ([f"http://127.0.0.1:8765/?token={TOKEN}", "--name", ""], "--name must be"),
        ([f"http://127.0.0.1:8765/?token={TOKEN}", "--name", "a\tb"], "--name must be"),
    ]:
        result = runner.invoke(app, args, env={TOKEN_ENV: ""})
        assert result.exit_code == 2, (args, result.output)
        assert result.stderr.count("\n") == 1 and why in result.stderr, result.stderr
        assert TOKEN not in result.stderr
    help_text = runner.invoke(app, ["--help"]).output
    assert "--token-file" in help_text and "--name" in help_text


def test_a_request_nested_deeper_than_a_decoder_goes_still_gets_its_summary() -> None:
    from permclient.relay import RelayOption, RelayQuestion
    from simhost.approve.cards import card_request

    deep = msgspec.json.encode(permission_params("s1", "c1")).replace(
        b'{"command":"python3"}', b"[" * 100_000 + b"]" * 100_000
    )
    question = RelayQuestion(
        "q1",
        "s1",
        "c1",
        "run c1",
        "execute",
        (RelayOption("allow", "Allow", "allow_once"),),
        msgspec.Raw(deep),
    )
    shown = card_request(question)
    assert shown is not None
    request, whole = shown
    assert not whole and [option.option_id for option in request.options] == ["allow"]


async def test_a_held_key_that_answered_one_card_never_answers_the_next(
    autojump_clock: trio.abc.Clock,
) -> None:
    """The agent asks again 0.6 s after the first answer, while the digit that gave
    it is still held down: its repeats outlast the next card's half second."""
    async with controlled(question("q1", THREE)) as ui:
        await trio.sleep(0.5)
        await ui.press(key("1"))
        assert ui.answers() == [("q1", {"outcome": "selected", "optionId": "allow"})]
        ui.approver.receive(Resolved("q1", "selected", "allow", "term"))
        for repeat in range(60):  # two seconds of a held key, 30 repeats a second
            if repeat == 18:
                ui.approver.receive(Requested(question("q2", THREE)))
            await trio.sleep(1 / 30)
            await ui.press(key("1"))
        assert len(ui.answers()) == 1


# ------------------------------------------ editor rules, reasons and batches, end to end


async def _reply(peer: FakePeer, method: str, result: Any) -> None:
    with trio.fail_after(WAIT_S):
        request = await peer.receive()
    assert request.get("method") == method, request
    await peer.send({"jsonrpc": "2.0", "id": request["id"], "result": result})


@asynccontextmanager
async def hosted(places: Places) -> AsyncIterator[tuple[FakePeer, str]]:
    """What ``simhost serve`` wires, in this process, on a scripted ACP agent with one
    session (``s1``): the agent, and the server's ``host:port``."""
    async with connected("acp") as (client, peer), trio.open_nursery() as nursery:
        relay = Relay()
        rulebook, audit, warnings = open_rules(places.workspace.resolve(), places.state)
        assert warnings == []
        backend = AcpBackend(client, places.workspace.resolve())
        host = ServeHost(client, backend, relay, rulebook=rulebook, audit=audit)
        await nursery.start(host.run)
        nursery.start_soon(host.new_session)
        await _reply(peer, "session/new", {"sessionId": "s1"})
        while not host.sessions:
            await trio.testing.wait_all_tasks_blocked()
        stop = trio.Event()
        authority = await nursery.start(
            functools.partial(serve_relay, sessions=host),
            relay,
            Gate(TOKEN),
            "127.0.0.1",
            0,
            stop.wait,
        )
        try:
            yield peer, authority
        finally:
            relay.close()
            stop.set()
            nursery.cancel_scope.cancel()


async def test_a_batch_answers_exactly_the_questions_it_listed(places: Places) -> None:
    workspace = places.workspace.resolve()

    async def read(peer: FakePeer, call: str, path: str) -> Any:
        tool_call = {
            "toolCallId": call,
            "title": f"fs.read: {path}",
            "kind": "read",
            "status": "pending",
            "locations": [{"path": str(workspace / path)}],
        }
        params = {"sessionId": "s1", "toolCall": tool_call, "options": allow_deny()}
        return await peer.request("session/request_permission", params)

    async with hosted(places) as (peer, authority), approving(authority) as approver:
        await approver.out.wait_for("0 questions pending")
        first = await read(peer, "r1", "a.txt")
        second = await read(peer, "r2", "b.txt")
        await peer.ask_permission("s1", "x1")  # (not a read)
        await approver.out.wait_for("⧗ 2 approvals waiting")
        await approver.answer("/allow-all reads")
        await approver.out.wait_for("Answer them? y/N")
        listed = approver.text.rpartition("/allow-all reads will answer")[2]
        assert listed.startswith(" 2 questions in (s1):\n  #1 fs.read: a.txt → Allow\n  #2 fs")
        later = await read(peer, "r3", "c.txt")  # asked after the list was shown
        await approver.out.wait_for("⧗ 3 approvals waiting")
        await approver.answer("y")
        await approver.out.wait_for("/allow-all reads: 2 answered")
        with trio.fail_after(WAIT_S):
            answers = {(m := await peer.receive())["id"]: m["result"] for _ in range(2)}
        assert answers == {first: selected("allow"), second: selected("allow")}
        await approver.out.wait_for("Permission request  1 of 2")  # x1, and r3 still asks
        await approver.answer("2 not that one")  # x1: denied, with a reason
        await approver.out.wait_for("→ Deny  reject_once · run x1 · (s1) · reason: not that one")
        message = await peer.receive()
        assert message["result"]["outcome"]["_meta"] == {"permclient/reason": "not that one"}
        await approver.out.wait_for("fs.read: c.txt", count=2)
        await approver.answer("1")
        assert await peer.receive() == {"jsonrpc": "2.0", "id": later, "result": selected("allow")}
    assert [(r["toolCall"], r["by"]) for r in _audit(places)] == [
        ("r1", "batch"),
        ("r2", "batch"),
        ("x1", "person"),
        ("r3", "person"),
    ]


def _audit(places: Places) -> list[dict[str, Any]]:
    path = places.state / AUDIT_NAME
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# ------------------------------------------- the controller: rules, reasons and commands


def sent_of(ui: Controlled, kind: type[Any]) -> list[Any]:
    """The messages of ``kind`` sent, without their refs."""
    return [msgspec.structs.replace(m, ref=None) for m in ui.sent if isinstance(m, kind)]


def ref_of(ui: Controlled, kind: type[Any]) -> str:
    """The ref of the last message of ``kind`` sent (its replies carry it)."""
    ref: str = [message for message in ui.sent if isinstance(message, kind)][-1].ref
    return ref


async def type_line(ui: Controlled, text: str) -> None:
    """Type ``text`` key by key (each read alone), then Enter."""
    for char in text:
        await ui.press(key(char))
    await ui.press(Key("enter", at=trio.current_time()))


ALLOW_X = "Always allow `x …` in this workspace, until revoked"
DENY_X = "Always deny `x …` in this workspace, until revoked"


async def test_an_editor_rule_picked_by_key_shows_its_whole_label_and_waits_for_y(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with controlled(question("q1", THREE), question("q2", THREE)) as ui:
        offers = [RuleOffer(0, "allow", ALLOW_X), RuleOffer(1, "deny", DENY_X)]
        ui.approver.receive(RuleOffers("q1", offers))
        # A plain screen drew the card before its rules came: they are said below it.
        heading = "Editor rules (kept by the editor; /rules lists them):"
        assert f"{heading}\n a  {ALLOW_X}\n b  {DENY_X}\n" in ui.out.getvalue()
        ui.approver.receive(RuleOffers("q9", offers))  # (a question not here: nothing)
        await trio.sleep(0.5)
        await ui.press(key("c"))  # no third rule: not a key of this card
        assert ui.hint.startswith("Press 1-3 to choose · a-b saves a rule · Esc answers")
        await ui.press(key("b"))
        assert f"Save editor rule: {DENY_X}? y saves it (it answers this card)" in (
            ui.out.getvalue()
        )
        await ui.press(Key("enter", at=trio.current_time()))  # not Enter: back
        assert sent_of(ui, SaveRule) == []
        await trio.sleep(1)
        await ui.press(key("b"))
        await trio.sleep(0.1)
        await ui.press(key("y"))
        assert sent_of(ui, SaveRule) == [SaveRule("q1", "s1", 1)]
        await trio.sleep(1)
        await ui.press(key("1"))  # in flight: the card takes no other answer
        assert ui.answers() == []
        # The server says why not: the card asks again (after a fresh look).
        saving = ref_of(ui, SaveRule)
        ui.approver.receive(Error("the rule was not saved: No space left on device", ref=saving))
        text = ui.out.getvalue()
        assert "the server: the rule was not saved: No space left on device" in text
        assert "the card asks again · run call-q1 · (s1)" in text
        await trio.sleep(0.5)
        await ui.press(key("a"))
        await trio.sleep(0.1)
        await ui.press(key("y"))
        assert sent_of(ui, SaveRule)[1:] == [SaveRule("q1", "s1", 0)]
        assert ref_of(ui, SaveRule) != saving  # (a ref of its own)
        rule = ALLOW_X.removeprefix("Always ")
        ui.approver.receive(RuleSaved(1, rule, ref=ref_of(ui, SaveRule)))
        ui.approver.receive(Resolved("q1", "selected", "allow", "rule 1"))
        ui.approver.receive(
            RuleReceipt("s1", "call-q1", "run call-q1", 1, rule, "allowed", 1, "q1")
        )
        ui.approver.receive(RuleReceipt("s1", "call-q7", "run\x1b[2J", 1, rule, "denied", 2))
        text = ui.out.getvalue()
        assert f"rule 1 saved: {rule}" in text
        assert "✓ answered by rule 1: Allow  allow_once · run call-q1 · (s1)" in text
        assert f"⚖ rule 1 allowed · run call-q1 · (s1) · {rule}" in text
        assert "⚖ rule 1 denied · run\\x1b[2J · (s1) · " in text
        assert ui.approver.shown is not None and "q2" in ui.approver.shown.tool_title


async def test_a_deny_option_picked_by_key_takes_a_reason_enter_sends_it_esc_goes_back(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with controlled(question("q1", THREE), question("q2", THREE)) as ui:
        await trio.sleep(0.5)
        await ui.press(key("3"))
        assert "Reason for denying (optional, sent to the agent)" in ui.out.getvalue()
        for char in "use 2":  # digits too: they are the reason's
            await ui.press(key(char))
        assert ui.prompt == "reason > use 2 "
        assert ui.hint.startswith("Reason for denying (optional, sent to the agent): type it")
        assert ui.answers() == [] and ui.approver.editor.text == "use 2"
        await ui.press(Key("esc", at=trio.current_time()))
        assert "not denied: the card still asks" in ui.out.getvalue()
        assert ui.answers() == [] and ui.approver.editor.text == ""
        await trio.sleep(1)
        await ui.press(key("3"))
        await ui.press(Key("paste", "not\tnow ", at=trio.current_time()))
        await ui.press(Key("enter", at=trio.current_time()))
        (answer,) = sent_of(ui, Answer)
        assert (answer.question_id, answer.reason) == ("q1", "not\tnow")
        assert msgspec.to_builtins(answer.decision) == {"outcome": "selected", "optionId": "deny"}
        ui.approver.receive(Resolved("q1", "selected", "deny", "term", "not now"))
        assert "→ Deny  reject_once · run call-q1 · (s1) · reason: not now" in ui.out.getvalue()
        # A card that leaves takes its reason prompt with it.
        await trio.sleep(1)
        await ui.press(key("3"), key("x"))
        ui.approver.receive(Withdrawn("q2", "turn"))
        assert "the card went before the denial was sent: nothing answered" in ui.out.getvalue()
        assert ui.approver.editor.text == ""


async def test_commands_are_typed_on_a_line_of_their_own_and_list_and_revoke_rules(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with controlled(question("q1", THREE)) as ui:
        await trio.sleep(0.5)
        await ui.press(key("/"), key("r"), key("1"))  # a digit on the line answers nothing
        assert ui.answers() == [] and ui.approver.editor.text == "/r1"
        assert ui.hint.startswith("A command is being typed: Enter runs it, Esc drops it")
        assert ui.prompt == "command > /r1 "
        await ui.press(Key("esc", at=trio.current_time()))
        assert ui.approver.editor.text == "" and ui.answers() == []
        await type_line(ui, "/rules rm 1")  # no list shown yet: listed first
        assert sent_of(ui, ListRules) == [ListRules()]
        rows = [
            RuleRow(1, "allow", "allow `git status …` in this workspace, until revoked", 2, "/r"),
            RuleRow(2, "deny", "deny `rm …` in every workspace, until revoked", 0, "memory"),
        ]
        ui.approver.receive(Rules(rows))  # (news, not the list asked for: not shown)
        assert "editor rules (a deny rule" not in ui.out.getvalue()
        ui.approver.receive(Rules(rows, ref=ref_of(ui, ListRules)))
        text = ui.out.getvalue()
        assert "editor rules (a deny rule beats an allow rule)" in text
        assert "memory (until the session ends)" in text
        assert sent_of(ui, RevokeRule) == [RevokeRule(1, rows[0].rule)]
        ui.approver.receive(RuleRevoked(1, rows[0].rule, ref=ref_of(ui, RevokeRule)))
        ui.approver.receive(Rules([msgspec.structs.replace(rows[1], number=1)]))
        assert f"rule 1 revoked: {rows[0].rule}" in ui.out.getvalue()
        assert ui.out.getvalue().count("editor rules (a deny rule") == 1  # news: not shown
        # Each receipt carries its rule's hits (no list is sent per answer); one naming
        # words the list does not have at that number changes no row.
        deny_rm = rows[1].rule
        ui.approver.receive(RuleReceipt("s1", "c8", "rm a", 1, deny_rm, "denied", 6))
        ui.approver.receive(RuleReceipt("s1", "c9", "rm b", 1, deny_rm, "denied", 7))
        ui.approver.receive(RuleReceipt("s1", "c9", "git status", 1, rows[0].rule, "allowed", 99))

        # The last list shown says rule 2 is the deny rule; the server's news says it is
        # rule 1 now: nothing is sent, and the list is shown, with the hits as of now.
        await type_line(ui, "/rules rm 2")
        text = ui.out.getvalue()
        assert "rule 2 changed or is gone since the last list: nothing revoked" in text
        shown = text.rpartition("editor rules (a deny rule beats an allow rule)")[2]
        assert re.search(r"│ 1 +│ deny `rm …` in every workspace, until revoked +│ 7 +│", shown)
        assert "99" not in shown
        assert len(sent_of(ui, RevokeRule)) == 1
        # Refused by the server: the list it sends again is shown.
        renumbered = [msgspec.structs.replace(row, number=3 - row.number) for row in rows]
        ui.approver.receive(Rules(renumbered[::-1]))  # (news: the git status rule is back)
        await type_line(ui, "/rules rm 1")
        assert sent_of(ui, RevokeRule)[1:] == [RevokeRule(1, rows[1].rule)]
        refused = ref_of(ui, RevokeRule)
        ui.approver.receive(
            Error("that rule changed or is gone: the list is sent again", ref=refused)
        )
        ui.approver.receive(Rules([], ref=refused))
        assert "no editor rules yet: a card's a-d keys save one" in ui.out.getvalue()
        await type_line(ui, "/rules rm x")
        await type_line(ui, "/rules edit")
        await type_line(ui, "/nope")
        await type_line(ui, "/help")
        text = ui.out.getvalue()
        assert "usage: /rules rm N (N from /rules)" in text
        assert "usage: /rules, /rules rm N" in text
        assert "no command '/nope': /help lists them" in text
        assert "/allow-all WHAT" in text and "start a command line" in text
        assert ui.answers() == []


async def test_a_batch_asks_for_the_card_s_session_lists_then_answers_what_it_listed(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with controlled(
        question("q1", THREE), question("q2", THREE, "s2"), question("q3", THREE)
    ) as ui:
        await type_line(ui, "/allow-all")
        assert "usage: /allow-all KIND|GLOB" in ui.out.getvalue()
        await type_line(ui, "/allow-all executes")
        assert sent_of(ui, PreviewBatch) == [PreviewBatch("s1", "allow", "executes")]
        ui.approver.receive(BatchPreview("s1", "allow", "executes", [], ref="9"))  # not ours
        typed_early = Key("char", "y", at=trio.current_time())
        items = [BatchItem("q3", "run call-q3", "Allow"), BatchItem("q5", "run it", "Allow")]
        asked = ref_of(ui, PreviewBatch)
        ui.approver.receive(BatchPreview("s1", "allow", "executes", items, ref=asked))
        text = ui.out.getvalue()
        assert (
            "/allow-all executes will answer 2 questions in (s1):\n"
            "  #3 run call-q3 → Allow\n  #? run it → Allow\nAnswer them? y/N"
        ) in text
        await ui.press(typed_early)  # read before the list was shown: not a yes
        assert "read the list first: the next y answers them" in ui.out.getvalue()
        assert ui.prompt == "/allow-all executes: answer the 2 listed? y/N"
        await trio.sleep(0.1)
        await ui.press(key("y"))
        assert sent_of(ui, AnswerBatch) == [AnswerBatch("s1", "allow", "executes", ["q3", "q5"])]
        ui.approver.receive(BatchAnswered("s1", "executes", 1, ref=ref_of(ui, AnswerBatch)))
        assert "/allow-all executes: 1 answered" in ui.out.getvalue()
        await type_line(ui, "/deny-all executes")
        preview = BatchPreview("s1", "deny", "executes", items[:1], ref=ref_of(ui, PreviewBatch))
        ui.approver.receive(preview)
        await ui.press(key("n"))
        assert "/deny-all executes: nothing answered" in ui.out.getvalue()
        await type_line(ui, "/deny-all reads")
        ui.approver.receive(BatchPreview("s1", "deny", "reads", [], ref=ref_of(ui, PreviewBatch)))
        assert "/deny-all reads: no pending question of (s1)" in ui.out.getvalue()
        assert len(sent_of(ui, AnswerBatch)) == 1 and ui.answers() == []


async def test_a_reply_or_an_error_ends_the_wait_of_the_request_its_ref_names_only(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with controlled(question("q1", THREE), question("q2", THREE)) as ui:
        ui.approver.receive(RuleOffers("q1", [RuleOffer(0, "allow", ALLOW_X)]))
        await trio.sleep(0.5)
        await ui.press(key("a"))
        await trio.sleep(0.1)
        await ui.press(key("y"))
        await type_line(ui, "/rules")
        await type_line(ui, "/allow-all reads")
        saving, listing = ref_of(ui, SaveRule), ref_of(ui, ListRules)
        previewing = ref_of(ui, PreviewBatch)
        assert len({saving, listing, previewing}) == 3
        # Three requests in flight: the preview's error ends the preview's wait only
        # (the card's rule is still being saved, the list still awaited).
        ui.approver.receive(Error("not a kind or a path glob: …", ref=previewing))
        assert ui.hint.startswith("… sent editor rule") and "asks again" not in ui.out.getvalue()
        ui.approver.receive(BatchPreview("s1", "allow", "reads", [], ref=previewing))  # (late)
        assert "no pending question" not in ui.out.getvalue()
        ui.approver.receive(Error("invalid message: Object contains unknown field `x`"))
        assert ui.hint.startswith("… sent editor rule")  # (names no request of this view's)
        ui.approver.receive(Rules([], ref=listing))
        assert "no editor rules yet" in ui.out.getvalue()
        # The save's own error: its card asks again.
        ui.approver.receive(
            Error("the rule is saved, but it does not answer this card", ref=saving)
        )
        assert "the card asks again · run call-q1 · (s1)" in ui.out.getvalue()
        # So does an error for an answer (before, the card stayed in flight for good).
        await trio.sleep(0.5)
        await ui.press(key("1"))
        assert ui.hint.startswith("… sent Allow")
        ui.approver.receive(Error("invalid message: …", ref=ref_of(ui, Answer)))
        assert ui.out.getvalue().count("the card asks again · run call-q1 · (s1)") == 2
        await trio.sleep(1)
        await ui.press(key("1"))
        assert len(ui.answers()) == 2


async def test_a_line_waits_for_the_reply_its_request_names_not_the_next_one_to_come(
    autojump_clock: trio.abc.Clock,
) -> None:
    console, out = watched_console()
    approver = Approver(PlainScreen(console), "term", input_mode="lines", arm_delay=0)
    sent: list[ViewMessage] = []

    def to_server(message: ViewMessage) -> bool:
        sent.append(message)
        return True

    lines, receive = trio.open_memory_channel[InputEvent](16)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(approver.run, receive)
        await trio.testing.wait_all_tasks_blocked()
        approver.opened(to_server, "host:1", [])
        await lines.send(Line("/rules"))
        await trio.testing.wait_all_tasks_blocked()
        (asked,) = sent
        assert isinstance(asked, ListRules) and asked.ref is not None
        approver.receive(Error("the agent did not answer within 30 s", ref="another"))
        approver.receive(Rules([]))  # (news of the rules, before the reply)
        with trio.move_on_after(1):
            await approver.wait_ready()
        assert trio.current_time() == pytest.approx(1)  # (still waiting)
        approver.receive(Rules([], ref=asked.ref))
        await approver.wait_ready()  # at once
        assert trio.current_time() == pytest.approx(1)
        assert out.getvalue().count("no editor rules yet") == 1
        approver.quit(0)


async def test_lines_wait_a_moment_for_a_card_s_editor_rules(
    autojump_clock: trio.abc.Clock,
) -> None:
    console, out = watched_console()
    approver = Approver(PlainScreen(console), "term", input_mode="lines", arm_delay=0)
    _, receive = trio.open_memory_channel[InputEvent](16)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(approver.run, receive)
        await trio.testing.wait_all_tasks_blocked()
        approver.opened(lambda message: True, "host:1", [question("q1", THREE)])
        start = trio.current_time()
        await approver.wait_ready()  # no rules came: a quarter of a second
        assert trio.current_time() - start == pytest.approx(OFFERS_WAIT_S)
        approver.receive(Requested(question("q2", THREE)))
        approver.receive(Resolved("q1", "selected", "allow", "tab"))
        start = trio.current_time()
        with trio.move_on_after(0.1):
            await approver.wait_ready()
        assert trio.current_time() - start == pytest.approx(0.1)  # (still waiting)
        approver.receive(RuleOffers("q2", [RuleOffer(0, "allow", ALLOW_X)]))
        await approver.wait_ready()  # at once
        assert trio.current_time() - start == pytest.approx(0.1)
        assert "Answer with a line: 1-3 (a deny option may be followed by a reason), a (an" in (
            out.getvalue()
        )
        approver.quit(0)


# ------------------------------------------------------------------ in a terminal


