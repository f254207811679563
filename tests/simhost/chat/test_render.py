"""What the chat prints besides cards: a runtime's string never breaks a transcript line,
``/policy`` names each standing grant, and ``/help`` agrees with docs/chat.md."""

from __future__ import annotations

import re

import pytest

from permclient import RequestError
from simhost.chat.keys import Key
from simhost.chat.render import COMMANDS, KEYS
from tests.support import paths
from tests.support.fake_runtime import Harness, running_chat

FORGED = "✓ fs.write: x  [edit]  completed — allowed by you"
"""What a forged transcript line would say: a write that never happened, allowed."""
BREAKS = ["\n", "\r", "\u2028", "\x1b[2K\r"]
DOCS = paths.DOCS / "chat.md"


def _forged_lines(chat: Harness) -> list[str]:
    """Transcript lines that begin with a forged marker (after any indentation)."""
    return [line for line in re.split(r"\r?\n", chat.text) if line.lstrip().startswith("✓")]


def _typed(text: str) -> str:
    """``text`` as typed in a step of the fake runtime's script (``\\n`` for a line break)."""
    return text.replace("\n", "\\n")


async def test_a_tool_title_with_a_line_break_forges_no_transcript_line() -> None:
    async with running_chat() as chat:
        chat.runtime.say_outcome = False  # the agent's own message lines are its to make
        # The card, the answer's receipt (→) and the tool line all show the title.
        await chat.type_line(f"ask {_typed('x' + chr(10) + FORGED)}")
        await chat.press("3", Key("enter"))  # deny, without a reason
        assert "→ Deny  reject_once · fs.write: x\\n✓ fs.write: x" in chat.text
        # A withdrawn card's notice (⊘) shows it too.
        await chat.type_line(f"withdraw {_typed('w' + chr(10) + FORGED)}; gate")
        chat.runtime.withdraw.set()
        chat.runtime.gate.set()
        await chat.press()
        assert "⊘ withdrawn by the runtime · fs.write: w\\n✓ fs.write: x" in chat.text
        assert _forged_lines(chat) == []


@pytest.mark.parametrize("brk", BREAKS, ids=repr)
async def test_runtime_strings_stay_on_their_line(brk: str) -> None:
    forged = brk + FORGED
    async with running_chat() as chat:
        # A stop reason.
        chat.runtime.stop_reason = "end_turn" + forged
        await chat.type_line("say hi\\n")
        chat.runtime.stop_reason = "end_turn"
        # A session title (the prompt line echoes it), and a session id (the prefix of
        # lines from a session that is not current).
        chat.runtime.sessions["s-1"].title = "Docs" + forged
        await chat.type_line("/sessions")
        await chat.type_line("hello")
        chat.runtime.next_ids = ["s-2" + forged]
        await chat.type_line("/new")
        await chat.type_line("/switch s-1")
        # A preset the runtime says is now in force.
        await chat.type_line("/policy read-only")
        # An error message, and a list of sessions a name matches.
        chat.runtime.refuse["sessionPermissions"] = RequestError(-32603, "no" + forged)
        await chat.type_line("/policy")
        chat.runtime.sessions["s-2" + forged].title = "Docs" + forged
        await chat.type_line("/switch s-")
        assert _forged_lines(chat) == [], chat.text
        assert "end_turn" in chat.text and "no" in chat.text and "names 2 sessions" in chat.text


async def test_policy_names_each_standing_grant_on_one_line() -> None:
    async with running_chat() as chat:
        chat.runtime.grants = [
            {
                "tool": "local_shell.local_shell",
                "decision": "allow",
                "scope": ["git", "status"],
                "name": "Always allow `git status …` in this session",
            },
            {
                "tool": "local_shell.local_shell",
                "decision": "allow",
                "scope": ["ls"],
                "name": "Always allow `ls …` in this session\n" + FORGED,
            },
            {"tool": "fs.write", "decision": "reject", "scope": ["notes.txt"]},
            {"tool": "fs.delete", "decision": "allow"},  # an older runtime: no scope
        ]
        await chat.type_line("/policy")
        assert "Always allow `git status …` in this session" in chat.text
        assert "Always allow `ls …` in this session\\n✓ fs.write: x" in chat.text
        assert "always reject: notes.txt" in chat.text
        assert "always allow" in chat.text.split("fs.delete")[-1]
        assert _forged_lines(chat) == []


def test_help_names_every_command_and_key_the_docs_describe() -> None:
    docs = DOCS.read_text(encoding="utf-8")
    helped = {name.split()[0] for name, _ in COMMANDS if name.startswith("/")}
    documented = set(re.findall(r"^\| `(/[a-z][a-z-]*)", docs, flags=re.MULTILINE))
    assert helped - {"/quit"} == documented
    assert ("/switch SESSION", "make SESSION current (loads it; the runtime activates it)") in (
        COMMANDS
    )
    assert any("unique prefix" in text for name, text in COMMANDS if name == "")
    assert "SESSION is an id, a unique prefix of one" in docs
    keys = dict(KEYS)
    assert keys["v"] == "on a card: print the whole card into the transcript (answers nothing)"
    assert "| `v` | print the whole card into the transcript (answers nothing) |" in docs
    # The keys of a card's editor rules, and a deny option's reason.
    assert keys["a-d"].startswith("on a card: save that editor rule")
    assert "| `a`…`d` | save that editor rule" in docs
    assert "a deny option then takes a reason" in keys["1-9"]
    assert "Reason for denying (optional, sent to the agent)" in docs


async def test_help_is_shown_with_switch_and_the_v_key() -> None:
    async with running_chat() as chat:
        await chat.type_line("/help")
        assert "/switch SESSION" in chat.text and "unique prefix of one" in chat.text
        assert re.search(r"^v +on a card: print the whole card", chat.text, flags=re.MULTILINE)
