"""A file-writing agent built on the official ACP Python SDK (PyPI ``agent-client-protocol``).

The Python twin of ``node/ts_agent.mjs``: the same prompt grammar, the same tool calls,
the same log, so ``tests/interop/test_acp_ts.py`` can drive both agents with the
same scenarios (``acp_scenarios.py``). Run as ``python acp_python_write_agent.py`` over
stdio (newline-delimited JSON-RPC). Each line of the prompt's text blocks is a command:

* ``write NAME TEXT``: a tool call ``write NAME`` (kind ``edit``, a diff creating NAME
  with TEXT); NAME is written in the session's cwd only if the permission answer
  selects an ``allow_*`` option.
* ``bigwrite NAME BYTES``: the same with generated text of exactly BYTES bytes of UTF-8;
  its sha256 is logged (event ``generated``).
* ``withdraw NAME``: the agent gives up on the permission request of ``write NAME``
  once every other request of the prompt has been answered.

  The Python SDK (0.12.1) has no way to withdraw a request: it does not implement
  ``$/cancel_request`` in either direction. The only thing an agent can do is cancel the
  asyncio task awaiting ``request_permission``: the SDK then forgets the request id and
  sends nothing, so the client is never told. The client's later answer for that id is
  dropped silently by the SDK. The agent logs ``withdraw`` and reports the call failed.

``_permclient/wait`` (an extension request) notifies ``_permclient/waiting`` and then
waits to be cancelled, which with this SDK never happens (see ``ext_method``).

A prompt reports a ``tool_call`` (pending) per call, asks permission for all of them at
once, and reports each call's end with ``tool_call_update``: ``in_progress`` then
``completed`` (allowed and written) or ``failed``. The turn ends with ``end_turn``, or
``cancelled`` when ``session/cancel`` arrived for the session during the turn (the agent
then does not withdraw its questions: the client must answer them itself).

Log: one JSON object per line to the file named by ``$PERMCLIENT_AGENT_LOG`` (else
stderr), in the format of ``ts_agent.mjs``: ``wire`` (every JSON-RPC message, ``dir``
``in``/``out``, recorded by the SDK's own stream observers), ``answer``, ``withdraw``,
``wrote``, ``generated``, ``session_cancel``, ``wait_started``.
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
import json
import logging
import os
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any, cast

import acp
from acp import (
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    RequestError,
    start_tool_call,
    tool_diff_content,
    update_tool_call,
)
from acp.connection import StreamDirection, StreamEvent
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    Implementation,
    PermissionOption,
    TextContentBlock,
    ToolCallLocation,
    ToolCallUpdate,
)

OPTIONS = [
    PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
    PermissionOption(option_id="allow-always", name="Always allow", kind="allow_always"),
    PermissionOption(option_id="deny", name="Deny", kind="reject_once"),
]
OPTION_KIND = {o.option_id: o.kind for o in OPTIONS}


def log(entry: dict[str, Any]) -> None:
    line = json.dumps(entry, ensure_ascii=False) + "\n"
    path = os.environ.get("PERMCLIENT_AGENT_LOG")
    if path:
        with open(path, "a", encoding="utf-8") as f:
            f.write(line)
    else:
        sys.stderr.write(f"[py-agent] {line}")


def observe(event: StreamEvent) -> None:
    direction = "in" if event.direction is StreamDirection.INCOMING else "out"
    log({"event": "wire", "dir": direction, "msg": event.message})


def generated_text(size: int) -> str:
    """Deterministic text of exactly ``size`` bytes of UTF-8 (the algorithm of ts_agent.mjs)."""
    parts: list[str] = []
    total = 0
    for i in itertools.count():
        unit = f'line {i}: "quoted" back\\slash\ttab é € 𝄞 \u2028 {"abcdefgh" * (i % 7)}\n'
        unit_bytes = len(unit.encode())
        if total + unit_bytes > size:
            break
        parts.append(unit)
        total += unit_bytes
    parts.append("x" * (size - total))
    return "".join(parts)


@dataclass
class Call:
    name: str
    text: str
    path: str
    big: bool = False

    @property
    def tool_call_id(self) -> str:
        return f"write:{self.name}"


@dataclass
class Turn:
    cancelled: bool = False


@dataclass
class SessionState:
    cwd: str
    # The latest prompt's turn: session/cancel marks it; the next prompt starts a fresh
    # one, so a turn still winding down is never un-cancelled by it.
    turn: Turn | None = None


def parse_commands(prompt: list[Any], cwd: str) -> tuple[list[Call], set[str]]:
    calls: list[Call] = []
    withdraw: set[str] = set()
    lines = [
        line.strip()
        for block in prompt
        if isinstance(block, TextContentBlock)
        for line in block.text.split("\n")
        if line.strip()
    ]
    for line in lines:
        command, _, rest = line.partition(" ")
        name, _, arg = rest.partition(" ")
        if not name or "/" in name or name.startswith("."):
            raise RequestError.invalid_params(
                {"line": line, "reason": "expected a plain file name"}
            )
        path = str(Path(cwd) / name)
        if command == "write":
            calls.append(Call(name, arg, path))
        elif command == "bigwrite":
            calls.append(Call(name, generated_text(int(arg)), path, big=True))
        elif command == "withdraw":
            withdraw.add(name)
        else:
            raise RequestError.invalid_params({"line": line, "reason": "unknown command"})
    if not withdraw <= {c.name for c in calls}:
        raise RequestError.invalid_params({"withdraw": sorted(withdraw)})
    return calls, withdraw


class WriteAgent:
    def __init__(self) -> None:
        self._conn: Any = None
        self._ids = itertools.count(1)
        self._sessions: dict[str, SessionState] = {}

    def on_connect(self, conn: Any) -> None:
        self._conn = conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=acp.PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(),
            agent_info=Implementation(name="permclient-py-write-agent", version="0.0.0"),
        )

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        if not Path(cwd).is_absolute():
            raise RequestError.invalid_params({"cwd": cwd, "reason": "cwd must be absolute"})
        session_id = f"py-session-{next(self._ids)}"
        self._sessions[session_id] = SessionState(cwd)
        return NewSessionResponse(session_id=session_id)

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        log({"event": "session_cancel", "sessionId": session_id})
        session = self._sessions.get(session_id)
        if session is not None and session.turn is not None:
            session.turn.cancelled = True

    async def ext_method(self, method: str, params: dict[str, Any]) -> dict[str, Any]:
        """``_permclient/wait``: wait until cancelled (SDK 0.12.1 never cancels it)."""
        if method != "permclient/wait":
            raise RequestError.method_not_found(f"_{method}")
        log({"event": "wait_started"})
        await self._conn.ext_notification("permclient/waiting", {})
        # The SDK ignores the client's `$/cancel_request` (it logs an error): this
        # handler is never told, and waits until the connection closes.
        await asyncio.Event().wait()
        raise AssertionError("unreachable")  # pragma: no cover

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        session = self._sessions.get(session_id)
        if session is None:
            raise RequestError.invalid_params({"sessionId": session_id})
        turn = session.turn = Turn()
        calls, withdraw = parse_commands(prompt, session.cwd)
        for call in calls:
            if call.big:
                digest = hashlib.sha256(call.text.encode()).hexdigest()
                size = len(call.text.encode())
                log(
                    {
                        "event": "generated",
                        "toolCallId": call.tool_call_id,
                        "bytes": size,
                        "sha256": digest,
                    }
                )
            await self._conn.session_update(
                session_id,
                start_tool_call(
                    call.tool_call_id,
                    f"write {call.name}",
                    kind="edit",
                    status="pending",
                    content=[tool_diff_content(call.path, call.text)],
                    locations=[ToolCallLocation(path=call.path)],
                    raw_input={"path": call.path, "bytes": len(call.text.encode())},
                ),
            )
        tasks = {
            call.name: asyncio.create_task(self._ask_and_apply(session_id, turn, call))
            for call in calls
        }
        await asyncio.gather(*(t for name, t in tasks.items() if name not in withdraw))
        for name in sorted(withdraw):
            log({"event": "withdraw", "sessionId": session_id, "toolCallId": f"write:{name}"})
            tasks[name].cancel()
        await asyncio.gather(*tasks.values(), return_exceptions=True)
        return PromptResponse(stop_reason="cancelled" if turn.cancelled else "end_turn")

    async def _ask_and_apply(self, session_id: str, turn: Turn, call: Call) -> None:
        answer: dict[str, Any]
        allowed = False
        try:
            response = await self._conn.request_permission(
                session_id=session_id,
                tool_call=ToolCallUpdate(
                    tool_call_id=call.tool_call_id,
                    title=f"write {call.name}",
                    kind="edit",
                    status="pending",
                    content=[tool_diff_content(call.path, call.text)],
                    locations=[ToolCallLocation(path=call.path)],
                    raw_input={"path": call.path, "bytes": len(call.text.encode())},
                ),
                options=OPTIONS,
            )
            answer = {
                "ok": True,
                "value": response.model_dump(mode="json", by_alias=True, exclude_none=True),
            }
            outcome = response.outcome
            allowed = isinstance(outcome, AllowedOutcome) and OPTION_KIND.get(
                outcome.option_id, ""
            ).startswith("allow_")
        except asyncio.CancelledError:
            # Withdrawn: SDK 0.12.1 forgot the pending id and sent nothing at all.
            answer = {"ok": False, "error": {"message": "withdrawn (task cancelled)"}}
        except Exception as exc:
            answer = {"ok": False, "error": {"message": repr(exc)}}
        log({"event": "answer", "sessionId": session_id, "toolCallId": call.tool_call_id, **answer})
        allowed = allowed and not turn.cancelled
        if not allowed:
            await self._conn.session_update(
                session_id,
                update_tool_call(
                    call.tool_call_id,
                    status="failed",
                    raw_output={"applied": False, "answer": answer},
                ),
            )
            return
        await self._conn.session_update(
            session_id, update_tool_call(call.tool_call_id, status="in_progress")
        )
        data = call.text.encode()
        await asyncio.to_thread(Path(call.path).write_bytes, data)
        log({"event": "wrote", "path": call.path, "bytes": len(data)})
        await self._conn.session_update(
            session_id,
            update_tool_call(
                call.tool_call_id,
                status="completed",
                raw_output={"applied": True, "path": call.path, "bytes": len(data)},
            ),
        )


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="[acp-python-write-agent] %(message)s")
    # The SDK's Connection takes stream observers: they see every message, both ways.
    asyncio.run(acp.run_agent(cast(acp.Agent, WriteAgent()), observers=[observe]))


if __name__ == "__main__":
    main()
