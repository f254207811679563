"""Wiring: start the runtime, pick the screen and the keyboard, run the chat, clean up.

:func:`run_chat` is what ``simhost chat`` runs inside ``trio.run``. It starts
the runtime (or an ACP agent) as a child with :func:`permclient.open_process`
(its stderr to a log file), puts a terminal in raw mode only when both stdin
and stdout are terminals (and always restores it), and leaves nothing running:
leaving ``open_process`` stops the child and its process group.
"""

from __future__ import annotations

import logging
import os
import shlex
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager, nullcontext
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Final

import trio
from rich.console import Console
from rich.text import Text

import permclient
from simhost._usage import USAGE, one_line, plain_console
from simhost.rulebook import open_rules

from .app import (
    DEFAULT_ARM_DELAY_S,
    DEFAULT_START_TIMEOUT_S,
    REPEAT_GUARD_S,
    ChatApp,
    ChatOptions,
)
from .backends import AcpBackend
from .screen import LiveScreen, PlainScreen, Screen
from .terminal import (
    InputEvent,
    KeyboardPause,
    forward_signals,
    raw_keyboard,
    run_in_terminal,
    start_reading,
)
from .text import visible

__all__ = ["ChatConfig", "RuntimeLog", "chat_screen", "run_chat"]

LOG_NAME: Final = "chat-runtime.log"
_TAIL_BYTES: Final = 4000
_TAIL_LINES: Final = 15


@dataclass(frozen=True)
class ChatConfig:
    """What ``simhost chat`` was asked to do."""

    workspace: Path
    policy: str | None = None
    state_dir: Path | None = None
    telemetry: Path | None = None
    runtime_cmd: str | None = None
    dialect: permclient.DialectName = "bridge"
    start_timeout: float = DEFAULT_START_TIMEOUT_S
    arm_delay: float = DEFAULT_ARM_DELAY_S
    """At a keyboard only (see :class:`ChatOptions`): line input answers at once."""
    repeat_guard: float = REPEAT_GUARD_S
    """At a keyboard only (see :class:`ChatOptions`)."""

    def runtime_argv(self) -> list[str]:
        """The runtime's (or agent's) command line.

        The reference runtime by default (``python -m simhost runtime --stdio``
        with ``--workspace``, ``--dialect acp`` when asked, and ``--policy`` /
        ``--state-dir`` when given); ``runtime_cmd`` split like a shell would,
        used as it is, otherwise.
        """
        if self.runtime_cmd is not None:
            return shlex.split(self.runtime_cmd)
        argv = [sys.executable, "-m", "simhost", "runtime", "--stdio"]
        argv += ["--workspace", str(self.workspace)]
        if self.dialect != "bridge":
            argv += ["--dialect", self.dialect]
        if self.policy:
            argv += ["--policy", self.policy]
        if self.state_dir is not None:
            argv += ["--state-dir", str(self.state_dir)]
        return argv


class RuntimeLog:
    """The runtime's stderr: a file in the state folder, or an anonymous temporary file."""

    def __init__(self, state_dir: Path | None, name: str = LOG_NAME) -> None:
        self.file: IO[bytes]
        if state_dir is not None:
            state_dir.mkdir(parents=True, exist_ok=True)
            self.path: Path | None = state_dir / name
            self.file = open(self.path, "a+b")  # noqa: SIM115 - closed by close()
        else:
            self.path = None
            self.file = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        self._start = os.fstat(self.file.fileno()).st_size

    def tail(self) -> str:
        """The last lines the runtime wrote in this run (reading never moves its offset)."""
        try:
            fd = self.file.fileno()
            size = os.fstat(fd).st_size
            start = max(self._start, size - _TAIL_BYTES)
            data = os.pread(fd, size - start, start)
        except (OSError, ValueError):
            return ""
        lines = data.decode("utf-8", "replace").splitlines()
        return "\n".join(lines[-_TAIL_LINES:])

    def close(self) -> None:
        self.file.close()


class _ScreenLogHandler(logging.Handler):
    """permclient's warnings (a fail-closed answer, a malformed message) on the screen."""

    def __init__(self, screen: Screen) -> None:
        super().__init__(logging.WARNING)
        self.screen = screen

    def emit(self, record: logging.LogRecord) -> None:
        try:
            message = visible(record.getMessage(), keep="")  # one line
            self.screen.print(Text(f"permclient: {message}", style="dim yellow"))
        except Exception:  # pragma: no cover - a log line must never break the chat
            self.handleError(record)


@contextmanager
def _permclient_logs_to(screen: Screen) -> Iterator[None]:
    logger = logging.getLogger("permclient")
    handler = _ScreenLogHandler(screen)
    saved = logger.propagate
    logger.addHandler(handler)
    logger.propagate = False  # not to stderr: it would tear through the live region
    try:
        yield
    finally:
        logger.removeHandler(handler)
        logger.propagate = saved


async def run_chat(
    config: ChatConfig,
    *,
    console: Console | None = None,
    err_console: Console | None = None,
    stdin_fd: int = 0,
) -> int:
    """Run ``simhost chat``; returns the exit code (see :meth:`ChatApp.run`).

    2, with nothing started, when the telemetry file or the state folder cannot
    be opened; 1, with the agent's stderr tail, when the agent could not start
    or went away before the first session was open.
    """
    console = console or plain_console()
    err_console = err_console or plain_console(stderr=True)
    keyboard = os.isatty(stdin_fd) and console.is_terminal
    options = (
        ChatOptions(
            input_mode="keys",
            arm_delay=config.arm_delay,
            repeat_guard=config.repeat_guard,
            start_timeout=config.start_timeout,
        )
        if keyboard
        else ChatOptions(input_mode="lines", arm_delay=0.0, start_timeout=config.start_timeout)
    )
    argv = config.runtime_argv()
    cwd = config.workspace if config.runtime_cmd is not None else None
    peer = "agent" if config.dialect == "acp" else "runtime"
    send, receive = trio.open_memory_channel[InputEvent](1024)
    code = 1
    with ExitStack() as stack:
        try:
            # Written from the chat's own loop (not a thread), and flushed before each
            # write to the screen (chat_screen): the file keeps step with the screen.
            # Leaving the stack writes what is left.
            telemetry = (
                stack.enter_context(
                    permclient.JsonlTelemetry(config.telemetry, write_in_thread=False)
                )
                if config.telemetry is not None
                else None
            )
        except OSError as exc:
            _error(err_console, f"cannot open the telemetry file {config.telemetry}: {_why(exc)}")
            return USAGE
        try:
            log = RuntimeLog(config.state_dir)
        except OSError as exc:
            _error(err_console, f"cannot use the state folder {config.state_dir}: {_why(exc)}")
            return USAGE
        stack.callback(log.close)
        rulebook, audit, warnings = open_rules(config.workspace, config.state_dir)
        for warning in warnings:  # a rule that cannot be read is skipped, and said
            console.print(Text(f"rules: {visible(warning)}", style="yellow"), soft_wrap=True)
        app: ChatApp | None = None
        pause = KeyboardPause()
        async with trio.open_nursery() as nursery:
            await nursery.start(forward_signals, send)  # Ctrl-C is an event before the spawn
            spawned = False
            try:
                async with permclient.open_process(
                    argv, dialect=config.dialect, stderr=log.file, telemetry=telemetry, cwd=cwd
                ) as client:
                    spawned = True
                    screen = chat_screen(console, keyboard=keyboard, telemetry=telemetry)
                    backend = (
                        AcpBackend(client, config.workspace) if config.dialect == "acp" else None
                    )
                    app = ChatApp(
                        client,
                        screen,
                        options,
                        log_tail=log.tail,
                        backend=backend,
                        rulebook=rulebook,
                        audit=audit,
                        edit=_editor(stdin_fd, pause) if keyboard else None,
                    )
                    terminal = raw_keyboard(stdin_fd) if keyboard else nullcontext()
                    with terminal, _permclient_logs_to(screen):
                        screen.start()
                        nursery.start_soon(screen.run)  # batched redraws, resizes
                        try:
                            start_reading(
                                nursery, stdin_fd, send, app.wait_ready, keys=keyboard, pause=pause
                            )
                            code = await app.run(receive)
                        finally:
                            screen.stop()
            except OSError as exc:
                if spawned:
                    raise
                _error(err_console, f"could not start the {peer} {argv[0]!r}: {_why(exc)}")
                code = 1
            nursery.cancel_scope.cancel()
        if app is not None and app.start_failure is not None:
            # Told after the child is stopped, so its last words are in the log.
            _error(err_console, app.start_failure)
            tail = log.tail().strip()
            if tail:
                err_console.print(Text(f"{peer} stderr (last lines):", style="bold"))
                err_console.print(Text(visible(tail), style="dim"), soft_wrap=True)
    console.print(Text(f"bye: the {peer} is stopped", style="dim"))
    return code


def chat_screen(
    console: Console, *, keyboard: bool, telemetry: permclient.JsonlTelemetry | None
) -> Screen:
    """The chat's screen: live on a terminal (``keyboard``), plain lines otherwise.

    ``telemetry`` is flushed before each write to it: whatever was recorded before
    something is shown (a question cancelled with its turn, then "turn cancelled") is
    on file by the time it is shown. (Its own task writes it too, but only once
    scheduled: that can be after the screen's next frame, or, for plain lines,
    always after the line.)
    """
    flush = _flush_once(telemetry.flush) if telemetry is not None else None
    if keyboard:
        return LiveScreen(console, before_output=flush)
    return PlainScreen(console, before_output=flush)


def _flush_once(flush: Callable[[], None]) -> Callable[[], None]:
    """``flush``, but not again from inside itself: a warning it logs (a record it
    cannot encode, a full disk) is shown on the screen, which would flush first, and
    wait for the batch being written, which waits for the warning."""
    flushing = False

    def flush_once() -> None:
        nonlocal flushing
        if flushing:
            return
        flushing = True
        try:
            flush()
        finally:
            flushing = False

    return flush_once


def _editor(fd: int, pause: KeyboardPause) -> Callable[[Path], Awaitable[int]] | None:
    """Opens a file in ``$VISUAL`` or ``$EDITOR`` on the chat's terminal (``None``
    when neither is set)."""
    command = os.environ.get("VISUAL") or os.environ.get("EDITOR")
    if not command:
        return None
    argv = shlex.split(command)

    async def edit(path: Path) -> int:
        return await run_in_terminal(fd, [*argv, str(path)], pause)

    return edit


def _error(err_console: Console, message: str) -> None:
    err_console.print(Text(f"simhost chat: {one_line(message)}"), soft_wrap=True)


def _why(exc: OSError) -> str:
    return exc.strerror or str(exc)
