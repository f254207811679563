"""``simhost chat`` as a command: options, a runtime that fails, one that is not there."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

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
