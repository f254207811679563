"""Every ``simhost`` command: a wrong command line is one line on stderr, exit code 2, no
traceback, nothing started; an agent that dies at start is one line plus its stderr tail,
exit code 1; nothing is left running; ``--help`` is plain text without type noise; strings
from people and peers are never read as Rich markup."""

from __future__ import annotations

import os
import sys
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from simhost.approve.target import TOKEN_ENV
from tests.support import paths
from tests.support.cli import ForkedSimhost, Ran

ROOT = paths.ROOT
STUCK_AGENT = f"{sys.executable} {paths.FAKE_AGENTS / 'stuck_acp_agent.py'}"
SCENARIO = str(ROOT / "examples" / "scenarios" / "denial_leaves_workspace_untouched.toml")
TIMEOUT = 60
Simhost = Callable[..., tuple[Ran, str]]


def _left_running(marker: str) -> list[int]:
    """Processes whose environment carries ``marker``: the command's, and their children."""
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            environ = (entry / "environ").read_bytes()
        except OSError:
            continue  # gone meanwhile, or not ours to read
        if marker.encode() in environ.split(b"\0"):
            pids.append(int(entry.name))
    return pids


@pytest.fixture
def simhost(tmp_path: Path, forked: ForkedSimhost) -> Simhost:
    """``simhost ARGS`` (as ``python -m simhost`` runs it) in ``tmp_path``: no terminal,
    narrow, marked in its env; ``{tmp}`` in an argument is ``tmp_path``."""

    def run(*args: str) -> tuple[Ran, str]:
        marker = f"SIMHOST_CLI_TEST={uuid.uuid4().hex}"
        key, value = marker.split("=")
        env = {
            **os.environ,
            "COLUMNS": "40",
            key: value,
            "XDG_STATE_HOME": str(tmp_path / "xdg"),
            "XDG_CONFIG_HOME": str(tmp_path / "config"),
        }
        env.pop(TOKEN_ENV, None)
        argv = [a.replace("{tmp}", str(tmp_path)) for a in args]
        return forked.run(argv, cwd=tmp_path, env=env, timeout=TIMEOUT), marker

    return run


USAGE_ERRORS = [
    # (arguments, what the one line says)
    (["nosuch"], "No such command 'nosuch'"),
    (["--bogus"], "No such option: --bogus"),
    (["chat", "--bogus"], "No such option: --bogus"),
    (["chat", "--workspace", "/nonexistent"], "'/nonexistent' does not exist"),
    (["chat", "--telemetry", "/nonexistent/dir/x.jsonl"], "cannot open the telemetry file"),
    (["chat", "--telemetry", "{tmp}"], "is a directory"),
    (["chat", "--policy", "nosuch"], "unknown policy 'nosuch'"),
    (["chat", "--policy", "{tmp}/missing.json"], "cannot read policy file"),
    (["chat", "--policy", "{tmp}/a-file"], "is not JSON"),
    (["chat", "--agent", ""], "--agent '': the agent's command is empty"),
    (["chat", "--agent", "'"], "cannot split like a shell"),
    (["chat", "--runtime-cmd", "  "], "--runtime-cmd '  ': the agent's command is empty"),
    (["chat", "--dialect", "[/x]"], "unknown dialect '[/x]'"),
    (["chat", "--dialect", "a\nb\u202e[/x]"], r"unknown dialect 'a\nb\u202e[/x]'"),
    (["chat", "--policy", "strict", "--agent", "cat"], "--policy is for the reference runtime"),
    (["chat", "--policy", "nosuch", "--runtime-cmd", "cat"], "not with --runtime-cmd"),
    (["chat", "--state-dir", "/proc/nope/x"], "cannot use the state folder"),
    (["chat", "--state-dir", "{tmp}/a-file"], "is a file"),
    (["chat", "--start-timeout", "0"], "--start-timeout 0.0: give a number of seconds above 0"),
    (["chat", "--start-timeout", "-1"], "give a number of seconds above 0"),
    (["chat", "--start-timeout", "nan"], "give a number of seconds above 0"),
    (["chat", "--start-timeout", "inf"], "give a number of seconds above 0"),
    (["runtime", "--dialect", "[/x]"], "unknown dialect '[/x]'"),
    (["runtime", "--policy", "nosuch"], "unknown policy 'nosuch'"),
    (["runtime", "--workspace", "/nonexistent"], "is not a folder"),
    (["runtime", "--state-dir", "/proc/nope/x"], "cannot create the state folder"),
    (["runtime", "--state-dir", "{tmp}/a-file"], "cannot create the state folder"),
    (["run"], "Missing argument"),
    (["run", "{tmp}/missing.toml"], "cannot read"),
    (["run", "--junit", "/nonexistent/x.xml", SCENARIO], "--junit '/nonexistent/x.xml'"),
    (["run", "--json", "/nonexistent/x.json", SCENARIO], "--json '/nonexistent/x.json'"),
    (["run", "--junit", "{tmp}/r", "--json", "{tmp}/r", SCENARIO], "name the same file"),
    (["run", "--dialect", "[/x]", SCENARIO], "unknown dialect '[/x]'"),
    (["run", "--agent", "", SCENARIO], "the agent's command is empty"),
    (["run", "--repeat", "0", SCENARIO], "Invalid value for '--repeat'"),
]


@pytest.mark.parametrize(
    ("args", "says"), USAGE_ERRORS, ids=[" ".join(a).replace("\n", "\\n") for a, _ in USAGE_ERRORS]
)
def test_a_usage_error_is_one_line_exit_2_no_traceback_nothing_started(
    simhost: Simhost, tmp_path: Path, args: list[str], says: str
) -> None:
    (tmp_path / "a-file").write_text("not json\n")
    result, marker = simhost(*args)
    assert result.returncode == 2, result
    assert "Traceback" not in result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("simhost"), lines
    assert says in lines[0], lines
    assert result.stdout == ""  # nothing ran, not even a scenario's first line
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a-file"]  # no report, no state
    assert _left_running(marker) == []


# The card guards of chat and approve (--arm-delay, --repeat-guard): 0.1 to 5 seconds.
GUARD_COMMANDS = {"chat": ["chat"], "approve": ["approve", "http://127.0.0.1:8765/?token=guard-test"]}
BAD_GUARDS = [
    # (arguments, what the one line says after "simhost COMMAND: ")
    (["--arm-delay", "0.05"], "--arm-delay 0.05: give a number of seconds from 0.1 to 5"),
    (["--arm-delay", "6"], "--arm-delay 6.0: give a number of seconds from 0.1 to 5"),
    (["--arm-delay", "5.01"], "--arm-delay 5.01: give a number of seconds from 0.1 to 5"),
    (["--arm-delay", "0"], "--arm-delay 0.0: give a number of seconds from 0.1 to 5"),
    (["--arm-delay", "nan"], "--arm-delay nan: give a number of seconds from 0.1 to 5"),
    (["--arm-delay", "inf"], "--arm-delay inf: give a number of seconds from 0.1 to 5"),
    (["--arm-delay", "soon"], "Invalid value for '--arm-delay'"),
    (["--repeat-guard", "0"], "--repeat-guard 0.0: give a number of seconds from 0.1 to 5"),
    (["--repeat-guard", "-1"], "--repeat-guard -1.0: give a number of seconds from 0.1 to 5"),
    (["--repeat-guard", "6"], "--repeat-guard 6.0: give a number of seconds from 0.1 to 5"),
    (["--repeat-guard", "nan"], "--repeat-guard nan: give a number of seconds from 0.1 to 5"),
]


@pytest.mark.parametrize("command", sorted(GUARD_COMMANDS))
@pytest.mark.parametrize(("args", "says"), BAD_GUARDS, ids=[" ".join(a) for a, _ in BAD_GUARDS])
def test_an_arm_delay_or_repeat_guard_out_of_range_is_one_line_exit_2_nothing_started(
    simhost: Simhost, tmp_path: Path, command: str, args: list[str], says: str
) -> None:
    result, marker = simhost(*GUARD_COMMANDS[command], *args)
    assert result.returncode == 2, result
    assert "Traceback" not in result.stdout + result.stderr
    lines = result.stderr.splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith(f"simhost {command}: "), lines
    assert says in lines[0], lines
    assert result.stdout == ""  # nothing ran: no banner, no card
    assert list(tmp_path.iterdir()) == []  # no state folder, no log, no audit
    assert _left_running(marker) == []


AGENT_FAILURES = [
    # (--agent, the stderr lines after the one-line error)
    ("false", []),
    ("sh -c 'echo boom >&2; echo second line >&2; exit 3'", ["boom", "second line"]),
    ("sh -c 'sleep 600 & echo orphan >&2; exit 4'", ["orphan"]),
]


@pytest.mark.parametrize(("agent", "tail"), AGENT_FAILURES, ids=[a for a, _ in AGENT_FAILURES])
def test_an_agent_that_dies_at_start_is_one_line_and_its_stderr_tail_exit_1(
    simhost: Simhost, tmp_path: Path, agent: str, tail: list[str]
) -> None:
    result, marker = simhost("chat", "--agent", agent)
    assert result.returncode == 1, result
    assert "Traceback" not in result.stdout + result.stderr
    first, *rest = result.stderr.splitlines()
    assert first.startswith("simhost chat: the agent "), first
    assert first.endswith("before the first session was open"), first
    assert rest == (["agent stderr (last lines):", *tail] if tail else [])
    assert _left_running(marker) == []


START_FAILURES = [
    # (--agent, --start-timeout, the one line, the stderr tail after it)
    (
        "sh -c 'echo stuck agent: silent >&2; exec sleep 600'",
        "1",
        "the agent did not answer initialize within 1 s (see --start-timeout)",
        ["stuck agent: silent"],
    ),
    (
        f"{STUCK_AGENT} no-session",
        "5",
        "the agent did not answer the request for a first session within 5 s (see --start-timeout)",
        ["stuck agent: no-session"],
    ),
    (
        f"{STUCK_AGENT} error",
        "30",
        r"the agent answered initialize with an error [-32603] no model\nsimhost chat: all is well",
        ["stuck agent: error"],
    ),
    # cat echoes the request: permclient answers it -32601, which cat echoes back.
    (
        "cat",
        "30",
        "the agent answered initialize with an error [-32601] method not found: initialize",
        [],
    ),
]


@pytest.mark.parametrize(
    ("agent", "timeout", "says", "tail"),
    START_FAILURES,
    ids=["never answers", "opens no session", "error", "cat"],
)
def test_a_start_that_fails_or_takes_too_long_is_one_line_and_the_stderr_tail_exit_1(
    simhost: Simhost,
    tmp_path: Path,
    agent: str,
    timeout: str,
    says: str,
    tail: list[str],
) -> None:
    # stdin is /dev/null: the end of input does not hold the start up, nor end it early.
    result, marker = simhost("chat", "--agent", agent, "--start-timeout", timeout)
    assert result.returncode == 1, result
    assert "Traceback" not in result.stdout + result.stderr
    assert result.stderr.splitlines() == [
        f"simhost chat: {says}",
        *(["agent stderr (last lines):", *tail] if tail else []),
    ]
    assert "error" not in result.stdout and "starting the agent" not in result.stdout
    assert _left_running(marker) == []


def test_ctrl_c_while_the_agent_starts_is_exit_130_without_a_traceback(
    simhost: Simhost, tmp_path: Path
) -> None:
    # The agent sends SIGINT to the chat once asked to initialize, and never answers.
    result, marker = simhost("chat", "--agent", f"{STUCK_AGENT} interrupt")
    assert result.returncode == 130, result
    assert result.stderr == ""
    assert result.stdout.splitlines() == ["bye: the agent is stopped"]
    assert _left_running(marker) == []


def test_an_agent_that_cannot_be_started_is_one_line_exit_1(
    simhost: Simhost, tmp_path: Path
) -> None:
    result, marker = simhost("chat", "--agent", "/nonexistent/agent --acp")
    assert result.returncode == 1
    assert result.stderr.splitlines() == [
        "simhost chat: could not start the agent '/nonexistent/agent': No such file or directory"
    ]
    assert _left_running(marker) == []


@pytest.mark.parametrize(
    "command",
    [[], ["chat"], ["runtime"], ["run"], ["audit"]],
    ids=["simhost", "chat", "runtime", "run", "audit"],
)
def test_help_is_plain_text_without_type_noise(
    simhost: Simhost, tmp_path: Path, command: list[str]
) -> None:
    result, _ = simhost(*command, "--help")
    assert result.returncode == 0, result
    assert "Usage: simhost" in result.stdout
    assert "<bool>" not in result.stdout and "<str>" not in result.stdout
    assert "<path>" not in result.stdout and "<dir>" not in result.stdout
    assert "<list[" not in result.stdout
    assert "╭" not in result.stdout  # no Rich panels: brackets in help texts stay as written
    if command == ["runtime"]:
        assert "[default: the current folder]" in " ".join(result.stdout.split())


def test_no_command_shows_the_help_and_exits_2(simhost: Simhost, tmp_path: Path) -> None:
    result, _ = simhost()
    assert result.returncode == 2
    assert "Usage: simhost" in result.stderr and "Commands:" in result.stderr


