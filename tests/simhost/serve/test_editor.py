"""Editor rules, batch answers, reasons and the audit trail of ``simhost serve``, end to
end: views through a real WebSocket client, against the command in a child process
with the reference runtime, or against a host in this process with a scripted agent
(where a test must say exactly when a question arrives).

Every wait is bounded (``WAIT_S``); nothing sleeps. Rules, audit trails and the
runtime's sessions live under each test's own folders (the state folder given, and
``XDG_CONFIG_HOME`` / ``XDG_STATE_HOME``), never the home folder's.
"""

from __future__ import annotations

import functools
import os
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

from permclient.relay import Relay
from permclient.rules import EditorRule, Effect, load_rules, save_rules
from simhost.audit import AUDIT_NAME
from simhost.chat.backends import AcpBackend
from simhost.rulebook import RULES_NAME, open_rules
from simhost.serve.host import ServeHost
from simhost.serve.protocol import MAX_BATCH, Error
from simhost.serve.server import Gate, serve_relay
from tests.support.peer import CANCELLED, FakePeer, allow_deny, connected, selected
from tests.support.serving import (
    GIT_STATUS_RULE,
    TOKEN,
    WAIT_S,
    Inbox,
    Places,
    answer,
    next_message,
    opened,
    rows,
    sockets_freed_quietly,
    view,
)

sockets_freed_quietly = pytest.fixture(autouse=True)(sockets_freed_quietly)

# ------------------------------------------------------------- the reference runtime


# ---------------------------------------------------- a scripted agent, in this process


@dataclass
class Desk:
    """A host with editor rules on a scripted agent (sessions ``s1`` and ``s2``), served
    on a real socket: ``peer`` plays the agent."""

    host: ServeHost
    peer: FakePeer
    authority: str
    places: Places
    _ids: int = 0

    async def ask(self, session_id: str, **tool_call: Any) -> Any:
        """The agent asks; returns the JSON-RPC id of its request."""
        self._ids += 1
        call = {"toolCallId": f"c{self._ids}", "status": "pending", **tool_call}
        params = {"sessionId": session_id, "toolCall": call, "options": allow_deny()}
        return await self.peer.request("session/request_permission", params)

    async def edit(self, session_id: str, *paths: str) -> Any:
        """The agent asks to edit ``paths`` (relative to the workspace)."""
        workspace = self.places.workspace.resolve()
        return await self.ask(
            session_id,
            title=f"fs.write: {', '.join(paths)}",
            kind="edit",
            locations=[{"path": str(workspace / path)} for path in paths],
        )

    async def run(self, session_id: str, command: str) -> Any:
        return await self.ask(
            session_id,
            title=f"local_shell: {command}",
            kind="execute",
            rawInput={"command": command},
        )

    async def answers(self, count: int) -> dict[Any, Any]:
        """The next ``count`` answers the agent gets, by request id."""
        got = {}
        with trio.fail_after(WAIT_S):
            for _ in range(count):
                message = await self.peer.receive()
                got[message["id"]] = message["result"]
        return got


async def _reply(peer: FakePeer, method: str, result: Any) -> None:
    with trio.fail_after(WAIT_S):
        request = await peer.receive()
    assert request.get("method") == method, request
    await peer.send({"jsonrpc": "2.0", "id": request["id"], "result": result})


@asynccontextmanager
async def desk(places: Places, skipped: int = 0) -> AsyncIterator[Desk]:
    """What ``simhost serve`` wires (launch.py), on a scripted ACP agent (``skipped``:
    how many rules of the files cannot be read)."""
    async with connected("acp") as (client, peer), trio.open_nursery() as nursery:
        relay = Relay()
        rulebook, audit, warnings = open_rules(places.workspace.resolve(), places.state)
        assert len(warnings) == skipped, warnings
        backend = AcpBackend(client, places.workspace.resolve())
        host = ServeHost(client, backend, relay, rulebook=rulebook, audit=audit)
        await nursery.start(host.run)
        for session_id in ("s1", "s2"):
            nursery.start_soon(host.new_session)
            await _reply(peer, "session/new", {"sessionId": session_id})
        while len(host.sessions) < 2:
            await trio.testing.wait_all_tasks_blocked()
        stop = trio.Event()
        authority = await nursery.start(
            functools.partial(serve_relay, sessions=host),
            relay,
            Gate(TOKEN),
            "127.0.0.1",
            0,
            stop.wait,
        )
        try:
            yield Desk(host, peer, authority, places)
        finally:
            relay.close()
            stop.set()
            nursery.cancel_scope.cancel()


async def _replay(authority: str) -> list[str]:
    """The questions pending now, as a view that opens now is told them."""
    async with view(authority) as ws:
        return [event["question"]["toolCallId"] for event in await opened(ws, "check")]


async def test_a_batch_answers_exactly_what_its_preview_listed_that_is_still_pending(
    places: Places,
) -> None:
    async with desk(places) as d, view(d.authority) as ws_a, view(d.authority) as ws_b:
        a, b = Inbox(ws_a, "A"), Inbox(ws_b, "B")
        await a.open()
        await b.open()
        e1 = await d.edit("s1", "src/one.py")
        e2 = await d.edit("s1", "src/deep/two.py")
        e3 = await d.edit("s1", "docs/three.md")
        await d.run("s1", "make")  # c4: not an edit
        await d.edit("s2", "src/other.py")  # c5: another session's
        questions = {}
        for _ in range(5):
            question = (await a.take({"type": "requested"}))["question"]
            questions[question["toolCallId"]] = question

        async def preview(what: str, effect: str = "allow", session: str = "s1") -> list[str]:
            message = {"type": "preview_batch", "sessionId": session, "effect": effect}
            reply = await a.reply({**message, "what": what}, "batch_preview")
            assert reply["type"] == "batch_preview", reply
            assert (reply["sessionId"], reply["effect"], reply["what"]) == (session, effect, what)
            return [questions_by_id[item["questionId"]] for item in reply["questions"]]

        questions_by_id = {q["questionId"]: c for c, q in questions.items()}
        base = {"sessionId": "s1", "effect": "allow", "what": "edits"}
        assert await preview("edits") == ["c1", "c2", "c3"]
        assert await preview("edit") == ["c1", "c2", "c3"]
        assert await preview("src/**") == ["c1", "c2"]
        assert await preview("src/*") == ["c1"]
        assert await preview("executes", "deny") == ["c4"]
        assert await preview("reads") == []
        assert await preview("edits", session="s2") == ["c5"]
        assert await preview("edits", session="nowhere") == []
        reply = await a.reply({**base, "type": "preview_batch"}, "batch_preview")
        item = reply["questions"][0]
        assert item == {
            "questionId": questions["c1"]["questionId"],
            "title": "fs.write: src/one.py",
            "optionName": "Allow",
        }
        listed = [i["questionId"] for i in reply["questions"]]

        # Meanwhile: c3 is answered by a person, and c6 (an edit of s1) arrives.
        await b.send(answer(questions["c3"], "deny"))
        await a.take({"type": "resolved", "questionId": questions["c3"]["questionId"]})
        await d.edit("s1", "src/six.py")
        c6 = (await a.take({"type": "requested"}))["question"]
        assert c6["toolCallId"] == "c6"

        # The batch names what it listed, and a question of s2 and of s1's shell besides.
        extra = [questions["c5"]["questionId"], questions["c4"]["questionId"]]
        reply = await a.reply(
            {
                "type": "answer_batch",
                "sessionId": "s1",
                "effect": "allow",
                "what": "edits",
                "questionIds": listed + extra,
            },
            "batch_answered",
        )
        assert reply == {
            "type": "batch_answered",
            "sessionId": "s1",
            "what": "edits",
            "answered": 2,
        }
        for inbox in (a, b):
            for call in ("c1", "c2"):
                resolved = await inbox.take(
                    {"type": "resolved", "questionId": questions[call]["questionId"]}
                )
                assert resolved["optionId"] == "allow"
                assert resolved["by"] == "batch allow-all edits (A)"
        assert await d.answers(3) == {
            e3: selected("deny"),
            e1: selected("allow"),
            e2: selected("allow"),
        }
        assert await _replay(d.authority) == ["c4", "c5", "c6"]

        # The same batch again answers nothing: what it listed is no longer pending.
        again = {
            "type": "answer_batch",
            "sessionId": "s1",
            "effect": "allow",
            "what": "edits",
            "questionIds": listed,
        }
        assert (await a.reply(again, "batch_answered"))["answered"] == 0
        assert await _replay(d.authority) == ["c4", "c5", "c6"]

    records = places.audit()
    assert [(r["toolCall"], r["outcome"], r["by"], r["detail"]) for r in records[:3]] == [
        ("c3", "denied", "person", "view B"),
        ("c1", "allowed", "batch", "batch allow-all edits (A)"),
        ("c2", "allowed", "batch", "batch allow-all edits (A)"),
    ]
    assert records[1]["paths"] == [str(places.workspace.resolve() / "src" / "one.py")]
    # (then the questions left pending, withdrawn as the host goes)
    assert sorted((r["toolCall"], r["outcome"]) for r in records[3:]) == [
        ("c4", "cancelled"),
        ("c5", "cancelled"),
        ("c6", "cancelled"),
    ]


async def test_a_denial_s_reason_reaches_the_agent_in_meta_and_every_view(
    places: Places,
) -> None:
    async with desk(places) as d, view(d.authority) as ws_a, view(d.authority) as ws_b:
        a, b = Inbox(ws_a, "A"), Inbox(ws_b, "B")
        await a.open()
        await b.open()
        denied = await d.run("s1", "rm -r build")
        allowed = await d.run("s2", "make")
        cancelled = await d.edit("s2", "a.txt")
        q = {}
        for _ in range(3):
            question = (await a.take({"type": "requested"}))["question"]
            q[question["toolCallId"]] = question
        await a.send(answer(q["c1"], "deny", "  not\x07 the build folder\n"))
        await a.send(answer(q["c2"], "allow", "fine"))
        await a.send(answer(q["c3"], None, "never mind"))
        for inbox in (a, b):
            told = [
                await inbox.take({"type": "resolved", "questionId": q[call]["questionId"]})
                for call in ("c1", "c2", "c3")
            ]
            assert [(m["optionId"], m.get("reason")) for m in told] == [
                ("deny", "not the build folder"),
                ("allow", None),
                (None, None),
            ]
        assert await d.answers(3) == {
            denied: {
                "outcome": {
                    "outcome": "selected",
                    "optionId": "deny",
                    "_meta": {"permclient/reason": "not the build folder"},
                }
            },
            allowed: selected("allow"),
            cancelled: CANCELLED,
        }
    assert [(r["toolCall"], r["outcome"], r["by"], r.get("reason")) for r in places.audit()] == [
        ("c1", "denied", "person", "not the build folder"),
        ("c2", "allowed", "person", None),
        ("c3", "cancelled", "person", None),
    ]


async def test_every_ending_is_one_audit_line_with_who_or_what_ended_it(places: Places) -> None:
    async with desk(places) as d, view(d.authority) as ws_a:
        a = Inbox(ws_a, "rule 7")  # (a view may call itself anything: it is still a person)
        await a.open()
        await d.run("s1", "make test")
        withdrawn_id = await d.run("s2", "make docs")
        q = {}
        for _ in range(2):
            question = (await a.take({"type": "requested"}))["question"]
            q[question["toolCallId"]] = question
        await d.peer.notify("$/cancel_request", {"requestId": withdrawn_id})  # the agent's
        withdrawn = await a.take({"type": "withdrawn", "questionId": q["c2"]["questionId"]})
        assert withdrawn["reason"] == "peer"
        assert await d.answers(1) == {withdrawn_id: CANCELLED}
        await a.send(answer(q["c1"], "allow"))
        resolved = await a.take({"type": "resolved", "questionId": q["c1"]["questionId"]})
        assert resolved["by"] == "rule 7"
        await d.answers(1)
        await d.run("s1", "make lint")  # left pending: the host's end withdraws it
        await a.take({"type": "requested"})
    assert [(r["toolCall"], r["outcome"], r["by"], r.get("detail")) for r in places.audit()] == [
        ("c2", "cancelled", "runtime", "peer"),
        ("c1", "allowed", "person", "view rule 7"),
        ("c3", "cancelled", "teardown", "shutdown"),
    ]


async def test_a_deny_rule_saved_from_a_card_answers_what_it_covers_in_every_session(
    places: Places,
) -> None:
    async with desk(places) as d, view(d.authority) as ws_a, view(d.authority) as ws_b:
        a, b = Inbox(ws_a, "A"), Inbox(ws_b, "B")
        await a.open()
        await b.open()
        first = await d.edit("s1", "secrets/key.pem")
        second = await d.edit("s2", "secrets/deep/token.txt")
        await d.edit("s2", "src/app.py")
        q = {}
        for _ in range(3):
            question = (await a.take({"type": "requested"}))["question"]
            q[question["toolCallId"]] = question
        offers = await a.take({"type": "rule_offers", "questionId": q["c1"]["questionId"]})
        assert [o["label"] for o in offers["offers"]] == [
            "Always allow edit paths secrets/key.pem in this workspace, until revoked",
            "Always allow edit paths secrets/** in this workspace, until revoked",
            "Always deny edit paths secrets/key.pem in this workspace, until revoked",
            "Always deny edit paths secrets/** in this workspace, until revoked",
        ]
        rule = "deny edit paths secrets/** in this workspace, until revoked"
        await b.send(
            {
                "type": "save_rule",
                "questionId": q["c1"]["questionId"],
                "sessionId": "s1",
                "index": 3,
            }
        )
        for inbox in (a, b):
            for call in ("c1", "c2"):
                receipt = await inbox.take(
                    {"type": "rule_receipt", "questionId": q[call]["questionId"]}
                )
                assert (receipt["rule"], receipt["outcome"]) == (rule, "denied")
                resolved = await inbox.take(
                    {"type": "resolved", "questionId": q[call]["questionId"]}
                )
                assert (resolved["optionId"], resolved["by"]) == ("deny", "rule 1")
        assert await d.answers(2) == {first: selected("deny"), second: selected("deny")}
        assert await _replay(d.authority) == ["c3"]
        later = await d.edit("s1", "secrets/new.pem")  # answered as it arrives
        assert await d.answers(1) == {later: selected("deny")}
        receipt = await a.take({"type": "rule_receipt", "questionId": ""})
        assert (receipt["toolCallId"], receipt["sessionId"], receipt["outcome"]) == (
            "c4",
            "s1",
            "denied",
        )
        assert await _replay(d.authority) == ["c3"]
    assert [(r["toolCall"], r["outcome"], r["by"]) for r in places.audit()] == [
        ("c1", "denied", "rule"),
        ("c2", "denied", "rule"),
        ("c4", "denied", "rule"),
        ("c3", "cancelled", "teardown"),
    ]


async def test_a_deny_rule_denies_a_newer_agents_request_by_what_of_it_can_be_read(
    places: Places,
) -> None:
    """A request permclient types only in part (an unknown kind, status or content
    type) is denied by a deny rule that covers what can be read of it: its title, its
    raw input's command and paths, its locations, its known kind, the content items of
    known types. Never allowed by a rule: the rest goes to the views."""
    workspace = str(places.workspace.resolve())

    def kept(effect: Effect, **matches: Any) -> EditorRule:
        return EditorRule(
            effect=effect, scope="workspace", lifetime="revoked", workspace=workspace, **matches
        )

    save_rules(
        places.rules_file,
        [
            kept("allow", command=("echo",)),
            kept("deny", command=("rm",)),
            kept("deny", title="launch *"),
            kept("deny", kinds=("execute",), title="ship it"),
            kept("deny", paths=("secrets/**",)),
            kept("deny", kinds=("edit",), title="teleport it"),
        ],
    )
    words = {
        number: rule.describe(workspace)
        for number, rule in enumerate(load_rules(places.rules_file)[0], 1)
    }
    async with desk(places) as d, view(d.authority) as ws_a, view(d.authority) as ws_b:
        a, b = Inbox(ws_a, "A"), Inbox(ws_b, "B")
        await a.open()
        await b.open()
        secret = f"{workspace}/secrets/key.pem"
        hologram = {"type": "hologram", "scene": "a big red button"}
        denied = [
            # (the command, read from the raw input; the title; the known kind, the status
            # unknown; a location; a diff beside content of an unknown type)
            await d.ask("s1", title="t", kind="teleport", rawInput={"command": "rm -r build"}),
            await d.ask("s1", title="launch rockets", kind="teleport"),
            await d.ask("s2", title="ship it", kind="execute", status="hovering"),
            await d.ask("s2", title="t", kind="teleport", locations=[{"path": secret}]),
            await d.ask(
                "s1",
                title="t",
                kind="edit",
                content=[hologram, {"type": "diff", "path": secret, "newText": "x"}],
            ),
        ]
        answers = await d.answers(len(denied))
        assert answers == {request_id: selected("deny") for request_id in denied}
        for inbox in (a, b):
            receipts = [
                await inbox.take({"type": "rule_receipt", "toolCallId": f"c{call}"})
                for call in range(1, 6)
            ]
            assert [(r["number"], r["outcome"], r["hits"], r["questionId"]) for r in receipts] == [
                (2, "denied", 1, ""),
                (3, "denied", 1, ""),
                (4, "denied", 1, ""),
                (5, "denied", 1, ""),
                (5, "denied", 2, ""),
            ]
            assert receipts[1]["title"] == "launch rockets"
            assert inbox.kept({"type": "requested"}) == []

        # Nothing a rule would allow, nor a deny rule for a kind it cannot read: asked.
        allowed = await d.ask("s1", title="t", kind="teleport", rawInput={"command": "echo hi"})
        await d.ask("s2", title="teleport it", kind="teleport")
        asked_now = [(await a.take({"type": "requested"}))["question"] for _ in range(2)]
        assert [(q["toolCallId"], q["understood"]) for q in asked_now] == [
            ("c6", False),
            ("c7", False),
        ]
        await a.send(answer(asked_now[0], "allow"))
        assert await d.answers(1) == {allowed: selected("allow")}
        assert a.kept({"type": "rule_offers"}) == a.kept({"type": "rule_receipt"}) == []
        listing = await a.reply({"type": "list_rules"}, "rules")
        assert [r["hits"] for r in listing["rules"]] == [0, 1, 1, 1, 2, 0]
    assert [
        (r["toolCall"], r["outcome"], r["by"], r.get("detail"), r.get("command"), r.get("paths"))
        for r in places.audit()
    ] == [
        ("c1", "denied", "rule", f"rule 2: {words[2]}", "rm -r build", None),
        ("c2", "denied", "rule", f"rule 3: {words[3]}", None, None),
        ("c3", "denied", "rule", f"rule 4: {words[4]}", None, None),
        ("c4", "denied", "rule", f"rule 5: {words[5]}", None, [secret]),
        ("c5", "denied", "rule", f"rule 5: {words[5]}", None, [secret]),
        ("c6", "allowed", "person", "view A", None, None),
        ("c7", "cancelled", "teardown", "shutdown", None, None),
    ]


async def test_malformed_or_misdirected_requests_are_errors_and_change_nothing(
    places: Places,
) -> None:
    async with desk(places) as d, view(d.authority) as ws_a, view(d.authority) as ws_b:
        a, b = Inbox(ws_a, "A"), Inbox(ws_b, "B")
        await a.open()
        await b.open()
        await d.run("s1", "git status")
        question = (await a.take({"type": "requested"}))["question"]
        await a.take({"type": "rule_offers"})
        question_id = question["questionId"]
        save = {"type": "save_rule", "questionId": question_id, "sessionId": "s1"}
        batch = {"type": "answer_batch", "sessionId": "s1", "effect": "allow", "what": "executes"}
        preview = {"type": "preview_batch", "sessionId": "s1", "effect": "allow"}
        cases: list[tuple[dict[str, Any], str]] = [
            ({**save, "index": 2}, "no such rule offered for that question"),
            ({**save, "index": 16}, "invalid message: Expected `int` <= 15"),
            ({**save, "index": -1}, "invalid message: Expected `int` >= 0"),
            ({**save, "index": "0"}, "invalid message: Expected `int`, got `str`"),
            ({**save, "index": 0, "questionId": "q9-0000"}, "no such question pending"),
            ({**save, "index": 0, "sessionId": "s2"}, "no such question pending"),
            ({**save, "index": 0, "extra": 1}, "invalid message: Object contains unknown field"),
            ({**preview, "what": "x" * 257}, "invalid message: Expected `str` of length <= 256"),
            ({**preview, "what": ""}, "invalid message: Expected `str` of length >= 1"),
            ({**preview, "what": "src/[x"}, "not a kind or a path glob"),
            ({**preview, "what": "edits", "effect": "maybe"}, "invalid message"),
            ({**batch, "questionIds": [question_id] * (MAX_BATCH + 1)}, "invalid message"),
            ({**batch, "questionIds": [question_id], "what": "x" * 257}, "invalid message"),
            ({**batch, "questionIds": "all"}, "invalid message"),
            ({"type": "revoke_rule", "number": 0, "rule": "x"}, "invalid message"),
            ({"type": "revoke_rule", "number": 1, "rule": "x" * 4097}, "invalid message"),
            ({"type": "revoke_rule", "number": 1, "rule": GIT_STATUS_RULE}, "that rule changed"),
            ({**answer(question, "deny"), "reason": "r" * 1001}, "invalid message"),
            ({**answer(question, "deny"), "reason": 7}, "invalid message"),
            ({"type": "list_rules", "all": True}, "invalid message"),
        ]
        for message, says in cases:
            reply = await a.reply(message)
            assert reply["type"] == "error" and reply["reason"].startswith(says), (message, reply)
        assert rows(await a.take({"type": "rules"})) == []  # (the refused revoke's list)
        refused = await a.reply(
            {**answer(question, "deny", "no"), "sessionId": "s2"}, "answer_refused"
        )
        assert refused == {
            "type": "answer_refused",
            "questionId": question_id,
            "reason": "the answer names another session",
        }
        # Nothing changed: the question is pending, no rule, no answer, no audit line.
        assert (await a.reply({"type": "list_rules"}, "rules"))["rules"] == []
        assert await _replay(d.authority) == ["c1"]
        assert not places.rules_file.exists() and places.audit() == []
        assert d.host.desk is not None and d.host.desk.engine.rules == ()
        for inbox in (a, b):
            assert inbox.kept({"type": "resolved"}) == inbox.kept({"type": "rule_receipt"}) == []
        assert b.kept({"type": "error"}) == [] and b.kept({"type": "rules"}) == []
        # And the view goes on: the same question is answered by a rule saved now.
        await a.send({**save, "index": 0})
        for inbox in (a, b):
            resolved = await inbox.take({"type": "resolved", "questionId": question_id})
            assert resolved["by"] == "rule 1"
            assert rows(await inbox.take({"type": "rules"})) == [(1, "allow", GIT_STATUS_RULE, 0)]
        assert a.kept({"type": "error"}) == []


async def test_each_reply_names_its_request_by_ref_and_what_every_view_is_told_names_none(
    places: Places,
) -> None:
    async with desk(places) as d, view(d.authority) as ws_a, view(d.authority) as ws_b:
        a, b = Inbox(ws_a, "A"), Inbox(ws_b, "B")
        await a.open()
        await b.open()
        status = await d.run("s1", "git status")
        push = await d.run("s1", "git push")
        q = {}
        for _ in range(2):
            question = (await a.take({"type": "requested"}))["question"]
            q[question["toolCallId"]] = question
        save = {"type": "save_rule", "questionId": q["c1"]["questionId"], "sessionId": "s1"}
        preview = {"type": "preview_batch", "sessionId": "s1", "effect": "deny"}

        # Requests in flight at once, one of them waiting for the agent: each reply is
        # told apart by its ref, in whatever order they come.
        requests: list[tuple[dict[str, Any], str, str]] = [
            ({"type": "list_presets", "sessionId": "s1"}, "error", "ACP has no permission presets"),
            ({**save, "index": 9}, "error", "no such rule offered for that question"),
            ({**preview, "what": "src/[x"}, "error", "not a kind or a path glob"),
            ({"type": "prompt", "sessionId": "s9", "text": "hi"}, "error", "no such session"),
            ({"type": "cancel_turn", "sessionId": "s1"}, "error", "the session has no turn"),
            ({"type": "set_preset", "sessionId": "s1", "preset": "ask"}, "error", "ACP has no"),
            ({"type": "list_rules"}, "rules", ""),
            ({"type": "list_sessions"}, "sessions", ""),
            ({**preview, "what": "executes"}, "batch_preview", ""),
        ]
        for number, (message, _, _) in enumerate(requests):
            await a.send({**message, "ref": f"r{number}"})
        for number, (message, kind, says) in enumerate(requests):
            reply = await a.take({"ref": f"r{number}"})
            assert reply["type"] == kind and reply.get("reason", "").startswith(says), message
        assert [m for m in a.backlog if "ref" in m] == []  # (one reply each)

        # Saving a rule: the view that asked is told which rule it is; every view gets
        # the news (the list, the answers, the receipts), with no ref.
        await a.send({**save, "index": 1, "ref": "save"})  # (always deny git status)
        deny_status = "deny `git status …` in this workspace, until revoked"
        saved = await a.take({"ref": "save"})
        assert saved == {"type": "rule_saved", "number": 1, "rule": deny_status, "ref": "save"}
        for inbox in (a, b):
            news = [
                await inbox.take({"type": "rules"}),
                await inbox.take({"type": "resolved", "questionId": q["c1"]["questionId"]}),
                await inbox.take({"type": "rule_receipt", "hits": 1}),
            ]
            assert [m for m in news if "ref" in m] == []
        await a.send({**preview, "what": "executes", "ref": "again"})
        listed = await a.take({"ref": "again"})
        assert [item["questionId"] for item in listed["questions"]] == [q["c2"]["questionId"]]
        batch = {**preview, "type": "answer_batch", "what": "executes", "ref": "batch"}
        await a.send({**batch, "questionIds": [q["c2"]["questionId"]]})
        answered = await a.take({"ref": "batch"})
        assert answered == {
            "type": "batch_answered",
            "sessionId": "s1",
            "what": "executes",
            "answered": 1,
            "ref": "batch",
        }
        assert "ref" not in await b.take({"type": "resolved", "questionId": q["c2"]["questionId"]})

        # Revoking: refused, an error then the list as it is, both with the ref; done,
        # the view that asked is told which rule went, and every view gets the list.
        await b.send({"type": "revoke_rule", "number": 1, "rule": "stale", "ref": "stale"})
        refused = [await b.take({"ref": "stale"}), await b.take({"ref": "stale"})]
        assert [m["type"] for m in refused] == ["error", "rules"]
        assert rows(refused[1]) == [(1, "deny", deny_status, 1)]
        await b.send({"type": "revoke_rule", "number": 1, "rule": deny_status, "ref": "go"})
        revoked = await b.take({"ref": "go"})
        assert revoked == {"type": "rule_revoked", "number": 1, "rule": deny_status, "ref": "go"}
        for inbox in (a, b):
            assert "ref" not in await inbox.take({"type": "rules", "rules": []})
        assert await d.answers(2) == {status: selected("deny"), push: selected("deny")}
        await a.send({"type": "new_session", "ref": "new"})
        await _reply(d.peer, "session/new", {"sessionId": "s3"})
        for inbox in (a, b):
            created = await inbox.take({"type": "session_event", "event": "created"})
            assert created["view"] == "A" and "ref" not in created
        # A view is told no other view's replies.
        await a.send({"type": "list_rules", "ref": "a-last"})
        await b.send({"type": "list_rules", "ref": "b-last"})
        await a.take({"ref": "a-last"})
        await b.take({"ref": "b-last"})
        assert [m.get("ref") for m in a.backlog + b.backlog if "ref" in m] == []


async def test_a_rules_file_with_a_rule_that_cannot_be_read_is_never_rewritten(
    places: Places,
) -> None:
    """Rewriting it would drop what was skipped: a person's deny rule with a typo."""
    workspace = places.workspace.resolve()
    places.state.mkdir()
    text = (
        'version = 1\n\n[[rule]]\neffect = "deny"\nscope = "workspace"\n'
        f'lifetime = "revoked"\nworkspace = "{workspace}"\ncommand = ["git", "push"]\n\n'
        '[[rule]]\neffect = "deny"\nscope = "everywhere"\nlifetime = "revoked"\n'
        'command = ["rm"]\nfolder = "typo"\n'
    )
    places.rules_file.write_text(text, encoding="utf-8")
    async with desk(places, skipped=1) as d, view(d.authority) as ws:
        a = Inbox(ws, "A")
        await a.open()
        push_rule = "deny `git push …` in this workspace, until revoked"
        listing = await a.reply({"type": "list_rules"}, "rules")
        assert rows(listing) == [(1, "deny", push_rule, 0)]
        await d.run("s1", "git status")
        question = (await a.take({"type": "requested"}))["question"]
        await a.take({"type": "rule_offers"})
        save = {"type": "save_rule", "questionId": question["questionId"], "sessionId": "s1"}
        error = await a.reply({**save, "index": 0})
        skipped = f"{places.rules_file}:15: rule 2 skipped: unknown key 'folder'"
        assert error["reason"] == (
            f"the rule was not saved: {skipped}: the file is left as it is; fix it, "
            "then load the rules again"
        )
        await a.send({"type": "revoke_rule", "number": 1, "rule": push_rule})
        error = await a.take({"type": "error"})
        assert error["reason"].startswith(f"the rule was not revoked: {skipped}")
        assert rows(await a.take({"type": "rules"})) == [(1, "deny", push_rule, 0)]
        assert places.rules_file.read_text(encoding="utf-8") == text
        assert await _replay(d.authority) == ["c1"]


async def test_a_view_that_opens_late_gets_the_replay_then_the_offers_of_its_questions(
    places: Places,
) -> None:
    async with desk(places) as d, view(d.authority) as ws_a:
        a = Inbox(ws_a, "A")
        await a.open()
        await d.run("s1", "git status")
        await d.edit("s2", "src/a.py")
        for _ in range(2):
            await a.take({"type": "requested"})
        async with view(d.authority) as late:
            replay = await opened(late, "late")  # (exactly the questions, then replayed)
            assert [event["question"]["toolCallId"] for event in replay] == ["c1", "c2"]
            offers = [await next_message(late) for _ in replay]
            assert [(o["type"], o["questionId"]) for o in offers] == [
                ("rule_offers", event["question"]["questionId"]) for event in replay
            ]
            assert [o["label"] for o in offers[0]["offers"]] == [
                f"Always {GIT_STATUS_RULE}",
                "Always deny `git status …` in this workspace, until revoked",
            ]
            assert [o["label"] for o in offers[1]["offers"]] == [
                "Always allow edit paths src/a.py in this workspace, until revoked",
                "Always allow edit paths src/** in this workspace, until revoked",
                "Always deny edit paths src/a.py in this workspace, until revoked",
                "Always deny edit paths src/** in this workspace, until revoked",
            ]


def test_without_a_state_folder_rules_and_audit_are_kept_under_the_xdg_folders(
    places: Places,
) -> None:
    workspace = places.workspace.resolve()
    book, audit, warnings = open_rules(workspace, None)
    state_home = Path(os.environ["XDG_STATE_HOME"])
    assert warnings == [] and book.workspace_file.name == RULES_NAME
    assert book.workspace_file.is_relative_to(state_home)
    assert audit.path == book.workspace_file.parent / AUDIT_NAME
    assert book.user_file == places.config / "simhost" / RULES_NAME
    for path in (book.workspace_file, audit.path, book.user_file):
        assert not path.is_relative_to(workspace)


def test_a_batch_allow_never_lists_a_question_a_deny_rule_covers(tmp_path: Path) -> None:
    # The agent offers no reject_once: the deny rule cannot answer, and the card waits.
    import msgspec

    from permclient.relay import Relay, RelayOption, RelayQuestion, Requested
    from permclient.rules import EditorRule
    from simhost.rulebook import RuleBook
    from simhost.serve.editor import EditorDesk

    workspace = tmp_path / "ws"
    workspace.mkdir()
    book = RuleBook(workspace, workspace_file=tmp_path / "rules.toml", user_file=tmp_path / "u")
    book.load()
    env_rule = EditorRule(effect="deny", scope="everywhere", lifetime="revoked", paths=("**/.env",))
    book.add(env_rule)
    desk = EditorDesk(Relay(), book, None, lambda message: None)
    options = (
        RelayOption("yes", "Allow", "allow_once"),
        RelayOption("never", "No", "reject_always"),
    )
    for number, name in enumerate([".env", "notes.md"], 1):
        call = {"toolCallId": f"c{number}", "kind": "read"}
        call["locations"] = [{"path": str(workspace / name)}]  # type: ignore[list-item]
        offered = [{"optionId": o.option_id, "name": o.name, "kind": o.kind} for o in options]
        raw = msgspec.Raw(
            msgspec.json.encode({"sessionId": "s1", "toolCall": call, "options": offered})
        )
        question = RelayQuestion(f"q{number}", "s1", f"c{number}", name, "read", options, raw)
        desk.on_event(Requested(question))

    def listed(effect: str) -> list[str]:
        preview = desk.preview_batch("s1", effect, "reads")  # type: ignore[arg-type]
        assert not isinstance(preview, Error)
        return [item.question_id for item in preview.questions]

    assert listed("allow") == ["q2"]  # never the .env read
    assert listed("deny") == []  # no reject_once offered: a batch never guesses another kind
