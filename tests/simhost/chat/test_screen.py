"""The live region on a terminal: it fits the screen, redraws in batches, and follows resizes.

What is on the screen is read back with pyte, a terminal emulator, from the
bytes the screen wrote (a real terminal turns ``\\n`` into ``\\r\\n``).
"""

from __future__ import annotations

import io
import os
import re
import signal
import sys

import pyte
import pytest
import trio
import trio.testing
from rich.console import Console
from rich.text import Text

from simhost.chat.card import PermissionCard
from simhost.chat.keys import Key
from simhost.chat.screen import FRAME_S, LiveScreen, PlainScreen, View
from tests.support.cards import command_card, many_options_card, request
from tests.support.fake_runtime import running_chat, settle

SYNC_BEGIN = "\x1b[?2026h"
SYNC_END = "\x1b[?2026l"


def terminal(width: int = 80, height: int = 24) -> Console:
    return Console(
        file=io.StringIO(), width=width, height=height, force_terminal=True, color_system="256"
    )


def written(console: Console) -> str:
    output = console.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(output, str)
    return output


def plain(output: str) -> str:
    return re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", output)


def on_screen(console: Console) -> list[str]:
    """The rows a terminal of the console's size shows after everything written so far."""
    screen = pyte.Screen(console.width, console.height)
    pyte.Stream(screen).feed(written(console).replace("\n", "\r\n"))
    return [row.rstrip() for row in screen.display]


def tall_view(card_id: int = 1, running: int = 12) -> View:
    return View(
        lines=[Text(f"◐ tool {i}  in progress") for i in range(running)],
        card=command_card(80),
        card_id=card_id,
        marker=Text("⧗ 1 approval waiting: s-2 fs.write: a.txt"),
    )


@pytest.mark.parametrize("height", [16, 24, 40])
def test_the_session_row_the_options_and_the_marker_are_on_screen_whatever_the_card(
    height: int,
) -> None:
    console = terminal(height=height)
    screen = LiveScreen(console)
    screen.start()
    for i in range(30):
        screen.print(Text(f"transcript line {i}"))
    screen.refresh(tall_view())
    rows = on_screen(console)
    assert any(row.startswith("│ Session  Notes (s-7)") for row in rows)
    option_rows = [row for row in rows if re.match(r"│ +\d+ ", row)]
    assert [row.split()[1] for row in option_rows] == ["1", "2", "3", "4"]
    assert any("Press 1-4 to choose" in row for row in rows)
    assert any("of the command): press v to view" in row for row in rows)
    assert rows[-2].startswith("⧗ 1 approval waiting") or rows[-1].startswith("⧗ 1 approval")
    screen.stop()


@pytest.mark.parametrize("height", [8, 16, 24, 40])
def test_a_card_with_82_options_keeps_its_session_row_on_screen_and_fits(height: int) -> None:
    console = terminal(height=height)
    screen = LiveScreen(console)
    screen.start()
    for i in range(30):
        screen.print(Text(f"transcript line {i}"))
    card = many_options_card(82, rawInput={"command": "\n".join(["pytest"] * 50)})
    screen.refresh(View(card=card, card_id=1, marker=Text("⧗ 1 approval waiting")))
    rows = on_screen(console)
    assert sum(1 for row in rows if row.startswith("╭─ Permission request")) == 1
    assert any(row.startswith("│ Session  Notes (s-7)") for row in rows)
    assert any(row.startswith("⧗ 1 approval waiting") for row in rows)
    numbers = [int(row.split()[1]) for row in rows if re.match(r"│ +\d+ {3}", row)]
    if height >= 24:
        assert numbers == list(range(1, 10))
        assert any("… 73 more options (10-82): no key chooses them" in row for row in rows)
    else:
        assert numbers == list(range(1, len(numbers) + 1))
        assert any("terminal is too small for this card" in row for row in rows)
    screen.stop()


def test_running_tool_lines_give_way_to_the_card_newest_first() -> None:
    console = terminal(height=30)
    screen = LiveScreen(console)
    screen.start()
    screen.refresh(tall_view(running=40))
    rows = on_screen(console)
    assert any("more running or streaming" in row for row in rows)
    assert not any("◐ tool 0 " in row for row in rows)
    assert any(row.startswith("│ Session  Notes (s-7)") for row in rows)
    screen.stop()


def test_v_shows_the_whole_card_in_the_transcript_and_the_live_card_stays() -> None:
    console = terminal(height=24)
    screen = LiveScreen(console)
    screen.start()
    view = tall_view(running=0)
    screen.refresh(view)
    assert "> echo 80" not in plain(written(console))
    assert view.card is not None
    screen.show_card(view.card)
    output = plain(written(console))
    assert "> echo 80" in output and "more lines not shown" not in output
    rows = on_screen(console)
    assert any(row.startswith("│ Session  Notes (s-7)") for row in rows)  # the live card
    assert any("Press 1-4 to choose" in row for row in rows)
    screen.stop()


async def test_the_v_key_on_a_card_prints_it_whole() -> None:
    async with running_chat() as chat:
        await chat.type_line("/bg ask one.txt")
        assert chat.app.mode == "card"
        before = chat.text.count("Permission request")
        await chat.press("v")
        assert chat.text.count("Permission request") == before + 1
        assert chat.app.mode == "card"  # still asking: v answers nothing
        await chat.press("v")
        assert chat.text.count("Permission request") == before + 2
        await chat.press("3", Key("enter"))  # deny (the deny option takes a reason; none)
        assert chat.app.mode != "card"
        await chat.press("v")  # no card: a letter for the prompt
        assert chat.text.count("Permission request") == before + 2
        assert chat.app.editor.text == "v"


def test_a_pipe_gets_each_card_in_full_once() -> None:
    console = Console(file=io.StringIO(), width=80, color_system=None)
    screen = PlainScreen(console)
    for _ in range(3):
        screen.refresh(View(card=command_card(80), card_id=1))
    output = written(console)
    assert output.count("Permission request") == 1
    assert "> echo 80" in output and "press v" not in output


async def test_redraws_are_batched_into_frames_each_one_synchronized_update(
    autojump_clock: trio.testing.MockClock,
) -> None:
    console = terminal()
    screen = LiveScreen(console)
    screen.start()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(screen.run)
        await trio.testing.wait_all_tasks_blocked()
        card = command_card(3)
        screen.refresh(View(card=card, card_id=1, marker=Text("m")))  # a new card: drawn now
        assert screen.frames == 1
        for i in range(200):
            screen.refresh(View(card=card, card_id=1, marker=Text(f"marker {i}")))
            screen.print(Text(f"transcript {i}"))
        assert screen.frames == 1
        await trio.sleep(FRAME_S * 1.5)
        assert screen.frames == 2  # 200 changes and 200 lines: one frame
        await trio.sleep(FRAME_S * 5)
        assert screen.frames == 2  # nothing changed since
        nursery.cancel_scope.cancel()
    screen.stop()
    output = written(console)
    assert output.count(SYNC_BEGIN) == output.count(SYNC_END) == screen.frames
    assert output.count("transcript 199") == 1 and output.count("marker 199") == 1
    assert "marker 100" not in output  # never drawn: a later change came in the same frame
    rows = on_screen(console)
    assert "transcript 0" not in rows[0] and any(row == "transcript 199" for row in rows)


@pytest.mark.skipif(not hasattr(signal, "SIGWINCH"), reason="no SIGWINCH")
async def test_a_terminal_resize_redraws_the_card_to_the_new_size() -> None:
    console = terminal(height=40)
    screen = LiveScreen(console)
    screen.start()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(screen.run)
        await trio.testing.wait_all_tasks_blocked()
        screen.refresh(tall_view(running=0))
        frames = screen.frames
        console.height = 16
        os.kill(os.getpid(), signal.SIGWINCH)
        with trio.fail_after(5):
            while screen.frames == frames:  # noqa: ASYNC110 - the signal arrives in real time
                await trio.sleep(FRAME_S)
        nursery.cancel_scope.cancel()
    rows = on_screen(console)  # a 16-row terminal
    assert any(row.startswith("│ Session  Notes (s-7)") for row in rows)
    assert any("Press 1-4 to choose" in row for row in rows)
    screen.stop()


def test_twenty_cards_write_a_bounded_number_of_bytes() -> None:
    """Each card drawn, armed, answered: the bytes stay near the size of what is shown."""
    console = terminal(width=160, height=60)
    screen = LiveScreen(console)
    screen.start()
    for i in range(20):
        card_request = request(
            {
                "toolCallId": f"c{i}",
                "title": f"fs.write: f{i}.txt",
                "kind": "edit",
                "content": [
                    {"type": "diff", "path": f"/w/f{i}.txt", "oldText": None, "newText": "x\n"}
                ],
            }
        )
        for hint in ("… (keys are held back for a moment)", "Press 1-4 to choose"):
            screen.refresh(
                View(card=PermissionCard(card_request, hint=hint), card_id=i, prompt=Text("p"))
            )
        screen.refresh(View(prompt=Text("p")))
        screen.print(Text(f"→ Allow · fs.write: f{i}.txt · Session 1 (s-1)"))
    screen.stop()
    assert len(written(console).encode()) < 200_000


@pytest.mark.skipif(sys.platform == "win32", reason="POSIX terminal")
def test_without_a_terminal_no_synchronized_update_is_sent() -> None:
    console = Console(file=io.StringIO(), width=80, height=24, color_system=None)
    screen = LiveScreen(console)
    screen.start()
    screen.refresh(View(prompt=Text("p")))
    screen.stop()
    assert SYNC_BEGIN not in written(console)


async def test_the_chat_draws_on_a_live_screen_with_its_frame_task() -> None:
    async with running_chat(screen=LiveScreen) as chat:
        screen = chat.app.screen
        assert isinstance(screen, LiveScreen)
        screen.start()
        async with trio.open_nursery() as nursery:
            nursery.start_soon(screen.run)
            await chat.type_line("/bg ask one.txt")
            await trio.sleep(FRAME_S * 2)
            await settle()
            assert "Permission request" in chat.text
            await chat.press("1")
            await trio.sleep(FRAME_S * 2)
            assert "→ " in chat.text
            nursery.cancel_scope.cancel()
        screen.stop()
