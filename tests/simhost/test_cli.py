"""Every ``simhost`` command: a wrong command line is one line on stderr, exit code 2, no
traceback, nothing started; an agent that dies at start is one line plus its stderr tail,
exit code 1; nothing is left running; ``--help`` is plain text without type noise; strings
from people and peers are never read as Rich markup."""

from __future__ import annotations

import io
import os
from pathlib import Path

import msgspec
import pytest
from rich.console import Console

from simhost._usage import check_writable_file
from simhost.run.cli import _LiveView
from simhost.run.report import summary
from simhost.run.runner import RunEvent, ScenarioResult, TurnResult

MARKUP = "[/x] [bold]b :smile:"


def test_ctrl_c_before_the_chat_takes_it_as_an_event_is_exit_130_in_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import trio

    from simhost.cli import main

    def interrupted(*args: object) -> None:
        raise BaseExceptionGroup("from a nursery", [KeyboardInterrupt()])

    monkeypatch.setattr(trio, "run", interrupted)
    with pytest.raises(SystemExit) as exited:
        main(["chat", "--workspace", str(tmp_path)])
    assert exited.value.code == 130
    assert capsys.readouterr().err == "simhost chat: interrupted\n"


def _render(renderable: object) -> str:
    console = Console(file=io.StringIO(), width=200, color_system=None)  # markup on, the default
    console.print(renderable)
    output = console.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(output, str)
    return output


def test_run_reports_show_scenario_and_session_names_as_written() -> None:
    turn = TurnResult(
        session=MARKUP, index=1, prompt="p", passed=True, failures=[], stop_reason="end_turn",
        duration_s=0.1,
    )  # fmt: skip
    again = msgspec.structs.replace(turn, repeat=2)
    result = ScenarioResult(
        name=MARKUP, passed=True, turns=[turn, again], violations=[], wall_s=0.1,
        latencies_ms=[], repeat=2,
    )  # fmt: skip
    assert _render(summary([result])).count(MARKUP) >= 2
    view = _LiveView(MARKUP)
    view.update(RunEvent(kind="session_started", repeat=1, session=MARKUP, turns=1))
    assert _render(view).count(MARKUP) == 2  # the title and the session's row


def test_the_report_path_check_leaves_no_trace_and_never_blocks(tmp_path: Path) -> None:
    existing = tmp_path / "old.xml"
    existing.write_text("kept\n")
    check_writable_file(existing)
    assert existing.read_text() == "kept\n"
    check_writable_file(tmp_path / "new.xml")
    assert not (tmp_path / "new.xml").exists()
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(OSError):
        check_writable_file(fifo)  # no reader: refused at once, not a blocked write at the end
    with pytest.raises(IsADirectoryError):
        check_writable_file(tmp_path)

