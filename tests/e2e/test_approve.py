"""``simhost approve`` against a real server on a real socket: a relay, served by
``serve_relay``, whose questions a real permclient client gets from a scripted agent.
The approver reads its answers as lines from a pipe and prints to a console the test
watches; its controller's keyboard rules are tested on their own, with a mock clock.

Editor rules, receipts, reasons and batches: against ``simhost serve`` in a child
process with the reference runtime (another view prompts it), or a serve host in this
process on a scripted agent; once in a pty, keys and all. The server keeps its rules
and audit trail in the test's own folders (``XDG_CONFIG_HOME`` and ``XDG_STATE_HOME``
too)."""

from __future__ import annotations

import json
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any
from urllib.parse import parse_qs, urlsplit

import pexpect
import pytest
import trio
import trio.testing
from trio_websocket import WebSocketConnection

from permclient.rules import load_rules
from simhost.audit import AUDIT_NAME
from tests.support.approver import Approving, approving
from tests.support.pty import SHORT_ARM_DELAY, pty_env
from tests.support.serving import (
    GIT_STATUS_RULE,
    WAIT_S,
    Inbox,
    Places,
    new_session,
    send,
    served,
    served_sync,
    sockets_freed_quietly,
    view,
)

# (what trio-websocket leaves to the garbage collector is collected as each test ends)
sockets_freed_quietly = pytest.fixture(autouse=True)(sockets_freed_quietly)


class Tab(Inbox):
    """Another view (a browser tab's part): it starts sessions and prompts, and reads
    the agent's turns."""

    def __init__(self, ws: WebSocketConnection) -> None:
        super().__init__(ws, "tab")

    async def question(self, title: str) -> dict[str, Any]:
        """The question titled ``title`` (those asked before it are left out)."""
        while True:
            question: dict[str, Any] = (await self.take({"type": "requested"}))["question"]
            if question["title"] == title:
                return question

    async def first_session(self) -> str:
        await self.open()
        await self.send({"type": "list_sessions"})
        session_id: str = (await self.take({"type": "sessions"}))["sessions"][0]["sessionId"]
        return session_id

    async def prompt(self, session_id: str, text: str) -> None:
        await self.send({"type": "prompt", "sessionId": session_id, "text": text})


@asynccontextmanager
async def served_with_tab(places: Places) -> AsyncIterator[tuple[Approving, Tab, str]]:
    """``simhost serve`` (the reference runtime) with rules kept in the test's state
    folder; ``simhost approve`` on it, answering with lines; a tab; the first session."""
    async with (
        served(places.workspace, "--state-dir", str(places.state)) as server,
        view(server.authority, server.token) as ws,
        approving(server.authority, server.token) as approver,
    ):
        tab = Tab(ws)
        session_id = await tab.first_session()
        await approver.out.wait_for("0 questions pending")
        yield approver, tab, session_id


async def test_a_card_offers_editor_rules_and_one_saved_answers_it_and_later_questions(
    places: Places,
) -> None:
    async with served_with_tab(places) as (approver, tab, s1):
        await tab.prompt(s1, "run git status")
        await approver.out.wait_for("a-b (an editor rule)")  # (the card, then its rules)
        assert "Editor rules (kept by the editor; /rules lists them)" in approver.text
        assert f"a  Always {GIT_STATUS_RULE}" in approver.text
        assert "b  Always deny `git status …` in this workspace, until revoked" in approver.text
        assert not places.rules_file.exists()
        await approver.answer("a")  # a line: saved at once
        await approver.out.wait_for(f"rule 1 saved: {GIT_STATUS_RULE}")
        await approver.out.wait_for("✓ answered by rule 1: Allow  allow_once · local_shell: git")
        await approver.out.wait_for("⚖ rule 1 allowed · local_shell: git status · Session 1 (")
        assert "exit code" in await tab.turn(s1)
        (saved,), errors = load_rules(places.rules_file)
        assert errors == [] and saved.command == ("git", "status")

        # Later questions the rule covers never come up: a receipt each, no card.
        for count, prompt in enumerate(("run git status", "run git status --short"), 2):
            await tab.prompt(s1, prompt)
            assert "exit code" in await tab.turn(s1)
            await approver.out.wait_for("⚖ rule 1 allowed · local_shell: git status", count)
        assert approver.text.count("Permission request") == 1

        # One it does not cover is asked, with its own rules.
        await tab.prompt(s1, "run git push")
        await approver.out.wait_for("a  Always allow `git push …` in this workspace")
        await approver.out.wait_for("a-b (an editor rule)", count=2)
        await approver.answer("e")  # no such rule: nothing happens
        await approver.out.wait_for("answer 1-4, a-b (an editor rule), or c (cancelled): got 'e'")
        await approver.answer("b")  # Always deny: saved, and it answers the card
        await approver.out.wait_for("⚖ rule 2 denied · local_shell: git push")
        assert "denied" in await tab.turn(s1)


async def test_a_denial_s_reason_reaches_the_agent_and_an_allow_takes_none(
    places: Places,
) -> None:
    async with served_with_tab(places) as (approver, tab, s1):
        await tab.prompt(s1, "run git push")
        await approver.out.wait_for("Answer with a line: 1-4 (a deny option may be followed")
        await approver.out.wait_for("(an editor rule)")
        await approver.answer("1 looks fine")  # Allow: a reason goes only with a denial
        await approver.out.wait_for("a reason goes only with a deny option: nothing answered")
        await approver.answer("3   not before review ")
        await approver.out.wait_for("→ Deny  reject_once · local_shell: git push · Session 1 (")
        await approver.out.wait_for(") · reason: not before review")
        text = await tab.turn(s1)
        assert "the editor denied it, saying: not before review" in text, text

        # Another view's denial, with its reason: the notice says it.
        await tab.prompt(s1, "run make")
        question = await tab.question("local_shell: make")
        await approver.out.wait_for("local_shell: make")
        await send(
            tab.ws,
            {
                "type": "answer",
                "questionId": question["questionId"],
                "sessionId": s1,
                "decision": {"outcome": "selected", "optionId": "deny"},
                "reason": "no builds today",
            },
        )
        await approver.out.wait_for("✓ answered by tab: Deny  reject_once · local_shell: make")
        await approver.out.wait_for("· reason: no builds today")
        assert "saying: no builds today" in await tab.turn(s1)


async def test_rules_lists_them_and_rules_rm_revokes_one_listing_them_first_if_none_was(
    places: Places,
) -> None:
    async with served_with_tab(places) as (approver, tab, s1):
        for count, prompt in enumerate(("run git status", "run echo hi"), 1):
            await tab.prompt(s1, prompt)
            await approver.out.wait_for("a-b (an editor rule)", count)
            await approver.answer("a")
            await approver.out.wait_for(f"⚖ rule {count} allowed")
            assert "exit code" in await tab.turn(s1)
        (_, echo), _ = load_rules(places.rules_file)

        # No list was shown yet: it is listed first, then rule 2 of it is revoked.
        await approver.answer("/rules rm 2")
        await approver.out.wait_for("rule 2 revoked: allow `echo hi …` in this workspace")
        listing = approver.text.rpartition("editor rules (a deny rule beats an allow rule)")[2]
        assert "kept in" in listing and "rules.toml" in listing
        assert "│ 1 │ allow `git status …`" in listing and "│ 2 │ allow `echo hi …`" in listing
        assert listing.index("│ 2 │") < listing.index("rule 2 revoked")
        (kept,), _ = load_rules(places.rules_file)
        assert kept.command == ("git", "status") and echo.command == ("echo", "hi")

        await approver.answer("/rules")
        await approver.out.wait_for("editor rules (a deny rule beats an allow rule)", count=2)
        last = approver.text.rpartition("editor rules (a deny rule beats")[2]
        assert "│ 1 │ allow `git status …`" in last and "echo" not in last
        await approver.answer("/rules rm 2")  # not in the last list
        await approver.out.wait_for("there is no rule 2 in the last list: /rules lists them")
        await approver.answer("/rules rm 1")
        await approver.out.wait_for(f"rule 1 revoked: {GIT_STATUS_RULE}")
        assert load_rules(places.rules_file) == ([], [])
        await approver.answer("/rules")
        await approver.out.wait_for("no editor rules yet: a card's a-d keys save one")
        await approver.answer("/rules rm 1")  # (the last list has none)
        await approver.out.wait_for("there is no rule 1 in the last list")

        # Revoked: git status asks again.
        await tab.prompt(s1, "run git status")
        await approver.out.wait_for("a-b (an editor rule)", count=3)
        await approver.answer("c")
        await approver.out.wait_for("→ cancelled · local_shell: git status")
        assert "denied" in await tab.turn(s1)


async def test_allow_all_and_deny_all_list_the_card_s_session_then_answer_what_they_listed(
    places: Places,
) -> None:
    async with served_with_tab(places) as (approver, tab, s1):
        s2 = await new_session(tab)
        await tab.prompt(s1, "burst 2")
        await approver.out.wait_for("Permission request")
        await tab.prompt(s2, "burst 3")
        await approver.out.wait_for("⧗ 4 approvals waiting")
        up = approver.text.rpartition("Permission request")[2]
        assert "Session 1 (" in up.partition("Tool")[0]  # s1's card is up: its session's

        await approver.answer("/allow-all edits")
        await approver.out.wait_for("Answer them? y/N")
        listed = approver.text.rpartition("/allow-all edits will answer")[2]
        assert listed.startswith(" 2 questions in Session 1 (")
        assert listed.count("fs.write: burst-") == 2 and listed.count("→ Allow") == 2
        await approver.answer("y")
        await approver.out.wait_for("/allow-all edits: 2 answered")
        assert "burst 2: 2 completed, 0 denied" in await tab.turn(s1)
        await approver.out.wait_for("✓ answered by batch allow-all edits (term): Allow", 2)

        # Session 2's card is up now; a no answers nothing.
        await approver.answer("/deny-all burst-*.txt")
        await approver.out.wait_for("Answer them? y/N", count=2)
        listed = approver.text.rpartition("/deny-all burst-*.txt will answer")[2]
        assert listed.startswith(" 3 questions in Session 2 (")
        await approver.answer("n")
        await approver.out.wait_for("/deny-all burst-*.txt: nothing answered")
        await approver.answer("/deny-all reads")
        await approver.out.wait_for("/deny-all reads: no pending question of Session 2 (")
        await approver.answer("/deny-all burst-*.txt")
        await approver.out.wait_for("Answer them? y/N", count=3)
        await approver.answer("yes")
        await approver.out.wait_for("/deny-all burst-*.txt: 3 answered")
        assert "burst 3: 0 completed, 3 denied" in await tab.turn(s2)
        await approver.answer("/allow-all edits")  # no card is up: no session to name
        await approver.out.wait_for(
            "no card is up: /allow-all answers questions of the session whose card is up"
        )
    assert sorted(path.name for path in places.workspace.glob("burst-*")) == [
        "burst-1.txt",
        "burst-2.txt",
    ]


STYLE = r"(?:\x1b\[[0-9;]*m)*"  # (Rich's style codes, between differently styled parts)


ARMED = "Press 1-4 to choose" + STYLE + " · a-b saves a rule"


def _prompted(url: str, text: str) -> None:
    """Prompt the server's first session with ``text``, as another view would (until
    its turn has started). The session's last turn may not have ended yet (an answer
    reaches the approver before the agent ends its turn): then the prompt is refused,
    and sent again once that turn has ended."""
    parts = urlsplit(url)
    token = parse_qs(parts.query)["token"][0]

    async def prompt() -> None:
        async with view(parts.netloc, token) as ws:
            tab = Tab(ws)
            session_id = await tab.first_session()
            while True:
                await tab.prompt(session_id, text)
                reply = await tab.take_first(
                    {"type": "session_event", "event": "turn_started"}, {"type": "error"}
                )
                if reply["type"] == "session_event":
                    return
                assert "already has a turn running" in reply["reason"], reply
                await tab.take({"type": "session_event", "event": "turn_ended"})

    trio.run(prompt)


@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")
def test_at_a_terminal_rules_reasons_and_commands_take_their_keys(places: Places) -> None:
    with served_sync(places.workspace, "--state-dir", str(places.state)) as (url, _):
        env = pty_env()
        child = pexpect.spawn(
            sys.executable,
            ["-m", "simhost", "approve", url, "--name", "pty", *SHORT_ARM_DELAY],
            env=env,
            dimensions=(60, 160),
            encoding="utf-8",
            codec_errors="replace",
            timeout=WAIT_S * 3,
        )
        try:
            child.expect("0 questions pending")
            _prompted(url, "run git status")
            child.expect(ARMED)
            child.send("a")
            child.expect("Save editor rule: ")
            child.expect("allow `git status …` in this workspace, until revoked")
            child.expect("y saves it")
            child.send("y")
            child.expect("rule 1 allowed")

            _prompted(url, "run git push")
            child.expect(ARMED)
            child.send("3")  # Deny: the prompt takes a reason
            child.expect("Reason for denying")
            child.send("not today\r")
            child.expect("reason: not today")

            child.send("/rules\r")
            child.expect("kept in")
            child.send("/rules rm 1\r")
            child.expect("rule 1 revoked")
            child.send("\x03")
            child.expect(pexpect.EOF)
        finally:
            child.close(force=True)
        assert child.exitstatus == 0, child.signalstatus
    records = [json.loads(line) for line in (places.state / AUDIT_NAME).read_text().splitlines()]
    assert [(r["command"], r["outcome"], r["by"], r.get("reason")) for r in records] == [
        ("git status", "allowed", "rule", None),
        ("git push", "denied", "person", "not today"),
    ]

