"""``simhost run``: the example scenarios pass in both dialects, failures and invariant
violations are reported (exit 1, JUnit, JSON), malformed scenarios exit 2; the matcher
and the answer selection on their own."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from simhost.run.scenario import (
    load_scenario,
)
from tests.support import paths
from tests.support.cli import ForkedSimhost, Ran

ROOT = paths.ROOT
EXAMPLES = ROOT / "examples" / "scenarios"
ROGUE = paths.FAKE_AGENTS / "rogue_acp_agent.py"
TIMEOUT = 120


def simhost_run(forked: ForkedSimhost, *args: str | Path, cwd: Path | None = None) -> Ran:
    argv = ["run", *map(str, args)]
    return forked.run(argv, cwd=cwd or Path.cwd(), env=dict(os.environ), timeout=TIMEOUT)


def reports(tmp_path: Path) -> tuple[Path, Path]:
    return tmp_path / "junit.xml", tmp_path / "report.json"


def read_reports(junit: Path, json_path: Path) -> tuple[ET.Element, dict[str, Any]]:
    tree = ET.parse(junit).getroot()
    data: dict[str, Any] = json.loads(json_path.read_text(encoding="utf-8"))
    return tree, data


def scenario_file(tmp_path: Path, name: str, text: str) -> Path:
    path = tmp_path / f"{name}.toml"
    path.write_text(text, encoding="utf-8")
    return path


def rogue(mode: str) -> str:
    return f'[agent]\ncommand = "{sys.executable} {ROGUE} {mode}"\ndialect = "acp"\n'


# ---------------------------------------------------------------- examples


@pytest.mark.parametrize("dialect", ["bridge", "acp"])
def test_every_example_scenario_passes_against_the_reference_runtime(
    forked: ForkedSimhost, tmp_path: Path, dialect: str,
) -> None:
    files = sorted(EXAMPLES.glob("*.toml"))
    assert len(files) >= 5
    junit, json_path = reports(tmp_path)
    result = simhost_run(
        forked, *files, "--dialect", dialect, "--junit", junit, "--json", json_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr

    tree, data = read_reports(junit, json_path)
    assert data["passed"] is True
    assert tree.tag == "testsuites" and tree.get("failures") == "0"
    suites = {suite.get("name"): suite for suite in tree.iter("testsuite")}
    for path in files:
        scenario = load_scenario(path)
        suite = suites[scenario.name]
        expected_cases = sum(s.copies * len(s.turns) for s in scenario.sessions) + 1
        cases = suite.findall("testcase")
        assert len(cases) == expected_cases == int(suite.get("tests", "-1"))
        assert suite.get("failures") == "0"
        assert not list(suite.iter("failure"))
        assert [c.get("name") for c in cases].count("invariants") == 1
        props = {p.get("name"): p.get("value") for p in suite.iter("property")}
        assert props["dialect"] == dialect

    by_name = {s["name"]: s for s in data["scenarios"]}
    for scenario in by_name.values():
        assert scenario["violations"] == []
        assert scenario["dialect"] == dialect
        assert all(t["passed"] and t["failures"] == [] for t in scenario["turns"])

    load = by_name["load-20x10"]
    assert len(load["turns"]) == 200 and load["requests"] == 200
    assert len(load["latencies_ms"]) == 200
    assert load["latency_median_ms"] is not None and load["latency_p99_ms"] is not None
    assert 0 < load["sessions_s"] < load["wall_s"] < 60
    assert {t["session"] for t in load["turns"]} == {f"load#{k}" for k in range(1, 21)}
    line = next(ln for ln in result.stdout.splitlines() if ln.startswith("load-20x10: PASSED"))
    assert re.search(
        r"wall time [\d.]+ s \(sessions [\d.]+ s\); answer latency median [\d.]+ ms, p99 [\d.]+ ms",
        line,
    )

    cancelled = by_name["cancel-with-cards-open"]["turns"]
    burst = next(t for t in cancelled if t["prompt"] == "burst 5")
    assert burst["stop_reason"] == "cancelled" and burst["requests"] >= 3
    timeout = by_name["policy-timeout-withdraws"]["turns"]
    assert [t["stop_reason"] for t in sorted(timeout, key=lambda t: t["index"])] == [
        "end_turn",
        "end_turn",
    ]


# ----------------------------------------------------------------- failures


def test_a_failed_expectation_exits_1_and_says_what_was_expected_and_what_happened(
    forked: ForkedSimhost, tmp_path: Path,
) -> None:
    path = scenario_file(
        tmp_path,
        "wrong",
        """
name = "wrong"
[[sessions]]
name = "solo"
  [[sessions.turns]]
  prompt = "create kept.txt with fine"
  requests = [{ title = "kept", answer = "allow" }]
  expect = { files_exist = ["kept.txt"] }

  [[sessions.turns]]
  prompt = "create refused.txt with nope"
  requests = [{ title = "refused", count = 2, answer = "reject" }]
  expect = { files_exist = ["refused.txt"], reply_contains = ["created refused.txt"] }
""",
    )
    junit, json_path = reports(tmp_path)
    result = simhost_run(forked, path, "--junit", junit, "--json", json_path)
    assert result.returncode == 1, result.stdout + result.stderr
    assert "wrong: FAILED" in result.stdout

    tree, data = read_reports(junit, json_path)
    assert tree.get("failures") == "1"
    cases = {c.get("name", "").split(":")[0]: c for c in tree.iter("testcase")}
    assert cases["turn 1"].find("failure") is None
    assert cases["invariants"].find("failure") is None
    failure = cases["turn 2"].find("failure")
    assert failure is not None and failure.get("type") == "expectation"
    assert failure.get("message") == "expected 2 permission request matching 'refused', got 1"
    text = failure.text or ""
    assert "expected file refused.txt to exist; it does not" in text
    assert "expected the reply to contain 'created refused.txt'; it was 'denied: " in text
    assert cases["turn 2"].get("classname") == "wrong.solo"

    turn = next(t for t in data["scenarios"][0]["turns"] if t["index"] == 2)
    assert turn["passed"] is False and len(turn["failures"]) == 3


def test_a_tool_reported_completed_after_its_denial_is_an_invariant_violation(
    forked: ForkedSimhost, tmp_path: Path,
) -> None:
    path = scenario_file(
        tmp_path,
        "liar",
        rogue("complete-anyway")
        + """
[[sessions]]
name = "victim"
  [[sessions.turns]]
  prompt = "write it"
  requests = [{ title = "rogue\\\\.txt", kind = "edit", count = 1, answer = "reject" }]
""",
    )
    junit, json_path = reports(tmp_path)
    result = simhost_run(forked, path, "--junit", junit, "--json", json_path)
    assert result.returncode == 1, result.stdout + result.stderr

    tree, data = read_reports(junit, json_path)
    [violation] = data["scenarios"][0]["violations"]
    assert violation == (
        "session victim: tool call call-1 (fs.write: rogue.txt) was reported completed "
        "after its approval was denied (deny)"
    )
    invariants = next(c for c in tree.iter("testcase") if c.get("name") == "invariants")
    failure = invariants.find("failure")
    assert failure is not None and failure.get("type") == "invariant"
    assert failure.get("message") == violation
    # The turn's own expectations held: only the invariant caught it.
    assert data["scenarios"][0]["turns"][0]["passed"] is True


COMPLETED_AFTER_DENIAL = (
    "session victim: tool call call-1 (fs.write: rogue.txt) was reported completed "
    "after its approval was denied (deny)"
)


@pytest.mark.parametrize(
    ("mode", "requests", "violations"),
    [
        (
            # allowed, then rejected: the latest decision is what counts
            "allow-then-deny",
            '[{ title = "first", count = 1, answer = "allow" },'
            ' { title = "second", count = 1, answer = "reject" }]',
            [COMPLETED_AFTER_DENIAL],
        ),
        (
            # a second request under the id of a pending one must not wipe its record
            "reuse-id",
            '[{ title = "rogue\\\\.txt", count = 1, answer = "reject" }]',
            [
                "permission request 1001 of session victim: the agent reused its id for "
                "another request while it was still pending",
                "permission request 1001 of session victim was answered 2 times",
                COMPLETED_AFTER_DENIAL,
            ],
        ),
        (
            # reported completed 0.3 s after the session's last turn ended
            "complete-later",
            '[{ title = "rogue", count = 1, answer = "reject" }]',
            [COMPLETED_AFTER_DENIAL],
        ),
    ],
    ids=["allow-then-deny", "reuse-id", "complete-later"],
)
def test_completed_after_a_denial_is_caught_however_the_agent_disguises_it(
    forked: ForkedSimhost, tmp_path: Path, mode: str, requests: str, violations: list[str],
) -> None:
    path = scenario_file(
        tmp_path,
        mode,
        rogue(mode)
        + f"""
[[sessions]]
name = "victim"
  [[sessions.turns]]
  prompt = "write it"
  requests = {requests}
""",
    )
    junit, json_path = reports(tmp_path)
    result = simhost_run(forked, path, "--junit", junit, "--json", json_path)
    assert result.returncode == 1, result.stdout + result.stderr
    _, data = read_reports(junit, json_path)
    assert data["scenarios"][0]["violations"] == violations
    assert data["scenarios"][0]["turns"][0]["failures"] == []


def test_a_question_for_a_session_with_no_turn_running_is_reported(
    forked: ForkedSimhost, tmp_path: Path,
) -> None:
    path = scenario_file(
        tmp_path,
        "stray",
        rogue("stray")
        + """
[[sessions]]
name = "victim"
  [[sessions.turns]]
  prompt = "ask someone else"
""",
    )
    junit, json_path = reports(tmp_path)
    result = simhost_run(forked, path, "--junit", junit, "--json", json_path)
    assert result.returncode == 1, result.stdout + result.stderr
    _, data = read_reports(junit, json_path)
    assert data["scenarios"][0]["violations"] == [
        "permission request 1001 named session 'ghost' (not opened by this run), "
        "which had no turn running: answered cancelled"
    ]


def test_a_question_after_the_turn_ended_is_answered_cancelled_and_reported(
    forked: ForkedSimhost, tmp_path: Path,
) -> None:
    # The agent ends its turn, then asks: the turn's handler must not answer it
    # as scripted ("allow"), nor count it; it is a question with no turn running.
    path = scenario_file(
        tmp_path,
        "late",
        rogue("ask-after-turn")
        + """
[[sessions]]
name = "victim"
  [[sessions.turns]]
  prompt = "one"
  requests = [{ title = "late", answer = "allow" }]
""",
    )
    junit, json_path = reports(tmp_path)
    result = simhost_run(forked, path, "--junit", junit, "--json", json_path)
    assert result.returncode == 1, result.stdout + result.stderr
    _, data = read_reports(junit, json_path)
    [turn] = data["scenarios"][0]["turns"]
    assert turn["failures"] == [
        "expected at least one permission request matching 'late', got none"
    ]
    assert turn["requests"] == 0
    [violation] = data["scenarios"][0]["violations"]
    assert violation in (
        "victim turn 1: permission request 'fs.write: late.txt' (tool call late-1) arrived "
        "after the turn had ended, with no turn running: answered cancelled",
        "permission request 2001 named session victim, which had no turn running: "
        "answered cancelled",
    )


def test_a_card_left_open_when_the_turn_ends_is_reported(
    forked: ForkedSimhost, tmp_path: Path,
) -> None:
    path = scenario_file(
        tmp_path,
        "open",
        rogue("leave-open")
        + """
[[sessions]]
name = "victim"
  [[sessions.turns]]
  prompt = "ask and run"
  requests = [{ title = "rogue", answer = "ignore" }]
""",
    )
    junit, json_path = reports(tmp_path)
    result = simhost_run(forked, path, "--junit", junit, "--json", json_path)
    assert result.returncode == 1, result.stdout + result.stderr
    _, data = read_reports(junit, json_path)
    assert data["scenarios"][0]["violations"] == [
        "victim turn 1: 1 permission card(s) still open after the turn ended "
        "(stop reason 'end_turn'); answered cancelled"
    ]


def test_an_unexpected_request_is_answered_cancelled_and_fails_the_turn(
    forked: ForkedSimhost, tmp_path: Path,
) -> None:
    path = scenario_file(
        tmp_path,
        "surprise",
        """
[[sessions]]
name = "solo"
  [[sessions.turns]]
  prompt = "create surprise.txt with boo"
  expect = { files_absent = ["surprise.txt"], tool_status = { "surprise" = "failed" } }
""",
    )
    junit, json_path = reports(tmp_path)
    result = simhost_run(forked, path, "--junit", junit, "--json", json_path)
    assert result.returncode == 1
    _, data = read_reports(junit, json_path)
    [turn] = data["scenarios"][0]["turns"]
    assert turn["failures"] == [
        "unexpected permission request 'fs.write: surprise.txt' (kind edit): no expected "
        "request matches it; answered cancelled"
    ]
    assert data["scenarios"][0]["violations"] == []


def test_repeat_and_seed_override_the_scenario(forked: ForkedSimhost, tmp_path: Path) -> None:
    junit, json_path = reports(tmp_path)
    path = EXAMPLES / "racing_approvals.toml"
    result = simhost_run(forked, 
        path, "--repeat", "2", "--seed", "99", "--junit", junit, "--json", json_path
    )
    assert result.returncode == 0, result.stdout + result.stderr
    tree, data = read_reports(junit, json_path)
    [scenario] = data["scenarios"]
    assert scenario["repeat"] == 2 and scenario["seed"] == 99
    assert sorted({t["repeat"] for t in scenario["turns"]}) == [1, 2]
    assert len(scenario["turns"]) == 2 * 12
    classnames = {c.get("classname") for c in tree.iter("testcase")}
    assert "racing-approvals.repeat-2.beta#3" in classnames


# -------------------------------------------------------------- usage errors


def test_a_malformed_scenario_exits_2_naming_the_file_and_line(
    forked: ForkedSimhost, tmp_path: Path,
) -> None:
    bad_toml = scenario_file(tmp_path, "bad", '[[sessions]]\nname = "a"\nturns = [\n')
    result = simhost_run(forked, bad_toml)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert str(bad_toml) in result.stderr
    assert re.search(r"(:\d+\b|line \d+)", result.stderr), result.stderr

    typo = scenario_file(
        tmp_path,
        "typo",
        '[[sessions]]\nname = "a"\n  [[sessions.turns]]\n  prompt = "hi"\n  answr = "allow"\n',
    )
    good = EXAMPLES / "racing_approvals.toml"
    result = simhost_run(forked, good, typo)
    assert result.returncode == 2
    assert "Traceback" not in result.stderr
    assert str(typo) in result.stderr and "answr" in result.stderr
    assert "racing-approvals" not in result.stdout  # nothing ran


def test_usage_errors_exit_2_and_an_agent_that_cannot_start_fails(
    forked: ForkedSimhost, tmp_path: Path,
) -> None:
    good = EXAMPLES / "racing_approvals.toml"
    result = simhost_run(forked, good, "--dialect", "smoke-signals")
    assert result.returncode == 2 and "unknown dialect" in result.stderr
    result = simhost_run(forked, good, "--agent", "  ")
    assert result.returncode == 2 and "command is empty" in result.stderr

    _, json_path = reports(tmp_path)
    result = simhost_run(forked, good, "--agent", "/nonexistent/agent --acp", "--json", json_path)
    assert result.returncode == 1
    data = json.loads(json_path.read_text(encoding="utf-8"))
    assert data["scenarios"][0]["violations"][0].startswith(
        "could not start the agent '/nonexistent/agent'"
    )


@pytest.mark.parametrize(
    ("command", "message"),
    [
        ('"unterminated', "cannot split like a shell: No closing quotation"),
        ("''", "the agent's command is empty"),
    ],
    ids=["unterminated-quote", "an-empty-word"],
)
def test_an_agent_command_that_cannot_be_run_is_a_usage_error(
    forked: ForkedSimhost, command: str, message: str,
) -> None:
    result = simhost_run(forked, EXAMPLES / "racing_approvals.toml", "--agent", command)
    assert result.returncode == 2, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert f"simhost run: --agent {command!r}: {message}" in " ".join(result.stderr.split())
    assert result.stdout == ""  # nothing ran


def test_files_exist_wants_a_file_not_a_folder(forked: ForkedSimhost, tmp_path: Path) -> None:
    path = scenario_file(
        tmp_path,
        "folder",
        """
[workspace]
files = { "d/x.txt" = "hi" }

[[sessions]]
name = "solo"
  [[sessions.turns]]
  prompt = "read d/x.txt"
  expect = { files_exist = ["d", "d/x.txt"] }
""",
    )
    junit, json_path = reports(tmp_path)
    result = simhost_run(forked, path, "--junit", junit, "--json", json_path)
    assert result.returncode == 1, result.stdout + result.stderr
    _, data = read_reports(junit, json_path)
    [turn] = data["scenarios"][0]["turns"]
    assert turn["failures"] == ["expected file d to exist; it is a folder"]


def test_ctrl_c_says_interrupted_exits_130_and_leaves_nothing_behind(tmp_path: Path) -> None:
    # A request answered only after 30 s: the run is mid-turn when interrupted.
    path = scenario_file(
        tmp_path,
        "slow",
        """
[[sessions]]
name = "slow"
  [[sessions.turns]]
  prompt = "create a.txt with hi"
  requests = [{ title = "a\\\\.txt", answer = "allow", delay_ms = 30000 }]
""",
    )
    temp = tmp_path / "tmp"
    temp.mkdir()
    env = {**os.environ, "TMPDIR": str(temp)}
    process = subprocess.Popen(
        [sys.executable, "-m", "simhost", "run", str(path)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 20
        while not any(_processes_mentioning(str(temp))):  # the agent is up
            assert process.poll() is None, process.communicate()
            assert time.monotonic() < deadline, "the agent never started"
            time.sleep(0.1)
        time.sleep(0.5)  # and the request is pending
        os.killpg(process.pid, signal.SIGINT)  # as a terminal's Ctrl-C does
        out, err = process.communicate(timeout=30)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
            process.communicate()
    assert process.returncode == 130, out + err
    assert err.strip() == "simhost run: interrupted"
    assert list(temp.iterdir()) == []  # workspace and state folders removed
    assert list(_processes_mentioning(str(temp))) == []  # the agent is gone


def _processes_mentioning(text: str) -> Iterator[int]:
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmdline = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if text.encode() in cmdline:
            yield int(entry.name)


# --------------------------------------------------------------------- units


