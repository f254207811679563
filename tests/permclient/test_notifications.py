"""InboundNotification: params and the typed session/update, each decoded once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
import trio.testing
from hypothesis import given
from hypothesis import strategies as st

import permclient
import permclient._notifications
import permclient._wire
from permclient import InboundNotification
from permclient._wire import (
    AgentMessageChunk,
    SessionUpdate,
    ToolCallProgress,
    ToolCallStarted,
    UnknownUpdate,
)
from permclient.acp import AcpAgent
from tests.support.peer import FakePeer


def _notification(update: Any, method: str = "session/update") -> InboundNotification:
    raw = msgspec.json.encode({"sessionId": "s", "update": update})
    return InboundNotification(method, raw, "s")


def test_update_is_typed_and_decoded_once() -> None:
    note = _notification({"sessionUpdate": "tool_call", "toolCallId": "c", "status": "pending"})
    update = note.update
    assert isinstance(update, ToolCallStarted) and update.tool_call_id == "c"
    assert note.update is update


@pytest.mark.parametrize(
    "update",
    [
        {"sessionUpdate": "usage_update", "used": 1},  # a variant newer than this version
        {"sessionUpdate": "tool_call", "toolCallId": "c", "kind": "teleport"},  # unknown value
        {"sessionUpdate": "tool_call_update", "toolCallId": 7},  # a known one, malformed
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "hologram"}},
        {"sessionUpdate": "plan", "entries": "not a list"},
    ],
    ids=["new-variant", "unknown-value", "wrong-type", "unknown-content", "wrong-shape"],
)
def test_an_update_that_does_not_type_degrades_to_unknown_with_its_json(update: Any) -> None:
    assert _notification(update).update == UnknownUpdate(update["sessionUpdate"], update)


def test_unknown_fields_are_ignored_not_an_error() -> None:
    note = _notification(
        {
            "sessionUpdate": "agent_message_chunk",
            "content": {"type": "text", "text": "hi", "newField": 1},
            "alsoNew": [1],
        }
    )
    assert isinstance(note.update, AgentMessageChunk)


@pytest.mark.parametrize(
    ("method", "raw"),
    [
        ("session/update", b""),
        ("session/update", b"{not json"),
        ("session/update", b"[1, 2]"),
        ("session/update", b'{"sessionId": "s", "update": {"no": "tag"}}'),
        ("session/update", b'{"update": {"sessionUpdate": "plan", "entries": []}}'),
        ("session/update", b"[" * 5000 + b"]" * 5000),
        ("other/method", b'{"sessionId": "s", "update": {"sessionUpdate": "plan"}}'),
    ],
)
def test_update_is_none_for_other_methods_and_params_that_are_no_session_update(
    method: str, raw: bytes
) -> None:
    assert InboundNotification(method, raw, "s").update is None


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.sampled_from(["", "text", "pending"]),
    lambda inner: st.lists(inner, max_size=2) | st.dictionaries(st.sampled_from("abt"), inner),
    max_leaves=6,
)
_kinds = st.sampled_from(
    [
        "user_message_chunk",
        "agent_message_chunk",
        "agent_thought_chunk",
        "tool_call",
        "tool_call_update",
        "plan",
        "available_commands_update",
        "current_mode_update",
        "other",
    ]
)
_keys = st.sampled_from(
    ["content", "toolCallId", "title", "kind", "status", "rawInput", "entries", "_meta"]
)


@given(_kinds, st.dictionaries(_keys, _json, max_size=4))
def test_update_never_raises_whatever_the_peer_sends(kind: str, fields: dict[str, Any]) -> None:
    note = _notification({"sessionUpdate": kind, **fields})
    update = note.update
    assert isinstance(update, SessionUpdate.__args__)  # type: ignore[attr-defined]
    assert (update.session_update if isinstance(update, UnknownUpdate) else kind) == kind


class _Counted:
    """A decoder that counts its calls."""

    def __init__(self, decoder: msgspec.json.Decoder[Any]) -> None:
        self.decoder = decoder
        self.calls = 0

    def decode(self, data: bytes) -> Any:
        self.calls += 1
        return self.decoder.decode(data)


async def test_each_session_update_is_decoded_once_for_the_tracker_and_every_callback(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    # Every typed decode of a session/update, wherever it is asked for, goes through
    # this decoder once; the plain JSON one behind .params is not needed at all.
    typed_decoder = _Counted(permclient._wire._typed_session_update_decoder)
    plain_decoder = _Counted(permclient._notifications._any_decoder)
    monkeypatch.setattr(permclient._wire, "_typed_session_update_decoder", typed_decoder)
    monkeypatch.setattr(permclient._notifications, "_any_decoder", plain_decoder)
    ours, theirs = trio.testing.memory_stream_pair()
    peer = FakePeer(theirs, "acp")
    updates = [
        {"sessionUpdate": "tool_call", "toolCallId": "c", "title": "ls", "status": "pending"},
        {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": "hi"}},
        {"sessionUpdate": "tool_call_update", "toolCallId": "c", "status": "completed"},
        {"sessionUpdate": "usage_update", "used": 1},
    ]
    async with permclient.open_client(ours, dialect="acp") as client:
        session = AcpAgent(client).session("s", tmp_path)
        typed: list[SessionUpdate] = []
        by_method: list[SessionUpdate | None] = []
        by_session: list[SessionUpdate | None] = []
        with (
            session.on_update(typed.append),
            client.on_notification("session/update", lambda n: by_method.append(n.update)),
            client.on_session_notification("s", lambda n: by_session.append(n.update)),
        ):
            for update in updates:
                await peer.notify("session/update", {"sessionId": "s", "update": update})
            await trio.testing.wait_all_tasks_blocked()
        state = client.tool_calls.get("s", "c")
        assert state is not None and (state.title, state.status) == ("ls", "completed")
        assert len(typed) == len(updates)
        assert all(a is b is c for a, b, c in zip(typed, by_method, by_session, strict=True))
        assert isinstance(typed[2], ToolCallProgress)
        assert (typed_decoder.calls, plain_decoder.calls) == (len(updates), 0)
