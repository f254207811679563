"""What simhost chat and run read of a session/update: typed or not, the same."""

from __future__ import annotations

from typing import Any

import msgspec
import pytest

from permclient import InboundNotification
from permclient.acp import UnknownUpdate
from simhost._updates import ToolReport, message_text, tool_report

META = {"simhost": {"decidedBy": "editor"}}


def _update(update: dict[str, Any]) -> Any:
    raw = msgspec.json.encode({"sessionId": "s", "update": update})
    return InboundNotification("session/update", raw, "s").update


@pytest.mark.parametrize("kind", ["execute", "teleport"], ids=["typed", "untyped"])
def test_a_tool_call_reads_the_same_whether_it_typed_or_not(kind: str) -> None:
    update = _update(
        {
            "sessionUpdate": "tool_call_update",
            "toolCallId": "c",
            "title": "ls",
            "kind": kind,
            "status": "completed",
            "_meta": META,
        }
    )
    assert isinstance(update, UnknownUpdate) == (kind == "teleport")
    assert tool_report(update) == ToolReport("c", "ls", "completed", META["simhost"])
    assert message_text(update) is None


@pytest.mark.parametrize(
    "annotations", [{"priority": 1}, {"audience": ["robot"]}], ids=["typed", "untyped"]
)
def test_a_message_chunk_reads_the_same_whether_it_typed_or_not(annotations: Any) -> None:
    content = {"type": "text", "text": "hi", "annotations": annotations}
    update = _update({"sessionUpdate": "agent_message_chunk", "content": content})
    assert message_text(update) == "hi"
    assert tool_report(update) is None


def test_what_is_neither_text_nor_a_tool_call_with_an_id_reads_as_nothing() -> None:
    image = {"type": "image", "data": "", "mimeType": "image/png"}
    assert message_text(_update({"sessionUpdate": "agent_message_chunk", "content": image})) == ""
    assert tool_report(_update({"sessionUpdate": "tool_call", "toolCallId": ""})) is None
    assert tool_report(_update({"sessionUpdate": "tool_call", "toolCallId": 3})) is None
    plan = _update({"sessionUpdate": "plan", "entries": []})
    assert (message_text(plan), tool_report(plan)) == (None, None)
