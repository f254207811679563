"""The runtime's pure parts without processes: grammar, policy, presets, session store, tools."""

from __future__ import annotations

import json
import os
import stat
import threading
from contextlib import suppress
from pathlib import Path
from typing import Any

import msgspec
import pytest
import trio
import typer
from typer.testing import CliRunner

from simhost.runtime import grammar
from simhost.runtime.cli import runtime_command
from simhost.runtime.grammar import Burst, Create, Delete, Edit, Help, Read, Run, Say, Usage
from simhost.runtime.policy import (
    PRESETS,
    SHELL,
    TOOLS,
    Ask,
    PolicyError,
    Verdict,
    decode_policy,
    evaluate,
    load_policy,
    shipped_policy_names,
)
from simhost.runtime.sessions import SessionStore, StandingGrant, UnknownSession
from simhost.runtime.tools import (
    MAX_FILE_BYTES,
    MAX_OUTPUT_BYTES,
    ToolCall,
    plan_delete,
    plan_edit,
    plan_read,
    plan_shell,
    plan_write,
    shell_fallback,
)
from simhost.runtime.wire import HistoryEntry, TextContentBlock
from tests.support.runtime_editor import non_utf8_workspace

# --------------------------------------------------------------------- grammar


@pytest.mark.parametrize(
    ("prompt", "command"),
    [
        ("create notes.txt with hello world", Create("notes.txt", "hello world")),
        ("Create a.txt with b with c", Create("a.txt", "b with c")),
        (r"create a.txt with one\ntwo\\n", Create("a.txt", "one\ntwo\\n")),
        ('create "my notes.txt" with hi', Create("my notes.txt", "hi")),
        ("create /tmp/x.txt with hi", Create("/tmp/x.txt", "hi")),
        ("create empty.txt with", Create("empty.txt", "")),
        ("edit a.txt: old => new", Edit("a.txt", "old", "new")),
        ("edit a.txt: x =>", Edit("a.txt", "x", "")),
        ("edit 'a b.txt': 1 => 2", Edit("a b.txt", "1", "2")),
        ("read notes.txt", Read("notes.txt")),
        ("read 'two words.txt'", Read("two words.txt")),
        ("delete notes.txt", Delete("notes.txt")),
        ("run echo hi && ls", Run("echo hi && ls")),
        ("  run   python3 -V  ", Run("python3 -V")),
        ("burst 50", Burst(50)),
        ("help", Help()),
        ("hello there", Say("hello there")),
        ("creating things", Say("creating things")),
        ("", Say("")),
    ],
)
def test_grammar_parses(prompt: str, command: grammar.Command) -> None:
    assert grammar.parse(prompt) == command


@pytest.mark.parametrize(
    ("prompt", "verb"),
    [
        ("create notes.txt", "create"),
        ("create", "create"),
        ("create a.txt withhi", "create"),
        ("edit a.txt old => new", "edit"),
        ("edit a.txt: old new", "edit"),
        ("edit a.txt:  => new", "edit"),
        ("read", "read"),
        ("read 'unclosed", "read"),
        ("read 'a' b", "read"),
        ("delete", "delete"),
        ("run", "run"),
        ("burst", "burst"),
        ("burst 0", "burst"),
        ("burst -3", "burst"),
        (f"burst {grammar.MAX_BURST + 1}", "burst"),
        ("burst many", "burst"),
        ("burst \N{SUPERSCRIPT TWO}", "burst"),  # a digit to str.isdigit, not to int()
        ("burst " + "1" * 4301, "burst"),  # more digits than int() takes
    ],
)
def test_grammar_usage_errors(prompt: str, verb: str) -> None:
    command = grammar.parse(prompt)
    assert isinstance(command, Usage)
    assert command.verb == verb
    assert command.usage == grammar.USAGE[verb]


def test_help_names_every_command() -> None:
    text = grammar.help_text()
    for usage in grammar.USAGE.values():
        assert usage in text


# ---------------------------------------------------------------------- policy


def test_at_least_two_policies_are_shipped_and_all_load() -> None:
    names = shipped_policy_names()
    assert {"default", "strict"} <= set(names)
    for name in names:
        policy, label = load_policy(name)
        assert label == name
        assert policy.description


@pytest.mark.parametrize("name", shipped_policy_names())
@pytest.mark.parametrize("preset", sorted(PRESETS))
def test_no_shipped_policy_auto_allows_a_plain_shell_command(name: str, preset: str) -> None:
    policy, _ = load_policy(name)
    call = plan_shell(Path("/w"), "python3")
    assert call.tool == SHELL
    assert call.raw_input["command"] == "python3"
    verdict = evaluate(policy, PRESETS[preset], call.tool, None)
    assert not (isinstance(verdict, Verdict) and verdict.decision == "allow"), verdict


def test_default_policy_with_each_preset() -> None:
    policy, _ = load_policy("default")
    ask, read_only, auto_edit = PRESETS["ask"], PRESETS["read-only"], PRESETS["auto-edit"]
    assert evaluate(policy, ask, "fs.read", None) == Verdict("allow", "preset", _reason(policy))
    assert isinstance(evaluate(policy, ask, "fs.write", None), Ask)
    assert isinstance(evaluate(policy, ask, SHELL, None), Ask)
    for tool in ("fs.write", "fs.delete", SHELL):
        verdict = evaluate(policy, read_only, tool, None)
        assert isinstance(verdict, Verdict)
        assert (verdict.decision, verdict.decided_by) == ("deny", "preset")
    verdict = evaluate(policy, auto_edit, "fs.write", None)
    assert isinstance(verdict, Verdict)
    assert (verdict.decision, verdict.decided_by) == ("allow", "preset")
    assert isinstance(evaluate(policy, auto_edit, "fs.delete", None), Ask)
    assert isinstance(evaluate(policy, auto_edit, SHELL, None), Ask)


def _reason(policy: object) -> str:
    return "the policy and the preset 'ask' allow fs.read"


def test_a_deny_anywhere_wins_and_grants_come_next() -> None:
    policy = decode_policy(b'{"default": "approve", "tools": {"fs.delete": "deny"}}', "t")
    ask, read_only = PRESETS["ask"], PRESETS["read-only"]
    # A standing allow does not beat a deny of the policy or the preset.
    assert evaluate(policy, ask, "fs.delete", "allow") == Verdict(
        "deny", "policy", "the policy denies fs.delete"
    )
    denied = evaluate(policy, read_only, "fs.write", "allow")
    assert isinstance(denied, Verdict)
    assert (denied.decision, denied.decided_by) == ("deny", "preset")
    # A standing reject beats an allow of both.
    rejected = evaluate(policy, ask, "fs.read", "reject")
    assert isinstance(rejected, Verdict)
    assert (rejected.decision, rejected.decided_by) == ("deny", "grant")
    # A standing allow answers what would otherwise be asked, the shell included.
    for tool in ("fs.write", SHELL):
        granted = evaluate(policy, ask, tool, "allow")
        assert isinstance(granted, Verdict)
        assert (granted.decision, granted.decided_by) == ("allow", "grant")


def test_allow_needs_both_the_policy_and_the_preset() -> None:
    approve_writes = decode_policy(b'{"default": "allow", "tools": {"fs.write": "approve"}}', "t")
    assert isinstance(evaluate(approve_writes, PRESETS["auto-edit"], "fs.write", None), Ask)
    # default "allow" still never auto-allows the shell.
    assert isinstance(evaluate(approve_writes, PRESETS["auto-edit"], SHELL, None), Ask)


def test_timeouts_per_policy_and_per_tool() -> None:
    policy = decode_policy(
        json.dumps(
            {
                "default": "approve",
                "timeoutS": 30,
                "onTimeout": "deny",
                "tools": {SHELL: {"rule": "approve", "timeoutS": 5}, "fs.read": "allow"},
            }
        ),
        "t",
    )
    assert evaluate(policy, PRESETS["ask"], SHELL, None) == Ask(5)
    assert evaluate(policy, PRESETS["ask"], "fs.write", None) == Ask(30)
    untimed = decode_policy(b'{"default": "approve"}', "t")
    assert evaluate(untimed, PRESETS["ask"], "fs.write", None) == Ask(None)


@pytest.mark.parametrize(
    ("document", "complaint"),
    [
        ("{", "not JSON"),
        ("[]", "Expected `object`"),
        ("{}", "missing required field `default`"),
        ('{"default": "maybe"}', "Invalid enum value 'maybe'"),
        ('{"default": "approve", "tools": {"fs.wrte": "allow"}}', "Invalid enum value 'fs.wrte'"),
        ('{"default": "approve", "timeoutS": 0}', "Expected `float` > 0"),
        ('{"default": "approve", "timeoutS": "5"}', "Expected `float | null`"),
        ('{"default": "approve", "onTimeout": "allow"}', "Invalid enum value 'allow'"),
        ('{"default": "approve", "colour": "blue"}', "unknown field `colour`"),
        (f'{{"default": "approve", "tools": {{"{SHELL}": "allow"}}}}', "cannot be 'allow'"),
        (
            f'{{"default": "approve", "tools": {{"{SHELL}": {{"rule": "allow"}}}}}}',
            "cannot be 'allow'",
        ),
    ],
)
def test_bad_policy_files_are_refused_clearly(
    tmp_path: Path, document: str, complaint: str
) -> None:
    path = tmp_path / "bad.json"
    path.write_text(document)
    with pytest.raises(PolicyError) as info:
        load_policy(str(path))
    assert str(path) in str(info.value)
    assert complaint in str(info.value)


def test_unknown_policy_names_and_missing_files() -> None:
    with pytest.raises(PolicyError, match=r"unknown policy 'lenient'.*default"):
        load_policy("lenient")
    with pytest.raises(PolicyError, match="cannot read policy file"):
        load_policy("/nonexistent/policy.json")


# ----------------------------------------------------------------------- tools


def test_file_tools_refuse_outside_the_workspace_and_fall_back_to_the_shell(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "w"
    workspace.mkdir()
    (tmp_path / "outside.txt").write_text("x\n")
    os.symlink(tmp_path, workspace / "escape")
    for path in ("/tmp/x.txt", "../outside.txt", "escape/outside.txt"):
        call = plan_write(workspace, path, "hi\n", {"path": path, "text": "hi"})
        assert call.refusal is not None and call.refusal.outside, path
        fallback = shell_fallback(workspace, call)
        assert fallback is not None
        assert fallback.tool == SHELL and fallback.kind == "execute"
        assert fallback.raw_input["command"].startswith("python3 -c ")
    refused_delete = plan_delete(workspace, "../outside.txt")
    assert refused_delete.refusal is not None and refused_delete.refusal.outside
    # Refusals that are not about the workspace have no fallback.
    for refused in (
        plan_delete(workspace, "missing.txt"),
        plan_read(workspace, "missing.txt"),
        plan_write(workspace, ".", "x", {"path": ".", "text": "x"}),
        plan_write(workspace, "sub/..", "x", {"path": "sub/..", "text": "x"}),
        plan_edit(workspace, "missing.txt", "a", "b"),
    ):
        assert refused.refusal is not None and not refused.refusal.outside, refused.refusal
        assert shell_fallback(workspace, refused) is None


async def test_a_write_is_not_made_if_the_file_changed_after_it_was_shown(tmp_path: Path) -> None:
    target = tmp_path / "a.txt"
    target.write_text("one\n")
    call = plan_edit(tmp_path, "a.txt", "one", "two")
    assert call.refusal is None
    target.write_text("changed\n")
    result = await call.action()
    assert not result.ok and "changed since" in result.text
    assert target.read_text() == "changed\n"


async def test_an_approved_delete_never_follows_a_folder_swapped_for_a_symlink(
    tmp_path: Path,
) -> None:
    workspace, outside = tmp_path / "w", tmp_path / "outside"
    (workspace / "sub").mkdir(parents=True)
    outside.mkdir()
    (workspace / "sub" / "f.txt").write_text("mine\n")
    (outside / "f.txt").write_text("not yours\n")
    call = plan_delete(workspace, "sub/f.txt")
    assert call.refusal is None
    (workspace / "sub" / "f.txt").unlink()
    (workspace / "sub").rmdir()
    (workspace / "sub").symlink_to(outside)  # while the question is open
    result = await call.action()
    assert not result.ok and "changed since" in result.text
    assert (outside / "f.txt").read_text() == "not yours\n"


def test_a_write_to_a_fifo_is_refused_before_it_could_block(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    call = plan_write(tmp_path, "pipe", "x", {"path": "pipe", "text": "x"})
    assert call.refusal is not None and "not a regular file" in call.refusal.reason


def _hard_linked(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace whose notes.txt is a second name of a file outside it."""
    workspace, outside = tmp_path / "w", tmp_path / "outside.txt"
    workspace.mkdir()
    outside.write_text("private\n")
    os.link(outside, workspace / "notes.txt")
    return workspace, outside


def test_a_hard_linked_file_is_outside_for_every_file_tool_and_the_card_says_why(
    tmp_path: Path,
) -> None:
    workspace, outside = _hard_linked(tmp_path)
    for call in (
        plan_write(workspace, "notes.txt", "x\n", {"path": "notes.txt", "text": "x"}),
        plan_edit(workspace, "notes.txt", "p", "x"),
        plan_read(workspace, "notes.txt"),
        plan_delete(workspace, "notes.txt"),
    ):
        assert call.refusal is not None and call.refusal.outside, call.tool
        assert "has 2 hard links" in call.refusal.reason
        assert str(workspace / "notes.txt") in call.refusal.reason
        assert "private" not in repr(call)  # nothing of its content was read
        # The shell fallback asks, and its card says why it is asking.
        fallback = shell_fallback(workspace, call)
        assert fallback is not None and fallback.tool == SHELL
        [why] = fallback.content
        assert isinstance(why, TextContentBlock)
        assert why.content.text.startswith(f"instead of {call.title}: ")
        assert "has 2 hard links" in why.content.text
    assert outside.read_text() == "private\n"


async def test_a_hard_link_swapped_in_while_the_question_is_open_is_never_written_or_read(
    tmp_path: Path,
) -> None:
    workspace, outside = _hard_linked(tmp_path)
    (workspace / "notes.txt").unlink()
    (workspace / "notes.txt").write_text("mine\n")
    write = plan_write(workspace, "notes.txt", "x\n", {"path": "notes.txt", "text": "x"})
    read = plan_read(workspace, "notes.txt")
    delete = plan_delete(workspace, "notes.txt")
    assert write.refusal is read.refusal is delete.refusal is None
    outside.write_text("mine\n")  # even with the content the write expects
    (workspace / "notes.txt").unlink()
    os.link(outside, workspace / "notes.txt")
    for call in (write, read, delete):
        result = await call.action()
        assert not result.ok and "has 2 hard links" in result.text, result.text
    assert outside.read_text() == "mine\n"
    assert (workspace / "notes.txt").exists()


def _swap_parent_for_link(workspace: Path, outside: Path) -> None:
    (workspace / "sub").rename(workspace / "sub.aside")
    (workspace / "sub").symlink_to(outside)


def _swap_file_for_link(workspace: Path, outside: Path) -> None:
    (workspace / "sub" / "f.txt").unlink()
    (workspace / "sub" / "f.txt").symlink_to(outside / "f.txt")


@pytest.mark.parametrize("swap", [_swap_parent_for_link, _swap_file_for_link])
@pytest.mark.parametrize("tool", ["write", "read", "delete"])
async def test_a_symlink_swapped_in_right_after_the_last_check_is_never_followed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, tool: str, swap: Any
) -> None:
    workspace, outside = tmp_path / "w", tmp_path / "outside"
    (workspace / "sub").mkdir(parents=True)
    outside.mkdir()
    (workspace / "sub" / "f.txt").write_text("same\n")
    (outside / "f.txt").write_text("same\n")
    if tool == "write":
        raw = {"path": "sub/f.txt", "text": "x"}
        call = plan_write(workspace, "sub/f.txt", "pwned\n", raw)
    elif tool == "read":
        (outside / "f.txt").write_text("secret\n")
        call = plan_read(workspace, "sub/f.txt")
    else:
        call = plan_delete(workspace, "sub/f.txt")
    assert call.refusal is None
    # The swap lands just after the action's last look at the path (or, for an
    # action that takes no look, while the question is open).
    resolve = Path.resolve
    armed = [True]

    def resolve_then_swap(path: Path, strict: bool = False) -> Path:
        resolved = resolve(path, strict)
        if armed and armed.pop():
            swap(workspace, outside)
        return resolved

    monkeypatch.setattr(Path, "resolve", resolve_then_swap)
    if tool == "read":
        armed.clear()
        swap(workspace, outside)
    result = await call.action()
    assert not result.ok
    assert "secret" not in repr(result)
    assert (outside / "f.txt").read_text() == ("secret\n" if tool == "read" else "same\n")
    assert sorted(p.name for p in outside.iterdir()) == ["f.txt"]


@pytest.mark.parametrize("tool", ["write", "edit", "read", "delete"])
def test_symlink_loops_and_odd_paths_are_refused_for_that_call_only(
    tmp_path: Path, tool: str
) -> None:
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    (tmp_path / "file.txt").write_text("x\n")
    for path, reason in (
        ("a/x.txt", "symbolic link loop"),
        ("a", "symbolic link loop"),
        ("nul\0byte.txt", "null byte"),
        ("file.txt/x.txt", "is not a folder"),
    ):
        if tool == "write":
            call = plan_write(tmp_path, path, "x\n", {"path": path, "text": "x"})
        elif tool == "edit":
            call = plan_edit(tmp_path, path, "x", "y")
        elif tool == "read":
            call = plan_read(tmp_path, path)
        else:
            call = plan_delete(tmp_path, path)
        assert call.refusal is not None and not call.refusal.outside, path
        assert reason in call.refusal.reason, (path, call.refusal.reason)
        assert "\n" not in call.refusal.reason


@pytest.mark.parametrize("tool", ["write", "read", "delete"])
async def test_a_path_that_vanishes_or_loops_while_the_question_is_open_fails_that_call(
    tmp_path: Path, tool: str
) -> None:
    for make_it_odd in ("vanish", "loop"):
        workspace = tmp_path / make_it_odd / tool
        (workspace / "sub").mkdir(parents=True)
        (workspace / "sub" / "f.txt").write_text("x\n")
        if tool == "write":
            call = plan_write(workspace, "sub/f.txt", "y\n", {"path": "sub/f.txt", "text": "y"})
        elif tool == "read":
            call = plan_read(workspace, "sub/f.txt")
        else:
            call = plan_delete(workspace, "sub/f.txt")
        assert call.refusal is None
        (workspace / "sub" / "f.txt").unlink()
        (workspace / "sub").rmdir()
        if make_it_odd == "loop":
            (workspace / "sub").symlink_to(workspace / "sub")
        result = await call.action()
        assert not result.ok
        expected = "symbolic link loop" if make_it_odd == "loop" else "sub/f.txt"
        assert expected in result.text, result.text


def _unblock_fifo_later(fifo: Path) -> threading.Timer:
    """Writes to ``fifo`` after a while: old code blocked in open() then reads it, not hangs."""

    def write() -> None:
        with suppress(OSError):
            fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO unless a reader waits
            os.write(fd, b"from the fifo\n")
            os.close(fd)

    timer = threading.Timer(2.0, write)
    timer.start()
    return timer


def test_a_fifo_or_device_is_refused_by_every_file_tool(tmp_path: Path) -> None:
    os.mkfifo(tmp_path / "pipe")
    for path in ("pipe", "/dev/null"):
        workspace = tmp_path if path == "pipe" else Path("/dev")
        name = path.rsplit("/", 1)[-1]
        for call in (
            plan_write(workspace, name, "x", {"path": name, "text": "x"}),
            plan_edit(workspace, name, "x", "y"),
            plan_read(workspace, name),
            plan_delete(workspace, name),
        ):
            assert call.refusal is not None, (path, call.tool)
            assert "is not a regular file" in call.refusal.reason
    assert (tmp_path / "pipe").exists()


async def test_a_fifo_swapped_in_while_the_question_is_open_is_refused_not_waited_on(
    tmp_path: Path,
) -> None:
    (tmp_path / "f.txt").write_text("x\n")
    read = plan_read(tmp_path, "f.txt")
    write = plan_write(tmp_path, "f.txt", "y\n", {"path": "f.txt", "text": "y"})
    (tmp_path / "f.txt").unlink()
    os.mkfifo(tmp_path / "f.txt")
    timer = _unblock_fifo_later(tmp_path / "f.txt")
    try:
        for call in (read, write):
            result = await call.action()
            assert not result.ok and "a FIFO" in result.text, result.text
    finally:
        timer.cancel()
    assert stat.S_ISFIFO((tmp_path / "f.txt").lstat().st_mode)


async def test_reads_are_bounded_in_size(tmp_path: Path) -> None:
    big = tmp_path / "big.txt"
    with big.open("wb") as file:
        file.truncate(64 * 1024 * 1024 * 1024)  # 64 GiB, sparse
    write = plan_write(tmp_path, "big.txt", "x", {"path": "big.txt", "text": "x"})
    assert write.refusal is not None
    assert write.refusal.reason == f"{big} is larger than {MAX_FILE_BYTES} bytes"
    read = plan_read(tmp_path, "big.txt")
    result = await read.action()
    assert result.ok and result.raw_output["truncated"] is True
    assert len(result.raw_output["text"]) == MAX_OUTPUT_BYTES


async def test_the_shell_fallback_writes_what_the_file_tool_would_have(tmp_path: Path) -> None:
    outside = tmp_path / "out" / "x.txt"
    outside.parent.mkdir()
    workspace = tmp_path / "w"
    workspace.mkdir()
    text = 'it\'s "quoted"\nand ünïcode'
    call = plan_write(workspace, str(outside), text + "\n", {"path": str(outside), "text": text})
    fallback = shell_fallback(workspace, call)
    assert fallback is not None
    with trio.fail_after(10):
        result = await fallback.action()
    assert result.ok, result.text
    assert outside.read_text() == text + "\n"


async def test_shell_output_is_bounded(tmp_path: Path) -> None:
    call = plan_shell(tmp_path, "head -c 200000 /dev/zero | tr '\\0' x; exit 3")
    with trio.fail_after(10):
        result = await call.action()
    assert not result.ok
    assert result.raw_output["exitCode"] == 3
    assert result.raw_output["truncated"] is True
    assert len(result.raw_output["output"]) == 64 * 1024


# ------------------------------------------------ names that are not UTF-8


def _plan(tool: str, workspace: Path, path: str) -> ToolCall:
    if tool == "write":
        return plan_write(workspace, path, "x\n", {"path": path, "text": "x"})
    if tool == "edit":
        return plan_edit(workspace, path, "mine", "x")
    if tool == "read":
        return plan_read(workspace, path)
    return plan_delete(workspace, path)


def _on_the_wire(call: ToolCall) -> bytes:
    """Everything of a planned call the editor is sent; raises if JSON cannot carry it."""
    reason = None if call.refusal is None else call.refusal.reason
    shown = [call.title, call.raw_input, call.content, call.locations, reason]
    return msgspec.json.encode(shown)


@pytest.mark.parametrize("tool", ["write", "edit", "read", "delete"])
def test_a_path_to_a_non_utf8_name_is_refused_for_that_call_with_the_name_escaped(
    tmp_path: Path, tool: str
) -> None:
    workspace = non_utf8_workspace(tmp_path)
    before = sorted(os.listdir(os.fsencode(workspace)))
    paths = ["link", "file", "dir/f.txt", "dangling", "dir/new.txt"]
    for path in paths:
        call = _plan(tool, workspace, path)
        assert call.refusal is not None and not call.refusal.outside, (path, call)
        assert call.refusal.reason.endswith(": a name in it is not UTF-8"), path
        assert "\\xff" in call.refusal.reason and "\n" not in call.refusal.reason
        assert shell_fallback(workspace, call) is None
        _on_the_wire(call)
    assert sorted(os.listdir(os.fsencode(workspace))) == before
    assert Path(os.fsdecode(os.fsencode(workspace) + b"/d\xff/f.txt")).read_text() == "mine\n"


@pytest.mark.parametrize("tool", ["write", "edit", "read", "delete"])
def test_a_link_out_to_a_non_utf8_name_is_outside_and_its_fallback_fits_on_the_wire(
    tmp_path: Path, tool: str
) -> None:
    workspace = non_utf8_workspace(tmp_path)
    if tool != "write":
        (tmp_path / "\udcff-out").write_text("mine\n")  # a file tool needs it to exist
    call = _plan(tool, workspace, "out")
    assert call.refusal is not None and call.refusal.outside, call
    assert call.refusal.reason == (
        f"{workspace}/out (-> {tmp_path}/\\xff-out) is outside the workspace {workspace}"
    )
    _on_the_wire(call)
    fallback = shell_fallback(workspace, call)
    assert fallback is not None
    _on_the_wire(fallback)


async def test_a_link_swapped_to_a_non_utf8_name_while_the_question_is_open_fails_that_call(
    tmp_path: Path,
) -> None:
    workspace = non_utf8_workspace(tmp_path)
    (workspace / "sub").mkdir()
    (workspace / "sub" / "f.txt").write_text("mine\n")
    (workspace / "moving").symlink_to("sub/f.txt")
    calls = [_plan(tool, workspace, "moving") for tool in ("write", "read", "delete")]
    assert all(call.refusal is None for call in calls)
    (workspace / "moving").unlink()
    os.symlink(b"d\xff/f.txt", os.fsencode(workspace) + b"/moving")
    for call in calls:
        result = await call.action()
        assert not result.ok
        assert f"moving now resolves to {workspace}/d\\xff/f.txt" in result.text
        msgspec.json.encode([result.text, result.raw_output, result.content])
    assert (workspace / "sub" / "f.txt").read_text() == "mine\n"


def test_a_workspace_whose_path_is_not_utf8_is_refused_at_start(tmp_path: Path) -> None:
    workspace = os.fsdecode(os.fsencode(tmp_path) + b"/w\xff")
    os.mkdir(workspace)
    app = typer.Typer()
    app.command()(runtime_command)
    args = ["--state-dir", str(tmp_path / "state"), "--workspace", workspace]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2
    assert result.stdout == ""
    complaint = f"workspace {tmp_path}/w\\xff: its path is not UTF-8"
    assert complaint in " ".join(result.stderr.split())


# -------------------------------------------------------------------- sessions


def test_sessions_persist_atomically_and_reload(tmp_path: Path) -> None:
    store = SessionStore(tmp_path / "state")
    first = store.create("first")
    second = store.create(None)
    assert store.active_id == second.session_id
    assert second.title == "Session 2"
    first.add_history(HistoryEntry("user", "hello"))
    first.set_grant("/w", "fs.write", ("a.txt",), "allow")
    assert store.save(first)
    store.activate(first.session_id)
    files = sorted(p.name for p in (tmp_path / "state" / "sessions").iterdir())
    assert files == sorted(f"{s.session_id}.json" for s in (first, second))  # no temp files left
    # A broken file is skipped, not fatal.
    (tmp_path / "state" / "sessions" / "s-broken.json").write_text("{")
    again = SessionStore(tmp_path / "state")
    assert [s.session_id for s in again.sessions()] == [first.session_id, second.session_id]
    assert again.active_id == first.session_id
    loaded = again.get(first.session_id)
    assert loaded.history == [HistoryEntry("user", "hello")]
    assert loaded.grants_in("/w") == [StandingGrant("fs.write", ["a.txt"], "allow")]
    assert loaded.grants_in("/elsewhere") == []
    with pytest.raises(UnknownSession):
        again.get("s-nope")
    raw = msgspec.json.decode(
        (tmp_path / "state" / "sessions" / f"{first.session_id}.json").read_bytes()
    )
    assert raw["sessionId"] == first.session_id and raw["presetId"] == "ask"


def test_tool_names_are_the_contracts() -> None:
    assert TOOLS == ("fs.read", "fs.write", "fs.delete", "local_shell.local_shell")
