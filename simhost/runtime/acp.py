"""The ACP dialect's methods (Agent Client Protocol v1), on the shared runtime core.

``initialize``, ``session/new``, ``session/load``, ``session/list``,
``session/set_mode`` (the modes are the permission presets),
``session/prompt``, and the ``session/cancel`` notification. Every request
but ``initialize`` is refused (-32600) until ``initialize`` has been answered,
as the official ACP SDKs do. An unknown ``sessionId`` is -32002 (resource not
found).

A turn (``session/prompt``) runs in a cancel scope of its own, kept per
session. ``session/cancel`` cancels those scopes: each open
``session/request_permission`` of the turn is abandoned (permclient sends
``$/cancel_request {"requestId"}`` for it and drops a late answer), a running
command is killed, the turn's open tool calls end ``failed``, and then the
prompt is answered ``{"stopReason": "cancelled"}``. A ``$/cancel_request`` for
the ``session/prompt`` itself does the same through permclient's scope.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Final
from urllib.parse import unquote, urlsplit

import msgspec
import trio

import simhost
from permclient import ErrorCode, InboundNotification, RequestError
from simhost.runtime.acp_wire import (
    PROTOCOL_VERSION,
    AgentCapabilities,
    CancelParams,
    Implementation,
    InitializeParams,
    InitializeResult,
    ListSessionsParams,
    ListSessionsResult,
    LoadSessionParams,
    LoadSessionResult,
    McpCapabilities,
    NewSessionParams,
    NewSessionResult,
    PromptBlock,
    PromptCapabilities,
    PromptParams,
    PromptResult,
    ReplayedUpdate,
    ReplayUpdate,
    SessionCapabilities,
    SessionInfo,
    SessionMode,
    SessionModeState,
    SetModeParams,
    SetModeResult,
    ToolCallReplay,
    UserMessageChunk,
)
from simhost.runtime.core import Runtime, agent_message
from simhost.runtime.policy import PRESETS
from simhost.runtime.sessions import StoredSession
from simhost.runtime.wire import HistoryEntry, TextBlock, parse_params

__all__ = ["RESOURCE_NOT_FOUND", "AcpMethods", "prompt_text"]

log = logging.getLogger("simhost.runtime")

RESOURCE_NOT_FOUND: Final = int(ErrorCode.RESOURCE_NOT_FOUND)
"""ACP's error code for an unknown resource (here: a ``sessionId``)."""

_CANCELLED_TURN: Final = {"stopReason": "cancelled"}

Handler = Callable[[Any], Awaitable[Any]]


def _link_text(uri: str) -> str:
    """A ``resource_link`` as the grammar reads it: a ``file://`` URI's path, else the URI."""
    parts = urlsplit(uri)
    if parts.scheme != "file":
        return uri
    path = unquote(parts.path)
    if any(c.isspace() for c in path) or ":" in path:
        quote = "'" if '"' in path else '"'
        return f"{quote}{path}{quote}"
    return path


def prompt_text(blocks: list[PromptBlock]) -> str:
    """The command a prompt's content blocks spell.

    Text blocks are joined as they are; a ``resource_link`` stands for its path
    (a ``file://`` URI, quoted if it has spaces) or its URI, set off by spaces.
    Other blocks (the runtime does not advertise images, audio or embedded
    resources) are ignored.
    """
    text = ""
    for block in blocks:
        if block.type == "text" and isinstance(block.text, str):
            text += block.text
        elif block.type == "resource_link" and isinstance(block.uri, str):
            if text and not text[-1].isspace():
                text += " "
            text += _link_text(block.uri) + " "
    return text


class AcpMethods:
    """The client → agent methods of ACP v1, for one connection."""

    def __init__(self, runtime: Runtime) -> None:
        self.runtime = runtime
        self.initialized = False
        """True once ``initialize`` has been answered; before, other requests are refused."""
        self._turns: dict[str, set[trio.CancelScope]] = {}
        """The cancel scopes of each session's running turns."""

    def register(self, stack: ExitStack) -> None:
        """Register a handler for every method (undone when ``stack`` closes)."""
        client = self.runtime.client
        stack.enter_context(client.on_request("initialize", self.initialize))
        gated = {
            "session/new": self.session_new,
            "session/load": self.session_load,
            "session/list": self.session_list,
            "session/set_mode": self.session_set_mode,
        }
        for method, handler in gated.items():
            stack.enter_context(client.on_request(method, self._gated(method, handler)))
        stack.enter_context(
            client.on_request(
                "session/prompt",
                self._gated("session/prompt", self.session_prompt),
                cancelled_result=_CANCELLED_TURN,
            )
        )
        stack.enter_context(client.on_notification("session/cancel", self._on_cancel))

    def _gated(self, method: str, handler: Handler) -> Handler:
        async def gated(params: Any) -> Any:
            if not self.initialized:
                raise RequestError(
                    ErrorCode.INVALID_REQUEST,
                    f"ACP connection must be initialized before '{method}'",
                )
            return await handler(params)

        return gated

    # ------------------------------------------------------------------ helpers

    def _session(self, session_id: str) -> StoredSession:
        return self.runtime.session(session_id, missing=RESOURCE_NOT_FOUND)

    def _is_workspace(self, cwd: str) -> bool:
        path = Path(cwd)
        if not path.is_absolute():
            return False
        try:
            resolved = path.resolve()
        except (RuntimeError, OSError, ValueError):  # a link loop (RuntimeError before 3.13), a NUL
            return False
        return resolved == self.runtime.config.workspace

    def _check_cwd(self, cwd: str) -> None:
        """A session's ``cwd`` must be the runtime's workspace (tools act only there)."""
        workspace = self.runtime.config.workspace
        if not Path(cwd).is_absolute():
            raise RequestError(
                ErrorCode.INVALID_PARAMS, f"cwd must be an absolute path, not {cwd!r}"
            )
        if not self._is_workspace(cwd):
            raise RequestError(
                ErrorCode.INVALID_PARAMS,
                f"cwd {cwd} is not this runtime's workspace {workspace}: "
                "start it with --workspace set to the folder to work in",
            )

    @staticmethod
    def _ignore_mcp(servers: list[Any], additional: list[str]) -> None:
        if servers:
            log.info("ignored %d MCP server(s): this runtime has no LLM to use them", len(servers))
        if additional:
            log.info("ignored additionalDirectories: the tools act in the workspace only")

    @staticmethod
    def _modes(session: StoredSession) -> SessionModeState:
        return SessionModeState(
            session.preset_id,
            [SessionMode(p.preset_id, p.preset_id, p.description) for p in PRESETS.values()],
        )

    # ------------------------------------------------------------------ methods

    async def initialize(self, params: Any) -> InitializeResult:
        """``initialize``: protocol version 1, the capabilities, who we are."""
        request = parse_params(params, InitializeParams)
        if request.protocol_version != PROTOCOL_VERSION:
            log.info(
                "the client speaks ACP %d; answering with %d",
                request.protocol_version,
                PROTOCOL_VERSION,
            )
        runtime = self.runtime
        result = InitializeResult(
            PROTOCOL_VERSION,
            AgentCapabilities(
                load_session=True,
                prompt_capabilities=PromptCapabilities(),
                mcp_capabilities=McpCapabilities(),
                session_capabilities=SessionCapabilities(),
            ),
            [],
            Implementation("simhost-runtime", simhost.__version__, "simhost reference runtime"),
            {
                "simhost": {
                    "workspace": runtime.workspace_key,
                    "policy": runtime.config.policy_label,
                    "presets": list(PRESETS),
                }
            },
        )
        self.initialized = True  # before the answer goes out: the next request is accepted
        return result

    async def session_new(self, params: Any) -> NewSessionResult:
        """``session/new``: create a session (it becomes the active one)."""
        request = parse_params(params, NewSessionParams)
        self._check_cwd(request.cwd)
        self._ignore_mcp(request.mcp_servers, request.additional_directories)
        session = self.runtime.create_session(None)
        return NewSessionResult(session.session_id, self._modes(session))

    async def session_load(self, params: Any) -> LoadSessionResult:
        """``session/load``: replay the history as ``session/update``, then answer.

        The session becomes the active one.
        """
        request = parse_params(params, LoadSessionParams)
        session = self._session(request.session_id)
        self._check_cwd(request.cwd)
        self._ignore_mcp(request.mcp_servers, request.additional_directories)
        self.runtime.store.activate(session.session_id)
        client = self.runtime.client
        for entry in list(session.history):
            update = _replayed(entry)
            if update is not None:
                await client.notify("session/update", ReplayUpdate(session.session_id, update))
        return LoadSessionResult(self._modes(session))

    async def session_list(self, params: Any) -> ListSessionsResult:
        """``session/list``: every session, oldest first (none for another ``cwd``)."""
        request = parse_params(params, ListSessionsParams)
        runtime = self.runtime
        if request.cwd is not None and not self._is_workspace(request.cwd):
            return ListSessionsResult([])
        return ListSessionsResult(
            [
                SessionInfo(s.session_id, runtime.workspace_key, s.title, s.updated_at)
                for s in runtime.store.sessions()
            ]
        )

    async def session_set_mode(self, params: Any) -> SetModeResult:
        """``session/set_mode``: switch the session's permission preset (persisted)."""
        request = parse_params(params, SetModeParams)
        self.runtime.set_preset(self._session(request.session_id), request.mode_id)
        return SetModeResult()

    async def session_prompt(self, params: Any) -> PromptResult:
        """``session/prompt``: run one turn; ``session/cancel`` ends it ``cancelled``."""
        request = parse_params(params, PromptParams)
        session = self._session(request.session_id)
        session_id = session.session_id
        scopes = self._turns.setdefault(session_id, set())
        with trio.CancelScope() as scope:
            scopes.add(scope)
            try:
                stop_reason = await self.runtime.run_turn(session, prompt_text(request.prompt))
            finally:
                scopes.discard(scope)
                if not scopes and self._turns.get(session_id) is scopes:
                    del self._turns[session_id]
        if scope.cancelled_caught:
            return PromptResult("cancelled")
        return PromptResult(stop_reason)

    def _on_cancel(self, notification: InboundNotification) -> None:
        """``session/cancel``: cancel every running turn of the session."""
        try:
            request = msgspec.convert(notification.params, CancelParams)
        except msgspec.ValidationError as exc:
            log.warning("ignored a malformed session/cancel: %s", exc)
            return
        scopes = self._turns.get(request.session_id, set())
        log.info("session/cancel for %s: %d turn(s) running", request.session_id, len(scopes))
        for scope in scopes:
            scope.cancel()
        # A prompt that came in the same read has not started yet: it never will, and
        # is answered `cancelled` (its cancelled_result).
        self.runtime.client.cancel_requests("session/prompt", request.session_id)


def _replayed(entry: HistoryEntry) -> ReplayedUpdate | None:
    """The ``session/update`` that replays one history entry."""
    if entry.role == "user":
        return UserMessageChunk(TextBlock(entry.text))
    if entry.role == "agent":
        return agent_message(entry.text)
    if entry.tool_call_id is None or entry.status is None:
        return None
    return ToolCallReplay(entry.tool_call_id, entry.text, entry.status)
