"""``simhost chat`` as a person uses it: a real pseudo-terminal, the real reference runtime.

Every expect is bounded by a timeout; nothing sleeps. The chat prints the
runtime's pid in its banner, so each test can check that the child is gone
after the chat exits.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect
import pytest

from tests.support.pty import ARMED, REASON, STYLE, TIMEOUT, Chat, alive, chat_starter

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")

@pytest.fixture
def chat_in(tmp_path: Path) -> Iterator[Any]:
    yield from chat_starter(tmp_path, Chat)


def test_deny_then_allow_a_file_in_the_workspace(chat_in: Any) -> None:
    chat: Chat = chat_in()
    target = chat.workspace / "notes.txt"

    chat.say("create notes.txt with hello")
    chat.expect("Permission request")
    chat.expect("fs.write: notes.txt")
    chat.expect(r"\+hello")  # the diff of the new file
    chat.expect(ARMED)
    # Enter alone does nothing: the card still has the keyboard afterwards. (The redraw
    # after it says the Enter was read: with the 9 in the same read, the two are a paste.)
    chat.child.send("\r")
    chat.expect(ARMED)
    chat.child.send("9")
    chat.expect("there is no option 9")
    assert chat.events("approval.responded") == []
    chat.child.send("3")  # Deny: the prompt line takes a reason, nothing is answered yet
    chat.expect("Reason for denying")
    chat.expect(REASON)
    assert chat.events("approval.responded") == []
    chat.child.send("not yet\r")
    chat.expect("reason: " + STYLE + "not yet")  # the receipt
    chat.expect("denied by you")
    chat.expect("saying: not yet")  # the runtime got the reason
    chat.expect("turn ended")
    chat.expect_prompt()
    assert not target.exists()

    chat.say("create notes.txt with hello")
    chat.expect(ARMED)
    chat.child.send("1")
    chat.expect("completed")
    chat.expect("turn ended")
    chat.expect_prompt()
    assert target.read_text().startswith("hello")
    assert [e["option_id"] for e in chat.events("approval.responded")] == ["deny", "allow"]
    chat.quit()


def test_a_file_outside_the_workspace_goes_through_the_shell_and_asks(chat_in: Any) -> None:
    chat: Chat = chat_in()
    outside = Path(f"/tmp/simhost-chat-{uuid.uuid4().hex}.txt")
    try:
        chat.say(f"create {outside} with x")
        chat.expect("Permission request")
        chat.expect("local_shell")
        chat.expect("kind: execute")
        chat.expect(r"Command" + STYLE + " +" + STYLE + r"\$ python3")
        # A compound command is offered no standing grant: 1 Allow, 2 Deny.
        chat.expect(ARMED.replace("1-4", "1-2"))
        chat.deny("2")
        chat.expect("failed" + STYLE + " — denied")
        chat.expect("turn ended")
        assert not outside.exists()
        chat.quit()
    finally:
        outside.unlink(missing_ok=True)


def test_a_policy_timeout_withdraws_the_card_and_the_next_key_goes_to_the_prompt(
    chat_in: Any, tmp_path: Path
) -> None:
    policy = tmp_path / "quick.json"
    policy.write_text(json.dumps({"default": "approve", "timeoutS": 1}))
    chat: Chat = chat_in("--policy", str(policy))

    chat.say("create late.txt with x")
    # The card is up. (Not ARMED: the runtime withdraws it after 1 s by its clock, the
    # chat arms it after its arming delay by its own; a slow chat can see the withdrawal first.)
    chat.expect("Permission request")
    chat.expect("withdrawn by the runtime")
    chat.expect("turn ended")
    chat.expect_prompt()
    chat.child.send("3")  # would have been "Deny" on the card: it is text at the prompt now
    chat.expect_prompt("3")
    assert chat.events("approval.responded") == []
    assert [e["by"] for e in chat.events("approval.cancelled")] == ["peer"]
    assert not (chat.workspace / "late.txt").exists()
    chat.child.sendcontrol("u")
    chat.expect_prompt()
    chat.quit()


def test_ctrl_c_during_a_card_answers_it_cancelled(chat_in: Any) -> None:
    chat: Chat = chat_in()
    chat.say("create c.txt with x")
    chat.expect(ARMED)
    chat.child.sendcontrol("c")
    chat.expect("answered cancelled: you cancelled the turn")
    chat.expect("turn cancelled")
    chat.expect_prompt()
    [cancelled] = chat.events("approval.cancelled")
    assert cancelled["by"] == "turn"
    assert chat.events("approval.responded") == []
    assert not (chat.workspace / "c.txt").exists()
    # The chat goes on: the next turn asks again.
    chat.say("create c.txt with x")
    chat.expect(ARMED)
    chat.child.send("\x1b")  # Esc: cancelled
    chat.expect(r"cancelled \(Esc\)")
    chat.expect("turn ended")
    chat.quit()


def test_ctrl_c_at_the_prompt_leaves_cleanly(chat_in: Any) -> None:
    chat: Chat = chat_in()
    chat.child.sendcontrol("c")
    chat.child.expect(pexpect.EOF)
    chat.child.close()
    assert chat.child.exitstatus == 0
    assert not alive(chat.runtime_pid)


def test_sessions_commands_in_the_terminal(chat_in: Any) -> None:
    chat: Chat = chat_in()
    chat.say("/new Second")
    chat.expect(r"new session Second \((s-[0-9a-f]+)\)")
    chat.expect_prompt()
    chat.say("/sessions")
    chat.expect("Sessions")
    chat.expect("Second")
    chat.expect_prompt()
    chat.say("/policy")
    chat.expect("auto-edit")
    chat.expect_prompt()
    chat.quit()


def test_a_script_on_stdin_drives_the_chat(tmp_path: Path) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    script = "create a.txt with hi\n3\n\ncreate a.txt with hi\n1\n/sessions\n/quit\n"
    env = {k: v for k, v in os.environ.items() if k not in ("TERM", "FORCE_COLOR")}
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "simhost",
            "chat",
            "--workspace",
            str(workspace),
            "--state-dir",
            str(tmp_path / "state"),
        ],
        input=script,
        capture_output=True,
        text=True,
        timeout=TIMEOUT * 2,
        env=env,
        check=False,
    )
    out = result.stdout
    assert result.returncode == 0, result.stderr
    assert "\x1b" not in out  # readable without a terminal
    # The card's hint, wrapped in its 80-column frame: unwrapped, it names every answer.
    unwrapped = re.sub(r" *│\n│ *", " ", out)
    assert re.search(
        r"Answer with a line: 1-4 \(a deny option may be followed by a reason\), "
        r"a-?b \(an editor rule\), or esc \(cancelled\)\.",  # this card offers two rules
        unwrapped,
    )
    assert "→ Deny" in out and "denied by you" in out
    assert "→ Allow" in out and "completed — allowed by you" in out
    assert "Sessions" in out
    assert (workspace / "a.txt").read_text().startswith("hi")


def test_two_sessions_queue_their_cards_one_at_a_time(chat_in: Any) -> None:
    chat: Chat = chat_in()
    chat.say("/bg create a.txt with 1")
    chat.expect("background turn started")
    chat.expect(ARMED)
    # "/" types a command while the card waits; the card comes back after it.
    chat.say("/new Second")
    chat.expect(r"new session Second \(s-")
    chat.expect(ARMED)
    chat.say("/bg create b.txt with 2")
    # A card that comes back is armed again before it takes keys; the marker is drawn
    # below it, so both are read from one frame (armed before b.txt is asked, the card's
    # hint precedes the marker and no later frame draws it again).
    chat.expect(
        ARMED
        + r"[^╰]*╰[^╯]*╯"
        + STYLE
        + r"\s*"
        + STYLE
        + r"⧗ 1 approval waiting: [^\n]*'Second' fs\.write: b\.txt"
    )
    chat.child.send("1")  # the first card: Session 1's a.txt
    chat.expect(r"→ .*Allow.* · fs\.write: a\.txt · Session 1 \(s-")
    # The second card, Second's b.txt, once armed (its subtitle names the session).
    chat.expect(ARMED + r"[^╰]*╰[^╯]* Second \(s-")
    chat.deny("3")
    chat.expect(r"→ .*Deny.* · fs\.write: b\.txt · Second \(s-")
    chat.expect_prompt()
    chat.say("/sessions")
    chat.expect("Sessions")
    chat.expect_prompt()
    assert (chat.workspace / "a.txt").exists()
    assert not (chat.workspace / "b.txt").exists()
    responded = chat.events("approval.responded")
    assert [e["option_id"] for e in responded] == ["allow", "deny"]
    assert responded[0]["session_id"] != responded[1]["session_id"]
    chat.quit()


def test_allow_always_then_a_standing_grant_applies(chat_in: Any) -> None:
    chat: Chat = chat_in()
    chat.say("create g.txt with 1")
    chat.expect(ARMED)
    chat.child.send("2")  # allow always: a standing grant asks to be confirmed
    chat.expect("Confirm: ")
    chat.expect("Always allow")
    chat.expect("y confirms")
    chat.child.send("y")
    chat.expect("turn ended")
    chat.expect_prompt()
    chat.say("edit g.txt: 1 => 2")
    chat.expect("standing grant applied")
    chat.expect("turn ended")
    assert (chat.workspace / "g.txt").read_text().startswith("2")
    assert len(chat.events("approval.requested")) == 1
    chat.quit()


@pytest.mark.parametrize("wait_for_the_card", [False, True])
def test_typing_see_file_2_while_the_card_opens_answers_nothing(
    chat_in: Any, wait_for_the_card: bool
) -> None:
    """The issue's case: the line's ``2`` is text on the prompt line, never option 2.
    (The arming guard under test: its default delay.)"""
    chat: Chat = chat_in("--arm-delay", "0.5")
    chat.say("create t1.txt with abc")
    if wait_for_the_card:
        chat.expect(ARMED)
    for char in "see file 2":
        chat.child.send(char)
    chat.expect("Your prompt line has text: clear it")
    chat.expect("typed ahead: " + STYLE + "see file 2")
    assert chat.events("approval.responded") == []
    assert not (chat.workspace / "t1.txt").exists()
    chat.child.sendcontrol("u")
    chat.expect(ARMED)
    chat.deny("3")
    chat.expect("denied by you")
    chat.expect("turn ended")
    chat.expect_prompt()
    assert [e["option_id"] for e in chat.events("approval.responded")] == ["deny"]
    chat.quit()


def test_a_bracketed_paste_is_one_prompt_line_and_answers_nothing(chat_in: Any) -> None:
    chat: Chat = chat_in()
    chat.say("create p.txt with 1")
    chat.expect(ARMED)
    chat.child.send("\x1b[200~3\rcreate q.txt with 2\r\x1b[201~")
    chat.expect("typed ahead: " + STYLE + re.escape("3⏎create q.txt with 2⏎"))
    assert chat.events("approval.responded") == []
    chat.child.sendcontrol("u")
    chat.expect(ARMED)
    chat.child.send("1")
    chat.expect("turn ended")
    chat.expect_prompt()
    assert "\x1b[?2004h" in chat.transcript.read_text()  # bracketed paste was asked for
    chat.quit()
    assert chat.transcript.read_text().rstrip().count("\x1b[?2004l") == 1  # and switched off


def test_ctrl_c_clears_a_typed_line_and_quitting_asks_while_a_turn_runs(chat_in: Any) -> None:
    chat: Chat = chat_in()
    chat.child.send("half a thought")
    chat.expect_prompt("half a thought")
    chat.child.sendcontrol("c")
    chat.expect_prompt()
    chat.say("/bg create q.txt with 1")
    chat.expect(ARMED)
    chat.say("/quit")
    chat.expect("1 turn still running: quit\\? y/N")
    chat.child.send("n")
    chat.expect("not quitting")
    chat.expect(ARMED)
    chat.say("/quit")
    chat.expect("1 turn still running: quit\\? y/N")
    chat.child.send("y")
    chat.child.expect(pexpect.EOF)
    chat.child.close()
    assert chat.child.exitstatus == 0
    assert not alive(chat.runtime_pid)
    assert [e["by"] for e in chat.events("approval.cancelled")] == ["turn"]
    assert chat.events("approval.responded") == []
    assert not (chat.workspace / "q.txt").exists()


def test_the_runtime_s_messages_are_lines_of_their_own(chat_in: Any) -> None:
    """Each message ends its line: none is glued to the next (``…question)burst 2: …``)."""
    chat: Chat = chat_in()
    chat.say("burst 2")
    chat.expect(ARMED)
    chat.child.send("\x1b")
    chat.expect(r"cancelled \(Esc\)")
    chat.expect(ARMED)
    chat.child.send("1")
    chat.expect("burst 2: 1 completed, 1 denied, 0 failed")
    chat.expect("turn ended")
    chat.expect_prompt()
    lines = chat.plain_transcript().replace("\r", "\n").splitlines()
    messages = [line.strip() for line in lines if "burst 2: " in line or "created burst" in line]
    assert "burst 2: 1 completed, 1 denied, 0 failed" in messages
    assert {"created burst-1.txt (8 bytes)", "created burst-2.txt (8 bytes)"} & set(messages)
    assert any(line.startswith("denied: fs.write: burst-") for line in map(str.strip, lines))
    chat.quit()
