"""``simhost chat --agent``: the chat driving agents built on the official ACP SDKs, in a pty."""

from __future__ import annotations

import json
import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.interop import NODE_DIR, require_node_packages
from tests.support import paths
from tests.support.pty import CURSOR, STYLE, Chat, chat_starter

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")

PYTHON_AGENT = paths.INTEROP / "acp_python_agent.py"
ARMED = "Press 1-3 to choose"


def python_agent() -> str:
    return f"{sys.executable} {PYTHON_AGENT}"


class AgentChat(Chat):
    """The pty chat; an ACP session has no title, so the prompt is its bare id."""

    def expect_prompt(self, typed: str = "") -> None:
        self.child.expect(r"[\w-]+" + STYLE + " > " + STYLE + re.escape(typed) + STYLE + CURSOR)


@pytest.fixture
def chat_in(tmp_path: Path) -> Iterator[Any]:
    yield from chat_starter(tmp_path, AgentChat)


def test_the_chat_drives_a_python_sdk_agent_and_ctrl_c_cancels_its_turn(chat_in: Any) -> None:
    chat: Chat = chat_in("--agent", python_agent())
    # (The banner with the agent's name from `initialize` was printed before the
    # prompt: Chat waited for it.)
    transcript = chat.plain_transcript()
    assert "agent permclient-interop-agent 0.0.0" in transcript

    chat.say("approve me")
    chat.expect("Permission request")
    chat.expect("echo call-1")
    chat.expect(ARMED)
    chat.child.send("1")
    chat.expect("call-1: selected allow")
    chat.expect("turn ended: " + STYLE + "end_turn")
    chat.expect_prompt()

    chat.say("wait")
    chat.expect("echo call-wait")
    chat.expect(ARMED)
    chat.child.sendcontrol("c")
    chat.expect("answered cancelled: you cancelled the turn")
    chat.expect("turn cancelled")
    chat.expect_prompt()
    assert [e["by"] for e in chat.events("approval.cancelled")] == ["turn"]

    # The agent took the session/cancel and is ready for the next turn.
    chat.say("approve me")
    chat.expect(ARMED)
    chat.deny("3")
    chat.expect("call-1: selected deny")
    chat.expect("turn ended")
    chat.expect_prompt()
    assert [e["option_id"] for e in chat.events("approval.responded")] == ["allow", "deny"]
    chat.quit()


def test_two_concurrent_questions_are_answered_each_for_its_own_call(chat_in: Any) -> None:
    chat: Chat = chat_in("--agent", python_agent())
    chat.say("two")
    chat.expect(ARMED)
    chat.child.send("1")
    chat.expect(ARMED)
    chat.deny("3")
    chat.expect("call-2a: selected allow")
    chat.expect("call-2b: selected deny")
    chat.expect("turn ended")
    chat.expect_prompt()
    chat.quit()


def test_acp_has_no_presets_and_the_chat_says_so(chat_in: Any) -> None:
    chat: Chat = chat_in("--agent", python_agent())
    chat.say("/policy")
    chat.expect("ACP has no permission presets")
    chat.expect_prompt()
    chat.say("/sessions")
    chat.expect("py-session-1")
    chat.expect_prompt()
    chat.quit()


def test_the_chat_answers_a_typescript_sdk_agent_for_the_right_call_and_session(
    chat_in: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = require_node_packages("@agentclientprotocol/sdk", "zod")
    log = tmp_path / "ts-agent.jsonl"
    monkeypatch.setenv("PERMCLIENT_AGENT_LOG", str(log))
    chat: AgentChat = chat_in("--agent", shlex.join([node, str(NODE_DIR / "ts_agent.mjs")]))
    transcript = chat.plain_transcript()
    assert "agent permclient-ts-interop-agent 0.0.0" in transcript

    chat.say("write yes.txt hello")
    chat.expect("Permission request")
    chat.expect(ARMED)
    chat.child.send("1")
    chat.expect("turn ended: " + STYLE + "end_turn")
    chat.expect_prompt()
    chat.say("write no.txt nope")
    chat.expect(ARMED)
    chat.deny("3")
    chat.expect("turn ended: " + STYLE + "end_turn")
    chat.expect_prompt()

    # A second session, with a turn in the background: its card is answered for it.
    chat.say("/new")
    chat.expect("new session")
    chat.expect_prompt()
    chat.say("/bg write bg.txt from the background")
    chat.expect(ARMED)
    chat.child.send("1")
    chat.expect("turn ended")
    chat.expect_prompt()

    chat.say("write cancelled.txt never")
    chat.expect(ARMED)
    chat.child.sendcontrol("c")
    chat.expect("turn cancelled")
    chat.expect_prompt()
    chat.quit()

    ws = chat.workspace
    assert (ws / "yes.txt").read_text() == "hello"
    assert (ws / "bg.txt").read_text() == "from the background"
    assert not (ws / "no.txt").exists()
    assert not (ws / "cancelled.txt").exists()
    events = [json.loads(line) for line in log.read_text().splitlines()]
    answers = {e["toolCallId"]: e for e in events if e["event"] == "answer"}
    outcome = {call: e.get("value", {}).get("outcome") for call, e in answers.items()}
    assert outcome["write:yes.txt"] == {"outcome": "selected", "optionId": "allow"}
    assert outcome["write:no.txt"] == {"outcome": "selected", "optionId": "deny"}
    assert outcome["write:bg.txt"] == {"outcome": "selected", "optionId": "allow"}
    assert outcome["write:cancelled.txt"] == {"outcome": "cancelled"}
    assert answers["write:yes.txt"]["sessionId"] == answers["write:no.txt"]["sessionId"]
    second = answers["write:bg.txt"]["sessionId"]
    assert second != answers["write:yes.txt"]["sessionId"]
    # Ctrl-C went out as session/cancel for the session the turn ran in.
    cancels = [e["sessionId"] for e in events if e["event"] == "session_cancel"]
    assert cancels == [answers["write:cancelled.txt"]["sessionId"]] == [second]


def test_two_cards_at_once_from_a_typescript_sdk_agent_one_withdrawn_by_it(
    chat_in: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = require_node_packages("@agentclientprotocol/sdk", "zod")
    log = tmp_path / "ts-agent.jsonl"
    monkeypatch.setenv("PERMCLIENT_AGENT_LOG", str(log))
    chat: AgentChat = chat_in("--agent", shlex.join([node, str(NODE_DIR / "ts_agent.mjs")]))
    # Both questions are asked at once; once the first is answered the agent
    # withdraws the second with the SDK's own cancellation ($/cancel_request).
    chat.say("write kept.txt yes; write dropped.txt no; withdraw dropped.txt")
    chat.expect("write kept.txt")
    chat.expect("1 approval waiting")
    chat.expect(ARMED)
    chat.child.send("1")
    chat.expect("withdrawn by the runtime")
    chat.expect("turn ended: " + STYLE + "end_turn")
    chat.expect_prompt()
    chat.quit()
    assert (chat.workspace / "kept.txt").read_text() == "yes"
    assert not (chat.workspace / "dropped.txt").exists()
    events = [json.loads(line) for line in log.read_text().splitlines()]
    answers = {
        e["toolCallId"]: e.get("value", {}).get("outcome") for e in events if e["event"] == "answer"
    }
    assert answers == {
        "write:kept.txt": {"outcome": "selected", "optionId": "allow"},
        "write:dropped.txt": {"outcome": "cancelled"},
    }
