"""The editor side of the reference runtime's tests, in both dialects (bridge and acp):
the runtime started for real, what it told a permclient client per session, the
permission handlers those tests answer questions with, and the session files they
start it beside."""

from __future__ import annotations

import json
import os
import sys
from collections import defaultdict
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema
import msgspec
import trio

import permclient
from permclient import Decision, InboundNotification, PermissionRequest, Selected
from tests.support.acp_schema import SCHEMA_PATH, assert_valid

Handler = Callable[[PermissionRequest], Awaitable[Decision]]


class RuntimeEditor:
    """A permclient client plus every ``session/update`` the runtime sent it, per session."""

    def __init__(self, client: permclient.Client, workspace: Path) -> None:
        self.client = client
        self.workspace = workspace
        self.updates: dict[str, list[dict[str, Any]]] = defaultdict(list)
        self.notifications: list[Any] = []
        self._arrived = trio.Event()
        client.on_notification("session/update", self._on_update)

    def _on_update(self, notification: InboundNotification) -> None:
        assert notification.session_id is not None
        self.notifications.append(notification.params)
        self.updates[notification.session_id].append(notification.params["update"])
        self._arrived.set()
        self._arrived = trio.Event()

    async def wait_for(self, condition: Callable[[], bool]) -> None:
        """Wait until ``condition()`` holds, re-checking after every ``session/update``."""
        while not condition():
            await self._arrived.wait()

    def texts(self, session_id: str) -> list[str]:
        """The agent's messages, each without the newline that ends its chunk."""
        return [
            u["content"]["text"].removesuffix("\n")
            for u in self.updates[session_id]
            if u["sessionUpdate"] == "agent_message_chunk"
        ]

    def calls(self, session_id: str) -> dict[str, list[dict[str, Any]]]:
        """Tool-call events by toolCallId, in order."""
        calls: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for update in self.updates[session_id]:
            if update["sessionUpdate"] in ("tool_call", "tool_call_update"):
                calls[update["toolCallId"]].append(update)
        return calls

    def last_call(self, session_id: str) -> list[dict[str, Any]]:
        return list(self.calls(session_id).values())[-1]


async def never_asked(request: PermissionRequest) -> Decision:
    raise AssertionError(f"unexpected question: {request.tool_call.title}")


def answering(
    decision: Decision | str,
    seen: list[PermissionRequest],
    check: Callable[[], None] = lambda: None,
) -> Handler:
    """A handler that records each request, runs ``check()``, and answers ``decision``
    (a string is the option id to select)."""

    async def handler(request: PermissionRequest) -> Decision:
        seen.append(request)
        check()
        return Selected(decision) if isinstance(decision, str) else decision

    return handler


def statuses(events: list[dict[str, Any]]) -> list[str]:
    return [e["status"] for e in events]


def simhost_meta(events: list[dict[str, Any]]) -> dict[str, Any]:
    meta: dict[str, Any] = events[-1]["_meta"]["simhost"]
    return meta


# ------------------------------------------------------------ the bridge dialect

BRIDGE_RUNTIME = [sys.executable, "-m", "simhost", "runtime", "--stdio"]


class BridgeEditor(RuntimeEditor):
    """A bridge-dialect editor: ``sessionNew`` and ``chatSend``."""

    async def new_session(self, title: str | None = None) -> str:
        params = {} if title is None else {"title": title}
        result = await self.client.request("sessionNew", params)
        session_id: str = result["sessionId"]
        return session_id

    async def send(self, session_id: str, text: str, handler: Handler | None = None) -> str:
        """Run one turn, answering its questions with ``handler`` (none: any question fails)."""
        with self.client.permission_handler(session_id, handler or never_asked):
            result = await self.client.request("chatSend", {"sessionId": session_id, "text": text})
        stop_reason: str = result["stopReason"]
        return stop_reason


@asynccontextmanager
async def open_bridge_runtime(
    tmp_path: Path, *extra: str, state: str | None = "state", env: dict[str, str] | None = None
) -> AsyncIterator[BridgeEditor]:
    """The runtime on ``tmp_path/w``; ``state=None``: its default state folder (``env`` added)."""
    workspace = tmp_path / "w"
    workspace.mkdir(parents=True, exist_ok=True)
    argv = [*BRIDGE_RUNTIME, "--workspace", str(workspace), *extra]
    if state is not None:
        argv += ["--state-dir", str(tmp_path / state)]
    log = tmp_path / "runtime.log"
    environment = {**os.environ, **env} if env is not None else None
    async with permclient.open_process(
        argv, dialect="bridge", stderr=log, env=environment
    ) as client:
        editor = BridgeEditor(client, workspace)
        yield editor
        assert client.process is not None
    # Every session/update has ACP's shape.
    for params in editor.notifications:
        assert_valid("SessionNotification", params)
    # It exited on its own when its stdin closed, with nothing to complain about.
    assert client.process.returncode == 0
    assert log.read_text() == ""


# --------------------------------------------------------------- the acp dialect

ACP_RUNTIME = [sys.executable, "-m", "simhost", "runtime", "--stdio", "--dialect", "acp"]


# Runs the runtime as its child and copies each direction of its stdio, as it
# passes, to a file: argv is [python, -c, TAP, into.log, out.log, runtime argv...].
# It changes no byte and exits with the runtime's exit code.
TAP = r"""
import os, subprocess, sys, threading
into_path, out_path, argv = sys.argv[1], sys.argv[2], sys.argv[3:]
child = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE)

def pump(source, sink, path):
    with open(path, "ab") as log:
        try:
            while data := os.read(source, 65536):
                log.write(data)
                log.flush()
                sink.write(data)
                sink.flush()
        except BrokenPipeError:
            pass
        finally:
            try:
                sink.close()
            except BrokenPipeError:
                pass

threading.Thread(target=pump, args=(0, child.stdin, into_path), daemon=True).start()
pump(child.stdout.fileno(), sys.stdout.buffer, out_path)
sys.exit(child.wait())
"""


# ----------------------------------------------------------------- the schema

RESULT_DEFS = {
    "initialize": "InitializeResponse",
    "session/new": "NewSessionResponse",
    "session/load": "LoadSessionResponse",
    "session/list": "ListSessionsResponse",
    "session/set_mode": "SetSessionModeResponse",
    "session/prompt": "PromptResponse",
}
REQUEST_DEFS = {"session/request_permission": "RequestPermissionRequest"}
NOTIFICATION_DEFS = {
    "session/update": "SessionNotification",
    "$/cancel_request": "CancelRequestNotification",
}


@cache
def _schema() -> dict[str, Any]:
    schema: dict[str, Any] = json.loads(SCHEMA_PATH.read_text(encoding="utf-8"))
    return schema


@cache
def _validator(part: str | int) -> jsonschema.protocols.Validator:
    """A validator for ``$defs/<part>``, or for the schema's top-level message branch ``part``.

    (Branch 0: agent messages, 2: protocol-level ones.) The schema itself is checked
    once by tests/permclient/test_wire.py.
    """
    schema = _schema()
    target = {"$ref": f"#/$defs/{part}"} if isinstance(part, str) else schema["anyOf"][part]
    validator: jsonschema.protocols.Validator = jsonschema.Draft202012Validator(
        {**target, "$defs": schema["$defs"]}
    )
    return validator


def _assert_valid(def_name: str, instance: Any) -> None:
    """Validate ``instance`` against ``$defs/<def_name>`` of ACP's schema."""
    _validator(def_name).validate(instance)


def parse_lines(data: bytes) -> list[dict[str, Any]]:
    """Newline-delimited JSON: every line is one JSON object, the last one ends too."""
    assert data == b"" or data.endswith(b"\n"), "a message was left without its newline"
    messages = []
    for line in data.split(b"\n")[:-1]:
        message = json.loads(line)
        assert isinstance(message, dict), line
        messages.append(message)
    return messages


def check_runtime_messages(
    from_runtime: list[dict[str, Any]], to_runtime: list[dict[str, Any]]
) -> None:
    """Validate every message the runtime wrote against ACP's schema.

    A response is checked against the result type of the request it answers
    (its method is looked up among the client's requests).
    """
    asked = {m["id"]: m["method"] for m in to_runtime if "method" in m and "id" in m}
    for message in from_runtime:
        assert message["jsonrpc"] == "2.0"
        method = message.get("method")
        if method == "$/cancel_request":
            _validator(2).validate(message)
        else:
            _validator(0).validate(message)
        if method is not None and "id" in message:
            _assert_valid(REQUEST_DEFS[method], message["params"])
        elif method is not None:
            _assert_valid(NOTIFICATION_DEFS[method], message["params"])
        elif "result" in message:
            _assert_valid(RESULT_DEFS[asked[message["id"]]], message["result"])
        else:
            _assert_valid("Error", message["error"])


# ---------------------------------------------------------------- the editor


class AcpEditor(RuntimeEditor):
    """An editor in the ``acp`` dialect: ``initialize``, ``session/new``, ``session/prompt``."""

    async def initialize(self) -> dict[str, Any]:
        result: dict[str, Any] = await self.client.request(
            "initialize",
            {
                "protocolVersion": 1,
                "clientCapabilities": {"fs": {"readTextFile": False, "writeTextFile": False}},
                "clientInfo": {"name": "test", "version": "0"},
            },
        )
        return result

    async def new_session(self) -> str:
        result = await self.client.request(
            "session/new", {"cwd": str(self.workspace), "mcpServers": []}
        )
        session_id: str = result["sessionId"]
        return session_id

    async def prompt(
        self, session_id: str, prompt: str | list[dict[str, Any]], handler: Handler | None = None
    ) -> str:
        """One turn; its questions are answered by ``handler`` (none: any question fails)."""
        blocks = [{"type": "text", "text": prompt}] if isinstance(prompt, str) else prompt
        with self.client.permission_handler(session_id, handler or never_asked):
            result = await self.client.request(
                "session/prompt", {"sessionId": session_id, "prompt": blocks}
            )
        stop_reason: str = result["stopReason"]
        return stop_reason


@asynccontextmanager
async def open_acp_runtime(
    tmp_path: Path, *extra: str, state: str = "state", telemetry: Any = None
) -> AsyncIterator[AcpEditor]:
    """Start the runtime (behind the tap) and check, afterwards, all it wrote."""
    workspace = tmp_path / "w"
    workspace.mkdir(exist_ok=True)
    into, out = tmp_path / "to-runtime.jsonl", tmp_path / "from-runtime.jsonl"
    into.unlink(missing_ok=True)
    out.unlink(missing_ok=True)
    runtime = [*ACP_RUNTIME, "--workspace", str(workspace), "--state-dir", str(tmp_path / state)]
    argv = [sys.executable, "-c", TAP, str(into), str(out), *runtime, *extra]
    log = tmp_path / "runtime.log"
    async with permclient.open_process(
        argv, dialect="acp", stderr=log, telemetry=telemetry
    ) as client:
        yield AcpEditor(client, workspace)
        assert client.process is not None
    # It exited on its own when its stdin closed, with nothing to complain about.
    assert client.process.returncode == 0
    assert log.read_text() == ""
    from_runtime = parse_lines(out.read_bytes())
    assert from_runtime, "the runtime wrote nothing"
    check_runtime_messages(from_runtime, parse_lines(into.read_bytes()))


def runtime_wrote(tmp_path: Path) -> list[dict[str, Any]]:
    """What the runtime has written so far (the tap's copy)."""
    return parse_lines((tmp_path / "from-runtime.jsonl").read_bytes())


# ------------------------------------------------------------- session files


def valid_session(session_id: str, title: str = "kept") -> bytes:
    stamp = "2025-01-01T00:00:00.000Z"
    return msgspec.json.encode(
        {"sessionId": session_id, "title": title, "createdAt": stamp, "updatedAt": stamp}
    )


# ------------------------------------------------------------ odd session files


def odd_state_folder(tmp_path: Path) -> Path:
    """A state folder with one good session and every kind of unusable file beside it."""
    state = tmp_path / "state"
    folder = state / "sessions"
    folder.mkdir(parents=True)
    (folder / "s-000000000001.json").write_bytes(valid_session("s-000000000001"))
    deep = b'{"sessionId": "s-000000000002", "x": ' + b"[" * 2000 + b"]" * 2000 + b"}"
    (folder / "s-000000000002.json").write_bytes(deep)
    (folder / "s-000000000003.json").write_bytes(b"[" * 2000 + b"]" * 2000)
    os.mkfifo(folder / "s-000000000004.json")
    outside = tmp_path / "outside.json"
    outside.write_bytes(valid_session("s-000000000005"))
    (folder / "s-000000000005.json").symlink_to(outside)
    (folder / "s-000000000006.json").mkdir()
    os.mkfifo(state / "active.json")
    return state


def non_utf8_workspace(tmp_path: Path) -> Path:
    """A workspace whose links lead to names that are not UTF-8 (git can check such
    links out): a file, a folder on the way, a missing file, a place outside."""
    workspace = tmp_path / "w"
    raw = os.fsencode(workspace)
    os.makedirs(raw + b"/d\xff")
    Path(os.fsdecode(raw + b"/d\xff/f.txt")).write_text("mine\n")
    Path(os.fsdecode(raw + b"/\xff.txt")).write_text("mine\n")
    os.symlink(b"d\xff/f.txt", raw + b"/link")
    os.symlink(b"\xff.txt", raw + b"/file")
    os.symlink(b"d\xff", raw + b"/dir")
    os.symlink(b"\xff-missing", raw + b"/dangling")
    os.symlink(os.fsencode(tmp_path) + b"/\xff-out", raw + b"/out")
    return workspace
