"""The editor side shared by the runtime suites (``test_runtime.py``, bridge dialect, and
``test_runtime_acp.py``, acp dialect): what the runtime told a permclient client per
session, and the permission handlers those tests answer questions with."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import trio

import permclient
from permclient import Decision, InboundNotification, PermissionRequest, Selected

Handler = Callable[[PermissionRequest], Awaitable[Decision]]


class RuntimeEditor:
    """A permclient client plus every ``session/update`` the runtime sent it, per session."""

    def __init__(self, client: permclient.Client, workspace: Path) -> None:
        self.client = client
        self.workspace = workspace
        self.updates: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.notifications: list[Any] = []
        self._arrived = trio.Event()
        client.on_notification("session/update", self._on_update)

    def _on_update(self, notification: InboundNotification) -> None:
        assert notification.session_id is not None
        self.notifications.append(notification.params)
        self.updates[notification.session_id].append(notification.params["update"])
        self._arrived.set()
        self._arrived = trio.Event()

    async def wait_for(self, condition: Callable[[], bool]) -> None:
        """Wait until ``condition()`` holds, re-checking after every ``session/update``."""
        while not condition():
            await self._arrived.wait()

    def texts(self, session_id: str) -> list[str]:
        """The agent's messages, each without the newline that ends its chunk."""
        return [
            u["content"]["text"].removesuffix("\n")
            for u in self.updates[session_id]
            if u["sessionUpdate"] == "agent_message_chunk"
        ]

    def calls(self, session_id: str) -> dict[str, list[dict[str, Any]]]:
        """Tool-call events by toolCallId, in order."""
        calls: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for update in self.updates[session_id]:
            if update["sessionUpdate"] in ("tool_call", "tool_call_update"):
                calls[update["toolCallId"]].append(update)
        return calls

    def last_call(self, session_id: str) -> list[dict[str, Any]]:
        return list(self.calls(session_id).values())[-1]


async def never_asked(request: PermissionRequest) -> Decision:
    raise AssertionError(f"unexpected question: {request.tool_call.title}")


def answering(
    decision: Decision | str,
    seen: list[PermissionRequest],
    check: Callable[[], None] = lambda: None,
) -> Handler:
    """A handler that records each request, runs ``check()``, and answers ``decision``
    (a string is the option id to select)."""

    async def handler(request: PermissionRequest) -> Decision:
        seen.append(request)
        check()
        return Selected(decision) if isinstance(decision, str) else decision

    return handler


def statuses(events: list[dict[str, Any]]) -> list[str]:
    return [e["status"] for e in events]


def simhost_meta(events: list[dict[str, Any]]) -> dict[str, Any]:
    meta: dict[str, Any] = events[-1]["_meta"]["simhost"]
    return meta
