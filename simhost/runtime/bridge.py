"""The bridge dialect's methods (docs/bridge-protocol.md), on the shared runtime core.

``initialize``, ``sessionNew``, ``sessionList``, ``sessionRead``,
``sessionLoad``, ``sessionPermissions``, ``sessionSetPermission`` and
``chatSend``. A turn (``chatSend``) runs in the cancel scope permclient gives
its handler: the editor cancelling it (``$/cancelRequest``) cancels that
scope, and permclient answers ``{"stopReason": "cancelled"}`` at once.
"""

from __future__ import annotations

from contextlib import ExitStack
from typing import Any, Final

import simhost
from simhost.runtime.core import Runtime
from simhost.runtime.grants import option_name
from simhost.runtime.policy import PRESETS
from simhost.runtime.sessions import StoredSession
from simhost.runtime.wire import (
    ChatSendParams,
    ChatSendResult,
    GrantInfo,
    InitializeParams,
    InitializeResult,
    PresetInfo,
    RuntimeInfo,
    SessionIdParams,
    SessionListResult,
    SessionNewParams,
    SessionNewResult,
    SessionPermissionsResult,
    SessionReadResult,
    SessionSummary,
    SetPermissionParams,
    SetPermissionResult,
    parse_params,
)

__all__ = ["BridgeMethods"]

_CANCELLED_TURN: Final = {"stopReason": "cancelled"}


class BridgeMethods:
    """The editor → runtime methods of the bridge dialect."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime

    def register(self, stack: ExitStack) -> None:
        """Register a handler for every method (undone when ``stack`` closes)."""
        client = self.runtime.client
        handlers = {
            "initialize": self.initialize,
            "sessionNew": self.session_new,
            "sessionList": self.session_list,
            "sessionRead": self.session_read,
            "sessionLoad": self.session_load,
            "sessionPermissions": self.session_permissions,
            "sessionSetPermission": self.session_set_permission,
        }
        for method, handler in handlers.items():
            stack.enter_context(client.on_request(method, handler))
        stack.enter_context(
            client.on_request("chatSend", self.chat_send, cancelled_result=_CANCELLED_TURN)
        )

    def _read_result(self, session: StoredSession) -> SessionReadResult:
        return SessionReadResult(
            session.session_id,
            session.title,
            session.session_id == self.runtime.store.active_id,
            session.updated_at,
            list(session.history),
        )

    async def initialize(self, params: Any) -> InitializeResult:
        """``initialize``: who we are, where we act, under which policy."""
        parse_params(params, InitializeParams)
        runtime = self.runtime
        return InitializeResult(
            RuntimeInfo("simhost-runtime", simhost.__version__),
            runtime.workspace_key,
            runtime.config.policy_label,
            list(PRESETS),
        )

    async def session_new(self, params: Any) -> SessionNewResult:
        """``sessionNew``: create a session; it becomes the active one."""
        request = parse_params(params, SessionNewParams)
        return SessionNewResult(self.runtime.create_session(request.title).session_id)

    async def session_list(self, params: Any) -> SessionListResult:
        """``sessionList``: every session, oldest first."""
        store = self.runtime.store
        active = store.active_id
        return SessionListResult(
            [
                SessionSummary(s.session_id, s.title, s.session_id == active, s.updated_at)
                for s in store.sessions()
            ]
        )

    async def session_read(self, params: Any) -> SessionReadResult:
        """``sessionRead``: a session's history; never changes which session is active."""
        request = parse_params(params, SessionIdParams)
        return self._read_result(self.runtime.session(request.session_id))

    async def session_load(self, params: Any) -> SessionReadResult:
        """``sessionLoad``: like ``sessionRead``, and the session becomes the active one."""
        request = parse_params(params, SessionIdParams)
        session = self.runtime.session(request.session_id)
        self.runtime.store.activate(session.session_id)
        return self._read_result(session)

    async def session_permissions(self, params: Any) -> SessionPermissionsResult:
        """``sessionPermissions``: the session's preset, every preset, its standing grants."""
        request = parse_params(params, SessionIdParams)
        session = self.runtime.session(request.session_id)
        grants = sorted(
            session.grants_in(self.runtime.workspace_key), key=lambda g: (g.tool, g.scope)
        )
        return SessionPermissionsResult(
            session.preset_id,
            [PresetInfo(p.preset_id, p.description) for p in PRESETS.values()],
            [
                GrantInfo(
                    g.tool, g.decision, g.scope, option_name(g.decision, g.tool, tuple(g.scope))
                )
                for g in grants
            ],
        )

    async def session_set_permission(self, params: Any) -> SetPermissionResult:
        """``sessionSetPermission``: switch the session's preset (persisted)."""
        request = parse_params(params, SetPermissionParams)
        session = self.runtime.session(request.session_id)
        self.runtime.set_preset(session, request.preset_id)
        return SetPermissionResult(session.preset_id)

    async def chat_send(self, params: Any) -> ChatSendResult:
        """``chatSend``: run one turn. A peer cancel answers ``cancelled`` (permclient)."""
        request = parse_params(params, ChatSendParams)
        session = self.runtime.session(request.session_id)
        return ChatSendResult(await self.runtime.run_turn(session, request.text))
