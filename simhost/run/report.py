"""Reports of ``simhost run``: a Rich summary, JUnit XML for CI, and JSON.

* :func:`summary`: per scenario, a table of sessions by turns (✓/✗), then what
  failed (what was expected and what happened), the invariant violations, and
  a line with the wall time and the answer latency (median, p99).
* :func:`junit_xml`: one ``<testsuite>`` per scenario, one ``<testcase>`` per
  session and turn (``<failure message=...>`` with the expectation and what
  happened), and an ``invariants`` testcase per scenario for the built-in checks.
* :func:`json_report`: every :class:`~simhost.run.runner.ScenarioResult`, as JSON.
"""

from __future__ import annotations

import re
import socket
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Final

import msgspec
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from simhost._digits import small_number

from .runner import ScenarioResult, TurnResult

__all__ = ["json_report", "junit_xml", "stats_line", "summary"]

_MAX_TURN_COLUMNS: Final = 20
_MAX_LISTED: Final = 40
_XML_INVALID: Final = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def _label_key(turn: TurnResult) -> tuple[int, str, int]:
    name, _, copy = turn.session.rpartition("#")
    if name and (number := small_number(copy)) is not None:
        return turn.repeat, name, number
    return turn.repeat, turn.session, 0


def _rows(result: ScenarioResult) -> dict[tuple[int, str], list[TurnResult]]:
    """Turns grouped by (repeat, session label), in a natural order (load#2 before load#10)."""
    rows: dict[tuple[int, str], list[TurnResult]] = {}
    for turn in sorted(result.turns, key=lambda t: (_label_key(t), t.index)):
        rows.setdefault((turn.repeat, turn.session), []).append(turn)
    return rows


def _ms(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.1f} ms"


def stats_line(result: ScenarioResult) -> str:
    """One line: turns passed, violations, requests, wall time, answer latency median/p99."""
    failed = sum(1 for t in result.turns if not t.passed)
    verdict = "PASSED" if result.passed else "FAILED"
    return (
        f"{result.name}: {verdict}: {len(result.turns) - failed}/{len(result.turns)} turns "
        f"passed, {len(result.violations)} invariant violation(s), {result.requests} "
        f"permission request(s); wall time {result.wall_s:.2f} s "
        f"(sessions {result.sessions_s:.2f} s); answer latency median "
        f"{_ms(result.latency_median_ms)}, p99 {_ms(result.latency_p99_ms)} "
        f"(n={len(result.latencies_ms)})"
    )


def _table(result: ScenarioResult) -> Table:
    rows = _rows(result)
    repeats = result.repeat > 1
    widest = max((t.index for t in result.turns), default=0)
    table = Table(show_lines=False, pad_edge=False)
    if repeats:
        table.add_column("repeat", justify="right")
    table.add_column("session")
    compact = widest > _MAX_TURN_COLUMNS
    if compact:
        table.add_column("turns passed", justify="right")
    else:
        for index in range(1, widest + 1):
            table.add_column(str(index), justify="center")
    table.add_column("time", justify="right")
    for (repeat, label), turns in rows.items():
        cells: list[RenderableType] = [Text(str(repeat))] if repeats else []
        cells.append(Text(label))  # from the scenario file: never Rich markup
        if compact:
            passed = sum(1 for t in turns if t.passed)
            cells.append(
                Text(f"{passed}/{len(turns)}", style="green" if passed == len(turns) else "red")
            )
        else:
            by_index = {t.index: t for t in turns}
            for index in range(1, widest + 1):
                turn = by_index.get(index)
                if turn is None:
                    cells.append("")
                elif turn.passed:
                    cells.append(Text("✓", style="green"))
                else:
                    cells.append(Text("✗", style="bold red"))
        cells.append(f"{sum(t.duration_s for t in turns):.2f} s")
        table.add_row(*cells)
    return table


def _line(*parts: str | tuple[str, str]) -> Text:
    """A line that is never wrapped (logs stay greppable); failures keep their newlines."""
    return Text.assemble(*parts, no_wrap=True, overflow="ignore")


def summary(results: Sequence[ScenarioResult]) -> RenderableType:
    """The end-of-run summary of every scenario, as one Rich renderable."""
    parts: list[RenderableType] = []
    for result in results:
        parts.append(
            Text.assemble(
                ("scenario ", "bold"),
                (result.name, "bold"),
                (f" ({result.dialect}, seed {result.seed}", "dim"),
                (f", {result.repeat} repeats)" if result.repeat > 1 else ")", "dim"),
                no_wrap=True,
                overflow="ignore",
            )
        )
        parts.append(_table(result))
        failures = [
            (turn, failure)
            for turn in sorted(result.turns, key=lambda t: (_label_key(t), t.index))
            for failure in turn.failures
        ]
        for turn, failure in failures[:_MAX_LISTED]:
            where = f"{turn.session} turn {turn.index}"
            if result.repeat > 1:
                where = f"repeat {turn.repeat}, {where}"
            parts.append(_line(("  ✗ ", "red"), (where, "bold"), f": {failure}"))
        if len(failures) > _MAX_LISTED:
            parts.append(Text(f"  … and {len(failures) - _MAX_LISTED} more failures (see --json)"))
        for violation in result.violations[:_MAX_LISTED]:
            parts.append(_line(("  ✗ invariant: ", "bold red"), violation))
        if len(result.violations) > _MAX_LISTED:
            more = len(result.violations) - _MAX_LISTED
            parts.append(Text(f"  … and {more} more violations (see --json)"))
        parts.append(_line((stats_line(result), "bold green" if result.passed else "bold red")))
        parts.append(Text(""))
    return Group(*parts)


# ------------------------------------------------------------------ JUnit


def _clean(text: str) -> str:
    """Text XML 1.0 can carry (control characters an agent may send are dropped)."""
    return _XML_INVALID.sub("\ufffd", text)


def _short(text: str, limit: int = 60) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= limit and "\n" not in text else line[: limit - 1] + "…"


def junit_xml(results: Sequence[ScenarioResult]) -> str:
    """JUnit XML (the schema Jenkins, GitLab, GitHub Actions reporters read).

    One ``<testsuite>`` per scenario; one ``<testcase>`` per session and turn
    (classname ``SCENARIO.SESSION``, name ``turn N: PROMPT``), failing with
    ``<failure message="first failure">all failures</failure>``; and a
    testcase ``invariants`` per scenario that fails with the violations.
    """
    now = datetime.now(UTC).replace(microsecond=0).isoformat()
    root = ET.Element("testsuites", name="simhost run")
    total_tests = total_failures = 0
    total_time = 0.0
    for result in results:
        suite = ET.SubElement(root, "testsuite", name=_clean(result.name), timestamp=now)
        suite.set("hostname", _clean(socket.gethostname()))
        properties = ET.SubElement(suite, "properties")
        for key, value in (
            ("dialect", result.dialect),
            ("agent", result.agent),
            ("seed", str(result.seed)),
            ("repeat", str(result.repeat)),
            ("requests", str(result.requests)),
            ("wall_s", f"{result.wall_s:.3f}"),
            ("sessions_s", f"{result.sessions_s:.3f}"),
            ("latency_median_ms", _ms(result.latency_median_ms).removesuffix(" ms")),
            ("latency_p99_ms", _ms(result.latency_p99_ms).removesuffix(" ms")),
        ):
            ET.SubElement(properties, "property", name=key, value=_clean(value))
        tests = failures = 0
        for turn in sorted(result.turns, key=lambda t: (_label_key(t), t.index)):
            tests += 1
            classname = f"{result.name}.{turn.session}"
            if result.repeat > 1:
                classname = f"{result.name}.repeat-{turn.repeat}.{turn.session}"
            case = ET.SubElement(
                suite,
                "testcase",
                classname=_clean(classname),
                name=_clean(f"turn {turn.index}: {_short(turn.prompt)}"),
                time=f"{turn.duration_s:.3f}",
            )
            if turn.failures:
                failures += 1
                failure = ET.SubElement(
                    case, "failure", message=_clean(turn.failures[0]), type="expectation"
                )
                failure.text = _clean("\n".join(turn.failures))
            out = ET.SubElement(case, "system-out")
            out.text = _clean(
                f"prompt: {turn.prompt}\nstop reason: {turn.stop_reason}\n"
                f"permission requests: {turn.requests}"
            )
        tests += 1
        case = ET.SubElement(
            suite, "testcase", classname=_clean(result.name), name="invariants", time="0"
        )
        if result.violations:
            failures += 1
            count = len(result.violations)
            message = (
                result.violations[0]
                if count == 1
                else f"{count} violations; first: " + (result.violations[0])
            )
            failure = ET.SubElement(case, "failure", message=_clean(message), type="invariant")
            failure.text = _clean("\n".join(result.violations))
        out = ET.SubElement(case, "system-out")
        out.text = _clean(stats_line(result))
        suite.set("tests", str(tests))
        suite.set("failures", str(failures))
        suite.set("errors", "0")
        suite.set("skipped", "0")
        suite.set("time", f"{result.wall_s:.3f}")
        total_tests += tests
        total_failures += failures
        total_time += result.wall_s
    root.set("tests", str(total_tests))
    root.set("failures", str(total_failures))
    root.set("errors", "0")
    root.set("time", f"{total_time:.3f}")
    ET.indent(root)
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + ET.tostring(root, encoding="unicode") + "\n"


# ------------------------------------------------------------------- JSON


class _Report(msgspec.Struct):
    passed: bool
    scenarios: list[ScenarioResult]


def json_report(results: Sequence[ScenarioResult]) -> bytes:
    """``{"passed": ..., "scenarios": [ScenarioResult, ...]}`` as JSON bytes."""
    report = _Report(passed=all(r.passed for r in results), scenarios=list(results))
    return msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n"
