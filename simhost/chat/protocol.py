"""What the chat reads from a bridge runtime, typed once at the edge.

Results of the editor's requests (docs/bridge-protocol.md); ``session/update``
is typed by permclient (``InboundNotification.update``). These Structs are
lenient on purpose: unknown fields are ignored and most fields have defaults, so another bridge
runtime (``--runtime-cmd``) that adds or omits a detail still works; a result
that does not fit at all raises :class:`permclient.RemoteProtocolError` from
``client.request(..., result_type=...)``.
"""

from __future__ import annotations

from typing import Any

import msgspec

__all__ = [
    "ChatSendResult",
    "Grant",
    "HistoryEntry",
    "InitializeResult",
    "PermissionsResult",
    "Preset",
    "RuntimeInfo",
    "SessionHistory",
    "SessionListResult",
    "SessionNewResult",
    "SessionSummary",
    "SetPermissionResult",
]


class RuntimeInfo(msgspec.Struct, rename="camel"):
    """``runtimeInfo`` of ``initialize``."""

    name: str = "runtime"
    version: str = ""


class InitializeResult(msgspec.Struct, rename="camel"):
    """Result of ``initialize``."""

    runtime_info: RuntimeInfo | None = None
    workspace: str | None = None
    policy: Any = None
    presets: list[str] = msgspec.field(default_factory=list)


class SessionNewResult(msgspec.Struct, rename="camel"):
    """Result of ``sessionNew``."""

    session_id: str


class SessionSummary(msgspec.Struct, rename="camel"):
    """One session as ``sessionList`` lists it."""

    session_id: str
    title: str | None = None
    is_active: bool = False
    updated_at: str | None = None


class SessionListResult(msgspec.Struct, rename="camel"):
    """Result of ``sessionList``."""

    sessions: list[SessionSummary] = msgspec.field(default_factory=list)


class HistoryEntry(msgspec.Struct, rename="camel"):
    """One entry of a session's history."""

    role: str
    text: str = ""
    tool_call_id: str | None = None
    status: str | None = None


class SessionHistory(msgspec.Struct, rename="camel"):
    """Result of ``sessionRead`` and ``sessionLoad``."""

    session_id: str
    title: str | None = None
    is_active: bool = False
    updated_at: str | None = None
    history: list[HistoryEntry] = msgspec.field(default_factory=list)


class Preset(msgspec.Struct, rename="camel"):
    """A permission preset of ``sessionPermissions``."""

    preset_id: str
    description: str = ""


class Grant(msgspec.Struct, rename="camel"):
    """A standing grant (``allow_always`` / ``reject_always`` remembered for a scope).

    ``scope``: the command words or the path it covers; ``name``: the option that
    gave it (``Always allow `git status …` in this session``). A runtime that
    sends neither has one grant per tool.
    """

    tool: str
    decision: str
    scope: list[str] = msgspec.field(default_factory=list)
    name: str = ""


class PermissionsResult(msgspec.Struct, rename="camel"):
    """Result of ``sessionPermissions``."""

    preset_id: str
    presets: list[Preset] = msgspec.field(default_factory=list)
    grants: list[Grant] = msgspec.field(default_factory=list)


class SetPermissionResult(msgspec.Struct, rename="camel"):
    """Result of ``sessionSetPermission``."""

    preset_id: str


class ChatSendResult(msgspec.Struct, rename="camel"):
    """Result of ``chatSend``."""

    stop_reason: str = "end_turn"
