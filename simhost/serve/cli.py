"""``simhost serve``: the command line of the web approvals panel."""

from __future__ import annotations

import ipaddress
import math
import os
import secrets
from pathlib import Path
from typing import Annotated

import trio
import typer

from permclient import DialectName
from simhost._usage import check_agent_command, fail, interrupted
from simhost.serve.access import TOKEN, TOKEN_ENV

__all__ = ["serve_command"]


def serve_command(
    workspace: Annotated[
        Path,
        typer.Option(
            help="Folder the agent works in. Default: the current folder.",
            metavar="DIR",
            show_default=False,
            exists=True,
            file_okay=False,
            dir_okay=True,
            resolve_path=True,
        ),
    ] = Path("."),
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            help="Run this ACP agent instead of the reference runtime (split like a shell; "
            "run in the workspace, which is also its sessions' cwd).",
            metavar="'CMD ARGS'",
        ),
    ] = None,
    dialect: Annotated[
        str | None,
        typer.Option(
            help="Wire dialect: acp (the default with --agent) or bridge (the default "
            "otherwise). Without --agent, the reference runtime is started in that dialect.",
            metavar="acp|bridge",
        ),
    ] = None,
    host: Annotated[
        str,
        typer.Option(
            help="Address to listen on. Anything but a loopback address needs a token you "
            f"chose ({TOKEN_ENV} or --token-file): the page is plain HTTP.",
            metavar="ADDRESS",
        ),
    ] = "127.0.0.1",
    port: Annotated[
        int,
        typer.Option(help="Port to listen on; 0 picks a free one.", metavar="PORT"),
    ] = 0,
    token_file: Annotated[
        Path | None,
        typer.Option(
            "--token-file",
            help=f"Read the token from this file (else {TOKEN_ENV}, else a random one): "
            "22 to 256 characters of A-Z a-z 0-9 _ . ~ -.",
            metavar="FILE",
            exists=True,
            dir_okay=False,
            resolve_path=True,
        ),
    ] = None,
    state_dir: Annotated[
        Path | None,
        typer.Option(
            help="Where the reference runtime keeps its sessions; the agent's stderr is "
            "appended to serve-agent.log there.",
            metavar="DIR",
            file_okay=False,
            resolve_path=True,
        ),
    ] = None,
    start_timeout: Annotated[
        float,
        typer.Option(
            "--start-timeout",
            help="Seconds the agent has to answer initialize and open the first session.",
            metavar="SECONDS",
        ),
    ] = 30.0,
) -> None:
    """Serve approvals to a browser (or `simhost approve` on another machine).

    Starts the reference runtime (or --agent) and a web server in one process,
    opens a first session, and prints one line on stdout:

        serving at http://HOST:PORT/?token=TOKEN

    Open it in a browser: the page lists the sessions, sends prompts, and shows
    every permission request as a card; every open page (and every `simhost
    approve URL`) gets every question, and the first answer wins. A question
    waits for an answer across reloads and dropped connections. Ctrl-C stops:
    every question still pending is answered cancelled.

    Exit code: 0 after Ctrl-C or SIGTERM, 1 if the agent could not start or went
    away, 2 for a usage error or an address that cannot be used, 130 for Ctrl-C
    before it was serving.
    """
    command = "simhost serve"
    if not (math.isfinite(start_timeout) and start_timeout > 0):
        raise fail(command, f"--start-timeout {start_timeout}: give a number of seconds above 0")
    if dialect not in (None, "acp", "bridge"):
        raise fail(command, f"unknown dialect {dialect!r}: expected acp or bridge")
    if not 0 <= port <= 65535:
        raise fail(command, f"--port {port}: expected 0 to 65535")
    if agent is not None:
        check_agent_command(command, "--agent", agent)
    try:
        address = ipaddress.ip_address(host)
    except ValueError:
        raise fail(command, f"--host {host!r}: give an IP address, e.g. 127.0.0.1") from None
    if address.is_unspecified:  # (the Host check needs the one name views use)
        raise fail(
            command,
            f"--host {host} is every address: give the one views will use "
            "(this machine's address on the network you trust)",
        )
    loopback = address.is_loopback
    token = _chosen_token(command, token_file)
    if token is None:
        if not loopback:
            raise fail(
                command,
                f"--host {host} is reachable from other machines: choose the token yourself "
                f"({TOKEN_ENV}=... or --token-file FILE), and read docs/serve.md first",
            )
        token = secrets.token_urlsafe(24)
    chosen: DialectName = (
        "acp" if dialect == "acp" or (dialect is None and agent is not None) else "bridge"
    )
    # Imported here so `simhost runtime` never pays for the web server's modules.
    from simhost.chat.launch import ChatConfig

    from .launch import ServeConfig, run_serve

    config = ServeConfig(
        agent=ChatConfig(
            workspace=workspace,
            state_dir=state_dir,
            runtime_cmd=agent,
            dialect=chosen,
            start_timeout=start_timeout,
        ),
        host=host,
        port=port,
        token=token,
    )
    try:
        code = trio.run(run_serve, config)
    except BaseException as exc:
        if not interrupted(exc):
            raise
        raise fail(command, "interrupted", 130) from None
    raise typer.Exit(code)


def _chosen_token(command: str, token_file: Path | None) -> str | None:
    """The token from --token-file or the environment, checked; None if neither."""
    if token_file is not None:
        try:
            token = token_file.read_text(encoding="utf-8").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise fail(command, f"--token-file {token_file}: cannot read it: {exc}") from None
        where = f"--token-file {token_file}"
    elif os.environ.get(TOKEN_ENV):
        token, where = os.environ[TOKEN_ENV].strip(), TOKEN_ENV
    else:
        return None
    if not TOKEN.fullmatch(token):
        raise fail(
            command, f"{where}: a token is 22 to 256 characters of A-Z a-z 0-9 _ . ~ - (128 bits)"
        )
    return token
