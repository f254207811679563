"""DEMO ONLY: a tiny stand-in agent runtime for ``terminal_approver.py``.

This is not the reference runtime (that is ``simhost runtime``, which really reads,
writes and runs in its workspace; see docs/runtime.md). It is one plain Python file
(stdlib + msgspec), blocking stdio, one message at a time, in the bridge dialect:
``Content-Length: N\\r\\n\\r\\n`` + N bytes of JSON on stdin/stdout. It never writes
a file and never runs anything: it only *asks* for permission, and reads a file it is
asked to edit, to show a real diff.

Requests it answers:

* ``initialize`` -> ``{"runtimeInfo": {"name": "demo_agent", "version": "0"}}``
* ``sessionNew {"title"}`` -> ``{"sessionId": "demo-N"}``
* ``chatSend {"sessionId", "text"}`` -> ``{"stopReason", "results"}``, one result
  per tool call: ``{"toolCallId", "title", "optionId", "outcome", "allowed"}``. The
  text is a ``;``-separated list of steps, each one tool call:

  - ``read FILE``          kind ``read``
  - ``edit FILE TEXT``     kind ``edit`` (a ``diff`` appending TEXT as a line to FILE)
  - ``run COMMAND...``     kind ``execute`` (``rawInput.command``; also offers
    "Always allow `PROGRAM …`", which names its scope and says the demo does not
    remember it)

  Other steps are skipped (logged). For each tool call it sends a ``session/update``
  ``tool_call`` (pending), asks ``session/request_permission``, then sends
  ``tool_call_update`` ``completed`` if an allow option was chosen, else ``failed``.
  ``$/cancelRequest`` (or ``$/cancel_request``) for the ``chatSend`` stops the turn
  after the current question (``stopReason: "cancelled"``). Requests that arrive
  during a turn are answered after it.
* anything else -> error -32601.

It exits at the end of its input or when its output is closed (the editor went
away), on a frame without ``Content-Length``, and on Ctrl-C (status 130, no
traceback).

Usage: ``python examples/demo_agent.py`` (speaks on stdin/stdout; logs to stderr).
"""

from __future__ import annotations

import itertools
import os
import sys
from collections import deque
from typing import IO, Any

import msgspec

Message = dict[str, Any]

_stdin: IO[bytes] = sys.stdin.buffer
_stdout: IO[bytes] = sys.stdout.buffer
_ids = itertools.count()
_sessions = itertools.count(1)
_deferred: deque[Message] = deque()  # requests that arrived mid-turn, handled after it
_ALLOW_KINDS = frozenset({"allow_once", "allow_always"})


def log(text: str) -> None:
    print(f"[demo_agent] {text}", file=sys.stderr, flush=True)


def send(message: Message) -> None:
    body = msgspec.json.encode({"jsonrpc": "2.0", **message})
    _stdout.write(b"Content-Length: %d\r\n\r\n%b" % (len(body), body))
    _stdout.flush()


def receive() -> Message | None:
    """The next message (``{}`` if unreadable), or ``None`` at end of input.

    Exits on a frame without Content-Length: the stream is out of sync.
    """
    length = None
    while True:
        line = _stdin.readline(8192)
        if not line:
            return None
        if line in (b"\r\n", b"\n"):
            break
        name, _, value = line.decode("ascii", "replace").partition(":")
        digits = value.strip()
        if name.strip().lower() == "content-length" and digits.isascii() and digits.isdigit():
            length = int(digits) if len(digits) <= 12 else None  # no body is that long
    if length is None:
        sys.exit("demo_agent: frame without Content-Length")
    body = _stdin.read(length)
    if len(body) < length:
        return None  # end of input mid-frame
    try:
        message = msgspec.json.decode(body)
    except msgspec.DecodeError:
        message = None
    return message if isinstance(message, dict) else {}  # {} is ignored by every reader


def notify_update(session_id: str, update: Message) -> None:
    send({"method": "session/update", "params": {"sessionId": session_id, "update": update}})


def tool_call_for(step: str) -> Message | None:
    """The ``toolCall`` (without its id) a step of the prompt maps to."""
    verb, _, rest = step.strip().partition(" ")
    rest = rest.strip()
    if verb == "read" and rest:
        path = os.path.abspath(rest)
        return {
            "title": f"Read {rest}",
            "kind": "read",
            "locations": [{"path": path}],
            "rawInput": {"path": path},
        }
    if verb == "edit" and rest:
        name, _, text = rest.partition(" ")
        path = os.path.abspath(name)
        try:
            with open(path, encoding="utf-8") as file:
                old: str | None = file.read(64 * 1024)
        except OSError:
            old = None  # a new file
        new = (old or "") + text + "\n"
        diff = {"type": "diff", "path": path, "oldText": old, "newText": new}
        return {
            "title": f"Edit {name}",
            "kind": "edit",
            "content": [diff],
            "locations": [{"path": path}],
            "rawInput": {"path": path, "append": text},
        }
    if verb == "run" and rest:
        return {
            "title": f"Run `{rest}`",
            "kind": "execute",
            "rawInput": {"command": rest, "cwd": os.getcwd()},
        }
    return None


def options_for(tool_call: Message) -> list[Message]:
    options = [{"optionId": "allow-once", "name": "Allow once", "kind": "allow_once"}]
    if tool_call["kind"] == "execute":
        # An "always" names what it would cover; this demo remembers nothing, and says so.
        program = tool_call["rawInput"]["command"].split()[0]
        name = f"Always allow `{program} …` (the demo does not remember it)"
        options.append({"optionId": "allow-always", "name": name, "kind": "allow_always"})
    options.append({"optionId": "reject-once", "name": "Deny", "kind": "reject_once"})
    return options


def ask_permission(session_id: str, tool_call: Message, turn_id: Any) -> tuple[Message, bool]:
    """Ask, then read until the answer arrives; returns (outcome, turn_cancelled)."""
    request_id = next(_ids)
    options = options_for(tool_call)
    params = {"sessionId": session_id, "toolCall": tool_call, "options": options}
    send({"id": request_id, "method": "session/request_permission", "params": params})
    cancelled = False
    while (message := receive()) is not None:
        if message.get("id") == request_id and "method" not in message:
            result = message.get("result") or {}
            return result.get("outcome") or {"outcome": "cancelled"}, cancelled
        if message.get("method") in ("$/cancelRequest", "$/cancel_request"):
            cancel = message.get("params") or {}
            cancelled |= cancel.get("id", cancel.get("requestId")) == turn_id
        elif "method" in message and "id" in message:
            _deferred.append(message)  # one turn at a time: handled when this one ends
    sys.exit(0)  # the editor went away mid-turn


def run_turn(request_id: Any, params: Message) -> Message:
    session_id = str(params.get("sessionId", ""))
    results = []
    for n, step in enumerate(str(params.get("text", "")).split(";")):
        tool_call = tool_call_for(step)
        if tool_call is None:
            log(f"ignored step {step.strip()!r} (try: read FILE; edit FILE TEXT; run CMD)")
            continue
        tool_call_id = f"call-{request_id}-{n}"
        tool_call = {"toolCallId": tool_call_id, "status": "pending", **tool_call}
        notify_update(session_id, {"sessionUpdate": "tool_call", **tool_call})
        outcome, turn_cancelled = ask_permission(session_id, tool_call, request_id)
        option = outcome.get("optionId")
        kinds = {o["optionId"]: o["kind"] for o in options_for(tool_call)}
        allowed = outcome.get("outcome") == "selected" and kinds.get(option) in _ALLOW_KINDS
        status = "completed" if allowed else "failed"
        note = "allowed (the demo does nothing)" if allowed else "not allowed"
        text = {"type": "content", "content": {"type": "text", "text": note}}
        notify_update(
            session_id,
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": tool_call_id,
                "status": status,
                "content": [text],
            },
        )
        result = {"toolCallId": tool_call_id, "title": tool_call["title"], "optionId": option}
        results.append({**result, "outcome": outcome.get("outcome"), "allowed": allowed})
        if turn_cancelled:
            return {"stopReason": "cancelled", "results": results}
    return {"stopReason": "end_turn", "results": results}


def handle(message: Message) -> None:
    method, request_id = message.get("method"), message.get("id")
    params = message.get("params")
    if not isinstance(params, dict):
        params = {}
    if "id" not in message or method is None:
        return  # a notification (or a stray response): nothing to answer
    if method == "initialize":
        send({"id": request_id, "result": {"runtimeInfo": {"name": "demo_agent", "version": "0"}}})
    elif method == "sessionNew":
        session_id = f"demo-{next(_sessions)}"
        log(f"new session {session_id} ({params.get('title', '')!r})")
        send({"id": request_id, "result": {"sessionId": session_id}})
    elif method == "chatSend":
        send({"id": request_id, "result": run_turn(request_id, params)})
    else:
        error = {"code": -32601, "message": f"method not found: {method}"}
        send({"id": request_id, "error": error})


def main() -> int:
    try:
        while True:
            message = _deferred.popleft() if _deferred else receive()
            if message is None:
                return 0
            handle(message)
    except KeyboardInterrupt:  # run by hand and stopped: say so, no traceback
        log("interrupted")
        return 130
    except BrokenPipeError:  # the editor went away mid-turn: nothing left to say
        os.dup2(os.open(os.devnull, os.O_WRONLY), _stdout.fileno())  # no flush error at exit
        return 0


if __name__ == "__main__":
    sys.exit(main())
