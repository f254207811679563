"""Scenario files: a good file loads into the model; a bad one names its file, line and field."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from simhost.run.scenario import (
    AfterTurn,
    AgentSpec,
    ExpectedRequest,
    Scenario,
    ScenarioError,
    SessionSpec,
    TurnSpec,
    WorkspaceSpec,
    load_scenario,
)
from tests.support import paths
from tests.support.profiles import examples

# ------------------------------------------------------------------ well-formed

EVERY_FIELD = """\
name = "every field"
description = "exercises every key"
seed = 42
repeat = 3

[agent]
command = "python3 -m my_agent --flag 'a b'"
dialect = "acp"
policy = "strict"

[workspace]
path = "ws"

[workspace.files]
"notes.txt" = "hello"
"src/app.py" = '''
print("hi")
'''

[[sessions]]
name = "writer"
copies = 2

[[sessions.turns]]
prompt = "create a.txt with one"
cancel_after_ms = 5000
cancel_after_request = 2

[[sessions.turns.requests]]
title = "fs\\\\.write: a\\\\.txt"
kind = "edit"
count = 1
answer = "allow_always"
delay_ms = 10
jitter_ms = 5

[[sessions.turns.requests]]
title = "local_shell"
answer = "ignore"

[sessions.turns.expect]
stop_reason = "cancelled"
files_exist = ["a.txt"]
files_absent = ["b.txt", "sub/c.txt"]
file_contains = { "a.txt" = "one" }
reply_contains = ["created a.txt"]
tool_status = { "fs\\\\.write" = "completed", "local_shell" = "failed" }

[[sessions.turns]]
prompt = "read a.txt"

[[sessions]]
name = "reader"
turns = [
  { prompt = "burst 3", requests = [{ title = "burst", count = 3, answer = "reject" }] },
  { prompt = "delete a.txt", requests = [
    { title = "fs.delete", answer = "reject_always" },
  ], expect.stop_reason = "end_turn" },
  { prompt = "run true", requests = [{ title = "run", answer = "cancel" }] },
  { prompt = "hello", requests = [{ title = "hello", answer = "allow" }] },
]
"""

EVERY_FIELD_MODEL = Scenario(
    name="every field",
    description="exercises every key",
    seed=42,
    repeat=3,
    agent=AgentSpec(command="python3 -m my_agent --flag 'a b'", dialect="acp", policy="strict"),
    workspace=WorkspaceSpec(path="ws", files={"notes.txt": "hello", "src/app.py": 'print("hi")\n'}),
    sessions=[
        SessionSpec(
            name="writer",
            copies=2,
            turns=[
                TurnSpec(
                    prompt="create a.txt with one",
                    cancel_after_ms=5000,
                    cancel_after_request=2,
                    requests=[
                        ExpectedRequest(
                            title=r"fs\.write: a\.txt",
                            kind="edit",
                            count=1,
                            answer="allow_always",
                            delay_ms=10,
                            jitter_ms=5,
                        ),
                        ExpectedRequest(title="local_shell", answer="ignore"),
                    ],
                    expect=AfterTurn(
                        stop_reason="cancelled",
                        files_exist=["a.txt"],
                        files_absent=["b.txt", "sub/c.txt"],
                        file_contains={"a.txt": "one"},
                        reply_contains=["created a.txt"],
                        tool_status={r"fs\.write": "completed", "local_shell": "failed"},
                    ),
                ),
                TurnSpec(prompt="read a.txt"),
            ],
        ),
        SessionSpec(
            name="reader",
            turns=[
                TurnSpec(
                    prompt="burst 3",
                    requests=[ExpectedRequest(title="burst", count=3, answer="reject")],
                ),
                TurnSpec(
                    prompt="delete a.txt",
                    requests=[ExpectedRequest(title="fs.delete", answer="reject_always")],
                    expect=AfterTurn(stop_reason="end_turn"),
                ),
                TurnSpec(
                    prompt="run true", requests=[ExpectedRequest(title="run", answer="cancel")]
                ),
                TurnSpec(prompt="hello", requests=[ExpectedRequest(title="hello")]),
            ],
        ),
    ],
)


def write(tmp_path: Path, text: str | bytes, name: str = "scen.toml") -> Path:
    path = tmp_path / name
    if isinstance(text, bytes):
        path.write_bytes(text)
    else:
        path.write_text(text, encoding="utf-8")
    return path


def test_every_field_loads_into_the_model(tmp_path: Path) -> None:
    assert load_scenario(write(tmp_path, EVERY_FIELD)) == EVERY_FIELD_MODEL


def test_defaults_and_the_name_from_the_file(tmp_path: Path) -> None:
    text = '[[sessions]]\nname = "only"\n[[sessions.turns]]\nprompt = "hello"\n'
    scenario = load_scenario(write(tmp_path, text, "my-check.toml"))
    assert scenario == Scenario(
        name="my-check",
        sessions=[SessionSpec(name="only", turns=[TurnSpec(prompt="hello")])],
    )
    assert scenario.agent == AgentSpec(command=None, dialect="bridge", policy=None)
    assert scenario.workspace == WorkspaceSpec(path=None, files={})
    assert (scenario.seed, scenario.repeat, scenario.description) == (0, 1, "")
    assert scenario.sessions[0].copies == 1
    turn = scenario.sessions[0].turns[0]
    assert (turn.cancel_after_ms, turn.cancel_after_request, turn.requests) == (None, None, [])
    assert turn.expect == AfterTurn()
    request = ExpectedRequest(title="x")
    assert (request.kind, request.count, request.answer) == (None, None, "allow")
    assert (request.delay_ms, request.jitter_ms) == (0, 0)


def test_crlf_line_endings_load(tmp_path: Path) -> None:
    text = '[[sessions]]\r\nname = "a"\r\n[[sessions.turns]]\r\nprompt = "hi"\r\n'
    assert load_scenario(write(tmp_path, text)).sessions[0].turns[0].prompt == "hi"


DOCS = paths.DOCS / "scenarios.md"


def test_the_scenarios_in_the_docs_load(tmp_path: Path) -> None:
    blocks = re.findall(r"```toml\n(.*?)```", DOCS.read_text(encoding="utf-8"), re.S)
    whole = [block for block in blocks if "[[sessions]]" in block]
    assert len(whole) >= 2
    for block in whole:
        assert load_scenario(write(tmp_path, block)).sessions


# ------------------------------------------------------------------ malformed

# One session with one turn with one request; the cases below change a line of it.
# Lines:     1            2               3                4
TURN = '[[sessions]]\nname = "a"\n[[sessions.turns]]\nprompt = "hi"\n'
REQUEST = TURN + '[[sessions.turns.requests]]\ntitle = "fs"\n'  # lines 5, 6
S0T0 = "sessions[0].turns[0]"
R0 = f"{S0T0}.requests[0]"

MALFORMED: list[tuple[str, str, int | None, str | None, str]] = [
    # (id, file, line, field, what is wrong)
    (
        "toml-syntax",
        'name = "x"\nseed = = 3\n' + TURN,
        2,
        None,
        "invalid TOML at column 8: Invalid value",
    ),
    (
        "toml-syntax-at-end",
        TURN + "seed =",
        5,
        None,
        "invalid TOML at the end of the file: Invalid value",
    ),
    (
        "toml-duplicate-key",
        TURN + 'prompt = "again"\n',
        5,
        None,
        "invalid TOML at column 17: Cannot overwrite a value",
    ),
    (
        "unknown-top-level-key",
        'nmae = "x"\n' + TURN,
        1,
        "nmae",
        "unknown key; did you mean 'name'?",
    ),
    (
        "unknown-top-level-table",
        TURN + "[agnet]\npolicy = 'strict'\n",
        5,
        "agnet",
        "unknown key; did you mean 'agent'?",
    ),
    (
        "unknown-key-in-agent",
        '[agent]\ncommand = "x"\ntimeout = 3\n' + TURN,
        3,
        "agent.timeout",
        "unknown key; the keys here are command, dialect, policy",
    ),
    (
        "unknown-key-in-session",
        '[[sessions]]\nname = "a"\ncopeis = 2\n[[sessions.turns]]\nprompt = "hi"\n',
        3,
        "sessions[0].copeis",
        "unknown key; did you mean 'copies'?",
    ),
    (
        "unknown-key-in-turn",
        TURN + "timeout_ms = 5\n",
        5,
        f"{S0T0}.timeout_ms",
        "unknown key; the keys here are prompt, requests, cancel_after_ms,"
        " cancel_after_request, expect",
    ),
    (
        "unknown-key-in-request",
        REQUEST + 'anwser = "allow"\n',
        7,
        f"{R0}.anwser",
        "unknown key; did you mean 'answer'?",
    ),
    (
        "unknown-key-in-expect-inline",
        TURN + 'expect = { stop_reason = "end_turn", file_exists = ["a"] }\n',
        5,
        f"{S0T0}.expect.file_exists",
        "unknown key; did you mean 'files_exist'?",
    ),
    (
        "wrong-type-top-level",
        'seed = "7"\n' + TURN,
        1,
        "seed",
        "expected an integer; got '7'",
    ),
    (
        "wrong-type-bool-for-int",
        "repeat = true\n" + TURN,
        1,
        "repeat",
        "expected an integer >= 1; got true",
    ),
    (
        "wrong-type-prompt",
        '[[sessions]]\nname = "a"\n[[sessions.turns]]\nprompt = 5\n',
        4,
        f"{S0T0}.prompt",
        "expected a string; got 5",
    ),
    (
        "wrong-type-table",
        'agent = "acp"\n' + TURN,
        1,
        "agent",
        "expected a table; got 'acp'",
    ),
    (
        "wrong-type-turns",
        '[[sessions]]\nname = "a"\nturns = "hi"\n',
        3,
        "sessions[0].turns",
        "expected an array of tables; got 'hi'",
    ),
    (
        "wrong-type-list-item",
        TURN + "[sessions.turns.expect]\nreply_contains = [\n  'ok',\n  3,\n]\n",
        8,
        f"{S0T0}.expect.reply_contains[1]",
        "expected a string; got 3",
    ),
    (
        "bad-enum-answer",
        REQUEST + 'answer = "alow"\n',
        7,
        f"{R0}.answer",
        "expected one of allow, allow_always, reject, reject_always, cancel, ignore; got 'alow'",
    ),
    (
        "bad-enum-dialect",
        '[agent]\ndialect = "ACP"\n' + TURN,
        2,
        "agent.dialect",
        "expected one of bridge, acp; got 'ACP'",
    ),
    (
        "bad-enum-tool-status-value",
        TURN + '[sessions.turns.expect.tool_status]\n"fs\\\\.write: .*" = "done"\n',
        6,
        f'{S0T0}.expect.tool_status."fs\\\\.write: .*"',
        "expected one of pending, in_progress, completed, failed; got 'done'",
    ),
    (
        "bad-stop-reason",
        TURN + 'expect.stop_reason = "end-turn"\n',
        5,
        f"{S0T0}.expect.stop_reason",
        "expected one of end_turn, max_tokens, max_turn_requests, refusal, cancelled;"
        " got 'end-turn'",
    ),
    (
        "bad-kind",
        REQUEST + 'kind = "write"\n',
        7,
        f"{R0}.kind",
        "expected one of read, edit, delete, move, search, execute, think, fetch,"
        " switch_mode, other; got 'write'",
    ),
    (
        "missing-prompt",
        '[[sessions]]\nname = "a"\n[[sessions.turns]]\ncancel_after_ms = 5\n',
        3,
        f"{S0T0}.prompt",
        "required key is missing",
    ),
    (
        "missing-prompt-in-second-turn",
        TURN + "\n[[sessions.turns]]\n\n# no prompt\n",
        6,
        "sessions[0].turns[1].prompt",
        "required key is missing",
    ),
    (
        "missing-title",
        TURN + "[[sessions.turns.requests]]\nanswer = 'reject'\n",
        5,
        f"{R0}.title",
        "required key is missing",
    ),
    (
        "missing-name",
        'seed = 1\n\n[[sessions]]\ncopies = 2\n[[sessions.turns]]\nprompt = "hi"\n',
        3,
        "sessions[0].name",
        "required key is missing",
    ),
    (
        "missing-sessions",
        'name = "x"\nseed = 1\n',
        None,
        "sessions",
        "required key is missing",
    ),
    (
        "empty-sessions",
        'name = "x"\nsessions = []\n',
        2,
        "sessions",
        "a scenario needs at least one session",
    ),
    (
        "empty-turns",
        '[[sessions]]\nname = "a"\nturns = []\n',
        3,
        "sessions[0].turns",
        "a session needs at least one turn",
    ),
    (
        "empty-session-name",
        '[[sessions]]\nname = ""\n[[sessions.turns]]\nprompt = "hi"\n',
        2,
        "sessions[0].name",
        "must not be empty",
    ),
    (
        "negative-delay",
        REQUEST + "delay_ms = -5\n",
        7,
        f"{R0}.delay_ms",
        "expected an integer >= 0; got -5",
    ),
    (
        "negative-cancel-after-ms",
        TURN + "cancel_after_ms = -1\n",
        5,
        f"{S0T0}.cancel_after_ms",
        "expected an integer >= 0; got -1",
    ),
    (
        "zero-copies",
        '[[sessions]]\nname = "a"\ncopies = 0\n[[sessions.turns]]\nprompt = "hi"\n',
        3,
        "sessions[0].copies",
        "expected an integer >= 1; got 0",
    ),
    (
        "zero-count-in-inline-array",
        'sessions = [\n  { name = "a", turns = [\n    { prompt = "x", requests = [\n'
        '      { title = "t", count = 0 },\n    ] },\n  ] },\n]\n',
        4,
        "sessions[0].turns[0].requests[0].count",
        "expected an integer >= 1; got 0",
    ),
    (
        "bad-regex-title",
        TURN + '[[sessions.turns.requests]]\ntitle = "fs.write("\n',
        6,
        f"{R0}.title",
        "not a valid regular expression: missing ), unterminated subpattern at position 8",
    ),
    (
        "bad-regex-tool-status",
        TURN + "expect = { tool_status = { '[' = 'completed' } }\n",
        5,
        f'{S0T0}.expect.tool_status."["',
        "not a valid regular expression: unterminated character set at position 0",
    ),
    (
        "duplicate-session-names",
        TURN + '\n[[sessions]]\nname = "b"\nturns = [{ prompt = "x" }]\n\n'
        '[[sessions]]\nturns = [{ prompt = "y" }]\nname = "a"\n',
        12,
        "sessions[2].name",
        "duplicate session name 'a' (also sessions[0])",
    ),
    (
        "absolute-files-exist",
        TURN + '[sessions.turns.expect]\nfiles_exist = [\n  "ok.txt",\n  "/etc/passwd",\n]\n',
        8,
        f"{S0T0}.expect.files_exist[1]",
        "must be a relative path inside the workspace (no '..'); got '/etc/passwd'",
    ),
    (
        "dotdot-files-absent",
        TURN + 'expect.files_absent = ["sub/../../x"]\n',
        5,
        f"{S0T0}.expect.files_absent[0]",
        "must be a relative path inside the workspace (no '..'); got 'sub/../../x'",
    ),
    (
        "dotdot-file-contains",
        TURN + '[sessions.turns.expect.file_contains]\n"ok.txt" = "a"\n"../secret" = "b"\n',
        7,
        f'{S0T0}.expect.file_contains."../secret"',
        "must be a relative path inside the workspace (no '..'); got '../secret'",
    ),
    (
        "absolute-workspace-file",
        '[workspace]\nfiles."/tmp/x" = "hi"\n' + TURN,
        2,
        'workspace.files."/tmp/x"',
        "must be a relative path inside the workspace (no '..'); got '/tmp/x'",
    ),
    (
        "agent-command-unclosed-quote",
        '[agent]\ncommand = "my-agent \'oops"\n' + TURN,
        2,
        "agent.command",
        "cannot split like a shell: No closing quotation",
    ),
    (
        "error-after-a-multiline-string-that-looks-like-toml",
        'description = """\n[[sessions]]\nname = "fake"\n# not a comment\n"""\n'
        + TURN
        + "[[sessions.turns.requests]]\ntitle = 'x'\ncount = -2\n",
        12,
        f"{R0}.count",
        "expected an integer >= 1; got -2",
    ),
    (
        "crlf",
        '[[sessions]]\r\nname = "a"\r\n[[sessions.turns]]\r\nprompt = "hi"\r\nbogus = 1\r\n',
        5,
        f"{S0T0}.bogus",
        "unknown key; the keys here are prompt, requests, cancel_after_ms,"
        " cancel_after_request, expect",
    ),
]


@pytest.mark.parametrize(
    ("text", "line", "field", "reason"),
    [case[1:] for case in MALFORMED],
    ids=[case[0] for case in MALFORMED],
)
def test_malformed_file_names_file_line_and_field(
    tmp_path: Path, text: str, line: int | None, field: str | None, reason: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    error = caught.value
    where = f"{path}:{line}" if line is not None else f"{path}"
    what = f"{field}: {reason}" if field is not None else reason
    assert str(error) == f"{where}: {what}"
    assert (error.path, error.line, error.field) == (path, line, field)
    assert error.__cause__ is None  # no traceback chained into the report


def test_not_utf8_names_the_line_of_the_bad_byte(tmp_path: Path) -> None:
    path = write(tmp_path, b'seed = 1\nname = "caf\xe9"\n')
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert str(caught.value) == f"{path}:2: not UTF-8 text: byte 0xe9 (invalid continuation byte)"
    assert caught.value.line == 2


def test_missing_file(tmp_path: Path) -> None:
    path = tmp_path / "nowhere.toml"
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    assert str(caught.value) == f"{path}: cannot read: No such file or directory"
    assert (caught.value.path, caught.value.line, caught.value.field) == (path, None, None)


def test_a_folder_is_not_a_file(tmp_path: Path) -> None:
    with pytest.raises(ScenarioError) as caught:
        load_scenario(tmp_path)
    assert str(caught.value) == f"{tmp_path}: cannot read: Is a directory"


def test_the_model_checks_structs_built_in_python_too() -> None:
    session = SessionSpec(name="a", turns=[TurnSpec(prompt="hi")])
    with pytest.raises(ValueError, match=r"^sessions\[1\]\.name: duplicate session name 'a'"):
        Scenario(sessions=[session, session])
    with pytest.raises(ValueError, match=r"^title: not a valid regular expression"):
        ExpectedRequest(title="(")
    with pytest.raises(ValueError, match=r"^files_exist\[0\]: must be a relative path"):
        AfterTurn(files_exist=["C:\\windows"])


# ------------------------------------------------------------------ never a traceback

SEED_TEXT = EVERY_FIELD.encode()


@st.composite
def mangled(draw: st.DrawFn) -> bytes:
    """The well-formed file with a few bytes replaced, inserted or deleted."""
    data = bytearray(SEED_TEXT)
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        edit = draw(st.sampled_from(["replace", "insert", "delete"]))
        chunk = draw(
            st.sampled_from(
                [b"[", b"]", b"=", b'"', b"'", b"\n", b"#", b"-1", b"x", b"\xff", b"{", b",", b"."]
            )
        )
        if edit == "insert" or at == len(data):
            data[at:at] = chunk
        elif edit == "replace":
            data[at : at + 1] = chunk
        else:
            del data[at : at + draw(st.integers(1, 20))]
    return bytes(data)


@settings(
    max_examples=examples(300),
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(mangled())
def test_any_file_loads_or_raises_scenario_error_with_a_real_line(
    tmp_path: Path, raw: bytes
) -> None:
    path = write(tmp_path, raw)
    try:
        load_scenario(path)
    except ScenarioError as error:
        assert error.path == path
        assert error.line is None or 1 <= error.line <= raw.count(b"\n") + 1
        assert str(error).startswith(f"{path}")


# ------------------------------------------------- malformed beyond msgspec's types

NAME_RULE = "must be usable as a file name (it fills {name} and {session} in paths)"
EXPECT = "[sessions.turns.expect]\n"  # line 5 after TURN; its key on line 6

REJECTED: list[tuple[str, str, int, str, str]] = [
    # (id, file, line, field, the start of what is wrong)
    (
        "title-repeat-overflows",
        REQUEST.replace('title = "fs"', 'title = "x{4294967296}"'),
        6,
        f"{R0}.title",
        "not a valid regular expression: too large",
    ),
    (
        "title-nested-too-deeply",
        REQUEST.replace('title = "fs"', 'title = "' + "(" * 100_000 + ")" * 100_000 + '"'),
        6,
        f"{R0}.title",
        "not a valid regular expression: nested too deeply",
    ),
    (
        "tool-status-repeat-overflows",
        TURN + EXPECT + 'tool_status = { "x{4294967296}" = "completed" }\n',
        6,
        f'{S0T0}.expect.tool_status."x{{4294967296}}"',
        "not a valid regular expression: too large",
    ),
    ("name-absolute", TURN.replace('"a"', '"/etc"'), 2, "sessions[0].name", NAME_RULE),
    ("name-dotdot", TURN.replace('"a"', '".."'), 2, "sessions[0].name", NAME_RULE),
    (
        "name-with-hash-collides-with-a-copy-label",
        TURN.replace('name = "a"', 'name = "a"\ncopies = 2')
        + '[[sessions]]\nname = "a#2"\n[[sessions.turns]]\nprompt = "hi"\n',
        7,
        "sessions[1].name",
        NAME_RULE,
    ),
    (
        "nul-in-files-absent",
        TURN + EXPECT + 'files_absent = ["a.txt\\u0000"]\n',
        6,
        f"{S0T0}.expect.files_absent[0]",
        "must not contain a NUL character",
    ),
    (
        "nul-in-file-contains",
        TURN + EXPECT + 'file_contains = { "a\\u0000b" = "x" }\n',
        6,
        f'{S0T0}.expect.file_contains."a\\u0000b"',
        "must not contain a NUL character",
    ),
    (
        "empty-reply-contains",
        TURN + EXPECT + 'reply_contains = ["ok", ""]\n',
        6,
        f"{S0T0}.expect.reply_contains[1]",
        "must not be empty",
    ),
    (
        "keys-equal-once-filled",
        TURN + EXPECT + 'file_contains = { "a.txt" = "x", "{name}.txt" = "y" }\n',
        6,
        f'{S0T0}.expect.file_contains."{{name}}.txt"',
        "the same key as 'a.txt' once placeholders are filled",
    ),
    (
        "agent-command-an-empty-word",
        "[agent]\ncommand = \"''\"\n" + TURN,
        2,
        "agent.command",
        "empty command",
    ),
]


@pytest.mark.parametrize(
    ("text", "line", "field", "reason"),
    [case[1:] for case in REJECTED],
    ids=[case[0] for case in REJECTED],
)
def test_values_that_would_break_the_run_are_rejected_at_load(
    tmp_path: Path, text: str, line: int, field: str, reason: str
) -> None:
    path = write(tmp_path, text)
    with pytest.raises(ScenarioError) as caught:
        load_scenario(path)
    error = caught.value
    assert str(error).startswith(f"{path}:{line}: {field}: {reason}"), str(error)
    assert (error.line, error.field) == (line, field)
    assert error.__cause__ is None
