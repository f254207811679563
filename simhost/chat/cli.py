"""``simhost chat``: the command line of the stand-in editor."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import trio
import typer
from rich.console import Console

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
    runtime_cmd: Annotated[
        str | None,
        typer.Option(
            "--runtime-cmd",
            help="Advanced: run this bridge runtime instead of the reference one, e.g. "
            "'node my-runtime.js --stdio' (split like a shell; run in the workspace; "
            "--policy and --state-dir are not added to it).",
            metavar="'CMD ARGS'",
        ),
    ] = None,
) -> None:
    """Chat with an agent runtime and approve each tool call it asks for.

    Starts the reference runtime (or --runtime-cmd) as a child process, opens a
    session and shows every permission request as a card: number keys choose an
    option, Esc answers cancelled, Enter alone does nothing. Ctrl-C cancels a
    running turn; at the prompt it leaves. /help lists the commands. With stdin
    not a terminal, each line is a prompt, a command or a card's answer.
    """
    if policy is not None and Path(policy).expanduser().is_file():
        policy = str(Path(policy).expanduser().resolve())
    # Imported here so `simhost runtime` never pays for the chat's modules.
    from simhost.chat.launch import ChatConfig, run_chat

    config = ChatConfig(
        workspace=workspace,
        policy=policy,
        state_dir=state_dir,
        telemetry=telemetry,
        runtime_cmd=runtime_cmd,
    )
    if runtime_cmd is not None and not config.runtime_argv():
        Console(stderr=True).print("simhost chat: --runtime-cmd is empty")
        raise typer.Exit(2)
    code = trio.run(run_chat, config)
    raise typer.Exit(code)
