"""Editor rules, batch answers, reasons and the audit trail of ``simhost serve``, end to
end: views through a real WebSocket client, against the command in a child process
with the reference runtime, or against a host in this process with a scripted agent
(where a test must say exactly when a question arrives).

Every wait is bounded (``WAIT_S``); nothing sleeps. Rules, audit trails and the
runtime's sessions live under each test's own folders (the state folder given, and
``XDG_CONFIG_HOME`` / ``XDG_STATE_HOME``), never the home folder's."""

from __future__ import annotations

import sys
from typing import Any

import pytest

from permclient.rules import EditorRule, load_rules, save_rules
from simhost.audit import AUDIT_NAME
from simhost.rulebook import RULES_NAME, user_rules_file
from tests.support import paths
from tests.support.serving import (
    GIT_STATUS_RULE,
    Inbox,
    Places,
    answer,
    new_session,
    rows,
    served,
    sockets_freed_quietly,
    view,
)

# (what trio-websocket leaves to the garbage collector is collected as each test ends)
sockets_freed_quietly = pytest.fixture(autouse=True)(sockets_freed_quietly)

FAKE_AGENTS = paths.FAKE_AGENTS


async def first_session(inbox: Inbox) -> str:
    reply = await inbox.reply({"type": "list_sessions"}, "sessions")
    session_id: str = reply["sessions"][0]["sessionId"]
    return session_id


async def asked(inbox: Inbox, session_id: str, text: str) -> dict[str, Any]:
    """Prompt ``text`` in the session; the question it leads to."""
    await inbox.send({"type": "prompt", "sessionId": session_id, "text": text})
    requested = await inbox.take({"type": "requested"})
    question: dict[str, Any] = requested["question"]
    assert question["sessionId"] == session_id
    return question


async def test_a_saved_rule_answers_its_card_and_the_others_then_each_later_one_until_revoked(
    places: Places,
) -> None:
    workspace, state = places.workspace, places.state
    async with (
        served(workspace, "--state-dir", str(state)) as server,
        view(server.authority, server.token) as ws_a,
        view(server.authority, server.token) as ws_b,
    ):
        a, b = Inbox(ws_a, "A"), Inbox(ws_b, "B")
        assert await a.open() == [] and await b.open() == []
        s1 = await first_session(a)
        s2 = await new_session(a)
        s3 = await new_session(a)

        # A question comes with the rules its card may save, each naming its whole scope.
        q1 = await asked(a, s1, "run git status")
        offers = await a.take({"type": "rule_offers", "questionId": q1["questionId"]})
        assert offers["offers"] == [
            {"index": 0, "effect": "allow", "label": f"Always {GIT_STATUS_RULE}"},
            {
                "index": 1,
                "effect": "deny",
                "label": "Always deny `git status …` in this workspace, until revoked",
            },
        ]
        assert await b.take({"type": "rule_offers", "questionId": q1["questionId"]}) == offers
        q2 = await asked(a, s2, "run git status --short")
        q3 = await asked(a, s3, "run git push")
        for question in (q2, q3):
            await b.take({"type": "requested", "question": question})
        assert not places.rules_file.exists()

        # Saving it answers that card and every other pending one it covers (not git push).
        await a.send(
            {"type": "save_rule", "questionId": q1["questionId"], "sessionId": s1, "index": 0}
        )
        for inbox in (a, b):
            listing = await inbox.take({"type": "rules"})
            assert rows(listing) == [(1, "allow", GIT_STATUS_RULE, 0)]  # (saved)
            assert listing["rules"][0]["keptIn"] == str(places.rules_file)
            for hits, question in enumerate((q1, q2), 1):
                resolved = await inbox.take(
                    {"type": "resolved", "questionId": question["questionId"]}
                )
                assert resolved == {
                    "type": "resolved",
                    "questionId": question["questionId"],
                    "outcome": "selected",
                    "optionId": "allow",
                    "by": "rule 1",
                }
                receipt = await inbox.take(
                    {"type": "rule_receipt", "questionId": question["questionId"]}
                )
                assert receipt == {
                    "type": "rule_receipt",
                    "sessionId": question["sessionId"],
                    "toolCallId": question["toolCallId"],
                    "title": question["title"],
                    "number": 1,
                    "rule": GIT_STATUS_RULE,
                    "outcome": "allowed",
                    "hits": hits,  # (its answers so far: no list is sent per answer)
                    "questionId": question["questionId"],
                }
        for session_id in (s1, s2):
            text = await a.turn(session_id)
            assert "exit code" in text and "denied" not in text, text
        assert not a.kept({"questionId": q3["questionId"], "type": "resolved"})

        # The rules file: outside the workspace, its owner's only, the rule in it.
        assert places.rules_file.stat().st_mode & 0o777 == 0o600
        assert not places.rules_file.resolve().is_relative_to(workspace.resolve())
        assert not list(workspace.rglob("*.toml"))
        assert not user_rules_file().exists()  # (a workspace rule: the workspace's file)
        assert str(user_rules_file()).startswith(str(places.config))
        (saved,), errors = load_rules(places.rules_file)
        assert errors == [] and saved.command == ("git", "status")
        assert saved.scope == "workspace" and saved.workspace == str(workspace.resolve())

        # A denial's reason reaches the agent, and every view.
        await b.send(answer(q3, "deny", "pushes wait for review"))
        for inbox in (a, b):
            resolved = await inbox.take({"type": "resolved", "questionId": q3["questionId"]})
            assert resolved["by"] == "B" and resolved["reason"] == "pushes wait for review"
        text = await a.turn(s3)
        assert "the editor denied it, saying: pushes wait for review" in text, text

        # A later git status is answered by the rule as it arrives: a receipt, no card
        # (the turn ends, and no one answered).
        a.backlog.clear()
        await a.send({"type": "prompt", "sessionId": s1, "text": "run git status"})
        text = await a.turn(s1)
        assert "exit code" in text and "denied" not in text, text
        assert a.kept({"type": "requested"}) == a.kept({"type": "rule_offers"}) == []
        receipt = await a.take({"type": "rule_receipt"})
        assert receipt["questionId"] == "" and receipt["sessionId"] == s1
        assert receipt["number"] == 1 and receipt["outcome"] == "allowed"
        assert receipt["title"] == "local_shell: git status"
        assert receipt["hits"] == 3
        assert a.kept({"type": "rules"}) == []  # (the receipt carries the hits)
        assert (await b.take({"type": "rule_receipt", "questionId": ""}))["hits"] == 3

        # What the rule does not cover is asked. An allow's reason goes nowhere.
        push = await asked(a, s1, "run git push")
        await a.send(answer(push, "deny"))
        resolved = await b.take({"type": "resolved", "questionId": push["questionId"]})
        assert "reason" not in resolved and resolved["by"] == "A"
        text = await a.turn(s1)
        assert "the editor denied it" in text and "saying" not in text, text
        echo = await asked(a, s2, "run echo fine")
        await a.send(answer(echo, "allow", "only this once"))
        resolved = await b.take({"type": "resolved", "questionId": echo["questionId"]})
        assert resolved == {
            "type": "resolved",
            "questionId": echo["questionId"],
            "outcome": "selected",
            "optionId": "allow",
            "by": "A",
        }
        text = await a.turn(s2)
        assert text == "exit code 0\nfine\n[end_turn]"

        # Revoking needs the rule's words as they are now: stale ones are refused, and
        # the list is sent again to that view only.
        for number, words in (
            (1, "allow `git status …` in this workspace, until the session ends"),
            (2, GIT_STATUS_RULE),
        ):
            await a.send({"type": "revoke_rule", "number": number, "rule": words})
            error = await a.take({"type": "error"})
            assert error["reason"] == "that rule changed or is gone: the list is sent again"
            assert rows(await a.take({"type": "rules"})) == [(1, "allow", GIT_STATUS_RULE, 3)]
        assert (saved,) == tuple(load_rules(places.rules_file)[0])
        await a.send({"type": "revoke_rule", "number": 1, "rule": GIT_STATUS_RULE})
        for inbox in (a, b):
            assert (await inbox.take({"type": "rules"}))["rules"] == []
        assert b.kept({"type": "error"}) == [] and b.kept({"type": "rules"}) == []
        assert load_rules(places.rules_file) == ([], [])
        assert places.rules_file.stat().st_mode & 0o777 == 0o600

        # Revoked: git status is asked again. Left pending, the server's end withdraws it.
        again = await asked(a, s1, "run git status")
        assert again["title"] == "local_shell: git status"
        await a.take({"type": "rule_offers", "questionId": again["questionId"]})
        await a.send({"type": "cancel_turn", "sessionId": s1})
        withdrawn = await a.take({"type": "withdrawn", "questionId": again["questionId"]})
        assert withdrawn["reason"] == "turn"
        await asked(a, s2, "run git status")

    records = places.audit()
    assert [
        (r["session"], r.get("command"), r["outcome"], r["by"], r.get("detail"), r.get("reason"))
        for r in records
    ] == [
        (s1, "git status", "allowed", "rule", f"rule 1: {GIT_STATUS_RULE}", None),
        (s2, "git status --short", "allowed", "rule", f"rule 1: {GIT_STATUS_RULE}", None),
        (s3, "git push", "denied", "person", "view B", "pushes wait for review"),
        (s1, "git status", "allowed", "rule", f"rule 1: {GIT_STATUS_RULE}", None),
        (s1, "git push", "denied", "person", "view A", None),
        (s2, "echo fine", "allowed", "person", "view A", None),
        (s1, "git status", "cancelled", "turn", "turn", None),
        (s2, "git status", "cancelled", "teardown", "shutdown", None),
    ]
    assert [r["toolCall"] for r in records[:3]] == [q["toolCallId"] for q in (q1, q2, q3)]
    assert records[2]["optionId"] == "deny" and records[2]["optionKind"] == "reject_once"
    audit = state / AUDIT_NAME
    assert audit.stat().st_mode & 0o777 == 0o600
    assert not audit.resolve().is_relative_to(workspace.resolve())


async def test_rules_kept_in_both_files_answer_from_the_start_and_list_where_they_are_kept(
    places: Places,
) -> None:
    workspace = places.workspace.resolve()
    save_rules(
        places.rules_file,
        [
            EditorRule(
                effect="deny",
                scope="workspace",
                lifetime="revoked",
                workspace=str(workspace),
                command=("git", "push"),
            )
        ],
    )
    user_file = user_rules_file()
    assert user_file == places.config / "simhost" / RULES_NAME
    save_rules(
        user_file,
        [EditorRule(effect="allow", scope="everywhere", lifetime="revoked", command=("echo",))],
    )
    async with (
        served(places.workspace, "--state-dir", str(places.state)) as server,
        view(server.authority, server.token) as ws,
    ):
        a = Inbox(ws, "A")
        await a.open()
        listing = await a.reply({"type": "list_rules"}, "rules")
        assert [(r["number"], r["rule"], r["keptIn"]) for r in listing["rules"]] == [
            (1, "allow `echo …` in every workspace, until revoked", str(user_file)),
            (2, "deny `git push …` in this workspace, until revoked", str(places.rules_file)),
        ]
        s1 = await first_session(a)
        for prompt, outcome, number in (
            ("run echo hi", "allowed", 1),
            ("run git push", "denied", 2),
        ):
            await a.send({"type": "prompt", "sessionId": s1, "text": prompt})
            text = await a.turn(s1)
            assert a.kept({"type": "requested"}) == []
            receipt = await a.take({"type": "rule_receipt"})
            assert (receipt["number"], receipt["outcome"], receipt["questionId"]) == (
                number,
                outcome,
                "",
            )
        assert "the editor denied it" in text
    assert [(r["command"], r["outcome"], r["by"]) for r in places.audit()] == [
        ("echo hi", "allowed", "rule"),
        ("git push", "denied", "rule"),
    ]


async def test_a_newer_agents_request_reaches_the_views_and_no_rule_allows_it(
    places: Places,
) -> None:
    """permclient types it only in part: only a handler that keeps the raw params may
    take it (the views show it as it arrived). No rule allows what it cannot read in
    full, even one whose command it names, and no rule is offered for it."""
    save_rules(
        user_rules_file(),
        [
            EditorRule(effect="allow", scope="everywhere", lifetime="revoked", command=("echo",)),
            EditorRule(effect="allow", scope="everywhere", lifetime="revoked", title="run *"),
        ],
    )
    agent = f"{sys.executable} {FAKE_AGENTS / 'newer_acp_agent.py'}"
    async with (
        served(places.workspace, "--agent", agent, "--state-dir", str(places.state)) as server,
        view(server.authority, server.token) as ws,
    ):
        a = Inbox(ws, "A")
        await a.open()
        s1 = await first_session(a)
        question = await asked(a, s1, "go")
        assert question["understood"] is False and question["title"] == "run tests"
        await a.send(answer(question, "allow"))
        assert await a.turn(s1) == "outcome: allow\n[end_turn]"
        assert a.kept({"type": "rule_offers"}) == a.kept({"type": "rule_receipt"}) == []
    assert [(r["toolCall"], r["outcome"], r["by"], r["detail"]) for r in places.audit()] == [
        ("call-1", "allowed", "person", "view A")
    ]


async def test_a_batch_from_the_reference_runtime_answers_the_burst_it_listed(
    places: Places,
) -> None:
    async with (
        served(places.workspace, "--state-dir", str(places.state)) as server,
        view(server.authority, server.token) as ws,
    ):
        a = Inbox(ws, "A")
        await a.open()
        s1 = await first_session(a)
        await a.send({"type": "prompt", "sessionId": s1, "text": "burst 3"})
        burst = [(await a.take({"type": "requested"}))["question"] for _ in range(3)]
        preview = await a.reply(
            {"type": "preview_batch", "sessionId": s1, "effect": "deny", "what": "burst-*.txt"},
            "batch_preview",
        )
        assert preview["type"] == "batch_preview" and preview["effect"] == "deny"
        assert sorted(item["title"] for item in preview["questions"]) == [
            f"fs.write: burst-{n}.txt" for n in (1, 2, 3)
        ]
        assert {item["optionName"] for item in preview["questions"]} == {"Deny"}
        listed = [item["questionId"] for item in preview["questions"]]
        assert sorted(listed) == sorted(q["questionId"] for q in burst)
        reply = await a.reply(
            {
                "type": "answer_batch",
                "sessionId": s1,
                "effect": "deny",
                "what": "burst-*.txt",
                "questionIds": listed,
            },
            "batch_answered",
        )
        assert reply == {
            "type": "batch_answered",
            "sessionId": s1,
            "what": "burst-*.txt",
            "answered": 3,
        }
        for question_id in listed:
            resolved = await a.take({"type": "resolved", "questionId": question_id})
            assert (
                resolved["optionId"] == "deny"
                and resolved["by"] == "batch deny-all burst-*.txt (A)"
            )
        text = await a.turn(s1)
        assert "burst 3: 0 completed, 3 denied, 0 failed" in text
    assert not list(places.workspace.glob("burst-*"))
    records = places.audit()
    assert [(r["outcome"], r["by"], r["detail"]) for r in records] == [
        ("denied", "batch", "batch deny-all burst-*.txt (A)")
    ] * 3
    assert sorted(r["paths"][0] for r in records) == [
        str(places.workspace.resolve() / f"burst-{n}.txt") for n in (1, 2, 3)
    ]

