"""The simhost pytest plugin: the fixture, scenario files as tests, and the example."""

from __future__ import annotations

import shutil
import sys

import pytest

from simhost.pytest_plugin import SimhostRunner, answer, session, turn
from tests.support import paths

pytest_plugins = ("pytester",)

EXAMPLE = paths.EXAMPLES / "test_approvals_with_simhost.py"
ROGUE = paths.FAKE_AGENTS / "rogue_acp_agent.py"

GOOD = """
[[sessions]]
name = "one"
  [[sessions.turns]]
  prompt = "create a.txt with hi"
    [[sessions.turns.requests]]
    title = "fs.write"
    answer = "allow"
  [sessions.turns.expect]
  files_exist = ["a.txt"]
"""

WRONG = GOOD.replace('files_exist = ["a.txt"]', 'files_exist = ["b.txt"]')
MALFORMED = GOOD.replace('answer = "allow"', 'answer = "alow"')


def test_the_fixture_runs_a_scenario_built_in_python(simhost: SimhostRunner) -> None:
    scenario = simhost.scenario(
        session(
            "alpha",
            turn("create a.txt with hi", answer("fs.write", "allow"), files_exist=["a.txt"]),
            turn("create b.txt with no", answer("fs.write", "reject"), files_absent=["b.txt"]),
        )
    )
    result = simhost.run(scenario)
    simhost.check(result)
    assert result.passed
    assert [t.passed for t in result.turns] == [True, True]


def test_check_fails_the_test_with_what_was_expected(simhost: SimhostRunner) -> None:
    scenario = simhost.scenario(
        session("alpha", turn("create a.txt with hi", answer("fs.write", "reject"),
                              files_exist=["a.txt"]))
    )  # fmt: skip
    result = simhost.run(scenario)
    assert not result.passed
    with pytest.raises(pytest.fail.Exception, match=r"a\.txt"):
        simhost.check(result)


def test_scenario_files_are_collected_and_run_as_tests(pytester: pytest.Pytester) -> None:
    pytester.makefile(".toml", simhost_good=GOOD, simhost_wrong=WRONG, simhost_bad=MALFORMED)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=2)
    result.stdout.fnmatch_lines(["*b.txt*"])
    result.stdout.fnmatch_lines(["*simhost_bad.toml:*answer*"])


def test_the_example_test_file_passes(pytester: pytest.Pytester) -> None:
    shutil.copy(EXAMPLE, pytester.path / EXAMPLE.name)
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=2)


def test_simhost_dialect_keeps_the_scenarios_own_agent(pytester: pytest.Pytester) -> None:
    # The scenario's agent completes a tool it was denied: the run must fail with
    # --simhost-dialect too (it must not quietly run the reference runtime instead).
    liar = f"""
[agent]
command = "{sys.executable} {ROGUE} complete-anyway"
dialect = "acp"
[[sessions]]
name = "victim"
  [[sessions.turns]]
  prompt = "create rogue.txt with x"
  requests = [{{ title = "rogue\\\\.txt", kind = "edit", count = 1, answer = "reject" }}]
"""
    pytester.makefile(".toml", simhost_liar=liar)
    for extra in ([], ["--simhost-dialect", "acp"]):
        result = pytester.runpytest("-p", "no:cacheprovider", *extra)
        result.assert_outcomes(failed=1)
        result.stdout.fnmatch_lines(["*completed*"])
