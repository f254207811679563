"""Approve a coding agent's tool calls from the terminal, with permclient.

Spawns the demo runtime ``examples/demo_agent.py`` (bridge dialect), opens a
session, sends one prompt and answers the runtime's permission requests:

* a ``read`` tool call is allowed once automatically;
* anything else is shown (session, tool, command, diffs) and you pick an option by
  its number. There is no default: an empty line asks again; ``q`` or end of input
  answers ``cancelled``, which the runtime treats as "no". Ctrl-C answers the open
question ``cancelled``, stops the agent and exits with status 130.

``--auto deny`` / ``--auto allow`` answers without asking (for scripts and CI).

Usage::

    python examples/terminal_approver.py
    python examples/terminal_approver.py --auto deny
    printf '1\\n2\\n' | python examples/terminal_approver.py
    python examples/terminal_approver.py --prompt 'run make test; edit notes.txt done'
"""

from __future__ import annotations

import argparse
import difflib
import json
import os
import sys
import threading
from pathlib import Path
from typing import Any, Literal, NoReturn

import msgspec
import trio

import permclient
from permclient import (
    Cancelled,
    Content,
    Decision,
    Diff,
    InboundNotification,
    PermissionOption,
    PermissionRequest,
    Selected,
    Terminal,
    TextContent,
)
from permclient.acp import ToolCallProgress, ToolCallStarted

DEMO_AGENT = Path(__file__).resolve().parent / "demo_agent.py"
DEFAULT_PROMPT = "read README.md; edit notes.txt remember the milk; run ls -la"
AutoAnswer = Literal["allow", "deny"]


class SessionNewResult(msgspec.Struct, rename="camel"):
    session_id: str


def first_option(request: PermissionRequest, *kinds: str) -> PermissionOption | None:
    """The first offered option of one of ``kinds`` (in the order given)."""
    for kind in kinds:
        for option in request.options:
            if option.kind == kind:
                return option
    return None


def show(request: PermissionRequest) -> None:
    """Print what the agent wants to do: the permission card."""
    tool = request.tool_call
    print(f"\n== permission request (session {request.session_id}) ==")
    print(f"tool:    {tool.title or tool.tool_call_id}  [{tool.kind or 'unknown kind'}]")
    raw = tool.raw_input if isinstance(tool.raw_input, dict) else {}
    if "command" in raw:
        command = raw["command"]
        shown = " ".join(map(str, command)) if isinstance(command, list) else str(command)
        print(f"command: {shown}")
        if "cwd" in raw:
            print(f"cwd:     {raw['cwd']}")
    elif tool.raw_input is not None:
        print(f"input:   {json.dumps(tool.raw_input)}")
    for location in tool.locations or ():
        print(f"file:    {location.path}")
    for item in tool.content or ():
        if isinstance(item, Diff):
            old = (item.old_text or "").splitlines(keepends=True)
            new = item.new_text.splitlines(keepends=True)
            label = "new file" if item.old_text is None else "edit"
            print(f"diff ({label}) {item.path}:")
            lines = difflib.unified_diff(old, new, "before", "after")
            sys.stdout.writelines("    " + line.rstrip("\n") + "\n" for line in lines)
        elif isinstance(item, Content) and isinstance(item.content, TextContent):
            print(f"note:    {item.content.text}")
        elif isinstance(item, Terminal):
            print(f"terminal: {item.terminal_id}")


_blocked_in_input: set[int] = set()  # worker threads inside input(), abandoned ones too


def blocking_input(prompt: str) -> str:
    """``input()``, recorded, so :func:`main` knows whether one is still blocked at exit."""
    me = threading.get_ident()
    _blocked_in_input.add(me)
    try:
        return input(prompt)
    finally:
        _blocked_in_input.discard(me)


async def ask(request: PermissionRequest) -> Decision:
    """Ask on the terminal until a valid option number, ``q`` or end of input."""
    for n, option in enumerate(request.options, 1):
        print(f"  {n}) {option.name}  ({option.kind})")
    prompt = f"choose 1-{len(request.options)}, or q to cancel: "
    while True:
        try:
            # input() blocks, so it runs in a worker thread and the trio loop keeps
            # serving the connection. abandon_on_cancel: when the request is cancelled
            # (runtime withdrew it, turn cancelled, connection lost) the handler returns
            # at once and the thread is left behind; the line typed into it is lost.
            line = await trio.to_thread.run_sync(blocking_input, prompt, abandon_on_cancel=True)
        except EOFError:
            print("\n(end of input: cancelled)")
            return Cancelled()
        if not sys.stdin.isatty():
            print(line)  # echo piped answers so the transcript reads well
        answer = line.strip().lower()
        if answer == "q":
            return Cancelled()
        # Plain ASCII digits, and few: int() refuses "²", and numbers of 4,301 digits.
        if answer.isascii() and answer.isdigit() and len(answer) < 4:
            number = int(answer)
            if 1 <= number <= len(request.options):
                return Selected(request.options[number - 1].option_id)
        if answer:
            print(f"not an option: {line.strip()!r}")


def make_handler(auto: AutoAnswer | None) -> permclient.PermissionHandler:
    one_at_a_time = trio.Lock()  # one permission card on the terminal at a time

    async def handler(request: PermissionRequest) -> Decision:
        tool = request.tool_call
        if tool.kind == "read" and (option := first_option(request, "allow_once")):
            print(f"\n[auto] read allowed: {tool.title} -> {option.name}")
            return Selected(option.option_id)
        async with one_at_a_time:
            show(request)
            if auto is None:
                return await ask(request)
            kinds = ("allow_once",) if auto == "allow" else ("reject_once", "reject_always")
            chosen = first_option(request, *kinds)
            if chosen is None:
                print(f"[auto {auto}] no such option offered: cancelled")
                return Cancelled()
            print(f"[auto {auto}] chose {chosen.name!r} ({chosen.option_id})")
            return Selected(chosen.option_id)

    return handler


def first_leaf(error: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def print_update(note: InboundNotification) -> None:
    """Show tool-call status lines (a notification callback: sync, must not block)."""
    update = note.update  # typed once (the client's tool-call tracker read the same one)
    if isinstance(update, ToolCallStarted | ToolCallProgress):
        print(f"  . {update.tool_call_id}: {update.status or '?'}")


async def run(prompt: str, auto: AutoAnswer | None) -> None:
    argv = [sys.executable, str(DEMO_AGENT)]
    async with permclient.open_process(argv, dialect="bridge") as client:
        new = await client.request(
            "sessionNew", {"title": "terminal approver"}, result_type=SessionNewResult
        )
        session_id = new.session_id
        print(f"session {session_id}: {prompt!r}")
        with (
            client.on_session_notification(session_id, print_update),
            client.permission_handler(session_id, make_handler(auto)),
        ):
            result = await client.request("chatSend", {"sessionId": session_id, "text": prompt})
        print("\n== turn result ==")
        print(json.dumps(result, indent=2))
        print("\n== tool calls (client.tool_calls) ==")
        for state in client.tool_calls.session(session_id):
            print(f"  {state.tool_call_id}: {state.status:<10} {state.title}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0] if __doc__ else None)
    parser.add_argument(
        "--auto",
        choices=["allow", "deny"],
        help="answer every non-read request without asking (allow once, or deny)",
    )
    parser.add_argument("--prompt", default=DEFAULT_PROMPT, help="the text sent with chatSend")
    args = parser.parse_args()
    auto: Any = args.auto
    code = 0
    # except*: trio raises what a task raised inside an exception group.
    try:
        trio.run(run, args.prompt, auto)
    except* KeyboardInterrupt:
        print("\ninterrupted: open questions cancelled, the agent stopped")
        code = 130
    except* (permclient.PermclientError, OSError) as errors:
        print(f"error: {first_leaf(errors)}", file=sys.stderr)
        code = code or 1
    leave(code)


def leave(code: int) -> NoReturn:
    """Exit with ``code``, even with a prompt thread still blocked in ``input()``."""
    if _blocked_in_input:
        # An abandoned prompt thread still holds stdin's lock; a normal interpreter
        # shutdown would abort on it, so leave without one.
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)
    sys.exit(code)


if __name__ == "__main__":
    main()
