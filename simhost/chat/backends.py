"""What the chat asks of the agent it drives, in each dialect.

The chat's controller (:class:`~simhost.chat.app.ChatApp`) starts, opens
sessions, runs turns and lists sessions through a :class:`Backend`; permission
requests and ``session/update`` notifications reach it the same way in both
dialects (per-session handlers on the :class:`permclient.Client`).

* :class:`BridgeBackend`: the bridge runtime's editor methods (``initialize``,
  ``sessionNew``, ``chatSend``, ``sessionList``, ``sessionLoad`` ...), see
  docs/bridge-protocol.md.
* :class:`AcpBackend`: any Agent Client Protocol agent, through
  :mod:`permclient.acp`. ACP has no session list, history read or permission
  presets: the chat lists the sessions it opened, switches between them, and
  says so for the rest.
"""

from __future__ import annotations

from pathlib import Path
from typing import Protocol

import simhost
from permclient import Client, RequestError
from permclient.acp import AcpAgent, AcpSession, Implementation

from .protocol import (
    ChatSendResult,
    InitializeResult,
    PermissionsResult,
    RuntimeInfo,
    SessionHistory,
    SessionListResult,
    SessionNewResult,
    SessionSummary,
    SetPermissionResult,
)

__all__ = ["AcpBackend", "Backend", "BridgeBackend", "Unsupported"]

CLIENT_NAME = "simhost-chat"


class Unsupported(Exception):
    """The agent's dialect has no such thing (the message says what)."""


class Backend(Protocol):
    """The chat's requests to the agent."""

    role: str
    """What the banner calls the peer: ``runtime`` or ``agent``."""

    async def start(self) -> InitializeResult:
        """Initialize the connection; what the banner shows."""
        ...

    async def new_session(self, title: str | None) -> tuple[str, str | None]:
        """Open a session: its id and title."""
        ...

    async def prompt(self, session_id: str, text: str) -> str:
        """Run one turn; its stop reason."""
        ...

    async def list_sessions(self) -> list[SessionSummary]:
        """The sessions there are to switch to."""
        ...

    async def open(self, session_id: str, *, peek: bool) -> SessionHistory:
        """Switch to (or only read) a session."""
        ...

    async def permissions(self, session_id: str) -> PermissionsResult:
        """The session's permission preset and standing grants."""
        ...

    async def set_permission(self, session_id: str, preset: str) -> str:
        """Change the session's preset; the preset now in force."""
        ...


class BridgeBackend:
    """The bridge runtime's editor methods."""

    role = "runtime"

    def __init__(self, client: Client) -> None:
        self.client = client

    async def start(self) -> InitializeResult:
        info = {"name": CLIENT_NAME, "version": simhost.__version__}
        result: InitializeResult = await self.client.request(
            "initialize", {"clientInfo": info}, result_type=InitializeResult
        )
        return result

    async def new_session(self, title: str | None) -> tuple[str, str | None]:
        params = {"title": title} if title else {}
        created = await self.client.request("sessionNew", params, result_type=SessionNewResult)
        try:
            history = await self.client.request(
                "sessionRead", {"sessionId": created.session_id}, result_type=SessionHistory
            )
        except RequestError:  # a runtime without sessionRead: the title we asked for
            return created.session_id, title
        return created.session_id, history.title

    async def prompt(self, session_id: str, text: str) -> str:
        result = await self.client.request(
            "chatSend", {"sessionId": session_id, "text": text}, result_type=ChatSendResult
        )
        return result.stop_reason

    async def list_sessions(self) -> list[SessionSummary]:
        listing = await self.client.request("sessionList", {}, result_type=SessionListResult)
        return listing.sessions

    async def open(self, session_id: str, *, peek: bool) -> SessionHistory:
        method = "sessionRead" if peek else "sessionLoad"
        history: SessionHistory = await self.client.request(
            method, {"sessionId": session_id}, result_type=SessionHistory
        )
        return history

    async def permissions(self, session_id: str) -> PermissionsResult:
        result: PermissionsResult = await self.client.request(
            "sessionPermissions", {"sessionId": session_id}, result_type=PermissionsResult
        )
        return result

    async def set_permission(self, session_id: str, preset: str) -> str:
        result = await self.client.request(
            "sessionSetPermission",
            {"sessionId": session_id, "presetId": preset},
            result_type=SetPermissionResult,
        )
        return result.preset_id


class AcpBackend:
    """Any ACP agent, through :class:`permclient.acp.AcpAgent`."""

    role = "agent"

    def __init__(self, client: Client, workspace: Path) -> None:
        self.agent = AcpAgent(client, client_info=Implementation(CLIENT_NAME, simhost.__version__))
        self.workspace = workspace
        self.sessions: dict[str, AcpSession] = {}
        self.titles: dict[str, str | None] = {}

    async def start(self) -> InitializeResult:
        info = await self.agent.initialize()
        agent = info.agent_info
        return InitializeResult(
            runtime_info=RuntimeInfo(agent.title or agent.name, agent.version) if agent else None,
            workspace=str(self.workspace),
        )

    async def new_session(self, title: str | None) -> tuple[str, str | None]:
        session = await self.agent.new_session(self.workspace)
        self.sessions[session.id] = session
        self.titles[session.id] = title
        return session.id, title

    async def prompt(self, session_id: str, text: str) -> str:
        session = self.sessions.get(session_id) or self.agent.session(session_id, self.workspace)
        result = await session.prompt(text)
        return result.stop_reason

    async def list_sessions(self) -> list[SessionSummary]:
        return [SessionSummary(sid, self.titles.get(sid)) for sid in self.sessions]

    async def open(self, session_id: str, *, peek: bool) -> SessionHistory:
        if peek:
            raise Unsupported("an ACP agent cannot show a session's history without loading it")
        if session_id not in self.sessions:
            # The replayed history arrives as session/update notifications, which the
            # client holds until the chat adopts the session.
            self.sessions[session_id] = await self.agent.load_session(session_id, self.workspace)
        return SessionHistory(session_id, self.titles.get(session_id))

    async def permissions(self, session_id: str) -> PermissionsResult:
        raise Unsupported("ACP has no permission presets: the agent decides what to ask")

    async def set_permission(self, session_id: str, preset: str) -> str:
        raise Unsupported("ACP has no permission presets: the agent decides what to ask")
