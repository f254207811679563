"""The chat's start (``initialize`` and a first session): bounded, and every way it fails
is a start failure for the caller to report, never a transcript note."""

from __future__ import annotations

import os

import pytest
import trio
import trio.testing

from permclient import RequestError
from simhost.chat.app import DEFAULT_START_TIMEOUT_S, ChatOptions
from simhost.chat.keys import Key
from simhost.chat.terminal import Interrupt, Terminate, read_lines
from tests.support.fake_runtime import FakeRuntime, Harness, running_chat

TIMEOUT = 10.0
LINES = ChatOptions(input_mode="lines", arm_delay=0, repeat_guard=0, start_timeout=TIMEOUT)
KEYS = ChatOptions(input_mode="keys", arm_delay=0, repeat_guard=0, start_timeout=TIMEOUT)


def _runtime(**knobs: object) -> FakeRuntime:
    runtime = FakeRuntime()
    for name, value in knobs.items():
        setattr(runtime, name, value)
    return runtime


async def _ended(chat: Harness) -> int | None:
    """Wait (on the test's clock) until the chat is over; its exit code."""
    with trio.fail_after(10 * TIMEOUT):
        await chat.done.wait()
    return chat.exit_code


def test_the_start_is_bounded_by_default() -> None:
    assert ChatOptions().start_timeout == DEFAULT_START_TIMEOUT_S == 30.0


@pytest.mark.parametrize(
    ("stuck", "step"),
    [("initialize", "initialize"), ("sessionNew", "the request for a first session")],
)
async def test_a_runtime_that_does_not_answer_fails_the_start_after_the_start_timeout(
    autojump_clock: trio.testing.MockClock, stuck: str, step: str
) -> None:
    began = trio.current_time()
    async with running_chat(
        options=LINES, runtime=_runtime(stuck={stuck}), wait_ready=False
    ) as chat:
        assert await _ended(chat) == 1
        assert trio.current_time() - began == pytest.approx(TIMEOUT)
        assert chat.app.start_failure == (
            f"the runtime did not answer {step} within 10 s (see --start-timeout)"
        )
        assert not chat.app.ready.is_set()


@pytest.mark.parametrize("refused", ["initialize", "sessionNew"])
async def test_an_error_answer_during_the_start_is_a_start_failure_not_a_note(
    autojump_clock: trio.testing.MockClock, refused: str
) -> None:
    error = RequestError(-32603, "no model\n✓ all is well")
    async with running_chat(
        options=LINES, runtime=_runtime(refuse={refused: error}), wait_ready=False
    ) as chat:
        assert await _ended(chat) == 1
        failure = chat.app.start_failure
        assert failure is not None
        step = "initialize" if refused == "initialize" else "the request for a first session"
        assert failure.startswith(f"the runtime answered {step} with an error [-32603] no model")
        # Nothing about it in the transcript: the caller tells it on stderr, with the log.
        assert "no model" not in chat.text and "starting the runtime" not in chat.text


class _MisshapenRuntime(FakeRuntime):
    async def initialize(self, params: object) -> object:
        return {"runtimeInfo": "not an object"}


async def test_an_answer_of_the_wrong_shape_during_the_start_is_a_start_failure(
    autojump_clock: trio.testing.MockClock,
) -> None:
    async with running_chat(options=LINES, runtime=_MisshapenRuntime(), wait_ready=False) as chat:
        assert await _ended(chat) == 1
        failure = chat.app.start_failure
        assert failure is not None
        assert failure.startswith("unexpected answer from the runtime to initialize: ")
        assert "unexpected answer" not in chat.text


@pytest.mark.parametrize(
    ("options", "event", "code"),
    [
        (LINES, Interrupt(), 130),
        (KEYS, Key("ctrl_c"), 130),
        (LINES, Terminate("SIGTERM"), 0),
    ],
    ids=["SIGINT", "Ctrl-C key", "SIGTERM"],
)
async def test_ctrl_c_or_a_signal_during_the_start_ends_the_chat_at_once(
    autojump_clock: trio.testing.MockClock, options: ChatOptions, event: object, code: int
) -> None:
    began = trio.current_time()
    async with running_chat(
        options=options, runtime=_runtime(stuck={"initialize"}), wait_ready=False
    ) as chat:
        await chat.event(event)  # type: ignore[arg-type]
        assert await _ended(chat) == code
        assert trio.current_time() == began  # at once, not at the start timeout
        assert chat.app.start_failure is None  # interrupted, not failed: nothing to report


async def test_closed_stdin_during_the_start_leaves_once_the_start_ends(
    autojump_clock: trio.testing.MockClock,
) -> None:
    read_fd, write_fd = os.pipe()
    os.close(write_fd)  # `</dev/null`: the end of input is there from the start
    try:
        async with running_chat(
            options=LINES, runtime=_runtime(stuck={"initialize"}), wait_ready=False
        ) as chat:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read_lines, read_fd, chat.send, chat.app.wait_ready)
                assert await _ended(chat) == 1  # bounded by the start timeout
                nursery.cancel_scope.cancel()
            assert chat.app.start_failure is not None
    finally:
        os.close(read_fd)


async def test_closed_stdin_during_a_start_that_succeeds_leaves_with_0() -> None:
    read_fd, write_fd = os.pipe()
    os.close(write_fd)
    try:
        async with running_chat(options=LINES, wait_ready=False) as chat:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read_lines, read_fd, chat.send, chat.app.wait_ready)
                assert await _ended(chat) == 0
                nursery.cancel_scope.cancel()
            assert "new session Session 1 (s-1)" in chat.text
    finally:
        os.close(read_fd)
