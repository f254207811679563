"""What the tests of ``simhost serve`` share: a server in a child process, and views
that speak the relay protocol through a real WebSocket client (trio-websocket)."""

from __future__ import annotations

import gc
import json
import signal
import subprocess
import sys
import warnings
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

import trio
from trio_websocket import WebSocketConnection
from trio_websocket import open_websocket_url as open_ws

from simhost.audit import AUDIT_NAME
from simhost.rulebook import RULES_NAME

TOKEN = "t0k3n-" + "x" * 26
WAIT_S = 10


def sockets_freed_quietly() -> Iterator[None]:
    """What the libraries leave to the garbage collector (trio-websocket's sockets,
    hypercorn's connections, in reference cycles) is collected as each test ends,
    quietly: collected later, its ResourceWarning would fail whichever test is
    running then. (A test module makes it an autouse fixture.)"""
    yield
    with freed_quietly():
        pass


@contextmanager
def freed_quietly() -> Iterator[None]:
    """trio-websocket leaves its own socket to the garbage collector when the server
    closed the connection: free it in here (``del`` the connection), quietly,
    rather than fail whichever test runs when it is collected."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ResourceWarning)
        yield
        gc.collect()


@asynccontextmanager
async def view(
    authority: str, token: str = TOKEN, origin: str | None = None
) -> AsyncIterator[WebSocketConnection]:
    headers = [("Origin", origin or f"http://{authority}")]
    async with open_ws(f"ws://{authority}/ws?token={token}", extra_headers=headers) as ws:
        yield ws


async def next_message(ws: WebSocketConnection) -> dict[str, Any]:
    with trio.fail_after(WAIT_S):
        message: dict[str, Any] = json.loads(await ws.get_message())
    return message


async def send(ws: WebSocketConnection, message: dict[str, Any]) -> None:
    await ws.send_message(json.dumps(message))


async def opened(ws: WebSocketConnection, name: str) -> list[dict[str, Any]]:
    """Open as ``name``; the replay that follows (up to ``replayed``)."""
    await send(ws, {"type": "open", "view": name})
    assert await next_message(ws) == {"type": "opened", "view": name, "version": 1}
    replay = []
    while (message := await next_message(ws))["type"] != "replayed":
        replay.append(message)
    assert message == {"type": "replayed", "count": len(replay)}
    return replay


async def until(ws: WebSocketConnection, wanted: dict[str, Any]) -> dict[str, Any]:
    """The next message that has every field of ``wanted`` (others are skipped)."""
    while True:
        message = await next_message(ws)
        if all(message.get(key) == value for key, value in wanted.items()):
            return message


async def all_of(ws: WebSocketConnection, *wanted: dict[str, Any]) -> list[dict[str, Any]]:
    """The first message like each of ``wanted`` (as :func:`until`), in any order:
    question events and session events travel apart."""
    found: list[dict[str, Any] | None] = [None] * len(wanted)
    while None in found:
        message = await next_message(ws)
        for index, fields in enumerate(wanted):
            if found[index] is None and all(message.get(k) == v for k, v in fields.items()):
                found[index] = message
                break
    return [message for message in found if message is not None]


@dataclass
class Served:
    """A ``simhost serve`` child: its URL's parts, and the process."""

    url: str
    authority: str
    token: str
    process: trio.Process

    def agent_pid(self) -> int:
        """The agent the server started (its only child, forked by any of its threads)."""
        tasks = Path(f"/proc/{self.process.pid}/task")
        (child,) = [
            pid for task in tasks.iterdir() for pid in (task / "children").read_text().split()
        ]
        return int(child)


async def _read_all(stream: trio.abc.ReceiveStream) -> bytes:
    data = bytearray()
    while chunk := await stream.receive_some():
        data += chunk
    return bytes(data)


@asynccontextmanager
async def served(workspace: Path, *args: str) -> AsyncIterator[Served]:
    """``simhost serve --port 0`` in ``workspace``, until the block ends (then Ctrl-C,
    and it must exit 0 or 1 within WAIT_S, without a traceback)."""
    argv = [sys.executable, "-m", "simhost", "serve", "--workspace", str(workspace)]
    argv += ["--port", "0", "--state-dir", str(workspace / ".state"), *args]
    process = await trio.lowlevel.open_process(
        argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=workspace
    )
    assert process.stdout is not None and process.stderr is not None
    err = b""
    async with trio.open_nursery() as nursery:

        async def read_err() -> None:
            nonlocal err
            assert process.stderr is not None
            err = await _read_all(process.stderr)

        nursery.start_soon(read_err)
        try:
            line = b""
            with trio.fail_after(WAIT_S * 3):
                while not line.endswith(b"\n"):
                    chunk = await process.stdout.receive_some(1)
                    assert chunk, "simhost serve ended without serving"
                    line += chunk
            assert line.startswith(b"serving at http://"), line
            url = line.decode().split()[-1]
            parts = urlsplit(url)
            yield Served(url, parts.netloc, parse_qs(parts.query)["token"][0], process)
        finally:
            if process.returncode is None:
                process.send_signal(signal.SIGINT)
            with trio.move_on_after(WAIT_S):
                await process.wait()
            if process.returncode is None:
                process.kill()
                await process.wait()
            await process.stdout.aclose()
    text = err.decode()
    assert process.returncode in (0, 1) and "Traceback" not in text, text


@contextmanager
def served_sync(workspace: Path, *args: str) -> Iterator[tuple[str, subprocess.Popen[bytes]]]:
    """:func:`served` for a test that is not async (a Playwright one): the URL and
    the process, stopped with Ctrl-C at the end."""
    argv = [sys.executable, "-m", "simhost", "serve", "--workspace", str(workspace)]
    argv += ["--port", "0", "--state-dir", str(workspace / ".state"), *args]
    process = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=workspace)
    assert process.stdout is not None and process.stderr is not None
    try:
        line = process.stdout.readline()  # (bounded: the server's own --start-timeout)
        assert line.startswith(b"serving at http://"), line + process.stderr.read()
        yield line.decode().split()[-1], process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGINT)
        try:
            process.wait(WAIT_S)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        err = process.stderr.read().decode()
        process.stdout.close()
        process.stderr.close()
    assert process.returncode in (0, 1) and "Traceback" not in err, err


@dataclass
class Places:
    """A test's folders: the workspace, the state folder outside it, and the config
    folder (its XDG folders point into the test's own folder too)."""

    workspace: Path
    state: Path
    config: Path

    @property
    def rules_file(self) -> Path:
        return self.state / RULES_NAME

    def audit(self) -> list[dict[str, Any]]:
        path = self.state / AUDIT_NAME
        if not path.exists():
            return []
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]


# The words of the editor rule that a card for `git status` offers first.
GIT_STATUS_RULE = "allow `git status …` in this workspace, until revoked"


class Inbox:
    """One view's messages, taken by what they say rather than in the order they came:
    question events and host messages travel apart, and what a step does not take
    stays for the next (nothing is skipped unseen)."""

    def __init__(self, ws: WebSocketConnection, name: str) -> None:
        self.ws = ws
        self.name = name
        self.backlog: list[dict[str, Any]] = []

    async def open(self) -> list[dict[str, Any]]:
        return await opened(self.ws, self.name)

    async def send(self, message: dict[str, Any]) -> None:
        await send(self.ws, message)

    async def take(self, wanted: dict[str, Any]) -> dict[str, Any]:
        """The first message with every field of ``wanted`` (kept ones first)."""
        return await self.take_first(wanted)

    async def take_first(self, *wanted: dict[str, Any]) -> dict[str, Any]:
        """The first message with every field of one of ``wanted`` (kept ones first)."""
        for index, message in enumerate(self.backlog):
            if any(_like(message, w) for w in wanted):
                return self.backlog.pop(index)
        while True:
            message = await next_message(self.ws)
            if any(_like(message, w) for w in wanted):
                return message
            self.backlog.append(message)

    async def reply(self, message: dict[str, Any], kind: str = "error") -> dict[str, Any]:
        """Send ``message``; the first message of type ``kind`` or ``error`` that comes."""
        await self.send(message)
        while True:
            got = await next_message(self.ws)
            if got["type"] in (kind, "error"):
                return got
            self.backlog.append(got)

    def kept(self, wanted: dict[str, Any]) -> list[dict[str, Any]]:
        return [message for message in self.backlog if _like(message, wanted)]

    async def turn(self, session_id: str) -> str:
        """The session's text until its turn ends, and the stop reason."""
        text = ""
        while True:
            message = await self.take({"type": "session_event", "sessionId": session_id})
            if message["event"] == "message":
                text += message["text"]
            elif message["event"] == "turn_ended":
                return f"{text}[{message['text']}]"


def _like(message: dict[str, Any], wanted: dict[str, Any]) -> bool:
    return all(message.get(key) == value for key, value in wanted.items())


async def new_session(inbox: Inbox) -> str:
    await inbox.send({"type": "new_session"})
    created = await inbox.take({"type": "session_event", "event": "created", "view": inbox.name})
    session_id: str = created["sessionId"]
    return session_id


def answer(
    question: dict[str, Any], option_id: str | None, reason: str | None = None
) -> dict[str, Any]:
    decision = (
        {"outcome": "cancelled"}
        if option_id is None
        else {"outcome": "selected", "optionId": option_id}
    )
    message = {
        "type": "answer",
        "questionId": question["questionId"],
        "sessionId": question["sessionId"],
        "decision": decision,
    }
    if reason is not None:
        message["reason"] = reason
    return message


def rows(rules: dict[str, Any]) -> list[tuple[int, str, str, int]]:
    return [(r["number"], r["effect"], r["rule"], r["hits"]) for r in rules["rules"]]
