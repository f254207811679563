"""The bridge dialect's wire shapes, as the runtime sends and receives them.

One :class:`msgspec.Struct` per shape of docs/bridge-protocol.md. The
``session/update`` and ``session/request_permission`` shapes are ACP's, and the
ACP dialect sends them too; its own methods' shapes are in
:mod:`simhost.runtime.acp_wire`. Params are
converted from the decoded JSON permclient hands to request handlers
(:func:`parse_params` turns a mismatch into a ``-32602`` error); results and
notifications are encoded from these Structs directly.

Fields that the contract shows as ``null`` (``oldText`` of a new file) are
encoded as ``null``: these Structs do not use ``omit_defaults`` where a ``null``
means something. Optional fields that may be absent use ``msgspec.UNSET``.
"""

from __future__ import annotations

from typing import Any, Literal, TypeAlias, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

from permclient import ErrorCode, RequestError

__all__ = [
    "AgentMessageChunk",
    "ChatSendParams",
    "ChatSendResult",
    "DecidedBy",
    "DiffBlock",
    "GrantDecision",
    "GrantInfo",
    "HistoryEntry",
    "InitializeParams",
    "InitializeResult",
    "Location",
    "PermissionOptionOut",
    "PermissionRequestOut",
    "PresetInfo",
    "RuntimeInfo",
    "SessionIdParams",
    "SessionListResult",
    "SessionNewParams",
    "SessionNewResult",
    "SessionPermissionsResult",
    "SessionReadResult",
    "SessionSummary",
    "SessionUpdate",
    "SetPermissionParams",
    "SetPermissionResult",
    "SimhostDecision",
    "StopReason",
    "TextBlock",
    "TextContentBlock",
    "ToolCallContentOut",
    "ToolCallOut",
    "ToolCallStart",
    "ToolCallUpdateOut",
    "ToolKind",
    "ToolStatus",
    "parse_params",
]

S = TypeVar("S", bound=msgspec.Struct)

StopReason: TypeAlias = Literal["end_turn", "cancelled"]
ToolKind: TypeAlias = Literal["read", "edit", "delete", "execute"]
ToolStatus: TypeAlias = Literal["pending", "in_progress", "completed", "failed"]
DecidedBy: TypeAlias = Literal["policy", "preset", "grant", "editor", "timeout"]
GrantDecision: TypeAlias = Literal["allow", "reject"]
HistoryRole: TypeAlias = Literal["user", "agent", "tool"]


def parse_params(params: Any, kind: type[S]) -> S:
    """Convert a request's decoded params into ``kind``.

    ``None`` (no params) is read as ``{}``. Raises :class:`RequestError` with
    ``-32602`` (invalid params) and msgspec's explanation when they do not fit.
    """
    try:
        return msgspec.convert({} if params is None else params, kind)
    except msgspec.ValidationError as exc:
        raise RequestError(ErrorCode.INVALID_PARAMS, f"invalid params: {exc}") from exc


# ---------------------------------------------------------------- editor → runtime


class ClientInfo(msgspec.Struct, rename="camel"):
    """``clientInfo`` of ``initialize``: who the editor is."""

    name: str = ""
    version: str = ""


class InitializeParams(msgspec.Struct, rename="camel"):
    """Params of ``initialize``."""

    client_info: ClientInfo | None = None


class RuntimeInfo(msgspec.Struct, rename="camel"):
    """``runtimeInfo`` of the ``initialize`` result."""

    name: str
    version: str


class InitializeResult(msgspec.Struct, rename="camel"):
    """Result of ``initialize``: the runtime, its workspace, its policy and the preset ids."""

    runtime_info: RuntimeInfo
    workspace: str
    policy: str
    presets: list[str]


class SessionNewParams(msgspec.Struct, rename="camel"):
    """Params of ``sessionNew``."""

    title: str | None = None


class SessionNewResult(msgspec.Struct, rename="camel"):
    """Result of ``sessionNew``."""

    session_id: str


class SessionIdParams(msgspec.Struct, rename="camel"):
    """Params of ``sessionRead``, ``sessionLoad`` and ``sessionPermissions``."""

    session_id: str


class SessionSummary(msgspec.Struct, rename="camel"):
    """One row of ``sessionList``."""

    session_id: str
    title: str
    is_active: bool
    updated_at: str


class SessionListResult(msgspec.Struct, rename="camel"):
    """Result of ``sessionList``."""

    sessions: list[SessionSummary]


class HistoryEntry(msgspec.Struct, rename="camel", omit_defaults=True):
    """One entry of a session's history (also how it is persisted).

    ``tool_call_id`` and ``status`` are present only for ``role == "tool"``.
    """

    role: HistoryRole
    text: str
    tool_call_id: str | None = None
    status: ToolStatus | None = None


class SessionReadResult(msgspec.Struct, rename="camel"):
    """Result of ``sessionRead`` and ``sessionLoad``."""

    session_id: str
    title: str
    is_active: bool
    updated_at: str
    history: list[HistoryEntry]


class PresetInfo(msgspec.Struct, rename="camel"):
    """One permission preset, as listed by ``sessionPermissions``."""

    preset_id: str
    description: str


class GrantInfo(msgspec.Struct, rename="camel"):
    """A standing grant: ``allow_always`` (``allow``) or ``reject_always`` (``reject``).

    ``scope``: the command words or the file path it covers; ``name``: the
    option that gave it (``Always allow `git status …` in this session``).
    """

    tool: str
    decision: GrantDecision
    scope: list[str]
    name: str


class SessionPermissionsResult(msgspec.Struct, rename="camel"):
    """Result of ``sessionPermissions``."""

    preset_id: str
    presets: list[PresetInfo]
    grants: list[GrantInfo]


class SetPermissionParams(msgspec.Struct, rename="camel"):
    """Params of ``sessionSetPermission``."""

    session_id: str
    preset_id: str


class SetPermissionResult(msgspec.Struct, rename="camel"):
    """Result of ``sessionSetPermission``."""

    preset_id: str


class ChatSendParams(msgspec.Struct, rename="camel"):
    """Params of ``chatSend``."""

    session_id: str
    text: str


class ChatSendResult(msgspec.Struct, rename="camel"):
    """Result of ``chatSend``."""

    stop_reason: StopReason


# ---------------------------------------------------------------- runtime → editor


class TextBlock(msgspec.Struct, tag_field="type", tag="text"):
    """A plain text content block: ``{"type": "text", "text": ...}``."""

    text: str


class TextContentBlock(msgspec.Struct, tag_field="type", tag="content"):
    """Tool-call content wrapping a text block: ``{"type": "content", "content": {...}}``."""

    content: TextBlock


class DiffBlock(msgspec.Struct, tag_field="type", tag="diff", rename="camel"):
    """Tool-call content of a file write; ``old_text`` is ``None`` (``null``) for a new file."""

    path: str
    old_text: str | None
    new_text: str


ToolCallContentOut: TypeAlias = TextContentBlock | DiffBlock


class Location(msgspec.Struct, rename="camel"):
    """A file a tool call touches (absolute path)."""

    path: str


class SimhostDecision(msgspec.Struct, rename="camel", omit_defaults=True):
    """``_meta.simhost`` of a ``tool_call_update`` that follows a decision.

    ``option_id`` is set when the editor answered with an option; ``grant``
    when a standing grant decided: its receipt, e.g. ``allowed by your grant
    "Always allow `git status …` in this session"``.
    """

    decided_by: DecidedBy
    decision: Literal["allow", "deny"]
    option_id: str | None = None
    grant: str | None = None


class ToolCallOut(msgspec.Struct, rename="camel", omit_defaults=True):
    """The tool call of a ``session/request_permission`` (ACP ``ToolCallUpdate``)."""

    tool_call_id: str
    title: str
    kind: ToolKind
    status: ToolStatus
    raw_input: dict[str, Any]
    content: list[ToolCallContentOut] = msgspec.field(default_factory=list)
    locations: list[Location] = msgspec.field(default_factory=list)


class PermissionOptionOut(msgspec.Struct, rename="camel"):
    """One option of a permission request."""

    option_id: str
    name: str
    kind: Literal["allow_once", "allow_always", "reject_once", "reject_always"]


class PermissionRequestOut(msgspec.Struct, rename="camel"):
    """Params of ``session/request_permission`` as the runtime sends them.

    ``meta`` (``_meta``) is ``{"simhost": {"tool": ..., "timeoutS"?: ..., "fallbackFor"?: ...}}``.
    """

    session_id: str
    tool_call: ToolCallOut
    options: list[PermissionOptionOut]
    meta: dict[str, Any] = msgspec.field(default_factory=dict, name="_meta")


class AgentMessageChunk(msgspec.Struct, tag_field="sessionUpdate", tag="agent_message_chunk"):
    """``session/update`` of agent text."""

    content: TextBlock


class ToolCallStart(
    msgspec.Struct,
    tag_field="sessionUpdate",
    tag="tool_call",
    rename="camel",
    omit_defaults=True,
):
    """``session/update`` announcing a tool call (always ``pending``)."""

    tool_call_id: str
    title: str
    kind: ToolKind
    status: ToolStatus
    raw_input: dict[str, Any]
    content: list[ToolCallContentOut] = msgspec.field(default_factory=list)
    locations: list[Location] = msgspec.field(default_factory=list)
    meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")


class ToolCallUpdateOut(
    msgspec.Struct,
    tag_field="sessionUpdate",
    tag="tool_call_update",
    rename="camel",
    omit_defaults=True,
):
    """``session/update`` moving a tool call on (``in_progress``, ``completed``, ``failed``)."""

    tool_call_id: str
    status: ToolStatus
    content: list[ToolCallContentOut] | UnsetType = UNSET
    raw_output: dict[str, Any] | UnsetType = UNSET
    meta: dict[str, Any] | None = msgspec.field(default=None, name="_meta")


SessionUpdateKind: TypeAlias = AgentMessageChunk | ToolCallStart | ToolCallUpdateOut


class SessionUpdate(msgspec.Struct, rename="camel"):
    """Params of a ``session/update`` notification."""

    session_id: str
    update: SessionUpdateKind
