"""``simhost chat`` as a command: options, a runtime that fails, one that is not there."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

from simhost.chat.cli import chat_command
from simhost.chat.launch import ChatConfig

TIMEOUT = 60


def run_chat(tmp_path: Path, *args: str, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "simhost", "chat", "--workspace", str(tmp_path), *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )


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


def test_agent_and_dialect_choices_that_make_no_sense_are_usage_errors(tmp_path: Path) -> None:
    for args, why in [
        (["--agent", "a", "--runtime-cmd", "b"], "not both"),
        (["--dialect", "smoke-signals"], "unknown dialect"),
        (["--runtime-cmd", "b", "--dialect", "acp"], "use --agent for ACP"),
        (["--agent", "   "], "command is empty"),
    ]:
        result = run_chat(tmp_path, *args)
        assert result.returncode == 2, args
        assert why in result.stderr, (args, result.stderr)


def test_an_agent_that_cannot_start_is_a_clear_error(tmp_path: Path) -> None:
    result = run_chat(tmp_path, "--agent", "/nonexistent/agent --acp")
    assert result.returncode == 1
    assert "could not start the agent '/nonexistent/agent'" in result.stderr


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


def test_a_runtime_that_dies_ends_the_chat_with_1_and_its_log(tmp_path: Path) -> None:
    script = "import sys; sys.stderr.write('boom: no model here\\n'); sys.exit(3)"
    cmd = shlex.join([sys.executable, "-c", script])
    result = run_chat(tmp_path, "--runtime-cmd", cmd, "--state-dir", str(tmp_path / "st"))
    assert result.returncode == 1
    assert result.stderr.splitlines()[-2:] == [
        "runtime stderr (last lines):",
        "boom: no model here",
    ]
    assert (tmp_path / "st" / "chat-runtime.log").read_text() == "boom: no model here\n"


def test_a_runtime_that_cannot_start_is_a_clear_error(tmp_path: Path) -> None:
    result = run_chat(tmp_path, "--runtime-cmd", "/nonexistent/runtime --stdio")
    assert result.returncode == 1
    assert "could not start the runtime '/nonexistent/runtime'" in result.stderr


def test_a_workspace_that_does_not_exist_is_a_usage_error(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "simhost", "chat", "--workspace", str(tmp_path / "nope")],
        env={**os.environ, "COLUMNS": "400"},
        capture_output=True,
        text=True,
        timeout=TIMEOUT,
        check=False,
    )
    assert result.returncode == 2
    assert "does not exist" in result.stderr
