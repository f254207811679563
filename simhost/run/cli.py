"""``simhost run``: run scenario files against an agent, report, and exit 0/1/2.

Exit codes: 0 when every expectation and every built-in invariant held, 1 when
one did not (or a report could not be written), 2 for a usage error or a
malformed scenario (its message names the file, the line and the field), 130
when interrupted (Ctrl-C).
"""

from __future__ import annotations

import gc
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Final

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from simhost._usage import check_agent_command, check_writable_file, fail, one_line, plain_console

if TYPE_CHECKING:
    from simhost.run.runner import RunEvent, ScenarioResult
    from simhost.run.scenario import AgentSpec, Scenario

__all__ = ["run_command"]

_REFRESH_S: Final = 0.1


def run_command(
    scenarios: Annotated[
        list[Path],
        typer.Argument(
            # Hidden from the Arguments list, where Typer prints its type (<list[Path]>);
            # the usage line shows it and the docstring says what it is.
            metavar="SCENARIO",
            show_default=False,
            hidden=True,
        ),
    ],
    agent: Annotated[
        str | None,
        typer.Option(
            "--agent",
            help="Run this agent instead of each scenario's (default: the reference runtime, "
            "simhost runtime), split like a shell and run in the workspace. Speaks ACP "
            "unless --dialect bridge.",
            metavar="'CMD ARGS'",
        ),
    ] = None,
    dialect: Annotated[
        str | None,
        typer.Option(
            help="Wire dialect: bridge (Content-Length framed, chatSend) or acp (Agent Client "
            "Protocol). Without --agent, the reference runtime is started in that dialect. "
            "Default: the scenario's (acp with --agent).",
            metavar="bridge|acp",
            show_default=False,
        ),
    ] = None,
    junit: Annotated[
        Path | None,
        typer.Option(
            help="Write a JUnit XML report here (one testcase per session and turn, plus the "
            "invariants).",
            dir_okay=False,
            metavar="PATH",
        ),
    ] = None,
    json_path: Annotated[
        Path | None,
        typer.Option(
            "--json", help="Write every result as JSON here.", dir_okay=False, metavar="PATH"
        ),
    ] = None,
    repeat: Annotated[
        int | None,
        typer.Option(
            help="Run each scenario N times, each with a fresh workspace and agent "
            "(default: the scenario's repeat).",
            min=1,
            metavar="N",
            show_default=False,
        ),
    ] = None,
    seed: Annotated[
        int | None,
        typer.Option(
            help="Seed of the answer-delay jitter (default: the scenario's seed).",
            metavar="N",
            show_default=False,
        ),
    ] = None,
    turn_timeout: Annotated[
        float,
        typer.Option(
            help="Cancel (and fail) a turn still running after this many seconds.",
            min=0.001,
            metavar="SECONDS",
        ),
    ] = 60.0,
) -> None:
    """Run scripted multi-turn concurrency scenarios against an agent and check them.

    SCENARIO: scenario files (TOML) to run, one after the other.

    Each scenario's sessions run at once, each session's turns in order; every
    permission request is answered as the scenario scripts it, and what must hold
    after each turn is checked. Built-in invariants are checked on every run:
    every request answered exactly once, by its own session's handler; no card
    left open after its turn; no tool completed after its approval was denied or
    cancelled. Shows each session live on a terminal, then a summary with the
    wall time and the answer latency (median, p99).

    Exit code: 0 if every expectation and invariant held, 1 if not, 2 for a
    malformed scenario or a usage error, 130 when interrupted (Ctrl-C).
    """
    command = "simhost run"
    if dialect not in (None, "bridge", "acp"):
        raise fail(command, f"unknown dialect {dialect!r}: expected bridge or acp")
    if agent is not None:
        check_agent_command(command, "--agent", agent)
    if junit is not None and json_path is not None and junit.absolute() == json_path.absolute():
        raise fail(command, f"--junit and --json name the same file {str(junit)!r}")
    for option, report in (("--junit", junit), ("--json", json_path)):
        if report is None:
            continue
        # Checked before anything runs: a long run must not end in a report it cannot write.
        try:
            check_writable_file(report)
        except OSError as exc:
            why = exc.strerror or str(exc)
            raise fail(command, f"{option} {str(report)!r}: cannot write: {why}") from None
    # Imported here so `simhost chat` and `simhost runtime` never pay for the runner.
    import trio

    from simhost.run.scenario import ScenarioError, load_scenario

    loaded: list[tuple[Path, Scenario]] = []
    for path in scenarios:
        try:
            loaded.append((path, load_scenario(path)))
        except ScenarioError as exc:
            raise fail(command, str(exc)) from None
    console = plain_console()
    import simhost.run.report
    import simhost.run.runner  # noqa: F401 - imported before the freeze below

    # What is loaded by now lives as long as the process: keep it out of the
    # collector, so that a full collection mid-run (tens of ms on a slow machine)
    # does not show up as answer latency.
    gc.collect()
    gc.freeze()
    try:
        results = trio.run(_run_all, loaded, agent, dialect, repeat, seed, turn_timeout, console)
    except BaseException as exc:
        if not _interrupted(exc):
            raise
        # trio has unwound the run by now: agents stopped, workspaces removed.
        raise fail(command, "interrupted", 130) from None

    from simhost.run.report import json_report, junit_xml, summary

    console.print(summary(results), soft_wrap=True)
    code = 0 if all(r.passed for r in results) else 1
    try:
        if junit is not None:
            junit.write_text(junit_xml(results), encoding="utf-8")
        if json_path is not None:
            json_path.write_bytes(json_report(results))
    except OSError as exc:
        plain_console(stderr=True).print(
            Text(f"simhost run: cannot write a report: {one_line(str(exc))}"), soft_wrap=True
        )
        code = 1
    raise typer.Exit(code)


def _interrupted(exc: BaseException) -> bool:
    """Ctrl-C: a KeyboardInterrupt, alone or in an exception group from a nursery."""
    if isinstance(exc, BaseExceptionGroup):
        return exc.subgroup(KeyboardInterrupt) is not None
    return isinstance(exc, KeyboardInterrupt)


def _agent_for(scenario: Scenario, command: str | None, dialect: str | None) -> AgentSpec | None:
    """The command line's agent and dialect over the scenario's; its policy is kept."""
    if command is None and dialect is None:
        return None
    from simhost.run.scenario import AgentSpec

    chosen = dialect or ("acp" if command is not None else scenario.agent.dialect)
    return AgentSpec(
        command=command if command is not None else scenario.agent.command,
        dialect="acp" if chosen == "acp" else "bridge",
        policy=scenario.agent.policy,
    )


async def _run_all(
    loaded: list[tuple[Path, Scenario]],
    command: str | None,
    dialect: str | None,
    repeat: int | None,
    seed: int | None,
    turn_timeout: float,
    console: Console,
) -> list[ScenarioResult]:
    from rich.live import Live

    from simhost.run.runner import run_scenario

    results = []
    for path, scenario in loaded:
        view = _LiveView(scenario.name or path.stem)
        kwargs: dict[str, Any] = {
            "agent": _agent_for(scenario, command, dialect),
            "seed": seed,
            "repeat": repeat,
            "base_dir": path.parent,
            "turn_timeout": turn_timeout,
        }
        if console.is_terminal:
            with Live(view, console=console, auto_refresh=False, transient=True) as live:

                def show(event: RunEvent, view: _LiveView = view, live: Live = live) -> None:
                    view.update(event)
                    if view.due():
                        live.refresh()

                result = await run_scenario(scenario, on_event=show, **kwargs)
        else:
            console.print(Text(f"scenario {view.name}: running ({path})"), soft_wrap=True)

            def report(event: RunEvent) -> None:
                line = _progress_line(event)
                if line is not None:
                    console.print(line, soft_wrap=True)

            result = await run_scenario(scenario, on_event=report, **kwargs)
        results.append(result)
    return results


def _progress_line(event: RunEvent) -> Text | None:
    """A plain progress line (stdout not a terminal): failed turns and finished sessions."""
    where = f"repeat {event.repeat}, " if event.repeat > 1 else ""
    if event.kind == "turn_finished" and not event.passed:
        return Text(f"  ✗ {where}{event.session} turn {event.turn}: {event.detail}")
    if event.kind == "session_finished":
        verdict = "passed" if event.passed else "FAILED"
        return Text(f"  {where}{event.session}: {event.turns} turn(s), {verdict}")
    return None


class _SessionRow:
    __slots__ = ("failed", "requests", "state", "turn", "turns")

    def __init__(self, turns: int) -> None:
        self.turn = 0
        self.turns = turns
        self.state = "opening"
        self.requests = 0
        self.failed = 0


class _LiveView:
    """The live table: one row per session (and repeat)."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.rows: dict[tuple[int, str], _SessionRow] = {}
        self.repeat = 1
        self._last = 0.0

    def due(self) -> bool:
        now = time.monotonic()
        if now - self._last >= _REFRESH_S:
            self._last = now
            return True
        return False

    def update(self, event: RunEvent) -> None:
        self.repeat = max(self.repeat, event.repeat)
        if not event.session:
            return
        row = self.rows.get((event.repeat, event.session))
        if row is None:
            row = self.rows[event.repeat, event.session] = _SessionRow(event.turns)
        if event.kind == "turn_started":
            row.turn = event.turn
            row.state = event.detail
        elif event.kind == "request":
            row.requests += 1
            row.state = f"asked: {event.detail}"
        elif event.kind == "turn_finished":
            if not event.passed:
                row.failed += 1
                row.state = f"✗ {event.detail}"
            else:
                row.state = "✓"
        elif event.kind == "session_finished":
            row.state = "done" if event.passed else "done, with failures"

    def __rich__(self) -> Table:
        table = Table(
            title=Text(f"simhost run: {self.name} (repeat {self.repeat})"), title_justify="left"
        )
        table.add_column("session")
        table.add_column("turn", justify="right")
        table.add_column("asked", justify="right")
        table.add_column("failed", justify="right")
        table.add_column("now", overflow="ellipsis", no_wrap=True, max_width=70)
        for (repeat, label), row in self.rows.items():
            if repeat != self.repeat:
                continue
            table.add_row(
                Text(label),
                f"{row.turn}/{row.turns}",
                str(row.requests),
                Text(str(row.failed), style="red" if row.failed else ""),
                Text(row.state),
            )
        return table
