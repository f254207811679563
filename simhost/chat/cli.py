"""``simhost chat``: the command line of the stand-in editor."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import trio
import typer
from rich.console import Console

from permclient import DialectName

__all__ = ["chat_command"]


def chat_command(
    workspace: Annotated[
        Path,
        typer.Option(
            help="Folder the agent works in (passed to the runtime). Default: the current folder.",
            exists=True,
            file_okay=False,
            dir_okay=True,
            resolve_path=True,
        ),
    ] = Path("."),
    policy: Annotated[
        str | None,
        typer.Option(
            help="Human-in-the-loop policy: a shipped policy's NAME or a JSON file's PATH "
            "(passed to the runtime).",
            metavar="NAME|PATH",
        ),
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            help="Where the runtime keeps its sessions (passed to the runtime); the runtime's "
            "log goes there too, as chat-runtime.log.",
            file_okay=False,
            resolve_path=True,
        ),
    ] = None,
    telemetry: Annotated[
        Path | None,
        typer.Option(
            help="Append one JSON object per approval event to this file.",
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
    runtime_cmd: Annotated[
        str | None,
        typer.Option(
            "--runtime-cmd",
            help="Same as --agent CMD --dialect bridge (kept for scripts).",
            metavar="'CMD ARGS'",
        ),
    ] = None,
) -> None:
    """Chat with an agent and approve each tool call it asks for.

    Starts the reference runtime (or --agent, any ACP agent) as a child process,
    shows its name and version, opens a session, streams its replies and shows
    every permission request as a card: number keys choose an option, Esc answers
    cancelled, Enter alone does nothing. Ctrl-C cancels a running turn (ACP:
    session/cancel); at the prompt it leaves. /help lists the commands. With stdin
    not a terminal, each line is a prompt, a command or a card's answer.
    """
    err = Console(stderr=True)
    if agent is not None and runtime_cmd is not None:
        err.print("simhost chat: give --agent or --runtime-cmd, not both")
        raise typer.Exit(2)
    if dialect not in (None, "acp", "bridge"):
        err.print(f"simhost chat: unknown dialect {dialect!r}: expected acp or bridge")
        raise typer.Exit(2)
    if runtime_cmd is not None:
        if dialect == "acp":
            err.print("simhost chat: --runtime-cmd is a bridge runtime: use --agent for ACP")
            raise typer.Exit(2)
        agent, dialect = runtime_cmd, "bridge"
    chosen: DialectName = (
        "acp" if dialect == "acp" or (dialect is None and agent is not None) else "bridge"
    )
    if policy is not None and Path(policy).expanduser().is_file():
        policy = str(Path(policy).expanduser().resolve())
    # Imported here so `simhost runtime` never pays for the chat's modules.
    from simhost.chat.launch import ChatConfig, run_chat

    config = ChatConfig(
        workspace=workspace,
        policy=policy,
        state_dir=state_dir,
        telemetry=telemetry,
        runtime_cmd=agent,
        dialect=chosen,
    )
    if agent is not None and not config.runtime_argv():
        err.print("simhost chat: the agent's command is empty")
        raise typer.Exit(2)
    code = trio.run(run_chat, config)
    raise typer.Exit(code)
