"""A tiny ACP agent (raw JSON lines) that asks several questions at once.

Each prompt asks, all at once: ``read src/a.py`` (``call-1``), ``read src/b.py``
(``call-2``), ``read docs/c.md`` (``call-3``), all of kind ``read``, and ``make``
(``call-4``, kind ``execute``). Once ``call-1`` is answered it asks one more read,
``read src/late.py`` (``call-5``): a question that came after a batch's preview.
When every question is answered it says how each one was (``call-1: deny``, ...,
one line each, in call order) and ends the turn. Paths are absolute, in the folder
it runs in (the workspace).
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

OPTIONS = [
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "deny", "name": "Deny", "kind": "reject_once"},
]
FIRST = [
    ("read", "src/a.py"),
    ("read", "src/b.py"),
    ("read", "docs/c.md"),
    ("execute", "make"),
]
LATE = ("read", "src/late.py")


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def update(session_id: str, body: dict[str, Any]) -> None:
    send({"method": "session/update", "params": {"sessionId": session_id, "update": body}})


def ask(session_id: str, number: int, kind: str, what: str) -> int:
    call_id = f"call-{number}"
    if kind == "read":
        path = os.path.join(os.getcwd(), what)
        title = f"read {what}"
        extra: dict[str, Any] = {"locations": [{"path": path}], "rawInput": {"path": path}}
    else:
        title = f"run {what}"
        extra = {"rawInput": {"command": what}}
    call = {"toolCallId": call_id, "title": title, "kind": kind}
    update(session_id, {"sessionUpdate": "tool_call", **call, "status": "pending"})
    request_id = 1000 + number
    send(
        {
            "id": request_id,
            "method": "session/request_permission",
            "params": {"sessionId": session_id, "toolCall": {**call, **extra}, "options": OPTIONS},
        }
    )
    return request_id


def turn(session_id: str) -> str:
    """Ask every question; the outcomes, once all are answered."""
    asked: dict[int, int] = {}  # request id -> call number
    for number, (kind, what) in enumerate(FIRST, 1):
        asked[ask(session_id, number, kind, what)] = number
    outcomes: dict[int, str] = {}
    for line in sys.stdin:
        message = json.loads(line)
        answered = asked.get(message.get("id"))
        if answered is None or "method" in message:
            continue
        number = answered
        outcome = message.get("result", {}).get("outcome", {})
        outcomes[number] = str(outcome.get("optionId", outcome.get("outcome")))
        if number == 1:
            asked[ask(session_id, len(FIRST) + 1, *LATE)] = len(FIRST) + 1
        if len(outcomes) == len(asked):
            return "".join(f"call-{n}: {outcomes[n]}\n" for n in sorted(outcomes))
    sys.exit(0)


def main() -> None:
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if method == "initialize":
            info = {"name": "reads", "version": "0"}
            result = {"protocolVersion": 1, "agentCapabilities": {}, "agentInfo": info}
            send({"id": request_id, "result": {**result, "authMethods": []}})
        elif method == "session/new":
            send({"id": request_id, "result": {"sessionId": "reads-1"}})
        elif method == "session/prompt":
            session_id = message["params"]["sessionId"]
            text = {"type": "text", "text": turn(session_id)}
            update(session_id, {"sessionUpdate": "agent_message_chunk", "content": text})
            send({"id": request_id, "result": {"stopReason": "end_turn"}})
        elif method is not None and request_id is not None:
            send({"id": request_id, "error": {"code": -32601, "message": f"no {method}"}})


if __name__ == "__main__":
    main()
