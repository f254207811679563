"""Scenarios that drive an ACP file-writing agent through permclient (dialect ``acp``).

Two agents implement the same prompt grammar and the same log, one on each official ACP
SDK: ``node/ts_agent.mjs`` (TypeScript) and ``acp_python_write_agent.py`` (Python). Each
driver here spawns one agent, runs one scenario, and returns what happened on both
sides: what permclient's handlers saw, the turn's result, the ``session/update``s, the
client's telemetry, and the agent's own log (every JSON-RPC message it read or wrote,
what its SDK delivered for each permission request, the files it wrote). The tests make
the assertions; the drivers only synchronise, on events, never on time.

``connect`` is how a driver opens the connection: :func:`open_agent_process` (the
public ``permclient.open_process``) or :class:`WireRecorder` (``open_client`` over the
agent's pipes, recording every byte each way, for the schema checks).
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import trio

import permclient
from permclient import Cancelled, Diff, InboundNotification, PermissionRequest, Selected
from permclient.acp import SessionUpdate, ToolCallProgress, ToolCallStarted

AGENT_LOG_ENV = "PERMCLIENT_AGENT_LOG"
CANCELLED = {"outcome": {"outcome": "cancelled"}}
MIB = 1024 * 1024

# A bound on waiting for a spawned agent to exit after its stdin closed (not a wait).
EXIT_BOUND_S = 10.0


def selected(option_id: str) -> dict[str, Any]:
    return {"outcome": {"outcome": "selected", "optionId": option_id}}


# ----------------------------------------------------------------------- telemetry


class TelemetryRecorder:
    """A permclient ``Telemetry`` sink that keeps every record."""

    def __init__(self) -> None:
        self.records: list[dict[str, Any]] = []

    def emit(self, event: str, /, **fields: Any) -> None:
        self.records.append({"event": event, **fields})

    def of(self, event: str) -> list[dict[str, Any]]:
        return [r for r in self.records if r["event"] == event]


# ----------------------------------------------------------------------- transport

Connect = Callable[
    [Sequence[str], dict[str, str], TelemetryRecorder],
    AbstractAsyncContextManager[permclient.Client],
]


def open_agent_process(
    argv: Sequence[str], env: dict[str, str], telemetry: TelemetryRecorder
) -> AbstractAsyncContextManager[permclient.Client]:
    return permclient.open_process(argv, dialect="acp", env=env, telemetry=telemetry)


class RecordingStream(trio.abc.Stream):
    """A ``trio.abc.Stream`` that keeps a copy of every byte sent and received."""

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner
        self.sent = bytearray()
        self.received = bytearray()

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        self.sent += data
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self.inner.receive_some(max_bytes)
        self.received += data
        return data

    async def aclose(self) -> None:
        await self.inner.aclose()


def split_lines(data: bytes | bytearray) -> list[dict[str, Any]]:
    """The JSON-RPC messages of a newline-delimited byte stream (blank lines skipped)."""
    return [json.loads(line) for line in bytes(data).split(b"\n") if line.strip()]


@dataclass
class RecordedRun:
    argv: list[str]
    stream: RecordingStream

    @property
    def sent(self) -> list[dict[str, Any]]:
        """Every message permclient wrote, parsed from the exact bytes."""
        return split_lines(self.stream.sent)

    @property
    def received(self) -> list[dict[str, Any]]:
        return split_lines(self.stream.received)


class WireRecorder:
    """A ``Connect`` that records every byte permclient writes to (and reads from) the agent.

    ``permclient.open_client`` runs over the agent's stdio pipes wrapped in a
    :class:`RecordingStream`; one :class:`RecordedRun` per connection.
    """

    def __init__(self) -> None:
        self.runs: list[RecordedRun] = []

    @asynccontextmanager
    async def __call__(
        self, argv: Sequence[str], env: dict[str, str], telemetry: TelemetryRecorder
    ) -> AsyncIterator[permclient.Client]:
        process = await trio.lowlevel.open_process(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            env=env,
            start_new_session=True,
        )
        assert process.stdin is not None and process.stdout is not None
        stream = RecordingStream(trio.StapledStream(process.stdin, process.stdout))
        self.runs.append(RecordedRun(list(argv), stream))
        try:
            async with permclient.open_client(stream, dialect="acp", telemetry=telemetry) as client:
                yield client
        finally:
            # open_client closed the agent's stdin; both agents exit at end of input.
            with trio.CancelScope(shield=True):
                with trio.move_on_after(EXIT_BOUND_S):
                    await process.wait()
                if process.returncode is None:
                    process.kill()
                    await process.wait()


# ----------------------------------------------------------------------- agent log


@dataclass
class AgentLog:
    """The agent's log: its JSON-RPC traffic as its SDK saw it, and what it did."""

    entries: list[dict[str, Any]]

    @classmethod
    def read(cls, path: Path) -> AgentLog:
        text = path.read_text(encoding="utf-8") if path.exists() else ""
        # Split on "\n" only: str.splitlines() would also split inside a JSON string at
        # the raw U+2028 that JSON.stringify leaves in the generated text.
        return cls([json.loads(line) for line in text.split("\n") if line.strip()])

    def events(self, name: str) -> list[dict[str, Any]]:
        return [e for e in self.entries if e["event"] == name]

    def wire(self, direction: str) -> list[dict[str, Any]]:
        """Messages the agent read (``in``) or wrote (``out``), in order."""
        return [e["msg"] for e in self.entries if e["event"] == "wire" and e["dir"] == direction]

    def position(self, direction: str, predicate: Callable[[dict[str, Any]], bool]) -> int:
        """Index in the whole log of the only wire message matching ``predicate``."""
        (index,) = [
            i
            for i, e in enumerate(self.entries)
            if e["event"] == "wire" and e["dir"] == direction and predicate(e["msg"])
        ]
        return index

    def request_at(self, request_id: Any) -> int:
        """Log index of the agent's own request ``request_id``."""
        return self.position("out", lambda m: "method" in m and m.get("id") == request_id)

    def answer_at(self, request_id: Any) -> int:
        """Log index of the (only) response the agent read for its request ``request_id``."""
        return self.position("in", lambda m: "method" not in m and m.get("id") == request_id)

    def permission_request_ids(self) -> dict[str, Any]:
        """toolCallId -> the JSON-RPC id of the agent's permission request for it."""
        ids: dict[str, Any] = {}
        for msg in self.wire("out"):
            if msg.get("method") == "session/request_permission":
                tool_call_id = msg["params"]["toolCall"]["toolCallId"]
                assert tool_call_id not in ids, f"asked twice for {tool_call_id}"
                ids[tool_call_id] = msg["id"]
        return ids

    def responses_to(self, request_id: Any) -> list[dict[str, Any]]:
        """Every response the agent read for one of its own requests (the client's answers)."""
        return [m for m in self.wire("in") if "method" not in m and m.get("id") == request_id]

    def cancels_sent(self) -> list[dict[str, Any]]:
        """Params of every ``$/cancel_request`` the agent wrote."""
        return [m["params"] for m in self.wire("out") if m.get("method") == "$/cancel_request"]

    def cancels_received(self) -> list[dict[str, Any]]:
        """Params of every ``$/cancel_request`` the agent read (the client's)."""
        return [m["params"] for m in self.wire("in") if m.get("method") == "$/cancel_request"]

    def requests_received(self, method: str) -> list[dict[str, Any]]:
        return [m for m in self.wire("in") if m.get("method") == method and "id" in m]

    def responses_sent(self, request_id: Any) -> list[dict[str, Any]]:
        """Every response the agent wrote to the client's request ``request_id``."""
        return [m for m in self.wire("out") if "method" not in m and m.get("id") == request_id]

    def answers(self) -> dict[str, dict[str, Any]]:
        """toolCallId -> what the agent's SDK delivered for its permission request."""
        answers: dict[str, dict[str, Any]] = {}
        for e in self.events("answer"):
            assert e["toolCallId"] not in answers
            answers[e["toolCallId"]] = {k: v for k, v in e.items() if k in {"ok", "value", "error"}}
        return answers


def agent_env(workdir: Path) -> tuple[dict[str, str], Path]:
    """The agent's environment (ours plus its log path) and that log path, in ``workdir``."""
    workdir.mkdir(parents=True, exist_ok=True)
    log_path = workdir / "agent-log.jsonl"
    return {**os.environ, AGENT_LOG_ENV: str(log_path)}, log_path


# ----------------------------------------------------------------------- sessions


class Session:
    """One ACP session: its id, cwd, and every ``session/update`` the client got for it."""

    def __init__(self, client: permclient.Client, session_id: str, cwd: Path) -> None:
        self.client = client
        self.id = session_id
        self.cwd = cwd
        self.updates: list[SessionUpdate] = []
        self.foreign: list[InboundNotification] = []
        client.on_session_notification(session_id, self._on_notification)

    def _on_notification(self, notification: InboundNotification) -> None:
        if notification.session_id != self.id:
            self.foreign.append(notification)
        elif notification.update is not None:
            self.updates.append(notification.update)  # the decode the tracker made

    def tool_statuses(self) -> dict[str, list[str]]:
        """toolCallId -> the statuses the agent reported for it, in order."""
        statuses: dict[str, list[str]] = {}
        for u in self.updates:
            if isinstance(u, ToolCallStarted | ToolCallProgress) and u.status is not None:
                statuses.setdefault(u.tool_call_id, []).append(u.status)
        return statuses

    async def prompt(self, *blocks: str) -> Any:
        return await self.client.request(
            "session/prompt",
            {"sessionId": self.id, "prompt": [{"type": "text", "text": b} for b in blocks]},
        )


async def handshake(client: permclient.Client) -> dict[str, Any]:
    init: dict[str, Any] = await client.request(
        "initialize",
        {
            "protocolVersion": 1,
            "clientCapabilities": {},
            "clientInfo": {"name": "permclient-interop-tests", "version": "0"},
        },
    )
    return init


async def new_session(client: permclient.Client, cwd: Path) -> Session:
    await trio.Path(cwd).mkdir(parents=True, exist_ok=True)
    created = await client.request("session/new", {"cwd": str(cwd), "mcpServers": []})
    return Session(client, created["sessionId"], cwd)


def final_tool_states(client: permclient.Client, session: Session) -> dict[str, tuple[Any, bool]]:
    """toolCallId -> (status, awaiting_approval) from the client's tool-call tracker."""
    return {
        s.tool_call_id: (s.status, s.awaiting_approval)
        for s in client.tool_calls.session(session.id)
    }


def files_in(directory: Path) -> dict[str, str]:
    return {p.name: p.read_text(encoding="utf-8") for p in sorted(directory.iterdir())}


@dataclass
class Run:
    """What every scenario returns."""

    init: dict[str, Any]
    telemetry: TelemetryRecorder
    log: AgentLog = field(default_factory=lambda: AgentLog([]))


# ------------------------------------------------------ scenario: one mixed turn

# Chosen by title: the handler never answers by position.
MIXED_CHOICES = {
    "write allowed-once.txt": "allow",
    "write allowed-always.txt": "allow-always",
    "write denied.txt": "deny",
}
WITHDRAWN_TITLE = "write withdrawn.txt"
MIXED_PROMPT = (
    "write allowed-once.txt first file",
    "write allowed-always.txt second file",
    # Two commands in one text block, one per line.
    "write denied.txt must not exist\nwrite withdrawn.txt must not exist either",
    "withdraw withdrawn.txt",
)


@dataclass
class MixedTurn(Run):
    session: Session | None = None
    seen: list[tuple[str, str, str]] = field(default_factory=list)
    handler_cancelled: list[str] = field(default_factory=list)
    pending_after_prompt: int = -1
    result: Any = None
    tool_states: dict[str, tuple[Any, bool]] = field(default_factory=dict)
    files: dict[str, str] = field(default_factory=dict)


async def run_mixed_turn(connect: Connect, argv: Sequence[str], workdir: Path) -> MixedTurn:
    """One prompt, four writes asked at once: two allowed, one denied, one withdrawn.

    Every handler records its request; the answering ones wait until all four are
    pending (so the agent must have asked concurrently, else this never finishes).
    The withdrawn one blocks until cancelled. The agent withdraws it only once the
    other three are answered, so it is surely pending in permclient by then.
    """
    env, log_path = agent_env(workdir)
    telemetry = TelemetryRecorder()
    all_asked = trio.Event()
    run = MixedTurn(init={}, telemetry=telemetry)

    async def handler(req: PermissionRequest) -> Selected | Cancelled:
        run.seen.append((req.session_id, req.tool_call.tool_call_id, req.tool_call.title or ""))
        if len(run.seen) == 4:
            all_asked.set()
        if req.tool_call.title == WITHDRAWN_TITLE:
            try:
                await trio.sleep_forever()
            except trio.Cancelled:
                run.handler_cancelled.append(req.tool_call.tool_call_id)
                raise
        await all_asked.wait()
        return Selected(MIXED_CHOICES[req.tool_call.title or ""])

    async with connect(argv, env, telemetry) as client:
        run.init = await handshake(client)
        session = run.session = await new_session(client, workdir / "ws")
        with client.permission_handler(session.id, handler):
            run.result = await session.prompt(*MIXED_PROMPT)
            run.pending_after_prompt = client.pending_permissions(session.id)
        run.tool_states = final_tool_states(client, session)
    run.files = files_in(session.cwd)
    run.log = AgentLog.read(log_path)
    return run


# ------------------------------------------------------ scenario: two sessions


@dataclass
class TwoSessions(Run):
    sessions: dict[str, Session] = field(default_factory=dict)
    seen: dict[str, list[tuple[str, str]]] = field(default_factory=dict)
    results: dict[str, Any] = field(default_factory=dict)
    files: dict[str, dict[str, str]] = field(default_factory=dict)


TWO_SESSION_PROMPTS = {
    "A": ("write a-1.txt from A", "write a-2.txt from A"),
    "B": ("write b-denied.txt from B", "write b-allowed.txt from B"),
}


async def run_two_sessions(connect: Connect, argv: Sequence[str], workdir: Path) -> TwoSessions:
    """Two sessions prompt at once; each session's handler answers its own requests.

    A allows everything; B denies ``b-denied.txt`` and allows ``b-allowed.txt``. Both
    handlers hold their answers until all four requests (two per session) are pending,
    so both turns are surely in flight together.
    """
    env, log_path = agent_env(workdir)
    telemetry = TelemetryRecorder()
    run = TwoSessions(init={}, telemetry=telemetry, seen={"A": [], "B": []})
    all_asked = trio.Event()

    def handler_for(name: str) -> Callable[[PermissionRequest], Any]:
        async def handler(req: PermissionRequest) -> Selected | Cancelled:
            run.seen[name].append((req.session_id, req.tool_call.title or ""))
            if sum(len(v) for v in run.seen.values()) == 4:
                all_asked.set()
            await all_asked.wait()
            return Selected("deny" if req.tool_call.title == "write b-denied.txt" else "allow")

        return handler

    async with connect(argv, env, telemetry) as client:
        run.init = await handshake(client)
        for name in ("A", "B"):
            run.sessions[name] = await new_session(client, workdir / name)
        a, b = run.sessions["A"], run.sessions["B"]
        with (
            client.permission_handler(a.id, handler_for("A")),
            client.permission_handler(b.id, handler_for("B")),
        ):
            async with trio.open_nursery() as nursery:
                for name, session in run.sessions.items():

                    async def turn(name: str = name, session: Session = session) -> None:
                        run.results[name] = await session.prompt(*TWO_SESSION_PROMPTS[name])

                    nursery.start_soon(turn)
    run.files = {name: files_in(s.cwd) for name, s in run.sessions.items()}
    run.log = AgentLog.read(log_path)
    return run


# ------------------------------------------------------ scenario: session/cancel


@dataclass
class CancelledTurn(Run):
    session: Session | None = None
    seen: list[str] = field(default_factory=list)
    handler_cancelled: list[str] = field(default_factory=list)
    pending_before_cancel: int = -1
    pending_after_cancel: int = -1
    outcome: Any = None  # the prompt's result, or the RequestError it raised
    files: dict[str, str] = field(default_factory=dict)


CANCEL_PROMPT = ("write c-1.txt one", "write c-2.txt two", "write c-3.txt three")


async def run_session_cancel(connect: Connect, argv: Sequence[str], workdir: Path) -> CancelledTurn:
    """Three writes pending at once, then the client sends ``session/cancel``."""
    env, log_path = agent_env(workdir)
    telemetry = TelemetryRecorder()
    run = CancelledTurn(init={}, telemetry=telemetry)
    all_asked = trio.Event()

    async def handler(req: PermissionRequest) -> Selected | Cancelled:
        run.seen.append(req.tool_call.tool_call_id)
        if len(run.seen) == len(CANCEL_PROMPT):
            all_asked.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            run.handler_cancelled.append(req.tool_call.tool_call_id)
            raise
        return Selected("allow")  # pragma: no cover - never reached

    async with connect(argv, env, telemetry) as client:
        run.init = await handshake(client)
        session = run.session = await new_session(client, workdir / "ws")
        with client.permission_handler(session.id, handler):
            async with trio.open_nursery() as nursery:

                async def turn() -> None:
                    try:
                        run.outcome = await session.prompt(*CANCEL_PROMPT)
                    except permclient.RequestError as exc:
                        run.outcome = exc

                nursery.start_soon(turn)
                await all_asked.wait()
                run.pending_before_cancel = client.pending_permissions(session.id)
                await client.notify("session/cancel", {"sessionId": session.id})
                run.pending_after_cancel = client.pending_permissions(session.id)
    run.files = files_in(session.cwd)
    run.log = AgentLog.read(log_path)
    return run


# ------------------------------------------------------ scenario: a 5 MiB message


@dataclass
class BigTurn(Run):
    size: int = 0
    session: Session | None = None
    received: list[tuple[int, str]] = field(default_factory=list)  # (UTF-8 bytes, sha256)
    update_digest: tuple[int, str] | None = None
    result: Any = None
    file_digest: tuple[int, str] | None = None


def digest(text: str | bytes) -> tuple[int, str]:
    data = text.encode() if isinstance(text, str) else text
    return len(data), hashlib.sha256(data).hexdigest()


async def run_big_diff(
    connect: Connect, argv: Sequence[str], workdir: Path, size: int = 5 * MIB
) -> BigTurn:
    """A permission request whose diff carries ``size`` bytes of text, on one line."""
    env, log_path = agent_env(workdir)
    telemetry = TelemetryRecorder()
    run = BigTurn(init={}, telemetry=telemetry, size=size)

    async def handler(req: PermissionRequest) -> Selected | Cancelled:
        content = req.tool_call.content
        assert content is not None and len(content) == 1
        diff = content[0]
        assert isinstance(diff, Diff)
        run.received.append(digest(diff.new_text))
        return Selected("allow")

    async with connect(argv, env, telemetry) as client:
        run.init = await handshake(client)
        session = run.session = await new_session(client, workdir / "ws")
        with client.permission_handler(session.id, handler):
            run.result = await session.prompt(f"bigwrite big.txt {size}")
        (announce,) = [u for u in session.updates if isinstance(u, ToolCallStarted)]
        assert announce.content is not None and isinstance(announce.content[0], Diff)
        run.update_digest = digest(announce.content[0].new_text)
    big = session.cwd / "big.txt"
    run.file_digest = digest(big.read_bytes()) if big.exists() else None
    run.log = AgentLog.read(log_path)
    return run


# ------------------------------------------------ scenario: the caller gives up


@dataclass
class AbandonedRequests(Run):
    session: Session | None = None
    seen: list[str] = field(default_factory=list)
    handler_cancelled: list[str] = field(default_factory=list)
    prompt_cancelled_caught: bool = False
    pending_after_cancel: int = -1
    wait_cancelled_caught: bool = False
    next_result: Any = None
    files: dict[str, str] = field(default_factory=dict)


ABANDON_PROMPT = ("write d-1.txt one", "write d-2.txt two")


async def run_abandoned_requests(
    connect: Connect, argv: Sequence[str], workdir: Path
) -> AbandonedRequests:
    """The caller's own scope gives up on two requests, then the connection goes on.

    1. ``session/prompt`` with two writes pending: its caller's scope is cancelled.
       permclient tells the agent the ACP way (``session/cancel`` for the session) and
       answers the session's pending permissions itself.
    2. ``_permclient/wait`` (an extension request the agent holds until cancelled): its
       caller's scope is cancelled once the agent said it is waiting; permclient sends
       ``$/cancel_request`` for its id.
    3. A new prompt (allowed) on the same connection: the agent's late answers to 1 and 2
       were dropped, never mistaken for anything else.
    """
    env, log_path = agent_env(workdir)
    telemetry = TelemetryRecorder()
    run = AbandonedRequests(init={}, telemetry=telemetry)
    all_asked = trio.Event()
    waiting = trio.Event()

    async def blocking(req: PermissionRequest) -> Selected | Cancelled:
        run.seen.append(req.tool_call.tool_call_id)
        if len(run.seen) == len(ABANDON_PROMPT):
            all_asked.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            run.handler_cancelled.append(req.tool_call.tool_call_id)
            raise
        return Selected("allow")  # pragma: no cover - never reached

    async def allow(req: PermissionRequest) -> Selected | Cancelled:
        return Selected("allow")

    async with connect(argv, env, telemetry) as client:
        client.on_notification("_permclient/waiting", lambda _n: waiting.set())
        run.init = await handshake(client)
        session = run.session = await new_session(client, workdir / "ws")
        with client.permission_handler(session.id, blocking):
            prompt_scope = trio.CancelScope()
            async with trio.open_nursery() as nursery:

                async def turn() -> None:
                    with prompt_scope:
                        await session.prompt(*ABANDON_PROMPT)

                nursery.start_soon(turn)
                await all_asked.wait()
                prompt_scope.cancel()
            run.prompt_cancelled_caught = prompt_scope.cancelled_caught
            run.pending_after_cancel = client.pending_permissions(session.id)

        wait_scope = trio.CancelScope()
        async with trio.open_nursery() as nursery:

            async def wait() -> None:
                with wait_scope:
                    await client.request("_permclient/wait", {})

            nursery.start_soon(wait)
            await waiting.wait()
            wait_scope.cancel()
        run.wait_cancelled_caught = wait_scope.cancelled_caught

        with client.permission_handler(session.id, allow):
            run.next_result = await session.prompt("write after.txt still works")
    run.files = files_in(session.cwd)
    run.log = AgentLog.read(log_path)
    return run
