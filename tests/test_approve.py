"""``simhost approve`` against a real server on a real socket: a relay, served by
``serve_relay``, whose questions a real permclient client gets from a scripted agent.
The approver reads its answers as lines from a pipe and prints to a console the test
watches; its controller's keyboard rules are tested on their own, with a mock clock."""

from __future__ import annotations

import io
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
import trio.testing
import typer
from hypercorn.config import Config
from rich.console import Console
from typer.testing import CliRunner

from permclient import Client, Question, deferred
from permclient.relay import AnswerRefused, Relay, RelayOption, RelayQuestion, Requested, Resolved
from simhost.approve.app import Approver
from simhost.approve.cli import approve_command
from simhost.approve.launch import run_approve
from simhost.approve.link import FIRST_RETRY_S, LAST_RETRY_S
from simhost.approve.target import TOKEN_ENV, Target, TargetError, default_view_name, target_of
from simhost.chat.keys import Key
from simhost.chat.screen import PlainScreen
from simhost.chat.terminal import InputEvent
from simhost.serve.protocol import Answer, SessionEvent, SessionInfo, Sessions, ViewMessage
from simhost.serve.server import Gate, serve_relay

from .peer import CANCELLED, FakePeer, connected, permission_params, selected
from .serving import (
    TOKEN,
    WAIT_S,
    freed_quietly,
    next_message,
    opened,
    send,
    sockets_freed_quietly,
    view,
)

sockets_freed_quietly = pytest.fixture(autouse=True)(sockets_freed_quietly)


class Watched(io.StringIO):
    """A console's file that a test can wait on: it is written from the trio thread."""

    def __init__(self) -> None:
        super().__init__()
        self._written = trio.Event()

    def write(self, text: str) -> int:
        self._written.set()
        return super().write(text)

    async def wait_for(self, text: str, count: int = 1) -> None:
        """Until ``text`` was written ``count`` times (bounded)."""
        with trio.fail_after(WAIT_S):
            while True:
                self._written = trio.Event()
                if self.getvalue().count(text) >= count:
                    return
                await self._written.wait()


def watched_console() -> tuple[Console, Watched]:
    out = Watched()
    console = Console(file=out, width=120, color_system=None, markup=False, emoji=False)
    return console, out


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


def target(authority: str, token: str = TOKEN) -> Target:
    host, _, port = authority.rpartition(":")
    return Target(host, int(port), token)


@dataclass
class Approving:
    """``run_approve`` running: its stdin (a pipe), what it printed, its exit code."""

    out: Watched
    err: Watched
    stdin: int
    code: int | None = None
    ended: trio.Event = field(default_factory=trio.Event)

    async def answer(self, line: str) -> None:
        os.write(self.stdin, line.encode() + b"\n")

    @property
    def text(self) -> str:
        return self.out.getvalue()


@asynccontextmanager
async def approving(authority: str, token: str = TOKEN) -> AsyncIterator[Approving]:
    """``simhost approve`` as the view ``term``, answering with lines; at the end of the
    block its stdin is closed, and it must have left by then or leave at once."""
    read_end, write_end = os.pipe()
    console, out = watched_console()
    err_console, err = watched_console()
    approver = Approving(out, err, write_end)

    async def run() -> None:
        approver.code = await run_approve(
            target(authority, token),
            "term",
            console=console,
            err_console=err_console,
            stdin_fd=read_end,
        )
        approver.ended.set()

    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(run)
            yield approver
            os.close(write_end)  # the end of input
            write_end = -1
            with trio.fail_after(WAIT_S):
                await approver.ended.wait()
    finally:
        if write_end >= 0:
            os.close(write_end)
        os.close(read_end)  # (its reader thread got the end of input: it reads no more)


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


@dataclass
class Controlled:
    """An :class:`Approver` at a keyboard, opened with a replay; what it sent."""

    approver: Approver
    out: Watched
    keys: trio.MemorySendChannel[InputEvent]
    sent: list[ViewMessage]

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
    approver = Approver(PlainScreen(console), "term", input_mode="keys")
    send, receive = trio.open_memory_channel[InputEvent](16)
    sent: list[ViewMessage] = []

    def to_server(message: ViewMessage) -> bool:
        sent.append(message)
        return True

    async with trio.open_nursery() as nursery:
        nursery.start_soon(approver.run, receive)
        await trio.testing.wait_all_tasks_blocked()
        approver.opened(to_server, "host:1", list(replay))
        yield Controlled(approver, out, send, sent)
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
        ui.approver.receive(AnswerRefused("q1", "withdrawn (timeout)"))
        assert "✗ the server refused the answer: withdrawn (timeout); the card asks again" in (
            ui.out.getvalue()
        )
        await ui.press(key("3"))
        assert len(ui.answers()) == 1  # the card is up again: half a second to look first
        await trio.sleep(0.5)
        await ui.press(key("3"))
        assert ui.answers()[1:] == [("q1", {"outcome": "selected", "optionId": "deny"})]


async def test_a_standing_grant_by_key_waits_for_enter_and_esc_cancels(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with controlled(question("q1", THREE), question("q2", THREE)) as ui:
        await trio.sleep(0.5)
        await ui.press(key("2"))
        assert ui.answers() == []
        assert "Confirm: Always allow (a standing grant)?" in ui.out.getvalue()
        await trio.sleep(0.1)
        await ui.press(Key("enter", at=trio.current_time()))
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
