"""The keys' reader standing aside while an editor has the terminal: once paused, it
never reads a byte until resumed, whatever the order of its wake-ups."""

from __future__ import annotations

import os
from collections.abc import Iterator

import pytest
import trio
import trio.testing

from simhost.chat.terminal import KeyboardPause


@pytest.fixture
def pipe() -> Iterator[tuple[int, int]]:
    read_end, write_end = os.pipe()
    yield read_end, write_end
    os.close(read_end)
    os.close(write_end)


async def _watch(pause: KeyboardPause, fd: int, became_readable: trio.Event) -> None:
    await pause.readable(fd)
    became_readable.set()


async def test_a_paused_reader_waits_for_the_resume_even_with_bytes_to_read(
    pipe: tuple[int, int],
) -> None:
    read_end, write_end = pipe
    pause = KeyboardPause()
    became_readable = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch, pause, read_end, became_readable)
        await trio.testing.wait_all_tasks_blocked()
        pause.pause()
        os.write(write_end, b"typed in the editor\n")
        await trio.testing.wait_all_tasks_blocked()
        assert not became_readable.is_set()
        pause.resume()
        with trio.fail_after(5):
            await became_readable.wait()


async def test_a_pause_that_comes_while_the_reader_wakes_from_a_resume_still_holds(
    pipe: tuple[int, int],
) -> None:
    # The resume wakes the reader; the pause comes before it runs, when it is waiting on
    # nothing a pause can cancel. It must see the pause and not read the editor's bytes.
    read_end, write_end = pipe
    pause = KeyboardPause()
    pause.pause()
    became_readable = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch, pause, read_end, became_readable)
        await trio.testing.wait_all_tasks_blocked()
        pause.resume()
        pause.pause()
        await trio.testing.wait_all_tasks_blocked()
        os.write(write_end, b"typed in the editor\n")
        await trio.testing.wait_all_tasks_blocked()
        assert not became_readable.is_set()
        pause.resume()
        with trio.fail_after(5):
            await became_readable.wait()


async def test_pauses_nest_and_a_second_pause_never_strands_the_reader(
    pipe: tuple[int, int],
) -> None:
    # Two programs handed the terminal in turn: the reader waits until both gave it
    # back (a second pause used to replace the event the reader waited on, which no
    # resume then set: the chat never read a key again).
    read_end, write_end = pipe
    pause = KeyboardPause()
    became_readable = trio.Event()
    async with trio.open_nursery() as nursery:
        nursery.start_soon(_watch, pause, read_end, became_readable)
        await trio.testing.wait_all_tasks_blocked()
        pause.pause()
        await trio.testing.wait_all_tasks_blocked()
        pause.pause()
        os.write(write_end, b"typed in the second editor\n")
        pause.resume()
        await trio.testing.wait_all_tasks_blocked()
        assert not became_readable.is_set()  # the second still has the terminal
        pause.resume()
        with trio.fail_after(5):
            await became_readable.wait()
