"""A synchronous, plugin-style API on top of permclient's blocking facade.

Many editor plugin APIs are plain callbacks on a UI thread, with no event loop.
:class:`AgentPlugin` below is what such a plugin might look like: ``start()``,
``send(text)`` (blocks until the turn ends; call it from a worker thread in a
real editor), ``stop()``. Permission requests become "cards": the editor's
``show_card(handle)`` runs through ``dispatch`` (here a small "UI thread" with a
queue, standing in for a toolkit's run-on-main-thread), and the user's click
calls ``handle.answer(...)`` from whichever thread it happens on.

``--auto allow|deny`` clicks for you (for scripts and CI). Without it, the card
asks on stdin (from a thread of its own: the UI thread never blocks); end of input
clicks "deny", and Ctrl-C withdraws the open cards (the runtime gets
``cancelled``), stops the runtime and exits with status 130.

Usage::

    python examples/threaded_plugin.py --auto allow
    python examples/threaded_plugin.py --workspace /tmp/w --prompt 'run ls' --auto deny
    python examples/threaded_plugin.py          # asks on stdin
"""

from __future__ import annotations

import argparse
import os
import queue
import sys
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import permclient
from permclient import Selected
from permclient.embed import BlockingClient, PermissionHandle, open_blocking


class UiThread:
    """A stand-in for a UI toolkit's main thread: runs what is posted to it, in order."""

    def __init__(self) -> None:
        self._queue: queue.Queue[Callable[[], object] | None] = queue.Queue()
        self._thread = threading.Thread(target=self._loop, name="ui-main")
        self._thread.start()

    def post(self, fn: Callable[[], object]) -> None:
        """The ``dispatch`` callable: safe from any thread."""
        self._queue.put(fn)

    def _loop(self) -> None:
        while (fn := self._queue.get()) is not None:
            fn()

    def stop(self) -> None:
        self._queue.put(None)
        self._thread.join()


class AgentPlugin:
    """The plugin: one runtime, one session, synchronous calls."""

    def __init__(self, argv: list[str], show_card: Callable[[PermissionHandle], None]) -> None:
        self._argv = argv
        self._show_card = show_card
        self._ui = UiThread()
        self._client: BlockingClient | None = None
        self._session_id = ""

    def start(self) -> None:
        self._client = open_blocking(self._argv, dispatch=self._ui.post)
        self._session_id = self._client.request("sessionNew", {"title": "plugin"})["sessionId"]
        self._client.permission_handler(self._session_id, self._show_card)

    def send(self, text: str) -> str:
        assert self._client is not None
        result: dict[str, Any] = self._client.request(
            "chatSend", {"sessionId": self._session_id, "text": text}
        )
        return str(result["stopReason"])

    def stop(self) -> None:
        """Every open card is withdrawn and answered cancelled; the runtime stops."""
        if self._client is not None:
            self._client.close()
        self._ui.stop()


_blocked_in_input: set[int] = set()  # prompt threads inside input(), abandoned ones too


def ask_on_stdin(click: Callable[[str], None]) -> None:
    """The user's answer, from stdin: ``y`` allows, anything else (or end of input) denies."""
    me = threading.get_ident()
    _blocked_in_input.add(me)
    try:
        line = input("allow? [y/N] ")
    except EOFError:
        line = ""
        print("(end of input: denied)", flush=True)
    finally:
        _blocked_in_input.discard(me)
    click("allow" if line.strip().lower() == "y" else "deny")


def make_show_card(auto: str | None) -> Callable[[PermissionHandle], None]:
    def show_card(handle: PermissionHandle) -> None:
        tool_call = handle.request.tool_call
        print(f"[{threading.current_thread().name}] card: {tool_call.title}", flush=True)
        handle.on_cancelled(lambda h: print(f"card withdrawn: {tool_call.title}", flush=True))
        wanted = {"allow": "allow_once", "deny": "reject_once"}

        def click(choice: str) -> None:
            if handle.done:
                return  # the card was withdrawn while the user looked at it
            option = next((o for o in handle.request.options if o.kind == wanted[choice]), None)
            if option is None:
                handle.cancel()
            else:
                handle.answer(Selected(option.option_id))
            print(f"[{threading.current_thread().name}] clicked: {choice}", flush=True)

        # The click comes from another thread than the card: that is fine. The card
        # itself returns at once, as a real one would: the UI thread never waits.
        if auto is not None:
            threading.Thread(target=click, args=(auto,), name="click").start()
        else:
            threading.Thread(target=ask_on_stdin, args=(click,), name="click", daemon=True).start()

    return show_card


def cli() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workspace", help="the runtime's workspace (default: a temp folder)")
    parser.add_argument("--prompt", default="create notes.txt with hello from a plugin")
    parser.add_argument("--auto", choices=["allow", "deny"], help="click without asking")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        workspace = args.workspace or scratch
        Path(workspace).mkdir(parents=True, exist_ok=True)
        argv = [sys.executable, "-m", "simhost", "runtime", "--stdio"]
        argv += ["--workspace", workspace, "--state-dir", str(Path(scratch) / "state")]
        plugin = AgentPlugin(argv, make_show_card(args.auto))
        code = 0
        try:
            try:
                plugin.start()
                print(f"turn ended: {plugin.send(args.prompt)}", flush=True)
            finally:
                plugin.stop()
            print("runtime stopped", flush=True)
        except KeyboardInterrupt:
            print("\ninterrupted: open cards withdrawn, runtime stopped", flush=True)
            code = 130
        except (permclient.PermclientError, OSError) as exc:
            print(f"error: {exc}", file=sys.stderr)
            code = 1
    if _blocked_in_input:
        # A prompt thread still inside input() holds stdin's lock; a normal interpreter
        # shutdown would abort on it, so leave without one.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(cli())
