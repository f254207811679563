"""Drive any Agent Client Protocol agent and approve its tool calls, with permclient.acp.

Starts an ACP agent (by default the reference runtime, ``simhost runtime --stdio
--dialect acp``, in a fresh temporary workspace), initializes it, opens a session,
sends one prompt, prints the agent's reply and tool calls as they stream in, and
answers each permission request: you pick an option by its number (``q`` or end of
input answers ``cancelled``), or ``--auto allow|deny`` answers without asking.
Ctrl-C answers the open question ``cancelled``, stops the agent and exits with
status 130.

Usage::

    python examples/acp_client.py
    python examples/acp_client.py --prompt 'create notes.txt with hello' --auto allow
    python examples/acp_client.py --agent 'npx @zed-industries/claude-code-acp' --cwd .
"""

from __future__ import annotations

import argparse
import shlex
import sys
import tempfile
from pathlib import Path
from typing import NoReturn

import trio

import permclient
from permclient.acp import (
    AcpAgent,
    AgentMessageChunk,
    SessionUpdate,
    ToolCallProgress,
    ToolCallStarted,
)

sys.path.insert(0, str(Path(__file__).resolve().parent))
from terminal_approver import (  # the same card and keys
    AutoAnswer,
    first_leaf,
    leave,
    make_handler,
)

DEFAULT_PROMPT = "create notes.txt with hello"


def show_update(update: SessionUpdate) -> None:
    """Print the agent's text as it streams, and one line per tool call event."""
    if isinstance(update, AgentMessageChunk):
        text = getattr(update.content, "text", None)
        if text:
            print(text, end="" if text.endswith("\n") else "\n", flush=True)
    elif isinstance(update, ToolCallStarted):
        print(f"[tool] {update.title or update.tool_call_id} ({update.kind}): {update.status}")
    elif isinstance(update, ToolCallProgress) and update.status:
        print(f"[tool] {update.tool_call_id}: {update.status}")


async def main(argv: list[str], cwd: Path, prompt: str, auto: AutoAnswer | None) -> int:
    async with permclient.open_process(argv, dialect="acp", cwd=cwd) as client:
        agent = AcpAgent(client)
        info = await agent.initialize()
        who = info.agent_info
        print(f"agent: {who.name} {who.version}" if who else "agent: (no agentInfo)")
        session = await agent.new_session(cwd)
        with session.on_update(show_update), session.permission_handler(make_handler(auto)):
            result = await session.prompt(prompt)
        print(f"turn ended: {result.stop_reason}")
    return 0


def cli() -> NoReturn:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agent", help="the agent's command line (default: the reference one)")
    parser.add_argument("--cwd", type=Path, help="the session's folder (default: a fresh one)")
    parser.add_argument("--prompt", default=DEFAULT_PROMPT)
    parser.add_argument("--auto", choices=["allow", "deny"], help="answer without asking")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="acp-client.") as scratch:
        cwd = (args.cwd or Path(scratch)).resolve()
        reference = [sys.executable, "-m", "simhost", "runtime", "--stdio", "--dialect", "acp"]
        argv = shlex.split(args.agent) if args.agent else [*reference, "--workspace", str(cwd)]
        code = 0
        # except*: trio raises what a task raised inside an exception group.
        try:
            code = trio.run(main, argv, cwd, args.prompt, args.auto)
        except* KeyboardInterrupt:
            print("\ninterrupted: the agent is stopped")
            code = 130
        except* (permclient.PermclientError, OSError) as errors:
            print(f"error: {first_leaf(errors)}", file=sys.stderr)
            code = code or 1
    leave(code)


if __name__ == "__main__":
    cli()
