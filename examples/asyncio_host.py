"""An asyncio program that drives ``simhost runtime`` with permclient in trio guest mode.

The client runs on this program's own asyncio loop (no second thread), through
:func:`permclient.embed.asyncio_client`. It opens a session, sends one prompt and
approves the runtime's permission requests through a callback: a plain function
that gets a :class:`permclient.embed.PermissionHandle`, asks (on stdin, in a
worker thread so the loop keeps running) and answers the handle.

``--auto allow|deny`` answers without asking (for scripts and CI). End of input
answers ``deny``; Ctrl-C answers every open question ``cancelled``, stops the
runtime and exits with status 130.

Usage::

    python examples/asyncio_host.py --workspace /tmp/w
    python examples/asyncio_host.py --workspace /tmp/w --auto allow
    python examples/asyncio_host.py --workspace /tmp/w --prompt 'run ls' --auto deny
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path

import permclient
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


_blocked_in_input: set[int] = set()  # reader threads inside input(), abandoned ones too


async def read_line(prompt: str) -> str | None:
    """A line from stdin, or None at end of input, without blocking the loop.

    ``input()`` runs in a daemon thread of its own, not in the loop's executor:
    ``asyncio.run`` waits for the executor's threads at exit, and one blocked in
    ``input()`` would keep Ctrl-C from ever ending the program.
    """
    loop = asyncio.get_running_loop()
    line: asyncio.Future[str | None] = loop.create_future()

    def settle(value: str | None) -> None:
        if not line.done():
            line.set_result(value)

    def read() -> None:
        me = threading.get_ident()
        _blocked_in_input.add(me)
        try:
            value: str | None = input(prompt)
        except EOFError:
            value = None
        finally:
            _blocked_in_input.discard(me)
        with contextlib.suppress(RuntimeError):  # the loop is gone: no one is asking
            loop.call_soon_threadsafe(settle, value)

    threading.Thread(target=read, name="stdin", daemon=True).start()
    return await line


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
            line = await read_line("allow? [y/N] ")
            if line is None:
                print("(end of input: denied)", flush=True)
            option = allow if line is not None and line.strip().lower() == "y" else deny
            if handle.done:
                return  # withdrawn while we asked
            if option is None:
                handle.cancel()
            else:
                handle.answer(Selected(option.option_id))

        # Kept until done: the loop holds only a weak reference to a task.
        task = asyncio.get_running_loop().create_task(ask())
        _asking.add(task)
        task.add_done_callback(_asking.discard)

    return approve


_asking: set[asyncio.Task[None]] = set()


async def main(workspace: str, state_dir: str, prompt: str, auto: str | None) -> None:
    async with asyncio_client(runtime_argv(workspace, state_dir)) as client:
        new = await client.request("sessionNew", {"title": "asyncio host"})
        session_id = new["sessionId"]
        with client.permission_handler(session_id, make_approver(auto)):
            result = await client.request("chatSend", {"sessionId": session_id, "text": prompt})
        print(f"turn ended: {result['stopReason']}", flush=True)
    print("runtime stopped", flush=True)


def cli() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", help="the runtime's workspace (default: a temp folder)")
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--auto", choices=["allow", "deny"], help="answer without asking")
    args = parser.parse_args()
    code = 0
    with tempfile.TemporaryDirectory() as scratch:
        workspace = args.workspace or scratch
        Path(workspace).mkdir(parents=True, exist_ok=True)
        try:
            asyncio.run(main(workspace, str(Path(scratch) / "state"), args.prompt, args.auto))
        except KeyboardInterrupt:
            # asyncio.run cancelled main(): leaving asyncio_client answered every open
            # question cancelled and stopped the runtime before this.
            print("\ninterrupted: open questions cancelled, runtime stopped", flush=True)
            code = 130
        except (permclient.PermclientError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            code = 1
    if _blocked_in_input:
        # A reader thread still inside input() holds stdin's lock; a normal interpreter
        # shutdown would abort on it, so leave without one.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(cli())
