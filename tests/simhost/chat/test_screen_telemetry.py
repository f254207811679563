"""The chat's telemetry file keeps step with its screen: a record made before something
is shown is on file by the time it is shown.

The pty tests read the file right after they see a line (``turn cancelled``, then the
prompt); so does a person tailing it. The file's own task writes only once trio
schedules it, which can be after the screen's next frame (for plain lines: always after
the line), so the chat's screen flushes it before each write (``chat_screen``).
"""

from __future__ import annotations

import io
import json
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing
from rich.console import Console
from rich.text import Text

import permclient
from simhost.chat.app import ChatApp, ChatOptions
from simhost.chat.keys import Key
from simhost.chat.launch import _permclient_logs_to, chat_screen
from simhost.chat.screen import LiveScreen
from simhost.chat.terminal import InputEvent, Interrupt
from tests.support.fake_runtime import FakeRuntime, settle


class CountedTelemetry(permclient.JsonlTelemetry):
    """The chat's sink, counting the records it was given."""

    given = 0

    def emit(self, event: str, /, **fields: Any) -> None:
        self.given += 1
        super().emit(event, **fields)


class Terminal(io.StringIO):
    """The console's file: at each write, the records given so far and those on file."""

    def __init__(self, path: Path, telemetry: CountedTelemetry) -> None:
        super().__init__()
        self.path, self.telemetry = path, telemetry
        self.writes: list[tuple[str, int, int]] = []

    def write(self, text: str) -> int:
        on_file = len(self.path.read_text().splitlines()) if self.path.exists() else 0
        self.writes.append((text, self.telemetry.given, on_file))
        return super().write(text)

    def behind(self) -> list[tuple[str, int, int]]:
        """The writes made while a record given before them was not on file yet."""
        return [
            (text[-80:], given, on_file) for text, given, on_file in self.writes if on_file < given
        ]


@dataclass
class Chat:
    app: ChatApp
    runtime: FakeRuntime
    send: trio.MemorySendChannel[InputEvent]
    terminal: Terminal
    path: Path

    async def type_line(self, text: str) -> None:
        for char in text:
            await self.send.send(Key.of(char))
        await self.send.send(Key("enter"))

    async def interrupt(self) -> None:
        """Ctrl-C: a key at a keyboard, SIGINT otherwise."""
        keyboard = self.app.options.input_mode == "keys"
        await self.send.send(Key("ctrl_c") if keyboard else Interrupt())

    def records(self, event: str) -> list[dict[str, Any]]:
        lines = self.path.read_text().splitlines()
        return [r for r in map(json.loads, lines) if r["event"] == event]


@asynccontextmanager
async def chat_on(tmp_path: Path, *, keyboard: bool, frames: bool) -> AsyncIterator[Chat]:
    """The chat on the screen ``run_chat`` gives it, with a telemetry file; ``frames``
    runs the live screen's frame task (otherwise it draws at once)."""
    path = tmp_path / "telemetry.jsonl"
    ours, theirs = trio.testing.memory_stream_pair()
    runtime = FakeRuntime()
    send, receive = trio.open_memory_channel[InputEvent](256)
    telemetry = CountedTelemetry(path, write_in_thread=False)
    with telemetry:
        terminal = Terminal(path, telemetry)
        console = Console(file=terminal, width=120, force_terminal=True, color_system=None)
        async with trio.open_nursery() as nursery:
            await nursery.start(runtime.serve, theirs)
            async with permclient.open_client(ours, telemetry=telemetry) as client:
                screen = chat_screen(console, keyboard=keyboard, telemetry=telemetry)
                assert isinstance(screen, LiveScreen) == keyboard
                options = ChatOptions(
                    input_mode="keys" if keyboard else "lines", arm_delay=0, repeat_guard=0
                )
                app = ChatApp(client, screen, options)
                screen.start()
                nursery.start_soon(app.run, receive)
                if frames:
                    nursery.start_soon(screen.run)
                with trio.fail_after(5):
                    await app.ready.wait()
                yield Chat(app, runtime, send, terminal, path)
                app.quit(0)
                await settle()
                screen.stop()
            nursery.cancel_scope.cancel()


@pytest.mark.parametrize("keyboard", [True, False], ids=["live", "plain"])
async def test_a_question_cancelled_with_its_turn_is_on_file_when_the_chat_says_so(
    tmp_path: Path, keyboard: bool
) -> None:
    async with chat_on(tmp_path, keyboard=keyboard, frames=False) as chat:
        await chat.type_line("ask a.txt")
        await settle()
        assert chat.app.shown is not None
        await chat.interrupt()  # cancels the turn: its question is answered cancelled
        await settle()
        said = [w for w in chat.terminal.writes if "turn cancelled" in w[0]]
        assert said and chat.terminal.behind() == []
        assert [r["by"] for r in chat.records("approval.cancelled")] == ["turn"]


@pytest.mark.parametrize("keyboard", [True, False], ids=["live", "plain"])
async def test_no_write_of_the_chat_comes_before_a_record_made_before_it(
    tmp_path: Path, keyboard: bool, autojump_clock: trio.abc.Clock
) -> None:
    # The real chat's screen: frames drawn by their own task, which trio may schedule
    # before or after the telemetry's (a batch's order is random). Withdrawals by the
    # runtime and by a cancelled turn, ten times over.
    async with chat_on(tmp_path, keyboard=keyboard, frames=True) as chat:
        for _ in range(10):
            await chat.type_line("withdraw w.txt; ask b.txt")
            await settle()
            chat.runtime.withdraw.set()
            await settle()
            chat.runtime.withdraw = trio.Event()
            shown = chat.app.shown
            assert shown is not None and shown.tool_title == "fs.write: b.txt"
            await chat.interrupt()
            await settle()
            assert chat.app.mode == "prompt"
            await trio.sleep(1)  # past the frame's wait
        assert chat.terminal.behind() == []
        assert [r["by"] for r in chat.records("approval.cancelled")] == ["peer", "turn"] * 10


@pytest.mark.parametrize("keyboard", [True, False], ids=["live", "plain"])
def test_a_warning_the_flush_logs_is_shown_without_flushing_again(
    tmp_path: Path, keyboard: bool
) -> None:
    # permclient's warnings go to the screen, which flushes the file first: the
    # telemetry's own warning (here, a record it cannot encode) must not flush again
    # from inside the flush (it would wait for its own batch, 5 s at a time, for ever).
    telemetry = permclient.JsonlTelemetry(tmp_path / "t.jsonl", write_in_thread=False)
    out = io.StringIO()
    console = Console(file=out, width=120, force_terminal=True, color_system=None)
    screen = chat_screen(console, keyboard=keyboard, telemetry=telemetry)
    shown = threading.Event()

    def show() -> None:
        screen.print(Text("a line"))
        shown.set()

    with telemetry, _permclient_logs_to(screen):
        screen.start()
        telemetry.emit("odd", value=object())  # not JSON
        threading.Thread(target=show, daemon=True).start()  # (it would hang, not fail)
        assert shown.wait(10)
        screen.stop()
    assert "permclient: telemetry: could not record odd" in out.getvalue()
    assert "a line" in out.getvalue()
