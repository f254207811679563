"""``simhost runtime``: the reference runtime's command line.

Nothing but protocol bytes ever goes to stdout: errors and logs go to stderr.
Exit codes: 0 when the editor closes stdin, 2 for a bad option (unknown
dialect, missing workspace, invalid policy, a state folder that cannot be
created, written or used), 1 when serving fails, 130 on Ctrl-C. Two dialects:
``bridge`` (the default) and ``acp`` (Agent Client Protocol v1).
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated, Final, get_args

import trio
import typer
from rich.logging import RichHandler

from permclient import DialectName
from permclient._workspace_fs import escape_non_utf8, is_utf8
from simhost._usage import fail, plain_console
from simhost.runtime.policy import PolicyError, load_policy, shipped_policy_names
from simhost.runtime.sessions import SessionStore, default_state_dir

__all__ = ["runtime_command"]

_stderr = plain_console(stderr=True)
_DIALECTS: Final[tuple[DialectName, ...]] = get_args(DialectName)


def _fail(message: str, code: int) -> typer.Exit:
    return fail("simhost runtime", message, code)


def runtime_command(
    stdio: Annotated[
        bool,
        typer.Option(
            "--stdio/--no-stdio",
            help="Speak the protocol on stdin/stdout (the only transport so far).",
        ),
    ] = True,
    workspace: Annotated[
        Path | None,
        typer.Option(
            help="Folder the tools act in; paths in prompts are relative to it. "
            "[default: the current folder]",
            metavar="DIR",
            show_default=False,
        ),
    ] = None,
    policy: Annotated[
        str,
        typer.Option(
            help="Human-in-the-loop policy: a shipped name "
            f"({', '.join(shipped_policy_names())}) or the path of a JSON policy file.",
            metavar="NAME|PATH",
        ),
    ] = "default",
    state_dir: Annotated[
        Path | None,
        typer.Option(
            help="Folder where sessions are kept. [default: one per workspace, "
            "under $XDG_STATE_HOME/simhost/workspaces or ~/.local/state/simhost/workspaces]",
            metavar="DIR",
            show_default=False,
        ),
    ] = None,
    dialect: Annotated[
        str,
        typer.Option(
            help="Wire dialect: bridge (VS Code style: Content-Length framed JSON-RPC, "
            "chatSend) or acp (Agent Client Protocol v1: newline-delimited JSON-RPC, "
            "initialize, session/new, session/load, session/prompt, session/cancel).",
            metavar="bridge|acp",
        ),
    ] = "bridge",
    verbose: Annotated[
        bool, typer.Option("--verbose", "-v", help="Log what happens to stderr.")
    ] = False,
) -> None:
    """Run the deterministic reference agent runtime (no LLM) for an editor.

    Prompts such as `create notes.txt with hello` or `run ls` become tool calls
    that act inside the workspace only after the policy or the editor allows them.
    """
    if dialect not in _DIALECTS:
        raise _fail(f"unknown dialect {dialect!r}: expected {' or '.join(_DIALECTS)}", 2)
    if not stdio:
        raise _fail("--stdio is the only transport so far", 2)
    folder = (workspace or Path.cwd()).expanduser()
    if not folder.is_dir():
        raise _fail(f"workspace {folder} is not a folder", 2)
    try:
        loaded, label = load_policy(policy)
    except PolicyError as exc:
        raise _fail(str(exc), 2) from None
    resolved = folder.resolve()
    if not is_utf8(resolved):  # every tool call names it, and JSON carries only UTF-8
        raise _fail(f"workspace {escape_non_utf8(resolved)}: its path is not UTF-8", 2)
    state = (state_dir or default_state_dir(resolved)).expanduser().absolute()
    try:
        state.mkdir(parents=True, exist_ok=True, mode=0o700)
    except OSError as exc:
        raise _fail(f"cannot create the state folder {state}: {exc.strerror or exc}", 2) from None
    if not os.access(state, os.W_OK | os.X_OK):
        raise _fail(f"cannot write in the state folder {state}", 2)
    logging.basicConfig(
        level=logging.INFO if verbose else logging.WARNING,
        format="%(message)s",
        handlers=[RichHandler(console=_stderr, show_path=False)],
    )
    try:
        store = SessionStore(state)  # before serving: its errors are one line, not a traceback
    except OSError as exc:
        raise _fail(f"cannot use the state folder {state}: {exc.strerror or exc}", 2) from None
    # Imported here so `simhost chat` never pays for the runtime's server.
    from simhost.runtime.server import RuntimeConfig, serve_stdio

    config = RuntimeConfig(resolved, loaded, label, state, dialect)
    try:
        trio.run(serve_stdio, config, None, store)
    except KeyboardInterrupt:
        raise typer.Exit(130) from None
    except OSError as exc:
        raise _fail(str(exc), 1) from None
