"""``simhost chat``: the command line of the stand-in editor."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Annotated

import trio
import typer

from permclient import DialectName
from simhost._usage import (
    ArmDelayOption,
    RepeatGuardOption,
    check_agent_command,
    check_seconds,
    fail,
    interrupted,
)

__all__ = ["chat_command"]


def chat_command(
    workspace: Annotated[
        Path,
        typer.Option(
            help="Folder the agent works in (passed to the runtime). Default: the current folder.",
            metavar="DIR",
            show_default=False,
            exists=True,
            file_okay=False,
            dir_okay=True,
            resolve_path=True,
        ),
    ] = Path("."),
    policy: Annotated[
        str | None,
        typer.Option(
            help="Human-in-the-loop policy of the reference runtime: a shipped policy's NAME "
            "or a JSON file's PATH (checked before it starts; not with --agent).",
            metavar="NAME|PATH",
        ),
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            help="Where the reference runtime keeps its sessions; its log (or the --agent's "
            "stderr) is appended to chat-runtime.log there.",
            metavar="DIR",
            file_okay=False,
            resolve_path=True,
        ),
    ] = None,
    telemetry: Annotated[
        Path | None,
        typer.Option(
            help="Append one JSON object per approval event to this file.",
            metavar="FILE",
            dir_okay=False,
            resolve_path=True,
        ),
    ] = None,
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            help="Run this agent instead of the reference runtime, e.g. "
            "'npx @zed-industries/claude-code-acp' (split like a shell; run in the "
            "workspace, which is also its sessions' cwd). Speaks ACP unless --dialect "
            "bridge.",
            metavar="'CMD ARGS'",
        ),
    ] = None,
    dialect: Annotated[
        str | None,
        typer.Option(
            help="Wire dialect: acp (Agent Client Protocol, newline-delimited; the default "
            "with --agent) or bridge (Content-Length framed; the default otherwise). "
            "Without --agent, the reference runtime is started in that dialect.",
            metavar="acp|bridge",
        ),
    ] = None,
    start_timeout: Annotated[
        float,
        typer.Option(
            "--start-timeout",
            help="Seconds the agent has to answer initialize and open the first session; "
            "then the chat gives up with exit code 1.",
            metavar="SECONDS",
        ),
    ] = 30.0,
    runtime_cmd: Annotated[
        str | None,
        typer.Option(
            "--runtime-cmd",
            help="Same as --agent CMD --dialect bridge (kept for scripts).",
            metavar="'CMD ARGS'",
        ),
    ] = None,
    arm_delay: ArmDelayOption = None,
    repeat_guard: RepeatGuardOption = None,
) -> None:
    """Chat with an agent and approve each tool call it asks for.

    Starts the reference runtime (or --agent, any ACP agent) as a child process,
    shows its name and version, opens a session, streams its replies and shows
    every permission request as a card: number keys choose an option, Esc answers
    cancelled, Enter alone does nothing; a card takes a key once it has been on screen
    for --arm-delay, and not the repeat of the key that answered the card before it
    (--repeat-guard). Ctrl-C cancels a running turn (ACP:
    session/cancel); at the prompt it leaves. /help lists the commands. With stdin
    not a terminal, each line is a prompt, a command or a card's answer.

    Exit code: 0 after /quit or the end of input, 1 if the agent could not start
    (within --start-timeout), died or broke the connection, 2 for a usage error
    (nothing is started), 130 when interrupted while starting.
    """
    command = "simhost chat"
    if not (math.isfinite(start_timeout) and start_timeout > 0):
        raise fail(command, f"--start-timeout {start_timeout}: give a number of seconds above 0")
    # The guards' defaults and range, imported here (like the launch, below) so
    # `simhost runtime` never pays for the chat's modules.
    from simhost.chat.app import DEFAULT_ARM_DELAY_S, MAX_GUARD_S, MIN_GUARD_S, REPEAT_GUARD_S

    if arm_delay is None:
        arm_delay = DEFAULT_ARM_DELAY_S
    check_seconds(command, "--arm-delay", arm_delay, MIN_GUARD_S, MAX_GUARD_S)
    if repeat_guard is None:
        repeat_guard = REPEAT_GUARD_S
    check_seconds(command, "--repeat-guard", repeat_guard, MIN_GUARD_S, MAX_GUARD_S)
    if dialect not in (None, "acp", "bridge"):
        raise fail(command, f"unknown dialect {dialect!r}: expected acp or bridge")
    if agent is not None and runtime_cmd is not None:
        raise fail(command, "give --agent or --runtime-cmd, not both")
    if runtime_cmd is not None:
        if dialect == "acp":
            raise fail(command, "--runtime-cmd is a bridge runtime: use --agent for ACP")
        agent, dialect = runtime_cmd, "bridge"
    option = "--runtime-cmd" if runtime_cmd is not None else "--agent"
    if agent is not None:
        check_agent_command(command, option, agent)
        if policy is not None:
            # Only the reference runtime takes a policy: an agent has its own settings.
            raise fail(command, f"--policy is for the reference runtime: not with {option}")
    elif policy is not None:
        # Checked here, before anything starts, with the runtime's own loader.
        from simhost.runtime.policy import PolicyError, load_policy

        try:
            _, policy = load_policy(policy)
        except PolicyError as exc:
            raise fail(command, str(exc)) from None
    chosen: DialectName = (
        "acp" if dialect == "acp" or (dialect is None and agent is not None) else "bridge"
    )
    try:
        # Imported here so `simhost runtime` never pays for the chat's modules.
        from simhost.chat.launch import ChatConfig, run_chat

        config = ChatConfig(
            workspace=workspace,
            policy=policy,
            state_dir=state_dir,
            telemetry=telemetry,
            runtime_cmd=agent,
            dialect=chosen,
            start_timeout=start_timeout,
            arm_delay=arm_delay,
            repeat_guard=repeat_guard,
        )
        code = trio.run(run_chat, config)
    except BaseException as exc:
        if not interrupted(exc):
            raise
        # Ctrl-C before the chat takes it as an event (or after): trio has unwound
        # the run by now, so whatever was started is stopped.
        raise fail(command, "interrupted", 130) from None
    raise typer.Exit(code)
