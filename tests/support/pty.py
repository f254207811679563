"""``simhost chat`` in a real pseudo-terminal (pexpect), for the end-to-end tests: its
workspace, state folder and telemetry in the test's folder, every expect bounded by a
timeout. The chat prints the runtime's pid in its banner, so a test can check that the
child is gone after the chat exits."""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pexpect

TIMEOUT = 30
ARMED = "Press 1-4 to choose"
# Between what the prompt shows and what you typed, Rich puts style codes.
STYLE = r"(?:\x1b\[[0-9;]*m)*"
CURSOR = r"\x1b\[7m \x1b\[0m"  # the prompt's drawn cursor (reverse video)
REASON = "reason" + STYLE + " > "  # the prompt line, once a deny option's key was pressed


# The card's arming delay in these tests: the shortest allowed, so a card takes keys
# soon. The tests of the guard itself give the default (--arm-delay 0.5) instead.
SHORT_ARM_DELAY = ("--arm-delay", "0.1")


def pty_env() -> dict[str, str]:
    """The environment of a program in a pty: a colour terminal whose size is the pty's.
    (pytest-xdist's workers carry COLUMNS=80 and LINES=24, which Rich would take over
    the pty's real size.)"""
    env = {**os.environ, "TERM": "xterm-256color"}
    for name in ("NO_COLOR", "COLUMNS", "LINES"):
        env.pop(name, None)
    return env


def alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


class Chat:
    """A ``simhost chat`` in a pty, with its workspace, state folder and telemetry."""

    def __init__(self, tmp_path: Path, *extra: str) -> None:
        self.workspace = tmp_path / "ws"
        self.state = tmp_path / "state"
        self.telemetry = tmp_path / "telemetry.jsonl"
        self.workspace.mkdir()
        self.child = pexpect.spawn(
            sys.executable,
            [
                "-m",
                "simhost",
                "chat",
                "--workspace",
                str(self.workspace),
                "--state-dir",
                str(self.state),
                "--telemetry",
                str(self.telemetry),
                *(() if "--arm-delay" in extra else SHORT_ARM_DELAY),
                *extra,
            ],
            env=pty_env(),
            cwd=str(tmp_path),
            dimensions=(60, 160),
            encoding="utf-8",
            codec_errors="replace",
            timeout=TIMEOUT,
        )
        self.transcript = tmp_path / "pty.log"
        self.child.logfile_read = open(self.transcript, "w")  # noqa: SIM115
        self.child.expect(r"\(pid (\d+)\)")
        self.runtime_pid = int(self.child.match.group(1))
        self.child.expect("new session")
        self.expect_prompt()

    def expect(self, pattern: str) -> re.Match[str]:
        self.child.expect(pattern)
        match = self.child.match
        assert isinstance(match, re.Match)
        return match

    def expect_prompt(self, typed: str = "") -> None:
        """The prompt is up (showing ``typed``), with the drawn cursor after it."""
        self.child.expect(r"\)" + STYLE + " > " + STYLE + re.escape(typed) + STYLE + CURSOR)

    def say(self, line: str) -> None:
        self.child.send(line + "\r")

    def deny(self, key: str, reason: str = "") -> None:
        """Press the deny option ``key``: once the prompt line takes a reason (a key
        read with the Enter would be text, not an answer), type ``reason``, then Enter
        sends the denial."""
        self.child.send(key)
        self.expect(REASON)
        self.child.send(reason + "\r")

    def plain_transcript(self) -> str:
        """What the chat printed so far, without terminal escapes."""
        return re.sub(r"\x1b\[[0-9;?]*[a-zA-Z]", "", self.transcript.read_text())

    def events(self, name: str) -> list[dict[str, Any]]:
        lines = self.telemetry.read_text().splitlines()
        return [r for r in map(json.loads, lines) if r["event"] == name]

    def quit(self) -> None:
        self.say("/quit")
        self.child.expect(pexpect.EOF)
        self.child.close()
        assert self.child.exitstatus == 0, self.child.signalstatus
        assert not alive(self.runtime_pid)

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)
        self.child.logfile_read.close()


def chat_starter(tmp_path: Path, kind: type[Chat]) -> Iterator[Any]:
    """A ``chat_in`` fixture's body: start chats of ``kind``, close them all after."""
    chats: list[Chat] = []

    def start(*extra: str) -> Chat:
        chat = kind(tmp_path, *extra)
        chats.append(chat)
        return chat

    yield start
    for chat in chats:
        chat.close()
