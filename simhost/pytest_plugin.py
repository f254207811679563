"""The ``simhost`` pytest plugin: approval scenarios as ordinary tests.

Installed with the package (a ``pytest11`` entry point), so any project that has
``simhost`` installed gets:

* the ``simhost`` fixture, a :class:`SimhostRunner`: build sessions and turns in
  Python with scripted answers (:func:`session`, :func:`turn`, :func:`answer`),
  or load a scenario file, run it against an agent, and get a
  :class:`~simhost.run.runner.ScenarioResult`; :meth:`SimhostRunner.check`
  fails the test with what was expected and what happened, including the
  built-in invariants (every question answered exactly once, by its own
  session's handler, no card left open, no tool completed after a denial);
* ``--simhost-agent 'CMD ARGS'`` and ``--simhost-dialect bridge|acp`` to run the
  same tests against another agent (default: the reference runtime);
* scenario files named ``simhost_*.toml`` in test folders are collected and run
  as tests, one per file.

Nothing heavy is imported until a fixture or a scenario file is used: pytest loads
this plugin for every run of every project where permclient is installed, with or
without the ``host`` extra (Rich, Typer) that running scenarios needs. Without that
extra the plugin stays inert: the ``simhost`` fixture and scenario files fail, when
used, with one line saying which extra to install; nothing else changes.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from simhost._entry import HOST_EXTRA_MISSING, missing_host_modules

if TYPE_CHECKING:
    from simhost.run.runner import ScenarioResult
    from simhost.run.scenario import (
        AgentSpec,
        ExpectedRequest,
        Scenario,
        SessionSpec,
        TurnSpec,
    )

__all__ = ["SimhostRunner", "answer", "session", "turn"]


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("simhost", "simhost approval scenarios")
    group.addoption(
        "--simhost-agent",
        metavar="'CMD ARGS'",
        default=None,
        help="Agent command for the simhost fixture and scenario files "
        "(default: the reference runtime).",
    )
    group.addoption(
        "--simhost-dialect",
        choices=["bridge", "acp"],
        default=None,
        help="Wire dialect of that agent (default: acp with --simhost-agent, else bridge).",
    )


def _require_host_extra(what: str) -> None:
    """Fail the test in one line, before anything imports Rich or Typer, when they are missing."""
    missing = missing_host_modules()
    if missing:
        pytest.fail(f"{what}: {HOST_EXTRA_MISSING} (missing: {', '.join(missing)})", pytrace=False)


def _agent_options(config: pytest.Config) -> tuple[str | None, str | None]:
    """``--simhost-agent`` and ``--simhost-dialect``, as given (``None`` when not)."""
    return (
        config.getoption("--simhost-agent", default=None),
        config.getoption("--simhost-dialect", default=None),
    )


# ------------------------------------------------------------------ building


def answer(
    title: str,
    reply: str = "allow",
    *,
    kind: str | None = None,
    count: int | None = None,
    delay_ms: int = 0,
    jitter_ms: int = 0,
) -> ExpectedRequest:
    """A permission request the turn expects (title: a regular expression) and its answer."""
    from simhost.run.scenario import ExpectedRequest

    return ExpectedRequest(
        title=title,
        kind=kind,
        count=count,
        answer=reply,  # type: ignore[arg-type]  # checked by msgspec.convert below
        delay_ms=delay_ms,
        jitter_ms=jitter_ms,
    )


def turn(
    prompt: str,
    *requests: ExpectedRequest,
    cancel_after_ms: int | None = None,
    cancel_after_request: int | None = None,
    **expect: Any,
) -> TurnSpec:
    """One turn: its prompt, the requests it expects, and ``expect`` (AfterTurn's fields)."""
    import msgspec

    from simhost.run.scenario import AfterTurn, TurnSpec

    return TurnSpec(
        prompt=prompt,
        requests=list(requests),
        cancel_after_ms=cancel_after_ms,
        cancel_after_request=cancel_after_request,
        expect=msgspec.convert(expect, AfterTurn),
    )


def session(name: str, *turns: TurnSpec, copies: int = 1) -> SessionSpec:
    """A session: its turns run in order."""
    from simhost.run.scenario import SessionSpec

    return SessionSpec(name=name, turns=list(turns), copies=copies)


# ------------------------------------------------------------------ running


class SimhostRunner:
    """What the ``simhost`` fixture gives a test."""

    def __init__(self, agent_options: tuple[str | None, str | None], tmp_path: Path) -> None:
        self.agent_options = agent_options
        """``--simhost-agent`` and ``--simhost-dialect`` (``None`` when not given)."""
        self.tmp_path = tmp_path

    def scenario(
        self,
        *sessions: SessionSpec,
        seed: int = 0,
        repeat: int = 1,
        files: dict[str, str] | None = None,
        policy: str | None = None,
    ) -> Scenario:
        """A scenario from sessions built with :func:`session` (checked like a file)."""
        import msgspec

        from simhost.run.scenario import AgentSpec, Scenario, WorkspaceSpec

        built = Scenario(
            name="inline",
            seed=seed,
            repeat=repeat,
            agent=AgentSpec(policy=policy),
            workspace=WorkspaceSpec(files=dict(files or {})),
            sessions=list(sessions),
        )
        # The same checks as a scenario file (enums, ranges, patterns).
        return msgspec.convert(msgspec.to_builtins(built), Scenario)

    def load(self, path: str | Path) -> Scenario:
        """A scenario file (raises ScenarioError with the file, line and field)."""
        from simhost.run.scenario import load_scenario

        return load_scenario(Path(path))

    async def arun(
        self, scenario: Scenario | str | Path, *, seed: int | None = None, repeat: int | None = None
    ) -> ScenarioResult:
        """Run it (in an async test: pytest-trio)."""
        from simhost.run.runner import run_scenario

        if isinstance(scenario, str | Path):
            loaded, base_dir = self.load(scenario), Path(scenario).parent
        else:
            loaded, base_dir = scenario, self.tmp_path
        return await run_scenario(
            loaded, agent=self._agent_for(loaded), seed=seed, repeat=repeat, base_dir=base_dir
        )

    def run(
        self, scenario: Scenario | str | Path, *, seed: int | None = None, repeat: int | None = None
    ) -> ScenarioResult:
        """Run it (in a synchronous test)."""
        import trio

        return trio.run(lambda: self.arun(scenario, seed=seed, repeat=repeat))

    def check(self, result: ScenarioResult) -> None:
        """Fail the test, saying what was expected and what happened, unless all held."""
        if result.passed:
            return
        lines = [f"scenario {result.name!r} failed:"]
        for done in result.turns:
            for failure in done.failures:
                lines.append(f"  {done.session} turn {done.index}: {failure}")
        lines.extend(f"  invariant: {violation}" for violation in result.violations)
        pytest.fail("\n".join(lines), pytrace=False)

    def _agent_for(self, scenario: Scenario) -> AgentSpec | None:
        # Exactly what `simhost run --agent/--dialect` does with the same scenario.
        from simhost.run.cli import _agent_for

        command, dialect = self.agent_options
        return _agent_for(scenario, command, dialect)


@pytest.fixture
def simhost(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[SimhostRunner]:
    """Run approval scenarios against the agent (``--simhost-agent``, default the reference)."""
    _require_host_extra("the simhost fixture")
    yield SimhostRunner(_agent_options(request.config), tmp_path)


# ------------------------------------------------------------ scenario files


def pytest_collect_file(file_path: Path, parent: pytest.Collector) -> pytest.Collector | None:
    if file_path.suffix == ".toml" and file_path.name.startswith("simhost_"):
        collector: pytest.Collector = ScenarioFile.from_parent(parent, path=file_path)
        return collector
    return None


class ScenarioFile(pytest.File):
    """A ``simhost_*.toml`` scenario file: one test."""

    def collect(self) -> Iterator[pytest.Item]:
        yield ScenarioItem.from_parent(self, name=self.path.stem)


class ScenarioItem(pytest.Item):
    """Runs one scenario file and fails with its report."""

    def runtest(self) -> None:
        _require_host_extra(f"scenario {self.path.name}")
        runner = SimhostRunner(_agent_options(self.config), self.path.parent)
        runner.check(runner.run(self.path))

    def repr_failure(
        self,
        excinfo: pytest.ExceptionInfo[BaseException],
        style: Any = None,
    ) -> str:
        from simhost.run.scenario import ScenarioError

        if isinstance(excinfo.value, ScenarioError):
            return str(excinfo.value)
        if isinstance(excinfo.value, pytest.fail.Exception):
            return str(excinfo.value)
        return str(super().repr_failure(excinfo, style))

    def reportinfo(self) -> tuple[Path, int | None, str]:
        return self.path, 0, f"scenario {self.path.name}"
