"""What ``simhost chat`` and ``simhost run`` read of a ``session/update``.

permclient types each update once (``InboundNotification.update``); an update
this version could not type (an :class:`~permclient.acp.UnknownUpdate`, e.g. a
tool call with a kind or status newer than this version) is still read here, field
by field, from its JSON, so a newer runtime is shown as well as it can be.
"""

from __future__ import annotations

from typing import Any, Final, NamedTuple

from permclient import TextContent
from permclient.acp import (
    AgentMessageChunk,
    SessionUpdate,
    ToolCallProgress,
    ToolCallStarted,
    UnknownUpdate,
)

_TOOL_UPDATES: Final = frozenset({"tool_call", "tool_call_update"})


class ToolReport(NamedTuple):
    """What a tool-call update says: its id, and what it carries of the rest."""

    tool_call_id: str
    title: str | None
    status: str | None
    simhost_meta: dict[str, Any]
    """``_meta.simhost`` (``decidedBy``, ``decision``, ``optionId``) or ``{}``."""


def message_text(update: SessionUpdate) -> str | None:
    """The text of an agent message chunk (``""`` when it is not text), else ``None``."""
    if isinstance(update, AgentMessageChunk):
        return update.content.text if isinstance(update.content, TextContent) else ""
    if isinstance(update, UnknownUpdate) and update.session_update == "agent_message_chunk":
        content = update.data.get("content")
        if not isinstance(content, dict) or content.get("type") != "text":
            return ""
        text = content.get("text")
        return text if isinstance(text, str) else ""
    return None


def tool_report(update: SessionUpdate) -> ToolReport | None:
    """What a ``tool_call`` / ``tool_call_update`` says, typed or not; else ``None``
    (and for one without a ``toolCallId``)."""
    if isinstance(update, ToolCallStarted | ToolCallProgress):
        fields: dict[str, Any] = {
            "toolCallId": update.tool_call_id,
            "title": update.title,
            "status": update.status,
            "_meta": update.meta,
        }
    elif isinstance(update, UnknownUpdate) and update.session_update in _TOOL_UPDATES:
        fields = update.data
    else:
        return None
    tool_call_id, title, status = (fields.get(k) for k in ("toolCallId", "title", "status"))
    if not isinstance(tool_call_id, str) or not tool_call_id:
        return None
    meta = fields.get("_meta")
    simhost = meta.get("simhost") if isinstance(meta, dict) else None
    return ToolReport(
        tool_call_id,
        title if isinstance(title, str) else None,
        status if isinstance(status, str) else None,
        simhost if isinstance(simhost, dict) else {},
    )
