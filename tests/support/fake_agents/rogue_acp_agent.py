"""A tiny ACP agent (raw JSON lines, no SDK, no permclient) that breaks the rules on purpose.

``simhost run`` must report what it does. Run as ``python rogue_acp_agent.py MODE``:

* ``complete-anyway``: asks to write ``rogue.txt``, then reports the tool call
  ``completed`` whatever the answer was (a denial ignored);
* ``stray``: asks a question for a session that does not exist (``ghost``);
* ``leave-open``: asks a question and ends the turn without waiting for the answer;
* ``ask-after-turn``: ends the turn, then asks about ``late.txt`` for its session
  (a question with no turn running);
* ``allow-then-deny``: asks twice about one tool call, then reports it ``completed``
  (whatever the answers);
* ``reuse-id``: asks about ``rogue.txt``, and again under the same (still pending)
  id about ``dup.txt``, then reports ``rogue.txt`` ``completed``;
* ``complete-later``: asks, ends the turn once answered, and reports the tool call
  ``completed`` 0.3 s later (after the last turn).

Every turn answers ``end_turn``. Only what the runner needs is implemented.
"""

from __future__ import annotations

import json
import os
import sys
import threading
import time
from typing import Any

MODES = (
    "complete-anyway",
    "stray",
    "leave-open",
    "ask-after-turn",
    "allow-then-deny",
    "reuse-id",
    "complete-later",
)


_held: list[str] = []


def send(message: dict[str, Any], *, flush: bool = True) -> None:
    """Write one message; with ``flush=False`` it waits for the next, to go in one write."""
    _held.append(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    if flush:
        sys.stdout.flush()
        # One os.write: the reader gets held messages and this one in the same read
        # (pipes write up to PIPE_BUF bytes at once), whatever Python's buffering.
        data = "".join(_held).encode()
        _held.clear()
        while data:
            data = data[os.write(sys.stdout.fileno(), data) :]


def wait_response(request_id: int) -> dict[str, Any]:
    """Read until the response to ``request_id``; what else arrives meanwhile is dropped."""
    for line in sys.stdin:
        message = json.loads(line)
        if message.get("id") == request_id and "method" not in message:
            return message
    sys.exit(0)


def update(session_id: str, body: dict[str, Any]) -> None:
    send({"method": "session/update", "params": {"sessionId": session_id, "update": body}})


def ask(
    request_id: int,
    session_id: str,
    tool_call_id: str,
    title: str = "fs.write: rogue.txt",
    *,
    flush: bool = True,
) -> None:
    send(
        {
            "id": request_id,
            "method": "session/request_permission",
            "params": {
                "sessionId": session_id,
                "toolCall": {
                    "toolCallId": tool_call_id,
                    "title": title,
                    "kind": "edit",
                    "status": "pending",
                },
                "options": [
                    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                    {"optionId": "deny", "name": "Deny", "kind": "reject_once"},
                ],
            },
        },
        flush=flush,
    )


def turn(mode: str, session_id: str, number: int) -> None:
    tool_call_id = f"call-{number}"
    update(
        session_id,
        {
            "sessionUpdate": "tool_call",
            "toolCallId": tool_call_id,
            "title": "fs.write: rogue.txt",
            "kind": "edit",
            "status": "pending",
        },
    )
    request_id = 1000 + number
    if mode == "stray":
        ask(request_id, "ghost", tool_call_id)
        wait_response(request_id)
        status = "failed"
    elif mode == "leave-open":
        ask(request_id, session_id, tool_call_id)
        return  # the turn ends with the question still open
    elif mode == "ask-after-turn":
        return  # main() asks after the turn's answer
    elif mode == "allow-then-deny":
        ask(request_id, session_id, tool_call_id, "fs.write: rogue.txt (first)")
        wait_response(request_id)
        ask(request_id + 500, session_id, tool_call_id, "fs.write: rogue.txt (second)")
        wait_response(request_id + 500)
        status = "completed"  # whatever the answers said
    elif mode == "reuse-id":
        # One write for both, so the first is surely still pending when the second,
        # under the same id, is read.
        ask(request_id, session_id, tool_call_id, flush=False)
        ask(request_id, session_id, tool_call_id + "b", "fs.write: dup.txt")
        wait_response(request_id)  # the refusal of the reused id, or the answer
        wait_response(request_id)
        status = "completed"
    elif mode == "complete-later":
        ask(request_id, session_id, tool_call_id)
        wait_response(request_id)

        def later() -> None:
            time.sleep(0.3)
            body = {"sessionUpdate": "tool_call_update", "toolCallId": tool_call_id}
            update(session_id, {**body, "status": "completed"})

        threading.Thread(target=later).start()  # not a daemon: runs before the exit
        return
    else:
        ask(request_id, session_id, tool_call_id)
        wait_response(request_id)
        status = "completed"  # whatever the answer said
    update(
        session_id,
        {"sessionUpdate": "tool_call_update", "toolCallId": tool_call_id, "status": status},
    )
    text = {"type": "text", "text": f"rogue turn {number} done"}
    update(session_id, {"sessionUpdate": "agent_message_chunk", "content": text})


def main() -> None:
    mode = sys.argv[1] if len(sys.argv) > 1 else ""
    if mode not in MODES:
        sys.exit(f"usage: rogue_acp_agent.py {'|'.join(MODES)}")
    sessions = turns = 0
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if method == "initialize":
            result: dict[str, Any] = {
                "protocolVersion": 1,
                "agentCapabilities": {},
                "agentInfo": {"name": "rogue", "version": "0"},
                "authMethods": [],
            }
            send({"id": request_id, "result": result})
        elif method == "session/new":
            sessions += 1
            send({"id": request_id, "result": {"sessionId": f"rogue-{sessions}"}})
        elif method == "session/prompt":
            turns += 1
            session_id = message["params"]["sessionId"]
            turn(mode, session_id, turns)
            send({"id": request_id, "result": {"stopReason": "end_turn"}})
            if mode == "ask-after-turn" and turns == 1:
                ask(2000 + turns, session_id, f"late-{turns}", "fs.write: late.txt")
        elif method is not None and request_id is not None:
            send({"id": request_id, "error": {"code": -32601, "message": f"no {method}"}})
        # Notifications and late responses (a question answered after its turn) are dropped.


if __name__ == "__main__":
    main()
