"""Standing grants cover what their option says and no more: a shell command's program,
subcommand and option words (no new option, only plain words), exactly its words for a program
that runs code, or one file; compound commands and shell fallbacks never match one; every
"always" option names its scope; a call a grant answers is announced with a receipt line that
names the grant. Both dialects (the bridge through ``test_runtime``'s editor, ACP through
``test_runtime_acp``'s)."""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from permclient import PermissionRequest
from simhost.runtime.policy import SHELL
from tests.support import pty as test_chat_pty
from tests.support.runtime_editor import (
    RuntimeEditor,
    answering,
    open_acp_runtime,
    open_bridge_runtime,
    simhost_meta,
    statuses,
)

BOUND_S = 20


def receipt_chunks(editor: RuntimeEditor, session: str) -> list[str]:
    return [
        u["content"]["text"]
        for u in editor.updates[session]
        if u["sessionUpdate"] == "agent_message_chunk" and "by your grant" in u["content"]["text"]
    ]


async def always_allow_ls_then_rm_asks(editor: RuntimeEditor, session: str, send: Any) -> None:
    seen: list[PermissionRequest] = []
    await send(session, "run ls", answering("allow-always", seen))
    [first] = seen
    assert [o.name for o in first.options if o.kind == "allow_always"] == [
        "Always allow `ls …` in this session (no options)"
    ]
    # Covered: answered by the grant, without a question, with a receipt naming it.
    await send(session, "run ls .")
    receipt = 'allowed by your grant "Always allow `ls …` in this session (no options)"'
    assert simhost_meta(editor.last_call(session)) == {
        "decidedBy": "grant",
        "decision": "allow",
        "grant": receipt,
    }
    assert statuses(editor.last_call(session)) == ["pending", "in_progress", "completed"]
    assert receipt_chunks(editor, session) == [receipt + "\n"]
    # Not covered: another program asks, and so does `ls` chained with anything.
    (editor.workspace / "x.txt").write_text("keep")
    await send(session, "run rm -f x.txt", answering("deny", seen))
    await send(session, "run ls; rm -f x.txt", answering("deny", seen))
    await send(session, "run ls $(rm -f x.txt)", answering("deny", seen))
    await send(session, "run ls -a", answering("deny", seen))  # a new option
    assert [r.tool_call.raw_input["command"] for r in seen[1:]] == [
        "rm -f x.txt",
        "ls; rm -f x.txt",
        "ls $(rm -f x.txt)",
        "ls -a",
    ]
    assert [o.option_id for o in seen[2].options] == ["allow", "deny"]
    assert (editor.workspace / "x.txt").read_text() == "keep"
    assert len(receipt_chunks(editor, session)) == 1


async def test_bridge_always_allow_on_ls_covers_ls_only(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with open_bridge_runtime(tmp_path) as editor:
            session = await editor.new_session()
            await always_allow_ls_then_rm_asks(editor, session, editor.send)


async def test_acp_always_allow_on_ls_covers_ls_only(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with open_acp_runtime(tmp_path) as editor:
            await editor.initialize()
            session = await editor.new_session()
            await always_allow_ls_then_rm_asks(editor, session, editor.prompt)


async def narrow_grants_ask_for_what_they_do_not_say(
    editor: RuntimeEditor, session: str, send: Any, outside: Path
) -> None:
    workspace = editor.workspace
    await trio.run_process(["git", "init", "-q", str(workspace)])
    (workspace / "a.txt").write_text("hello\n")
    await trio.run_process(["git", "-C", str(workspace), "add", "a.txt"])
    pwned = outside / "pwned"
    seen: list[PermissionRequest] = []
    for granted, later in [
        ("git grep hello", f"git grep -O'touch {pwned}' -e hello"),
        ("sed -n 1p a.txt", f"sed -n '1e touch {pwned}' a.txt"),
        ("env LC_ALL=C sort a.txt", f"env LC_ALL=C touch {pwned}"),
    ]:
        await send(session, f"run {granted}", answering("allow-always", seen))
        asked = len(seen)
        await send(session, f"run {later}", answering("deny", seen))
        assert len(seen) == asked + 1, later  # asked, not answered by the grant
        assert simhost_meta(editor.last_call(session))["decidedBy"] == "editor"
    assert not pwned.exists()
    # An exact grant answers the very same command, and says it is exact.
    await send(session, "run sed -n 1p a.txt")
    exact = 'allowed by your grant "Always allow exactly `sed -n 1p a.txt` in this session"'
    assert simhost_meta(editor.last_call(session))["grant"] == exact
    assert [o.name for o in seen[2].options if o.kind == "allow_always"] == [
        "Always allow exactly `sed -n 1p a.txt` in this session"
    ]


async def test_bridge_narrow_grants_ask_for_commands_that_run_more(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    with trio.fail_after(BOUND_S):
        async with open_bridge_runtime(tmp_path) as editor:
            session = await editor.new_session()
            await narrow_grants_ask_for_what_they_do_not_say(editor, session, editor.send, outside)


async def test_acp_narrow_grants_ask_for_commands_that_run_more(tmp_path: Path) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    with trio.fail_after(BOUND_S):
        async with open_acp_runtime(tmp_path) as editor:
            await editor.initialize()
            session = await editor.new_session()
            await narrow_grants_ask_for_what_they_do_not_say(
                editor, session, editor.prompt, outside
            )


async def test_a_cat_grant_asks_for_a_link_that_leads_out_of_the_workspace(
    tmp_path: Path,
) -> None:
    """G7 end to end: ``cat notes.txt`` always allowed, then ``cat ./k`` (``k`` a link to a
    file outside) asks, and its denial keeps the secret out of the transcript."""
    secret = tmp_path / "secret.txt"
    secret.write_text("the-secret\n")
    with trio.fail_after(BOUND_S):
        async with open_bridge_runtime(tmp_path) as editor:
            (editor.workspace / "notes.txt").write_text("notes\n")
            (editor.workspace / "a.txt").write_text("a\n")
            (editor.workspace / "k").symlink_to(secret)
            session = await editor.new_session()
            seen: list[PermissionRequest] = []
            await editor.send(session, "run cat notes.txt", answering("allow-always", seen))
            await editor.send(session, "run cat a.txt")  # inside: the grant answers
            assert simhost_meta(editor.last_call(session))["decidedBy"] == "grant"
            await editor.send(session, "run cat ./k", answering("deny", seen))
            assert [r.tool_call.raw_input["command"] for r in seen] == [
                "cat notes.txt",
                "cat ./k",
            ]
            assert simhost_meta(editor.last_call(session))["decidedBy"] == "editor"
            assert not any("the-secret" in text for text in editor.texts(session))


def saved_session_with_grant(tmp_path: Path, tool: str, scope: list[str]) -> str:
    """A saved session of workspace ``tmp_path/w`` holding one standing allow grant."""
    sessions = tmp_path / "state" / "sessions"
    sessions.mkdir(parents=True)
    (tmp_path / "w").mkdir()
    session = {
        "sessionId": "s-000000000001",
        "title": "granted",
        "createdAt": "2025-01-01T00:00:00.000Z",
        "updatedAt": "2025-01-01T00:00:00.000Z",
        "format": 2,
        "scopedGrants": {
            str((tmp_path / "w").resolve()): [{"tool": tool, "scope": scope, "decision": "allow"}]
        },
    }
    (sessions / "s-000000000001.json").write_text(json.dumps(session))
    return "s-000000000001"


async def a_shell_fallback_is_never_granted(
    editor: RuntimeEditor, session: str, send: Any, target: Path
) -> None:
    seen: list[PermissionRequest] = []
    # The session has a grant for the fallback's very words, yet the fallback for a
    # refused read asks, and offers no "always" option.
    await send(session, f"read {target}", answering("deny", seen))
    [request] = seen
    assert request.tool_call.raw_input["command"] == f"cat -- {target}"
    assert [o.option_id for o in request.options] == ["allow", "deny"]
    fallback = editor.last_call(session)
    assert fallback[0]["_meta"]["simhost"]["fallbackFor"]
    assert simhost_meta(fallback)["decidedBy"] == "editor"
    # The same words typed as a command are the person's own: the grant answers them.
    await send(session, f"run cat -- {target}")
    assert simhost_meta(editor.last_call(session))["decidedBy"] == "grant"


@pytest.mark.parametrize("dialect", ["bridge", "acp"])
async def test_a_shell_fallback_offers_and_takes_no_grant(tmp_path: Path, dialect: str) -> None:
    target = tmp_path / "secret.txt"
    target.write_text("secret\n")
    session = saved_session_with_grant(tmp_path, SHELL, ["cat", "--", str(target)])
    with trio.fail_after(BOUND_S):
        if dialect == "bridge":
            async with open_bridge_runtime(tmp_path) as editor:
                await a_shell_fallback_is_never_granted(editor, session, editor.send, target)
        else:
            async with open_acp_runtime(tmp_path) as acp_editor:
                await acp_editor.initialize()
                await a_shell_fallback_is_never_granted(
                    acp_editor, session, acp_editor.prompt, target
                )


async def always_deny_a_file_then_another_asks(
    editor: RuntimeEditor, session: str, send: Any
) -> None:
    seen: list[PermissionRequest] = []
    await send(session, "create a.txt with a", answering("deny-always", seen))
    await send(session, "create ./a.txt with b")  # the same file: denied by the grant
    events = editor.last_call(session)
    grant = 'denied by your grant "Always deny edits to a.txt in this session"'
    assert simhost_meta(events)["grant"] == grant
    assert statuses(events) == ["pending", "failed"]
    assert any(grant in text for text in editor.texts(session))
    await send(session, "create b.txt with b", answering("allow", seen))  # another file asks
    assert len(seen) == 2
    assert not (editor.workspace / "a.txt").exists()
    assert (editor.workspace / "b.txt").exists()


async def test_bridge_always_deny_on_a_file_covers_that_file_only(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with open_bridge_runtime(tmp_path) as editor:
            session = await editor.new_session()
            await always_deny_a_file_then_another_asks(editor, session, editor.send)


async def test_acp_always_deny_on_a_file_covers_that_file_only(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with open_acp_runtime(tmp_path) as editor:
            await editor.initialize()
            session = await editor.new_session()
            await always_deny_a_file_then_another_asks(editor, session, editor.prompt)


async def test_every_agent_message_is_a_whole_line(tmp_path: Path) -> None:
    """So a chat that prints text as it streams never glues a receipt to the next line."""
    with trio.fail_after(BOUND_S):
        async with open_bridge_runtime(tmp_path) as editor:
            session = await editor.new_session()
            await editor.send(session, "hello")
            await editor.send(session, "burst 2", answering("allow-always", []))
            chunks = [
                u["content"]["text"]
                for u in editor.updates[session]
                if u["sessionUpdate"] == "agent_message_chunk"
            ]
            assert len(chunks) >= 4
            assert all(chunk.endswith("\n") for chunk in chunks)


async def test_format_1_tool_wide_grants_are_not_carried_over(tmp_path: Path) -> None:
    """A session saved with the old per-tool grants loads, and its shell asks again."""
    sessions = tmp_path / "state" / "sessions"
    sessions.mkdir(parents=True)
    workspace = str((tmp_path / "w").resolve())
    (tmp_path / "w").mkdir()
    (sessions / "s-000000000001.json").write_text(
        '{"sessionId": "s-000000000001", "title": "old", "createdAt": "2025-01-01T00:00:00.000Z",'
        ' "updatedAt": "2025-01-01T00:00:00.000Z", "presetId": "ask", "format": 1,'
        f' "grants": {{"{workspace}": {{"local_shell.local_shell": "allow"}}}}}}'
    )
    with trio.fail_after(BOUND_S):
        async with open_bridge_runtime(tmp_path) as editor:
            seen: list[PermissionRequest] = []
            await editor.send("s-000000000001", "run rm -f x", answering("deny", seen))
            assert len(seen) == 1


@pytest.fixture
def chat_in(tmp_path: Path) -> Iterator[Any]:
    yield from test_chat_pty.chat_starter(tmp_path, test_chat_pty.Chat)


@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")
def test_the_chat_shows_the_scope_on_the_card_and_a_receipt_when_a_grant_answers(
    chat_in: Any,
) -> None:
    chat: test_chat_pty.Chat = chat_in()
    chat.say("run ls")
    chat.expect(re.escape("Always allow `ls …` in this session (no options)"))
    chat.expect(test_chat_pty.ARMED)
    chat.child.send("2")
    chat.expect("Confirm: ")
    chat.expect(re.escape("Always allow `ls …` in this session"))
    chat.expect("y confirms")
    chat.child.send("y")
    chat.expect("turn ended")
    chat.expect_prompt()
    chat.say("run ls .")
    chat.expect(
        re.escape('allowed by your grant "Always allow `ls …` in this session (no options)"')
    )
    chat.expect("turn ended")
    chat.expect_prompt()
    chat.say("run rm -f nothing.txt")  # not covered: a card again
    chat.expect("Permission request")
    chat.expect(test_chat_pty.ARMED)
    chat.deny("3")
    chat.expect("turn ended")
    assert len(chat.events("approval.requested")) == 2
    chat.quit()

