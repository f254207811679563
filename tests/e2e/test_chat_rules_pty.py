"""Editor rules in ``simhost chat`` as a person uses them: a real pty, the real runtime.

Every expect is bounded by a timeout; nothing sleeps.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.pty import ARMED, Chat, chat_starter

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")


@pytest.fixture
def chat_in(tmp_path: Path) -> Iterator[Any]:
    yield from chat_starter(tmp_path, Chat)


def _audit(chat: Chat) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (chat.state / "audit.jsonl").read_text().splitlines()]


def test_an_always_allow_git_status_rule_answers_it_asks_for_git_push_and_revoking_asks_again(
    chat_in: Any,
) -> None:
    chat: Chat = chat_in()
    chat.say("run git status")
    chat.expect(ARMED)
    chat.expect("a-b saves a rule")
    chat.child.send("a")  # "Always allow `git status …` in this workspace": shown, then saved
    chat.expect("Save editor rule: ")
    chat.expect("allow `git status …` in this workspace, until revoked")
    chat.child.send("y")
    chat.expect("rule 1 saved")
    chat.expect("rule 1 allowed")
    chat.expect("turn ended")
    chat.expect_prompt()
    rules = (chat.state / "rules.toml").read_text()
    assert 'command = ["git", "status"]' in rules
    assert (chat.state / "rules.toml").stat().st_mode & 0o777 == 0o600

    chat.say("run git status")  # the rule answers: a receipt, no card
    chat.expect("rule 1 allowed")
    chat.expect("git status.*allowed by rule 1")  # the tool's line names the rule, not "you"
    chat.expect("turn ended")
    chat.expect_prompt()
    chat.say("run git push")  # not covered: a card
    chat.expect(ARMED)
    chat.child.send("3")  # Deny: the prompt takes a reason
    chat.expect("Reason for denying")
    chat.child.send("not today")
    chat.child.send("\r")
    chat.expect("saying: not today")
    chat.expect("turn ended")
    chat.expect_prompt()

    chat.say("/rules")
    chat.expect("kept in")
    chat.expect_prompt()
    listed = r"│ 1 │ allow `git status …` in this workspace, until revoked\s*│ 2 "
    assert re.search(listed, chat.plain_transcript())
    chat.say("/rules rm 1")
    chat.expect("rule 1 revoked")
    chat.expect_prompt()
    chat.say("run git status")  # revoked: it asks again
    chat.expect(ARMED)
    chat.child.send("\x1b")
    chat.expect("turn ended")
    chat.expect_prompt()
    assert "[[rule]]" not in (chat.state / "rules.toml").read_text()

    records = _audit(chat)
    assert [(r["command"], r["outcome"], r["by"]) for r in records] == [
        ("git status", "allowed", "rule"),
        ("git status", "allowed", "rule"),
        ("git push", "denied", "person"),
        ("git status", "cancelled", "person"),
    ]
    assert records[2]["reason"] == "not today"
    chat.quit()


def test_a_batch_answer_answers_exactly_the_listed_questions(chat_in: Any) -> None:
    chat: Chat = chat_in()
    chat.say("/bg burst 2")  # Session 1: two edits wait
    chat.expect(ARMED)
    chat.say("/new Second")
    chat.expect("new session Second")
    chat.say("/bg burst 3")  # Second: three more
    chat.expect("5 approvals waiting|⧗ 4 approvals waiting")
    chat.say("/allow-all edits")
    chat.expect("will answer 3 questions")
    chat.expect("Answer them\\? y/N")
    chat.child.send("y")
    chat.expect("/allow-all edits: 3 answered")
    chat.expect("allowed by /allow-all edits")
    chat.expect("burst 3: 3 completed")
    records = _audit(chat)
    assert [r["by"] for r in records] == ["batch"] * 3
    assert {r["session"] for r in records} == {records[0]["session"]}
    # Session 1's two are still asked: the batch named only Second's. (Two keys: the
    # same key again within a second would be taken for its auto-repeat.)
    chat.expect(ARMED)
    chat.child.send("\x1b")
    chat.expect("cancelled \\(Esc\\)")
    chat.expect(ARMED)
    chat.child.send("1")
    chat.expect(r"burst 2: \d completed, 1 denied")  # (Second wrote burst-2.txt first)
    chat.quit()


def test_rules_edit_opens_the_file_in_the_editor_and_reads_it_again(
    chat_in: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # The "editor" shows it has the terminal (it reads a line from it), then appends a
    # deny rule for `git push` to the file it was given.
    editor = tmp_path / "editor.sh"
    editor.write_text(
        "#!/bin/sh\n"
        'printf "editing %s\\n" "$1"\n'
        "read answer\n"
        'printf "\\n[[rule]]\\neffect = \\"deny\\"\\nscope = \\"everywhere\\"\\n'
        'lifetime = \\"revoked\\"\\ncommand = [\\"git\\", \\"push\\"]\\n" >> "$1"\n'
    )
    editor.chmod(0o755)
    monkeypatch.setenv("EDITOR", str(editor))
    chat: Chat = chat_in()
    chat.say("/rules edit")
    chat.expect("editing .*rules.toml")
    chat.child.send("typed in the editor\r")  # the editor reads it, not the chat
    chat.expect("1 rules: /rules lists them")
    chat.expect_prompt()
    chat.say("run git push")
    chat.expect("rule 1 denied")
    chat.expect("turn ended")
    chat.expect_prompt()
    assert "You said: typed" not in chat.plain_transcript()
    chat.quit()
