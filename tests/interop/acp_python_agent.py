"""An agent built on the official ACP Python SDK (PyPI ``agent-client-protocol``).

Run by tests/interop/test_acp_python.py as ``python acp_python_agent.py`` over stdio
(newline-delimited JSON-RPC). No LLM: the prompt text picks a script.

* ``approve me``: reports a pending tool call ``call-1``, asks permission for it, then
  says which outcome it got (``call-1: selected <optionId>`` or ``call-1: cancelled``).
* ``two``: asks permission for ``call-2a`` and ``call-2b`` concurrently, then says both
  outcomes, one message chunk each, in tool call order.
* ``wait``: asks permission for ``call-wait``; if the turn is cancelled
  (``session/cancel``) while it waits, the turn ends with ``cancelled``.

Every turn otherwise ends with ``end_turn``. Diagnostics go to stderr.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
from typing import Any, cast

import acp
from acp import (
    InitializeResponse,
    NewSessionResponse,
    PromptResponse,
    RequestPermissionResponse,
    start_tool_call,
    update_agent_message_text,
    update_tool_call,
)
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    Implementation,
    PermissionOption,
    TextContentBlock,
    ToolCallUpdate,
)

OPTIONS = [
    PermissionOption(option_id="allow", name="Allow", kind="allow_once"),
    PermissionOption(option_id="allow-always", name="Always allow", kind="allow_always"),
    PermissionOption(option_id="deny", name="Deny", kind="reject_once"),
]


def describe(response: RequestPermissionResponse) -> str:
    outcome = response.outcome
    if isinstance(outcome, AllowedOutcome):
        return f"selected {outcome.option_id}"
    return "cancelled"


class InteropAgent:
    def __init__(self) -> None:
        self._conn: Any = None
        self._ids = itertools.count(1)
        self._cancelled: set[str] = set()

    def on_connect(self, conn: Any) -> None:
        self._conn = conn

    async def initialize(
        self,
        protocol_version: int,
        client_capabilities: Any = None,
        client_info: Any = None,
        **kwargs: Any,
    ) -> InitializeResponse:
        return InitializeResponse(
            protocol_version=acp.PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(),
            agent_info=Implementation(name="permclient-interop-agent", version="0.0.0"),
        )

    async def new_session(
        self, cwd: str, mcp_servers: Any = None, **kwargs: Any
    ) -> NewSessionResponse:
        return NewSessionResponse(session_id=f"py-session-{next(self._ids)}")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        self._cancelled.add(session_id)

    async def _ask(self, session_id: str, tool_call_id: str) -> RequestPermissionResponse:
        title = f"local_shell: echo {tool_call_id}"
        raw_input = {"command": f"echo {tool_call_id}"}
        await self._conn.session_update(
            session_id,
            start_tool_call(
                tool_call_id, title, kind="execute", status="pending", raw_input=raw_input
            ),
        )
        response: RequestPermissionResponse = await self._conn.request_permission(
            session_id=session_id,
            tool_call=ToolCallUpdate(
                tool_call_id=tool_call_id,
                title=title,
                kind="execute",
                status="pending",
                raw_input=raw_input,
            ),
            options=OPTIONS,
        )
        allowed = isinstance(response.outcome, AllowedOutcome) and response.outcome.option_id in {
            "allow",
            "allow-always",
        }
        await self._conn.session_update(
            session_id,
            update_tool_call(tool_call_id, status="completed" if allowed else "failed"),
        )
        return response

    async def _say(self, session_id: str, text: str) -> None:
        await self._conn.session_update(session_id, update_agent_message_text(text))

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        self._cancelled.discard(session_id)
        text = "".join(b.text for b in prompt if isinstance(b, TextContentBlock)).strip()
        if text == "approve me":
            response = await self._ask(session_id, "call-1")
            await self._say(session_id, f"call-1: {describe(response)}")
        elif text == "two":
            first, second = await asyncio.gather(
                self._ask(session_id, "call-2a"), self._ask(session_id, "call-2b")
            )
            await self._say(session_id, f"call-2a: {describe(first)}")
            await self._say(session_id, f"call-2b: {describe(second)}")
        elif text == "wait":
            response = await self._ask(session_id, "call-wait")
            await self._say(session_id, f"call-wait: {describe(response)}")
        else:
            await self._say(session_id, f"unknown prompt: {text!r}")
        if session_id in self._cancelled:
            return PromptResponse(stop_reason="cancelled")
        return PromptResponse(stop_reason="end_turn")


def main() -> None:
    logging.basicConfig(level=logging.WARNING, format="[acp-python-agent] %(message)s")
    # The SDK looks handlers up by name and answers method_not_found for the methods
    # this agent does not define, so implementing a subset of acp.Agent is enough.
    asyncio.run(acp.run_agent(cast(acp.Agent, InteropAgent())))


if __name__ == "__main__":
    main()
