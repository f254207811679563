"""``simhost approve`` run in this process against a served relay: what it prints is
written to consoles a test can wait on, and it answers with lines from a pipe."""

from __future__ import annotations

import io
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import trio
from rich.console import Console

from simhost.approve.launch import run_approve
from simhost.approve.target import Target
from tests.support.serving import TOKEN, WAIT_S


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
