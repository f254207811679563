"""A tiny ACP agent (raw JSON lines) that never gets the chat started.

Run as ``python stuck_acp_agent.py MODE``; it writes ``stuck agent: MODE`` to
stderr first (for the chat's stderr tail), then:

* ``silent``: reads its input and never answers anything;
* ``error``: answers ``initialize`` with a JSON-RPC error whose message holds a
  line break (a forged second line, if it were printed as it is);
* ``no-session``: answers ``initialize``, never ``session/new``;
* ``interrupt``: sends SIGINT to its parent (the chat) once asked to
  ``initialize``, as a Ctrl-C during the start would, and never answers.
"""

from __future__ import annotations

import json
import os
import signal
import sys
from typing import Any

MODES = ("silent", "error", "no-session", "interrupt")


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def main(mode: str) -> None:
    sys.stderr.write(f"stuck agent: {mode}\n")
    sys.stderr.flush()
    for line in sys.stdin:
        message = json.loads(line)
        method, request_id = message.get("method"), message.get("id")
        if method != "initialize" or mode == "silent":
            continue
        if mode == "error":
            error = {"code": -32603, "message": "no model\nsimhost chat: all is well"}
            send({"id": request_id, "error": error})
        elif mode == "no-session":
            send({"id": request_id, "result": {"protocolVersion": 1}})
        elif mode == "interrupt":
            os.kill(os.getppid(), signal.SIGINT)


if __name__ == "__main__":
    if len(sys.argv) != 2 or sys.argv[1] not in MODES:
        sys.exit(f"usage: stuck_acp_agent.py {'|'.join(MODES)}")
    main(sys.argv[1])
