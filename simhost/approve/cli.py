"""``simhost approve``: the command line of the terminal approver."""

from __future__ import annotations

import functools
import os
from pathlib import Path
from typing import Annotated

import trio
import typer

from simhost._usage import ArmDelayOption, RepeatGuardOption, check_seconds, fail, interrupted

from .target import TOKEN_ENV, TargetError, check_view_name, default_view_name, target_of

__all__ = ["approve_command"]


def approve_command(
    url: Annotated[
        str,
        typer.Argument(
            # Hidden from the Arguments list, where Typer prints its type (<str>); the
            # usage line shows it and the docstring says what it is.
            metavar="URL",
            show_default=False,
            hidden=True,
        ),
    ],
    name: Annotated[
        str | None,
        typer.Option(
            "--name",
            help="This view's name, which the other views see when it answers (1 to 64 "
            "printable characters). Default: terminal-HOSTNAME.",
            metavar="NAME",
            show_default=False,
        ),
    ] = None,
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file",
            help="Read the token from this file's first line, when the URL has none "
            "(keeps it out of the process list).",
            metavar="PATH",
            dir_okay=False,
        ),
    ] = None,
    arm_delay: ArmDelayOption = None,
    repeat_guard: RepeatGuardOption = None,
) -> None:
    """Answer the permission requests of a simhost serve from this terminal.

    URL: the address simhost serve printed, http://HOST:PORT/?token=TOKEN; without
    the token part, the token comes from --token-file or SIMHOST_TOKEN.

    Connects to the server's WebSocket as a view named --name and shows every
    pending question (those asked before it connected too) as the same permission
    card as simhost chat, oldest first, with its session and the editor rules the
    server offers for it (a-d). A number key picks an option once the card has been
    up for --arm-delay (half a second), but not the repeat of the key that answered
    the card before (within --repeat-guard, a second): an allow_always option then
    waits for y, a deny option
    for a reason (type it, Enter sends the denial, Esc goes back). A letter shows
    its editor rule whole, and y saves it: it answers the card and every pending
    question it covers, and later ones as they come. Esc answers cancelled; v
    prints the whole card; / starts a command. With stdin not a terminal, each line
    answers the card that is up: a number (a deny option's may be followed by a
    reason: 3 not now), a rule's letter (saved at once), or c or an empty line
    (cancelled); a line that starts with / is a command.

    Commands: /rules lists the server's editor rules; /rules rm N revokes rule N of
    the last list (listed first if none was shown); /allow-all WHAT and /deny-all
    WHAT list the pending questions of the session whose card is up (there is no
    current session here) that a tool kind (reads) or a path glob (src/**) covers,
    then answer exactly those on y; /help. A question a rule answers prints a
    receipt naming the rule.

    A card leaves when the server says its question ended: answered here or by
    another view or a rule (named, with a denial's reason), or withdrawn (with the
    reason); a refused answer leaves it up. A dropped connection is made again
    (after 0.5 s, doubling up to 5 s), and the server's replay replaces the cards.

    Exit code: 0 after Ctrl-C, the end of input or SIGTERM; 1 if the server refuses
    this view (HTTP 403: a wrong token) or cannot be reached at first; 2 for a usage
    error (nothing is started), 130 when interrupted before it is up.
    """
    command = "simhost approve"
    # The guards' defaults and range: imported here, so the other commands never load
    # the chat's modules.
    from simhost.chat.app import DEFAULT_ARM_DELAY_S, MAX_GUARD_S, MIN_GUARD_S, REPEAT_GUARD_S

    if arm_delay is None:
        arm_delay = DEFAULT_ARM_DELAY_S
    check_seconds(command, "--arm-delay", arm_delay, MIN_GUARD_S, MAX_GUARD_S)
    if repeat_guard is None:
        repeat_guard = REPEAT_GUARD_S
    check_seconds(command, "--repeat-guard", repeat_guard, MIN_GUARD_S, MAX_GUARD_S)
    try:
        target = target_of(url, token_file=token_file, env_token=os.environ.get(TOKEN_ENV))
        view = check_view_name(name) if name is not None else default_view_name()
    except TargetError as exc:
        raise fail(command, str(exc)) from None
    try:
        # Imported here so the other commands never load the approver's modules.
        from simhost.approve.launch import run_approve

        code = trio.run(
            functools.partial(
                run_approve, target, view, arm_delay=arm_delay, repeat_guard=repeat_guard
            )
        )
    except BaseException as exc:
        if not interrupted(exc):
            raise
        # Ctrl-C before the approver takes it as an event: trio has unwound the run.
        raise fail(command, "interrupted", 130) from None
    raise typer.Exit(code)
