"""The examples run, non-interactively, and do what their docstrings say."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PYTHON_SDK_AGENT = Path(__file__).resolve().parent / "interop" / "acp_python_agent.py"


def run(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args], capture_output=True, text=True, timeout=60, cwd=cwd, check=False
    )


def test_terminal_approver_denies_everything_but_reads_when_told_to(tmp_path: Path) -> None:
    result = run(str(EXAMPLES / "terminal_approver.py"), "--auto", "deny", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "chose 'Deny'" in result.stdout


def test_acp_client_drives_an_official_python_sdk_agent(tmp_path: Path) -> None:
    agent = f"{sys.executable} {PYTHON_SDK_AGENT}"
    args = ["--agent", agent, "--prompt", "approve me", "--auto", "allow", "--cwd", str(tmp_path)]
    result = run(str(EXAMPLES / "acp_client.py"), *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "agent: permclient-interop-agent 0.0.0" in result.stdout
    assert "call-1: selected allow" in result.stdout
    assert "turn ended: end_turn" in result.stdout
