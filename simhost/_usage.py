"""What every ``simhost`` command line shares: plain consoles, one-line errors, path checks.

Exit codes of every command: ``2`` when the command line itself is wrong
(an unknown command or option, a bad value, a missing or unwritable file,
options that do not go together), found before anything is started; ``1``
when what it started failed (an agent that cannot start, dies or breaks the
connection; a failed scenario); ``130`` on Ctrl-C. A usage error is one line
on stderr, never a traceback.
"""

from __future__ import annotations

import errno
import math
import os
import shlex
from pathlib import Path
from typing import Annotated, Final, TypeAlias

import typer
from rich.console import Console
from rich.text import Text

__all__ = [
    "USAGE",
    "check_agent_command",
    "check_seconds",
    "check_writable_file",
    "fail",
    "interrupted",
    "one_line",
    "plain_console",
]

USAGE: Final = 2
"""The exit code of a command line that is wrong."""


def plain_console(*, stderr: bool = False) -> Console:
    """A console that prints strings as they are: no markup, no emoji codes, no highlighting.

    Every string simhost prints may hold text from a person or a peer: ``[/x]``
    would be a markup error, ``:smile:`` an emoji. Style goes through
    :class:`rich.text.Text` objects only.
    """
    return Console(stderr=stderr, markup=False, emoji=False, highlight=False)


def one_line(text: str) -> str:
    """``text`` on one line: line breaks and other control characters written as escapes."""
    return "".join(
        ch if ch.isprintable() else ch.encode("unicode_escape").decode("ascii") for ch in text
    )


def fail(command: str, message: str, code: int = USAGE) -> typer.Exit:
    """Print ``command: message`` as one line on stderr; return the exit to raise."""
    plain_console(stderr=True).print(Text(f"{command}: {one_line(message)}"), soft_wrap=True)
    return typer.Exit(code)


def check_writable_file(path: Path) -> None:
    """Raise :class:`OSError` unless ``path`` can be opened for writing.

    Checked by opening it, as the write will: an existing file is opened to
    append (nothing is written, its content stays); a new one is created and
    removed again. A FIFO without a reader is refused (it would block the write).
    """
    if path.is_dir():
        raise IsADirectoryError(errno.EISDIR, "is a folder", str(path))
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o666)
        os.close(fd)
        os.unlink(path)
        return
    os.close(fd)


def check_agent_command(command: str, option: str, agent: str) -> None:
    """Raise the usage error of ``command`` unless ``agent`` splits like a shell into a program."""
    try:
        words = shlex.split(agent)
    except ValueError as exc:
        raise fail(command, f"{option} {agent!r}: cannot split like a shell: {exc}") from None
    if not words or not words[0]:
        raise fail(command, f"{option} {agent!r}: the agent's command is empty")


def check_seconds(command: str, option: str, value: float, low: float, high: float) -> float:
    """``value``, unless it is not a number of seconds from ``low`` to ``high`` (both
    included): then the usage error of ``command``."""
    if not (math.isfinite(value) and low <= value <= high):
        raise fail(command, f"{option} {value}: give a number of seconds from {low:g} to {high:g}")
    return value


def interrupted(exc: BaseException) -> bool:
    """Ctrl-C: a KeyboardInterrupt, alone or in an exception group from a nursery."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(KeyboardInterrupt) is not None
    return isinstance(exc, KeyboardInterrupt)


# The card guards of the commands that take keys (chat, approve): the same options.
ArmDelayOption: TypeAlias = Annotated[
    float | None,
    typer.Option(
        "--arm-delay",
        help="At a terminal: seconds a permission card must have been on screen before a "
        "key can answer it, so a key typed for something else never answers a card that "
        "just appeared. 0.1 to 5; default 0.5.",
        metavar="SECONDS",
        show_default=False,
    ),
]
RepeatGuardOption: TypeAlias = Annotated[
    float | None,
    typer.Option(
        "--repeat-guard",
        help="At a terminal: the key that answered a card, read again within these "
        "seconds, is taken for the keyboard's auto-repeat and answers nothing, so a held "
        "key never answers the card that comes next. 0.1 to 5; default 1.",
        metavar="SECONDS",
        show_default=False,
    ),
]
