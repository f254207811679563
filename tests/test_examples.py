"""The examples run, non-interactively, and do what their docstrings say."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
PYTHON_SDK_AGENT = Path(__file__).resolve().parent / "interop" / "acp_python_agent.py"


def run(*args: str, cwd: Path, stdin: str = "") -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, *args],
        input=stdin,
        capture_output=True,
        text=True,
        timeout=60,
        cwd=cwd,
        check=False,
    )


def test_terminal_approver_denies_everything_but_reads_when_told_to(tmp_path: Path) -> None:
    result = run(str(EXAMPLES / "terminal_approver.py"), "--auto", "deny", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "chose 'Deny'" in result.stdout


def test_terminal_approver_allows_reads_itself_and_asks_for_the_rest(tmp_path: Path) -> None:
    # The default prompt: read (automatic), then edit (1 Allow once, 2 Deny), then run
    # (1 Allow once, 2 Always allow, 3 Deny). "1" allows the edit once, "3" denies the run.
    result = run(str(EXAMPLES / "terminal_approver.py"), cwd=tmp_path, stdin="1\n3\n")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "[auto] read allowed: Read README.md -> Allow once" in out
    assert out.count("choose 1-") == 2  # asked about the edit and the run only
    turn = json.loads(out.split("== turn result ==", 1)[1].split("== tool calls", 1)[0])
    assert turn["stopReason"] == "end_turn"
    answers = [(r["title"], r["optionId"], r["allowed"]) for r in turn["results"]]
    assert answers == [
        ("Read README.md", "allow-once", True),
        ("Edit notes.txt", "allow-once", True),
        ("Run `ls -la`", "reject-once", False),
    ]


def test_acp_client_drives_an_official_python_sdk_agent(tmp_path: Path) -> None:
    agent = f"{sys.executable} {PYTHON_SDK_AGENT}"
    args = ["--agent", agent, "--prompt", "approve me", "--auto", "allow", "--cwd", str(tmp_path)]
    result = run(str(EXAMPLES / "acp_client.py"), *args, cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "agent: permclient-interop-agent 0.0.0" in result.stdout
    assert "call-1: selected allow" in result.stdout
    assert "turn ended: end_turn" in result.stdout


def test_card_inbox_answers_cards_in_any_order_and_dismisses_the_rest(tmp_path: Path) -> None:
    result = run(str(EXAMPLES / "card_inbox.py"), cwd=tmp_path, stdin="5 3\n2 1\n1 x\n")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert all(f"[card {n}] " in out for n in range(1, 7)) and "[card 7]" not in out
    assert "card 5: Deny" in out and "card 2: Allow" in out and "card 1: dismissed" in out
    assert out.count("turn ended (end_turn)") == 2
    written = out.split("files written: ", 1)[1].split()
    assert len(written) == 1 and written[0].startswith("burst-")  # card 2's file only


def test_card_inbox_approves_nothing_without_input(tmp_path: Path) -> None:
    result = run(str(EXAMPLES / "card_inbox.py"), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert "files written: none" in result.stdout


def test_card_inbox_survives_commands_for_cards_that_never_open_and_odd_digits(
    tmp_path: Path,
) -> None:
    stdin = "7 1\n1 \N{SUPERSCRIPT TWO}\n\N{SUPERSCRIPT TWO} 1\n2 1\n2 x\n3 " + "1" * 4301 + "\n"
    result = run(str(EXAMPLES / "card_inbox.py"), cwd=tmp_path, stdin=stdin)
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "card 7 never opened: 1 command(s) not used" in out
    assert "card 1 has options 1-4, or x" in out and "not a command: '² 1'" in out
    assert "card 2: Allow" in out and out.count("turn ended (end_turn)") == 2
    assert "card 2: answered" in out and "card 2: dismissed" not in out  # first answer only
    assert "card 3 has options 1-4, or x" in out  # 4,301 digits: not a number, no crash
