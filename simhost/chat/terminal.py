"""The keyboard: a raw terminal read key by key, or lines from a pipe or file.

Both sources put :data:`InputEvent` values on a memory channel that a single
task (the chat's UI loop) consumes. The terminal source reads whenever bytes
are there; the line source reads the next line only when the chat is ready
for one (at the prompt, or while a card waits for an answer), so a script's
answer line is never taken for a prompt, or the other way round.
"""

from __future__ import annotations

import functools
import os
import signal
import sys
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, replace
from typing import Final, TypeAlias

import trio

from .keys import BRACKETED_PASTE_OFF, BRACKETED_PASTE_ON, Key, KeyDecoder

__all__ = [
    "EndOfInput",
    "InputEvent",
    "Interrupt",
    "Line",
    "Terminate",
    "forward_signals",
    "raw_keyboard",
    "read_keys",
    "read_lines",
    "start_reading",
]

ESC_TIMEOUT_S: Final = 0.05
PASTE_TIMEOUT_S: Final = 1.0
"""A bracketed paste whose end marker does not come within this ends there."""
_READ_SIZE: Final = 4096
_MAX_LINE: Final = 1 << 20


@dataclass(frozen=True, slots=True)
class Line:
    """One line of non-terminal input, without its line ending.

    ``handled`` (when given) is set by the consumer once the line has been acted
    on, so the reader asks whether the chat is ready for the next line only
    after this one changed its state.
    """

    text: str
    handled: trio.Event | None = None
    # When the chat was found ready for it (trio clock): a line read for one card,
    # or for the prompt, must not answer a card that came up after it.
    at: float | None = None


@dataclass(frozen=True, slots=True)
class EndOfInput:
    """stdin was closed."""


@dataclass(frozen=True, slots=True)
class Interrupt:
    """SIGINT arrived (Ctrl-C when the terminal is not in raw mode)."""


@dataclass(frozen=True, slots=True)
class Terminate:
    """SIGTERM or SIGHUP arrived: leave now."""

    signal_name: str


InputEvent: TypeAlias = Key | Line | EndOfInput | Interrupt | Terminate


@contextmanager
def raw_keyboard(fd: int) -> Iterator[None]:
    """Put the terminal on ``fd`` in raw input mode; always restore it.

    No line buffering, no echo, no signals from keys (Ctrl-C arrives as the
    byte ``0x03``), no flow control and no CR-to-LF translation; output
    processing stays on, so ``\\n`` still returns the carriage. The terminal is
    asked for bracketed pastes (``ESC[?2004h``, written to ``fd``: the keyboard's
    own terminal), so a paste arrives as one ``paste`` key; a terminal that does
    not know the sequence ignores it.
    """
    import termios

    saved = termios.tcgetattr(fd)
    mode = termios.tcgetattr(fd)
    mode[0] &= ~(
        termios.BRKINT
        | termios.ICRNL
        | termios.INLCR
        | termios.IGNCR
        | termios.ISTRIP
        | termios.IXON
    )
    mode[3] &= ~(termios.ICANON | termios.ECHO | termios.ISIG | termios.IEXTEN)
    mode[6][termios.VMIN] = 1
    mode[6][termios.VTIME] = 0
    termios.tcsetattr(fd, termios.TCSANOW, mode)
    try:
        _write_quietly(fd, BRACKETED_PASTE_ON)
        yield
    finally:
        _write_quietly(fd, BRACKETED_PASTE_OFF)
        termios.tcsetattr(fd, termios.TCSADRAIN, saved)


def _write_quietly(fd: int, data: bytes) -> None:
    """Best effort: a terminal opened read-only simply gets no bracketed pastes."""
    with suppress(OSError):
        os.write(fd, data)


class KeyboardPause:
    """Lets the keys' reader stand aside while another program (an editor) has the
    terminal: no key of its is read here meanwhile. Pauses nest: the reader goes on
    after as many resumes as there were pauses."""

    def __init__(self) -> None:
        self._resumed = trio.Event()
        self._resumed.set()
        self._pauses = 0
        self._waiting: trio.CancelScope | None = None

    async def readable(self, fd: int) -> None:
        """Wait until ``fd`` is readable and the reader is not paused."""
        while True:
            await self._resumed.wait()
            # A pause during that wait's checkpoint found no scope to cancel.
            if not self._resumed.is_set():
                continue
            with trio.CancelScope() as scope:
                self._waiting = scope
                await trio.lowlevel.wait_readable(fd)
            self._waiting = None
            # Readable just as a pause came: the bytes are the editor's now.
            if not scope.cancelled_caught and self._resumed.is_set():
                return

    def pause(self) -> None:
        self._pauses += 1
        if self._pauses == 1:  # (a second pause keeps the event the reader waits on)
            self._resumed = trio.Event()
        if self._waiting is not None:
            self._waiting.cancel()

    def resume(self) -> None:
        self._pauses = max(0, self._pauses - 1)
        if not self._pauses:
            self._resumed.set()


async def run_in_terminal(fd: int, argv: list[str], pause: KeyboardPause) -> int:
    """Hand the terminal on ``fd`` to ``argv`` (an editor), in its usual mode, and
    take it back in raw mode once it exits; returns its exit code. The keys' reader
    stands aside meanwhile. Raises :class:`OSError` if it cannot be started."""
    import termios

    raw = termios.tcgetattr(fd)
    cooked = termios.tcgetattr(fd)
    cooked[0] |= termios.ICRNL | termios.IXON | termios.BRKINT
    cooked[3] |= termios.ICANON | termios.ECHO | termios.ISIG | termios.IEXTEN
    pause.pause()
    try:
        _write_quietly(fd, BRACKETED_PASTE_OFF)
        termios.tcsetattr(fd, termios.TCSADRAIN, cooked)
        process = await trio.run_process(argv, check=False, stdin=fd)
        return process.returncode
    finally:
        termios.tcsetattr(fd, termios.TCSADRAIN, raw)
        _write_quietly(fd, BRACKETED_PASTE_ON)
        pause.resume()


async def read_keys(
    fd: int,
    send: trio.MemorySendChannel[InputEvent],
    *,
    esc_timeout: float = ESC_TIMEOUT_S,
    pause: KeyboardPause | None = None,
) -> None:
    """Read a raw terminal on ``fd`` and send its keys; :class:`EndOfInput` at EOF.

    Waits for readability with trio (the fd stays blocking, so nothing else
    sharing the terminal sees ``O_NONBLOCK``) and reads what is there.
    """
    pause = pause or KeyboardPause()
    decoder = KeyDecoder()
    read_at = trio.current_time()
    while True:
        if decoder.pending:
            timeout = PASTE_TIMEOUT_S if decoder.in_paste else esc_timeout
            with trio.move_on_after(timeout) as waited:
                await pause.readable(fd)
            if waited.cancelled_caught:
                for key in decoder.flush():  # keys of bytes read at read_at
                    await send.send(replace(key, at=read_at))
                continue
        else:
            await pause.readable(fd)
        try:
            data = os.read(fd, _READ_SIZE)
        except BlockingIOError:
            continue
        except OSError:
            data = b""
        if not data:
            await send.send(EndOfInput())
            return
        read_at = trio.current_time()
        for key in decoder.feed(data):
            await send.send(replace(key, at=read_at))


def start_reading(
    nursery: trio.Nursery,
    fd: int,
    send: trio.MemorySendChannel[InputEvent],
    wait_ready: Callable[[], Awaitable[None]],
    *,
    keys: bool,
    pause: KeyboardPause | None = None,
) -> None:
    """Read ``fd`` in ``nursery``: its keys (a terminal in raw mode, see
    :func:`read_keys`; ``pause`` lets them stand aside) or its lines, each sent once
    ``wait_ready`` returns."""
    if keys:
        nursery.start_soon(functools.partial(read_keys, fd, send, pause=pause))
    else:
        nursery.start_soon(read_lines, fd, send, wait_ready)


async def read_lines(
    fd: int,
    send: trio.MemorySendChannel[InputEvent],
    wait_ready: Callable[[], Awaitable[None]],
) -> None:
    """Read lines from ``fd`` (a pipe or a file) and send each one when the chat is ready.

    Reads in a worker thread (regular files cannot be polled). A line longer
    than 1 MiB is cut. Sends :class:`EndOfInput` at EOF, once the chat is ready.
    """
    pending = b""
    eof = False
    while True:
        newline = pending.find(b"\n")
        if newline < 0 and not eof and len(pending) < _MAX_LINE:
            chunk = await trio.to_thread.run_sync(_read, fd, abandon_on_cancel=True)
            if chunk:
                pending += chunk
            else:
                eof = True
            continue
        await wait_ready()
        if newline >= 0:
            raw, pending = pending[:newline], pending[newline + 1 :]
        elif pending:
            raw, pending = pending[:_MAX_LINE], pending[_MAX_LINE:]
        else:
            await send.send(EndOfInput())
            return
        handled = trio.Event()
        text = raw.decode("utf-8", "replace").rstrip("\r")
        await send.send(Line(text, handled, trio.current_time()))
        await handled.wait()


def _read(fd: int) -> bytes:
    try:
        return os.read(fd, _READ_SIZE)
    except OSError:
        return b""


async def forward_signals(
    send: trio.MemorySendChannel[InputEvent],
    *,
    task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
) -> None:
    """Turn SIGINT into :class:`Interrupt` and SIGTERM/SIGHUP into :class:`Terminate`.

    Started with ``nursery.start``, it returns once the signals are caught: from
    then on Ctrl-C is an event, never a ``KeyboardInterrupt``.
    """
    wanted = [signal.SIGINT, signal.SIGTERM]
    if sys.platform != "win32":
        wanted.append(signal.SIGHUP)
    with trio.open_signal_receiver(*wanted) as signals:
        task_status.started()
        async for signum in signals:
            if signum == signal.SIGINT:
                await send.send(Interrupt())
            else:
                await send.send(Terminate(signal.Signals(signum).name))
