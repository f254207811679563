"""The examples run, non-interactively, and do what their docstrings say.

Every example that runs as a program ends cleanly and approves nothing with its
standard input closed, and on Ctrl-C (SIGINT while it waits for the user) exits
with status 130, without a traceback, having approved nothing.
"""

from __future__ import annotations

import json
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import msgspec
import pytest

from tests.support import paths

EXAMPLES = paths.EXAMPLES
PYTHON_SDK_AGENT = paths.INTEROP / "acp_python_agent.py"
WAIT_S = 60.0
"""Bound on every wait for an example (generous: the machine may be loaded)."""


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
    # (1 Allow once, 2 Always allow `ls …`, 3 Deny). "1" allows the edit once, "3" denies the run.
    result = run(str(EXAMPLES / "terminal_approver.py"), cwd=tmp_path, stdin="1\n3\n")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "[auto] read allowed: Read README.md -> Allow once" in out
    assert out.count("choose 1-") == 2  # asked about the edit and the run only
    assert "Always allow `ls …` (the demo does not remember it)" in out  # names its scope
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


@pytest.mark.parametrize("shape", ["deferred", "async"])
def test_handler_shapes_puts_a_rule_in_front_of_a_person(shape: str, tmp_path: Path) -> None:
    example = str(EXAMPLES / "handler_shapes.py")
    result = run(example, "--shape", shape, cwd=tmp_path, stdin="y\n")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    # The person allowed the write; the rule denied the delete, never asking anyone.
    assert out.count("permission asked:") == 1 and "permission asked: fs.write" in out
    assert "rule: denied fs.delete: notes.txt" in out
    assert "notes.txt exists" in out
    denied = run(example, "--shape", shape, cwd=tmp_path, stdin="n\n")
    assert "notes.txt was not written" in denied.stdout


def test_editor_rules_answer_what_they_cover_and_the_person_the_rest(tmp_path: Path) -> None:
    example = str(EXAMPLES / "editor_rules.py")
    result = run(example, cwd=tmp_path, stdin="y\n")
    assert result.returncode == 0, result.stderr
    out = result.stdout
    assert "rule 1 allowed local_shell: git status: allow `git status …` in this workspace" in out
    assert "rule 2 allowed fs.write: docs/guide.md: allow edit paths docs/** in this" in out
    assert "rule 3 denied local_shell: rm -f old.txt: deny `rm …` in every workspace" in out
    # Only what no rule covers reached the person.
    assert out.count("permission asked:") == 1 and "permission asked: fs.write: notes.txt" in out
    assert "rules answered 3 questions" in out and "notes.txt exists" in out
    refused = run(example, cwd=tmp_path, stdin="n\n")
    assert "notes.txt was not written" in refused.stdout


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


class LineSocket:
    """A TCP client reading lines, each wait bounded."""

    def __init__(self, port: int, opened: list[socket.socket]) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=WAIT_S)
        opened.append(self.sock)
        self.buffer = b""

    def send(self, line: str) -> None:
        self.sock.sendall(line.encode() + b"\n")

    def line(self) -> bytes:
        while b"\n" not in self.buffer:
            data = self.sock.recv(65536)
            if not data:
                return b""
            self.buffer += data
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line

    def event(self) -> dict[str, object]:
        event: dict[str, object] = json.loads(self.line())
        return event


def test_relay_to_anything_takes_answers_from_approvers_over_a_socket(tmp_path: Path) -> None:
    process = subprocess.Popen(
        [sys.executable, str(EXAMPLES / "relay_to_anything.py")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
    )
    assert process.stdin is not None and process.stdout is not None
    assert process.stderr is not None
    out, err = Reader(process.stdout.fileno()), Reader(process.stderr.fileno())
    opened: list[socket.socket] = []
    try:
        assert out.wait_for(", then the token ", WAIT_S), (out.text(), err.text())
        found = re.search(r"nc 127\.0\.0\.1 (\d+), then the token (\S+)", out.peek())
        assert found is not None
        port, token = int(found.group(1)), found.group(2)
        intruder = LineSocket(port, opened)
        intruder.send("not-the-token")
        assert intruder.event() == {"type": "error", "reason": "wrong token"}
        assert intruder.line() == b""  # and it was disconnected
        early, late = LineSocket(port, opened), LineSocket(port, opened)
        early.send(token)
        process.stdin.write(b"create notes.txt with hi\ndelete nothing.txt\n")
        process.stdin.flush()
        requested = early.event()
        assert requested["type"] == "requested"
        question = requested["question"]
        assert isinstance(question, dict) and question["title"]
        question_id = question["questionId"]
        rude = LineSocket(port, opened)  # logs in, then resets its connection
        rude.send(token)
        assert rude.event() == requested
        rude.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        rude.sock.close()
        late.send(token)
        assert late.event() == requested  # the replay: still pending
        late.send(f"{question_id} no-such-option-is-selected too")  # (three words: refused)
        assert late.event()["type"] == "answer_refused"
        late.send(f"{question_id} allow")
        resolved = {
            "type": "resolved",
            "questionId": question_id,
            "outcome": "selected",
            "optionId": "allow",
            "by": "approver-3",
        }
        assert late.event() == resolved and early.event() == resolved
        early.send(f"{question_id} deny")
        assert early.event() == {
            "type": "answer_refused",
            "questionId": question_id,
            "reason": "already answered by approver-3",
        }
        process.stdin.close()  # the delete of a missing file asks nothing: the turns end
        code = process.wait(WAIT_S)
    finally:
        for sock in opened:
            sock.close()
        stdout, stderr = stopped(process, out, err)
    assert code == 0, (stdout, stderr)
    assert f"{question_id}: allow (by approver-3)" in stdout
    assert "approver-4 disconnected" in stdout or "approver-4 left" in stdout
    assert "files written: notes.txt" in stdout


# ------------------------------------------- every program: closed stdin and Ctrl-C


@dataclass(frozen=True)
class Program:
    """An example run as a program, and how to tell it approved nothing."""

    name: str
    args: tuple[str, ...] = ()  # "{w}" stands for the test's workspace
    waiting: str = ""  # output saying it now waits for the user
    stdin: bytes = b""  # sent first, to get it to wait (the demo agent needs a request)
    approved: str = ""  # a regex on its output that only an approval prints
    written: str = ""  # a file in the workspace that only an approval writes
    needs_display: bool = False

    def argv(self, workspace: Path) -> list[str]:
        args = [arg.replace("{w}", str(workspace)) for arg in self.args]
        return [sys.executable, str(EXAMPLES / self.name), *args]

    def assert_approved_nothing(self, out: str, workspace: Path) -> None:
        if self.approved:
            assert re.search(self.approved, out) is None, out
        if self.written:
            assert not (workspace / self.written).exists()


def _frame(message: dict[str, object]) -> bytes:
    body = msgspec.json.encode({"jsonrpc": "2.0", **message})
    return b"Content-Length: %d\r\n\r\n%b" % (len(body), body)


PROGRAMS = [
    Program(
        "acp_client.py",
        ("--cwd", "{w}"),
        waiting="choose 1-",
        approved=r"call-1: completed",
        written="notes.txt",
    ),
    Program("asyncio_host.py", ("--workspace", "{w}"), "allow? [y/N]", written="notes.txt"),
    # Its own workspace: "files written: none" is the proof.
    Program("card_inbox.py", waiting="[card 6]", approved=r"files written: (?!none)"),
    Program(
        "relay_to_anything.py",
        waiting="(waiting for an approver)",
        stdin=b"create notes.txt with hi\n",
        approved=r"files written: (?!none)",
    ),
    # Its own workspace: what it prints about notes.txt is the proof, in both shapes.
    Program("handler_shapes.py", waiting="permission asked:", approved=r"notes.txt exists"),
    Program(
        "handler_shapes.py",
        ("--shape", "async"),
        waiting="permission asked:",
        approved=r"notes.txt exists",
    ),
    Program(
        "demo_agent.py",
        waiting="Content-Length",  # it answered sessionNew, and waits for the next request
        stdin=_frame({"id": 1, "method": "sessionNew", "params": {"title": "t"}}),
    ),
    # Its own workspace: only the write of notes.txt asks.
    Program("editor_rules.py", waiting="permission asked:", approved=r"notes.txt exists"),
    # Reads are allowed by its own rule; the edit (call-1-1) and the run (call-1-2) asked.
    Program("terminal_approver.py", waiting="choose 1-", approved=r"call-1-[12]: completed"),
    Program("threaded_plugin.py", ("--workspace", "{w}"), "allow? [y/N]", written="notes.txt"),
    Program(
        "tk_approver.py",
        ("--workspace", "{w}"),
        "permission asked:",
        written="notes.txt",
        needs_display=True,
    ),
]


def test_every_example_that_runs_as_a_program_is_checked_here() -> None:
    programs = {
        path.name
        for path in EXAMPLES.glob("*.py")
        if 'if __name__ == "__main__":' in path.read_text(encoding="utf-8")
    }
    assert programs == {program.name for program in PROGRAMS}


class Reader:
    """Everything a pipe delivers, read by a thread; wait for text with a bound."""

    def __init__(self, pipe: int) -> None:
        self._pipe = pipe
        self._data = bytearray()
        self._changed = threading.Condition()
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        while chunk := os.read(self._pipe, 65536):
            with self._changed:
                self._data += chunk
                self._changed.notify_all()

    def wait_for(self, text: str, timeout: float) -> bool:
        with self._changed:
            return self._changed.wait_for(lambda: text.encode() in self._data, timeout)

    def text(self) -> str:
        self._thread.join(WAIT_S)  # the pipe is at its end once the process is gone
        return self._data.decode(errors="replace")

    def peek(self) -> str:
        """What was read so far."""
        with self._changed:
            return self._data.decode(errors="replace")


def stopped(process: subprocess.Popen[bytes], out: Reader, err: Reader) -> tuple[str, str]:
    """Kill ``process`` if it still runs, close its pipes; what it wrote to each."""
    assert process.stdin is not None and process.stdout is not None
    assert process.stderr is not None
    if process.poll() is None:
        process.kill()
        process.wait(WAIT_S)
    process.stdin.close()
    stdout, stderr = out.text(), err.text()
    process.stdout.close()
    process.stderr.close()
    return stdout, stderr


@pytest.mark.parametrize(
    "program", PROGRAMS, ids=lambda program: " ".join((program.name, *program.args))
)
def test_with_stdin_closed_an_example_ends_cleanly_and_approves_nothing(
    program: Program, tmp_path: Path
) -> None:
    env = {**os.environ}
    if program.needs_display:
        env.pop("DISPLAY", None)  # a window that waits for a click would wait forever
    result = subprocess.run(
        program.argv(tmp_path),
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=WAIT_S,
        cwd=tmp_path,
        env=env,
        check=False,
    )
    assert "Traceback" not in result.stderr
    if program.needs_display:  # no display: one line that says why, and a failure status
        assert result.returncode == 1
        assert result.stderr.count("\n") == 1 and "cannot open a window" in result.stderr
    else:
        assert result.returncode == 0, result.stderr
    program.assert_approved_nothing(result.stdout, tmp_path)


@pytest.fixture
def display_for(request: pytest.FixtureRequest, program: Program) -> str | None:
    """A display for the programs that need one (see :func:`display`), else None."""
    return str(request.getfixturevalue("display")) if program.needs_display else None


@pytest.mark.parametrize(
    "program", PROGRAMS, ids=lambda program: " ".join((program.name, *program.args))
)
def test_ctrl_c_while_an_example_waits_exits_130_without_a_traceback_approving_nothing(
    program: Program, display_for: str | None, tmp_path: Path
) -> None:
    env = {**os.environ}
    if display_for is not None:
        env["DISPLAY"] = display_for
    process = subprocess.Popen(
        program.argv(tmp_path),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        cwd=tmp_path,
        env=env,
    )
    assert process.stdin is not None and process.stdout is not None
    assert process.stderr is not None
    out, err = Reader(process.stdout.fileno()), Reader(process.stderr.fileno())
    try:
        # Standard input stays open and silent: a person who has not typed yet.
        process.stdin.write(program.stdin)
        process.stdin.flush()
        assert out.wait_for(program.waiting, WAIT_S), (out.text(), err.text())
        process.send_signal(signal.SIGINT)
        code = process.wait(WAIT_S)
    finally:
        stdout, stderr = stopped(process, out, err)
    assert code == 130, (stdout, stderr)
    assert "Traceback" not in stderr and "Fatal Python error" not in stderr, stderr
    program.assert_approved_nothing(stdout, tmp_path)
