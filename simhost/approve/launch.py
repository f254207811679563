"""Wiring: pick the screen and the keyboard, connect, run the approver, clean up.

:func:`run_approve` is what ``simhost approve`` runs inside ``trio.run``. Like the
chat, it puts a terminal in raw mode only when both stdin and stdout are terminals
(and always restores it); otherwise it reads answers as lines.
"""

from __future__ import annotations

import os
from contextlib import nullcontext
from typing import Final

import trio
from rich.console import Console
from rich.text import Text

from simhost._usage import one_line, plain_console
from simhost.chat.app import DEFAULT_ARM_DELAY_S, REPEAT_GUARD_S
from simhost.chat.screen import LiveScreen, PlainScreen, Screen
from simhost.chat.terminal import InputEvent, forward_signals, raw_keyboard, start_reading

from .app import Approver
from .link import keep_connected
from .target import Target

__all__ = ["run_approve"]

_INPUT_BUFFER: Final = 1024


async def run_approve(
    target: Target,
    view: str,
    *,
    console: Console | None = None,
    err_console: Console | None = None,
    stdin_fd: int = 0,
    arm_delay: float = DEFAULT_ARM_DELAY_S,
    repeat_guard: float = REPEAT_GUARD_S,
) -> int:
    """Run ``simhost approve`` against ``target`` as the view ``view``; returns the
    exit code: 0 after Ctrl-C, the end of input or SIGTERM/SIGHUP; 1, with one line
    on stderr, when the server refused the view (HTTP 403) or the first connection
    failed. A connection that drops later is made again, for as long as it runs.

    ``arm_delay`` and ``repeat_guard`` are the card's guards at a keyboard (see
    :class:`~simhost.approve.app.Approver`); lines answer at once."""
    console = console or plain_console()
    err_console = err_console or plain_console(stderr=True)
    keyboard = os.isatty(stdin_fd) and console.is_terminal
    screen: Screen = LiveScreen(console) if keyboard else PlainScreen(console)
    approver = Approver(
        screen,
        view,
        input_mode="keys" if keyboard else "lines",
        arm_delay=arm_delay if keyboard else 0.0,
        repeat_guard=repeat_guard,
    )

    async def connect() -> None:
        why = await keep_connected(target, view, approver)
        approver.quit(1, failure=why)

    send, receive = trio.open_memory_channel[InputEvent](_INPUT_BUFFER)
    async with trio.open_nursery() as nursery:
        await nursery.start(forward_signals, send)  # Ctrl-C is an event from here on
        with raw_keyboard(stdin_fd) if keyboard else nullcontext():
            screen.start()
            nursery.start_soon(screen.run)  # batched redraws, resizes
            try:
                start_reading(nursery, stdin_fd, send, approver.wait_ready, keys=keyboard)
                nursery.start_soon(connect)
                code = await approver.run(receive)
            finally:
                screen.stop()
        nursery.cancel_scope.cancel()
    if approver.failure is not None:
        err_console.print(Text(f"simhost approve: {one_line(approver.failure)}"), soft_wrap=True)
    elif approver.queue:
        console.print(Text("bye: the questions left stay pending for other views", style="dim"))
    return code
