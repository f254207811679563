"""``--arm-delay`` and ``--repeat-guard`` of ``simhost chat`` and ``simhost approve``: a
value outside 0.1-5 s is a usage error (one line, exit code 2, nothing started); a valid
one reaches the card's guards at a keyboard, and only there (lines answer at once); no
environment variable changes them."""

from __future__ import annotations

import io
import os
import socket
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
import trio.testing
import typer
from rich.console import Console
from typer.main import get_command
from typer.testing import CliRunner

import simhost.approve.launch as approve_launch
import simhost.chat.launch as chat_launch
from permclient.relay import RelayOption, RelayQuestion, Resolved
from simhost.approve.app import Approver
from simhost.approve.cli import approve_command
from simhost.approve.launch import run_approve
from simhost.approve.target import Target
from simhost.chat.app import (
    DEFAULT_ARM_DELAY_S,
    MAX_GUARD_S,
    MIN_GUARD_S,
    REPEAT_GUARD_S,
    ChatApp,
    ChatOptions,
)
from simhost.chat.cli import chat_command
from simhost.chat.keys import Key
from simhost.chat.launch import ChatConfig, run_chat
from simhost.chat.screen import PlainScreen
from simhost.chat.terminal import InputEvent
from simhost.cli import app as simhost_app
from simhost.serve.protocol import Answer, ViewMessage
from tests.support.peer import allow_deny, permission_params
from tests.support.serving import sockets_freed_quietly

# (what trio-websocket leaves to the garbage collector is collected as each test ends)
sockets_freed_quietly = pytest.fixture(autouse=True)(sockets_freed_quietly)

TIMEOUT = 60
URL = "http://127.0.0.1:8765/?token=guard-test-token"
WAIT_S = 30.0

# ------------------------------------------------------- from the command line to the config


def _typer_app(command: Any) -> typer.Typer:
    app = typer.Typer()
    app.command()(command)
    return app


@contextmanager
def _recorded_chat(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[ChatConfig]]:
    """``simhost chat`` with ``run_chat`` replaced: the configs it was given; nothing starts."""
    configs: list[ChatConfig] = []

    async def recording_run_chat(config: ChatConfig) -> int:
        configs.append(config)
        return 0

    monkeypatch.setattr(chat_launch, "run_chat", recording_run_chat)
    yield configs


@contextmanager
def _recorded_approve(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[dict[str, Any]]]:
    """``simhost approve`` with ``run_approve`` replaced: the guards it was given."""
    calls: list[dict[str, Any]] = []

    async def recording_run_approve(target: Target, view: str, **kwargs: Any) -> int:
        calls.append(kwargs)
        return 0

    monkeypatch.setattr(approve_launch, "run_approve", recording_run_approve)
    yield calls


GIVEN = [
    # (arguments, the arm delay and the repeat guard they give)
    ([], (DEFAULT_ARM_DELAY_S, REPEAT_GUARD_S)),
    (["--arm-delay", "0.1", "--repeat-guard", "5"], (0.1, 5.0)),
    (["--arm-delay", "5", "--repeat-guard", "0.1"], (5.0, 0.1)),
    (["--arm-delay", "2.5"], (2.5, REPEAT_GUARD_S)),
    (["--repeat-guard", "0.3"], (DEFAULT_ARM_DELAY_S, 0.3)),
]


def test_the_defaults_and_the_range_are_today_s_guards() -> None:
    assert (DEFAULT_ARM_DELAY_S, REPEAT_GUARD_S) == (0.5, 1.0)
    assert (MIN_GUARD_S, MAX_GUARD_S) == (0.1, 5.0)
    assert ChatConfig(Path(".")).arm_delay == ChatOptions().arm_delay == DEFAULT_ARM_DELAY_S
    assert ChatConfig(Path(".")).repeat_guard == ChatOptions().repeat_guard == REPEAT_GUARD_S


@pytest.mark.parametrize(("args", "guards"), GIVEN, ids=[" ".join(a) or "none" for a, _ in GIVEN])
def test_chat_passes_the_guards_it_was_given_including_both_bounds_to_its_config(
    monkeypatch: pytest.MonkeyPatch, args: list[str], guards: tuple[float, float]
) -> None:
    with _recorded_chat(monkeypatch) as configs:
        result = CliRunner().invoke(_typer_app(chat_command), args)
    assert result.exit_code == 0, result.output
    assert [(c.arm_delay, c.repeat_guard) for c in configs] == [guards]


@pytest.mark.parametrize(("args", "guards"), GIVEN, ids=[" ".join(a) or "none" for a, _ in GIVEN])
def test_approve_passes_the_guards_it_was_given_including_both_bounds_to_run_approve(
    monkeypatch: pytest.MonkeyPatch, args: list[str], guards: tuple[float, float]
) -> None:
    with _recorded_approve(monkeypatch) as calls:
        result = CliRunner().invoke(_typer_app(approve_command), [URL, *args])
    assert result.exit_code == 0, result.output
    assert [(c["arm_delay"], c["repeat_guard"]) for c in calls] == [guards]


ENVIRONMENT = {
    name: "3"
    for name in (
        "SIMHOST_ARM_DELAY",
        "SIMHOST_REPEAT_GUARD",
        "SIMHOST_CHAT_ARM_DELAY",
        "SIMHOST_CHAT_REPEAT_GUARD",
        "SIMHOST_APPROVE_ARM_DELAY",
        "SIMHOST_APPROVE_REPEAT_GUARD",
        "ARM_DELAY",
        "REPEAT_GUARD",
    )
}


def test_no_environment_variable_changes_the_guards(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("chat", "approve"):
        command = get_command(simhost_app).get_command(None, name)  # type: ignore[attr-defined]
        params = {p.name: p for p in command.params}
        assert params["arm_delay"].envvar is None and params["repeat_guard"].envvar is None
    runner = CliRunner()
    with _recorded_chat(monkeypatch) as configs, _recorded_approve(monkeypatch) as calls:
        chat = runner.invoke(simhost_app, ["chat"], env=ENVIRONMENT)
        approve = runner.invoke(simhost_app, ["approve", URL], env=ENVIRONMENT)
    assert (chat.exit_code, approve.exit_code) == (0, 0), (chat.output, approve.output)
    assert [(c.arm_delay, c.repeat_guard) for c in configs] == [
        (DEFAULT_ARM_DELAY_S, REPEAT_GUARD_S)
    ]
    assert [(c["arm_delay"], c["repeat_guard"]) for c in calls] == [
        (DEFAULT_ARM_DELAY_S, REPEAT_GUARD_S)
    ]


def test_the_help_of_both_commands_names_the_options_their_range_and_why(tmp_path: Path) -> None:
    runner = CliRunner()
    for command in (chat_command, approve_command):
        result = runner.invoke(_typer_app(command), ["--help"], env={"COLUMNS": "400"})
        assert result.exit_code == 0
        text = " ".join(result.output.split())
        assert "--arm-delay SECONDS" in text and "--repeat-guard SECONDS" in text
        assert f"{MIN_GUARD_S:g} to {MAX_GUARD_S:g}; default {DEFAULT_ARM_DELAY_S:g}." in text
        assert f"{MIN_GUARD_S:g} to {MAX_GUARD_S:g}; default {REPEAT_GUARD_S:g}." in text
        assert "a key typed for something else never answers a card that just appeared" in text
        assert "auto-repeat" in text


# ------------------------------------------------------ from the config to the card's guards


@contextmanager
def _terminal() -> Iterator[int]:
    """A pseudo-terminal: its keyboard end (what the command reads as stdin)."""
    leader, follower = os.openpty()
    try:
        yield follower
    finally:
        os.close(follower)
        os.close(leader)


@contextmanager
def _pipe() -> Iterator[int]:
    """A pipe already at its end: stdin that is not a terminal."""
    read_end, write_end = os.pipe()
    os.close(write_end)
    try:
        yield read_end
    finally:
        os.close(read_end)


def _console(*, terminal: bool) -> Console:
    return Console(
        file=io.StringIO(), width=100, force_terminal=terminal, color_system=None, markup=False
    )


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
    return port  # (closed: nothing listens there)


@pytest.fixture
def own_places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Rules and state of the test's own (a person's rules never change what it sees)."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    workspace = tmp_path / "ws"
    workspace.mkdir()
    return workspace


@pytest.mark.parametrize("at_a_terminal", [True, False], ids=["keys", "lines"])
async def test_run_chat_gives_the_configured_guards_to_the_chat_at_a_keyboard_only(
    own_places: Path, monkeypatch: pytest.MonkeyPatch, at_a_terminal: bool
) -> None:
    options: list[ChatOptions] = []

    class RecordingChat(ChatApp):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            options.append(self.options)

    monkeypatch.setattr(chat_launch, "ChatApp", RecordingChat)
    config = ChatConfig(
        own_places,
        state_dir=own_places.parent / "state",
        runtime_cmd="false",  # starts, and exits at once: the start fails, the chat ends
        dialect="acp",
        arm_delay=2.5,
        repeat_guard=0.3,
    )
    err = _console(terminal=False)
    with _terminal() if at_a_terminal else _pipe() as stdin_fd, trio.fail_after(WAIT_S):
        code = await run_chat(
            config, console=_console(terminal=at_a_terminal), err_console=err, stdin_fd=stdin_fd
        )
    assert code == 1, err.file.getvalue()  # type: ignore[attr-defined]
    assert len(options) == 1
    if at_a_terminal:
        assert options[0].input_mode == "keys"
        assert (options[0].arm_delay, options[0].repeat_guard) == (2.5, 0.3)
    else:
        assert options[0].input_mode == "lines"
        assert options[0].arm_delay == 0.0  # a line is read only when the chat is ready


@pytest.mark.parametrize("at_a_terminal", [True, False], ids=["keys", "lines"])
async def test_run_approve_gives_the_configured_guards_to_the_approver_at_a_keyboard_only(
    monkeypatch: pytest.MonkeyPatch, at_a_terminal: bool
) -> None:
    approvers: list[Approver] = []

    class RecordingApprover(Approver):
        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            approvers.append(self)

    monkeypatch.setattr(approve_launch, "Approver", RecordingApprover)
    err = _console(terminal=False)
    with _terminal() if at_a_terminal else _pipe() as stdin_fd, trio.fail_after(WAIT_S):
        code = await run_approve(
            Target("127.0.0.1", _free_port(), "guard-test-token"),  # nobody there: exit 1
            "term",
            console=_console(terminal=at_a_terminal),
            err_console=err,
            stdin_fd=stdin_fd,
            arm_delay=2.5,
            repeat_guard=0.3,
        )
    assert code == 1, err.file.getvalue()  # type: ignore[attr-defined]
    assert "cannot connect" in err.file.getvalue()  # type: ignore[attr-defined]
    [approver] = approvers
    if at_a_terminal:
        assert approver.input_mode == "keys"
        assert (approver.arm_delay, approver.repeat_guard) == (2.5, 0.3)
    else:
        assert approver.input_mode == "lines"
        assert approver.arm_delay == 0.0


# ------------------------------------------------------------- what the values then mean

def _question(question_id: str) -> RelayQuestion:
    tool_call_id = f"call-{question_id}"
    params = permission_params("s1", tool_call_id)
    return RelayQuestion(
        question_id=question_id,
        session_id="s1",
        tool_call_id=tool_call_id,
        title=f"run {tool_call_id}",
        kind="execute",
        options=tuple(RelayOption(o["optionId"], o["name"], o["kind"]) for o in allow_deny()),
        request=msgspec.Raw(msgspec.json.encode(params)),
    )


async def test_an_approver_with_given_guards_arms_cards_after_its_delay_and_ends_repeats_sooner(
    mock_clock: trio.testing.MockClock,
) -> None:
    """Arm delay 2 s: a key read 1.9 s after the card came up is too early (past the
    default half second). Repeat guard 0.2 s: the answering key, repeated every 0.1 s,
    answers nothing; read again 0.5 s after its last repeat (within the default second)
    it answers the next card."""
    approver = Approver(
        PlainScreen(_console(terminal=False)), "term", arm_delay=2.0, repeat_guard=0.2
    )
    send, receive = trio.open_memory_channel[InputEvent](16)
    sent: list[ViewMessage] = []

    def to_server(message: ViewMessage) -> bool:
        sent.append(message)
        return True

    def answered() -> list[str]:
        return [m.question_id for m in sent if isinstance(m, Answer)]

    async def press(char: str) -> None:
        await send.send(Key("char", char, at=trio.current_time()))
        await trio.testing.wait_all_tasks_blocked()

    async with trio.open_nursery() as nursery:
        nursery.start_soon(approver.run, receive)
        await trio.testing.wait_all_tasks_blocked()
        approver.opened(to_server, "host:1", [_question("q1"), _question("q2")])
        await trio.testing.wait_all_tasks_blocked()
        mock_clock.jump(1.9)
        await press("1")
        assert answered() == []  # up for 1.9 s of its 2
        mock_clock.jump(0.1)
        await press("1")
        assert answered() == ["q1"]
        approver.receive(Resolved("q1", "selected", "allow", "term"))  # q2 comes up now
        await trio.testing.wait_all_tasks_blocked()
        for _ in range(15):  # the key held for 1.5 s: a repeat every 0.1 s
            mock_clock.jump(0.1)
            await press("1")
        assert answered() == ["q1"]
        mock_clock.jump(0.5)  # q2 up for 2 s; 0.5 s since the last repeat
        await press("1")
        assert answered() == ["q1", "q2"]
        approver.quit(0)
