"""The ACP dialect's own wire shapes (Agent Client Protocol v1), as the runtime uses them.

Params and results of ``initialize``, ``session/new``, ``session/load``,
``session/list``, ``session/set_mode``, ``session/prompt`` and the
``session/cancel`` notification, named as in ACP's JSON Schema. The
``session/update`` and ``session/request_permission`` shapes are shared with
the bridge dialect (:mod:`simhost.runtime.wire`).

Params are read leniently, as ACP asks: unknown fields (``_meta``,
``clientCapabilities`` details, newer additions) are ignored.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, TypeAlias

import msgspec
from msgspec import UNSET, UnsetType

from simhost.runtime.wire import AgentMessageChunk, StopReason, TextBlock, ToolStatus

__all__ = [
    "PROTOCOL_VERSION",
    "AgentCapabilities",
    "CancelParams",
    "Implementation",
    "InitializeParams",
    "InitializeResult",
    "ListSessionsParams",
    "ListSessionsResult",
    "LoadSessionParams",
    "LoadSessionResult",
    "McpCapabilities",
    "NewSessionParams",
    "NewSessionResult",
    "PromptBlock",
    "PromptCapabilities",
    "PromptParams",
    "PromptResult",
    "ReplayUpdate",
    "ReplayedUpdate",
    "SessionCapabilities",
    "SessionInfo",
    "SessionMode",
    "SessionModeState",
    "SetModeParams",
    "SetModeResult",
    "ToolCallReplay",
    "UserMessageChunk",
]

PROTOCOL_VERSION: Final = 1
"""The one ACP protocol version this runtime speaks."""

_ProtocolVersion = Annotated[int, msgspec.Meta(ge=0, le=65535)]


class Implementation(msgspec.Struct, rename="camel", omit_defaults=True):
    """``clientInfo`` / ``agentInfo``: a peer's name and version."""

    name: str
    version: str
    title: str | None = None


# ---------------------------------------------------------------- initialize


class InitializeParams(msgspec.Struct, rename="camel"):
    """Params of ``initialize``; ``protocolVersion`` is the latest the client speaks."""

    protocol_version: _ProtocolVersion
    client_capabilities: dict[str, Any] | None = None
    client_info: Implementation | None = None


class PromptCapabilities(msgspec.Struct, rename="camel"):
    """Content blocks beyond text and resource links: none."""

    image: bool = False
    audio: bool = False
    embedded_context: bool = False


class McpCapabilities(msgspec.Struct):
    """MCP transports beyond stdio: none."""

    http: bool = False
    sse: bool = False


class SessionCapabilities(msgspec.Struct):
    """Optional session methods: ``session/list`` (``{}`` means supported)."""

    list: dict[str, Any] = msgspec.field(default_factory=dict)


class AgentCapabilities(msgspec.Struct, rename="camel"):
    """``agentCapabilities`` of the ``initialize`` result."""

    load_session: bool
    prompt_capabilities: PromptCapabilities
    mcp_capabilities: McpCapabilities
    session_capabilities: SessionCapabilities


class InitializeResult(msgspec.Struct, rename="camel"):
    """Result of ``initialize``.

    ``meta`` (``_meta``) is ``{"simhost": {"workspace", "policy", "presets"}}``:
    what the bridge's ``initialize`` reports, for clients that want it.
    """

    protocol_version: int
    agent_capabilities: AgentCapabilities
    auth_methods: list[Any]
    agent_info: Implementation
    meta: dict[str, Any] = msgspec.field(default_factory=dict, name="_meta")


# ------------------------------------------------------------------ sessions


class SessionMode(msgspec.Struct, rename="camel"):
    """A session mode: one of the runtime's permission presets."""

    id: str
    name: str
    description: str


class SessionModeState(msgspec.Struct, rename="camel"):
    """``modes`` of ``session/new`` and ``session/load``: the preset and every preset."""

    current_mode_id: str
    available_modes: list[SessionMode]


class NewSessionParams(msgspec.Struct, rename="camel"):
    """Params of ``session/new``. ``cwd`` must be the runtime's workspace."""

    cwd: str
    mcp_servers: list[Any]
    additional_directories: list[str] = msgspec.field(default_factory=list)


class NewSessionResult(msgspec.Struct, rename="camel"):
    """Result of ``session/new``."""

    session_id: str
    modes: SessionModeState


class LoadSessionParams(msgspec.Struct, rename="camel"):
    """Params of ``session/load``."""

    session_id: str
    cwd: str
    mcp_servers: list[Any]
    additional_directories: list[str] = msgspec.field(default_factory=list)


class UserMessageChunk(msgspec.Struct, tag_field="sessionUpdate", tag="user_message_chunk"):
    """``session/update`` of the user's text, as ``session/load`` replays it."""

    content: TextBlock


class ToolCallReplay(msgspec.Struct, tag_field="sessionUpdate", tag="tool_call", rename="camel"):
    """``session/update`` of a past tool call, as ``session/load`` replays it.

    ``title`` is the history entry's text (the call's title and how it ended).
    """

    tool_call_id: str
    title: str
    status: ToolStatus


ReplayedUpdate: TypeAlias = UserMessageChunk | AgentMessageChunk | ToolCallReplay


class ReplayUpdate(msgspec.Struct, rename="camel"):
    """Params of a ``session/update`` notification that replays one history entry."""

    session_id: str
    update: ReplayedUpdate


class LoadSessionResult(msgspec.Struct, rename="camel"):
    """Result of ``session/load`` (sent after the history was replayed)."""

    modes: SessionModeState


class ListSessionsParams(msgspec.Struct, rename="camel"):
    """Params of ``session/list``; one page holds every session, so ``cursor`` is unused."""

    cwd: str | None = None
    cursor: str | None = None


class SessionInfo(msgspec.Struct, rename="camel"):
    """One row of ``session/list``."""

    session_id: str
    cwd: str
    title: str
    updated_at: str


class ListSessionsResult(msgspec.Struct, rename="camel"):
    """Result of ``session/list``."""

    sessions: list[SessionInfo]


class SetModeParams(msgspec.Struct, rename="camel"):
    """Params of ``session/set_mode``: a preset id."""

    session_id: str
    mode_id: str


class SetModeResult(msgspec.Struct):
    """Result of ``session/set_mode``: ``{}``."""


# --------------------------------------------------------------------- turns


class PromptBlock(msgspec.Struct, rename="camel"):
    """One content block of a prompt, read loosely: ``text`` and ``resource_link`` are used."""

    type: str
    text: str | UnsetType = UNSET
    uri: str | UnsetType = UNSET


class PromptParams(msgspec.Struct, rename="camel"):
    """Params of ``session/prompt``."""

    session_id: str
    prompt: list[PromptBlock]


class PromptResult(msgspec.Struct, rename="camel"):
    """Result of ``session/prompt``."""

    stop_reason: StopReason


class CancelParams(msgspec.Struct, rename="camel"):
    """Params of the ``session/cancel`` notification."""

    session_id: str
