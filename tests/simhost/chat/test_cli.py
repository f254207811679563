"""``simhost chat`` as a command: options, a runtime that fails, one that is not there."""

from __future__ import annotations

import sys
from pathlib import Path

from typer.testing import CliRunner

from simhost.chat.cli import chat_command
from simhost.chat.launch import ChatConfig


def test_default_runtime_command_passes_the_options_through(tmp_path: Path) -> None:
    config = ChatConfig(tmp_path, policy="strict", state_dir=tmp_path / "st")
    assert config.runtime_argv() == [
        sys.executable, "-m", "simhost", "runtime", "--stdio",
        "--workspace", str(tmp_path), "--policy", "strict", "--state-dir", str(tmp_path / "st"),
    ]  # fmt: skip
    custom = ChatConfig(tmp_path, policy="strict", runtime_cmd="node 'my runtime.js' --stdio")
    assert custom.runtime_argv() == ["node", "my runtime.js", "--stdio"]
    acp = ChatConfig(tmp_path, dialect="acp")
    assert acp.runtime_argv()[-2:] == ["--dialect", "acp"]


def test_help_lists_the_options() -> None:
    import typer

    app = typer.Typer()
    app.command()(chat_command)
    result = CliRunner().invoke(app, ["--help"], env={"COLUMNS": "200", "NO_COLOR": "1"})
    assert result.exit_code == 0
    for option in (
        "--workspace",
        "--policy",
        "--state-dir",
        "--telemetry",
        "--agent",
        "--dialect",
        "--runtime-cmd",
    ):
        assert option in result.output

