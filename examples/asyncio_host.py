"""An asyncio program that drives ``simhost runtime`` with permclient in trio guest mode.

The client runs on this program's own asyncio loop (no second thread), through
:func:`permclient.embed.asyncio_client`. It opens a session, sends one prompt and
approves the runtime's permission requests through a callback: a plain function
that gets a :class:`permclient.embed.PermissionHandle`, asks (on stdin, in a
worker thread so the loop keeps running) and answers the handle.

``--auto allow|deny`` answers without asking (for scripts and CI).

Usage::

    python examples/asyncio_host.py --workspace /tmp/w
    python examples/asyncio_host.py --workspace /tmp/w --auto allow
    python examples/asyncio_host.py --workspace /tmp/w --prompt 'run ls' --auto deny
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path

from permclient import Selected
from permclient.embed import PermissionHandle, asyncio_client

DEFAULT_PROMPT = "create notes.txt with hello from asyncio"


def runtime_argv(workspace: str, state_dir: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "simhost",
        "runtime",
        "--stdio",
        "--workspace",
        workspace,
        "--state-dir",
        state_dir,
    ]


def make_approver(auto: str | None) -> Callable[[PermissionHandle], None]:
    """The permission callback: runs on the asyncio loop, answers the handle later."""

    def approve(handle: PermissionHandle) -> None:
        tool_call = handle.request.tool_call
        print(f"permission asked: {tool_call.title} ({tool_call.kind})", flush=True)
        handle.on_cancelled(lambda h: print(f"withdrawn: {tool_call.title}", flush=True))
        allow = next((o for o in handle.request.options if o.kind == "allow_once"), None)
        deny = next((o for o in handle.request.options if o.kind == "reject_once"), None)
        if auto is not None:
            option = allow if auto == "allow" else deny
            if option is None:
                handle.cancel()
            else:
                handle.answer(Selected(option.option_id))
                print(f"answered: {option.option_id}", flush=True)
            return

        async def ask() -> None:
            line = await asyncio.to_thread(input, "allow? [y/N] ")
            option = allow if line.strip().lower() == "y" else deny
            if option is None or not handle.answer(Selected(option.option_id)):
                handle.cancel()

        asyncio.get_running_loop().create_task(ask())

    return approve


async def main(workspace: str, state_dir: str, prompt: str, auto: str | None) -> None:
    async with asyncio_client(runtime_argv(workspace, state_dir)) as client:
        new = await client.request("sessionNew", {"title": "asyncio host"})
        session_id = new["sessionId"]
        with client.permission_handler(session_id, make_approver(auto)):
            result = await client.request("chatSend", {"sessionId": session_id, "text": prompt})
        print(f"turn ended: {result['stopReason']}", flush=True)
    print("runtime stopped", flush=True)


def cli() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", help="the runtime's workspace (default: a temp folder)")
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--auto", choices=["allow", "deny"], help="answer without asking")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        workspace = args.workspace or scratch
        Path(workspace).mkdir(parents=True, exist_ok=True)
        asyncio.run(main(workspace, str(Path(scratch) / "state"), args.prompt, args.auto))


if __name__ == "__main__":
    cli()
