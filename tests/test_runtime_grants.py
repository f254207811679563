"""Standing grants cover what their option says and no more: a shell command's program and
subcommand, or one file; compound commands never match one; every "always" option names its
scope; a call a grant answers is announced with a receipt line that names the grant. Both
dialects (the bridge through ``test_runtime``'s editor, ACP through ``test_runtime_acp``'s)."""

from __future__ import annotations

import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import trio

from permclient import PermissionRequest
from simhost.runtime.core import options_for
from simhost.runtime.grants import MAX_SCOPE_CHARS, GrantSubject, subject_of
from simhost.runtime.policy import SHELL
from simhost.runtime.wire import Location

from . import test_chat_pty, test_runtime, test_runtime_acp
from .runtime_editor import RuntimeEditor, answering, simhost_meta, statuses

BOUND_S = 20
WORKSPACE = Path("/w")


def shell(command: str) -> GrantSubject:
    subject = subject_of(SHELL, {"command": command, "cwd": "/w"}, [], WORKSPACE)
    assert subject is not None
    return subject


def file_tool(tool: str, path: str) -> GrantSubject:
    subject = subject_of(tool, {"path": path}, [Location(str(WORKSPACE / path))], WORKSPACE)
    assert subject is not None
    return subject


# ------------------------------------------------------------------ the scopes


@pytest.mark.parametrize(
    ("command", "scope"),
    [
        ("ls", ("ls",)),
        ("ls -la", ("ls",)),
        ("git status", ("git", "status")),
        ("git status --short", ("git", "status")),
        ("npm test", ("npm", "test")),
        ("npm run test:unit", ("npm", "run")),
        ("cat notes.txt", ("cat",)),
        ("touch c.txt", ("touch",)),
        ("./build.sh --fast", ("./build.sh",)),
        ("'git' status", ("git", "status")),
    ],
)
def test_a_shell_grant_is_the_program_and_its_subcommand(
    command: str, scope: tuple[str, ...]
) -> None:
    assert shell(command).scope == scope


@pytest.mark.parametrize(
    ("granted", "command", "covered"),
    [
        ("ls", "ls -la", True),
        ("ls", "ls", True),
        ("ls", "rm -rf x", False),  # the issue: `run ls` always-allowed ran `rm` too
        ("ls", "lsblk", False),
        ("ls", "/bin/ls", False),
        ("git status", "git status --short", True),
        ("git status", "git push --force", False),
        ("git status", "git", False),
        ("npm test", "npm install evil", False),
        ("touch c.txt", "touch d.txt", True),
    ],
)
def test_a_shell_grant_covers_later_commands_that_start_with_its_words_only(
    granted: str, command: str, covered: bool
) -> None:
    scope = shell(granted).scope
    assert scope is not None
    assert shell(command).covered_by(SHELL, scope) is covered
    assert not file_tool("fs.write", "ls").covered_by(SHELL, scope)


COMPOUND = [
    "ls; rm -rf x",
    "ls && rm -rf x",
    "ls || rm -rf x",
    "ls | sh",
    "ls & rm x",
    "ls $(rm x)",
    "ls ${HOME}",
    "ls `rm x`",
    "(rm x)",
    "ls > x",
    "ls < x",
    "ls 2>&1",
    "ls\nrm x",
    "ls\rrm x",
    "ls \\\nrm x",
    "ls 'unterminated",
    "ls\x00rm",
    "ls \u202erm",
    "ls\u2028rm",
]


@pytest.mark.parametrize("command", COMPOUND)
def test_a_command_sh_could_split_or_redirect_never_matches_a_grant_and_gets_none(
    command: str,
) -> None:
    subject = shell(command)
    assert subject.scope is None
    assert not subject.covered_by(SHELL, ("ls",))
    names = [o.option_id for o in options_for(subject)]
    assert names == ["allow", "deny"]


@pytest.mark.parametrize("command", ["FOO=1 ls", "*.sh", "~/bin/x", "-rf", "x" * 100])
def test_a_command_whose_program_cannot_be_named_plainly_is_offered_no_grant(
    command: str,
) -> None:
    assert shell(command).scope is None
    assert [o.option_id for o in options_for(shell(command))] == ["allow", "deny"]


def test_a_file_grant_is_that_tool_on_that_one_file() -> None:
    notes = file_tool("fs.write", "notes.txt")
    assert notes.scope == ("notes.txt",)
    assert notes.covered_by("fs.write", ("notes.txt",))
    assert not file_tool("fs.write", "other.txt").covered_by("fs.write", ("notes.txt",))
    assert not file_tool("fs.delete", "notes.txt").covered_by("fs.write", ("notes.txt",))
    assert not file_tool("fs.write", "notes.txt/x").covered_by("fs.write", ("notes.txt",))
    assert not shell("notes.txt").covered_by("fs.write", ("notes.txt",))
    # A path that cannot be named on one short line is offered no grant.
    assert file_tool("fs.write", "a\nb.txt").scope is None
    assert file_tool("fs.write", "d/" * MAX_SCOPE_CHARS).scope is None


@pytest.mark.parametrize(
    ("subject", "allow", "deny"),
    [
        (
            shell("git status -s"),
            "Always allow `git status …` in this session",
            "Always deny `git status …` in this session",
        ),
        (
            file_tool("fs.write", "notes.txt"),
            "Always allow edits to notes.txt in this session",
            "Always deny edits to notes.txt in this session",
        ),
        (
            file_tool("fs.read", "src/a.py"),
            "Always allow reading src/a.py in this session",
            "Always deny reading src/a.py in this session",
        ),
        (
            file_tool("fs.delete", "old.txt"),
            "Always allow deleting old.txt in this session",
            "Always deny deleting old.txt in this session",
        ),
    ],
)
def test_every_always_option_names_its_scope_on_one_short_line(
    subject: GrantSubject, allow: str, deny: str
) -> None:
    options = options_for(subject)
    assert [(o.option_id, o.kind) for o in options] == [
        ("allow", "allow_once"),
        ("allow-always", "allow_always"),
        ("deny", "reject_once"),
        ("deny-always", "reject_always"),
    ]
    assert (options[1].name, options[3].name) == (allow, deny)
    for option in options:
        assert option.name.isprintable() and len(option.name) <= 100


# ------------------------------------------------------------ both dialects


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
        "Always allow `ls …` in this session"
    ]
    # Covered: answered by the grant, without a question, with a receipt naming it.
    await send(session, "run ls -a")
    receipt = 'allowed by your grant "Always allow `ls …` in this session"'
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
    assert [r.tool_call.raw_input["command"] for r in seen[1:]] == [
        "rm -f x.txt",
        "ls; rm -f x.txt",
        "ls $(rm -f x.txt)",
    ]
    assert [o.option_id for o in seen[2].options] == ["allow", "deny"]
    assert (editor.workspace / "x.txt").read_text() == "keep"
    assert len(receipt_chunks(editor, session)) == 1


async def test_bridge_always_allow_on_ls_covers_ls_only(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with test_runtime.open_runtime(tmp_path) as editor:
            session = await editor.new_session()
            await always_allow_ls_then_rm_asks(editor, session, editor.send)


async def test_acp_always_allow_on_ls_covers_ls_only(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with test_runtime_acp.open_runtime(tmp_path) as editor:
            await editor.initialize()
            session = await editor.new_session()
            await always_allow_ls_then_rm_asks(editor, session, editor.prompt)


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
        async with test_runtime.open_runtime(tmp_path) as editor:
            session = await editor.new_session()
            await always_deny_a_file_then_another_asks(editor, session, editor.send)


async def test_acp_always_deny_on_a_file_covers_that_file_only(tmp_path: Path) -> None:
    with trio.fail_after(BOUND_S):
        async with test_runtime_acp.open_runtime(tmp_path) as editor:
            await editor.initialize()
            session = await editor.new_session()
            await always_deny_a_file_then_another_asks(editor, session, editor.prompt)


async def test_every_agent_message_is_a_whole_line(tmp_path: Path) -> None:
    """So a chat that prints text as it streams never glues a receipt to the next line."""
    with trio.fail_after(BOUND_S):
        async with test_runtime.open_runtime(tmp_path) as editor:
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
        async with test_runtime.open_runtime(tmp_path) as editor:
            seen: list[PermissionRequest] = []
            await editor.send("s-000000000001", "run rm -f x", answering("deny", seen))
            assert len(seen) == 1


# ---------------------------------------------------------------- in the chat


@pytest.fixture
def chat_in(tmp_path: Path) -> Iterator[Any]:
    yield from test_chat_pty.chat_starter(tmp_path, test_chat_pty.Chat)


@pytest.mark.skipif(sys.platform == "win32", reason="needs a POSIX pseudo-terminal")
def test_the_chat_shows_the_scope_on_the_card_and_a_receipt_when_a_grant_answers(
    chat_in: Any,
) -> None:
    chat: test_chat_pty.Chat = chat_in()
    chat.say("run ls")
    chat.expect(re.escape("Always allow `ls …` in this session"))
    chat.expect(test_chat_pty.ARMED)
    chat.child.send("2")
    chat.expect("turn ended")
    chat.expect_prompt()
    chat.say("run ls -a")
    chat.expect(re.escape('allowed by your grant "Always allow `ls …` in this session"'))
    chat.expect("turn ended")
    chat.expect_prompt()
    chat.say("run rm -f nothing.txt")  # not covered: a card again
    chat.expect("Permission request")
    chat.expect(test_chat_pty.ARMED)
    chat.child.send("3")
    chat.expect("turn ended")
    assert len(chat.events("approval.requested")) == 2
    chat.quit()
