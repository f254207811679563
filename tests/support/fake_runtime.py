"""A small bridge runtime for the chat's tests, and a harness that runs the chat against it.

:class:`FakeRuntime` plays the runtime role over a memory stream with permclient
itself (``open_client`` on the other end, ``on_request`` handlers), so the chat
is tested against a real JSON-RPC peer without a process or a terminal. Its
``chatSend`` understands a tiny script language (see :meth:`FakeRuntime.turn`).
This module holds no tests.
"""

from __future__ import annotations

import io
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from typing import Any

import trio
import trio.testing
from rich.console import Console

import permclient
from permclient import RequestError
from permclient._telemetry import MemoryTelemetry  # permclient.MemoryTelemetry once exported
from simhost.chat.app import ChatApp, ChatOptions
from simhost.chat.keys import Key, KeyDecoder
from simhost.chat.screen import PlainScreen, Screen
from simhost.chat.terminal import InputEvent

OPTIONS = [
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "allow-always", "name": "Allow always", "kind": "allow_always"},
    {"optionId": "deny", "name": "Deny", "kind": "reject_once"},
    {"optionId": "deny-always", "name": "Deny always", "kind": "reject_always"},
]


@dataclass
class Answer:
    session_id: str
    tool_call_id: str
    outcome: str | None  # "selected", "cancelled", or None when withdrawn
    option_id: str | None = None
    meta: dict[str, Any] | None = None  # the outcome's ``_meta`` (a denial's reason)


@dataclass
class FakeSession:
    session_id: str
    title: str
    preset: str = "ask"
    history: list[dict[str, Any]] = field(default_factory=list)


class FakeRuntime:
    """The runtime side of the bridge, scripted.

    ``chatSend`` text, words separated by ``;`` for several steps:

    * ``say TEXT`` -- an agent_message_chunk (no newline added; ``\\n`` is one);
    * ``ask NAME`` -- a write of NAME (tool call, permission request, outcome; ``\\n``
      in NAME is a line break);
    * ``ask2`` -- one request with a two-file diff;
    * ``unannounced NAME`` -- ask, without a ``tool_call`` update first;
    * ``gate`` -- wait until the test sets :attr:`gate`;
    * ``withdraw NAME`` -- ask, and withdraw the question when :attr:`withdraw` is set;
    * ``grant NAME`` -- a call that a standing grant allowed, without asking;
    * ``late NAME`` -- in_progress, completed, then a late ``pending``;
    * ``burst N`` -- N questions at once;
    * ``hang`` -- never end (until the turn is cancelled).
    """

    def __init__(self) -> None:
        self.client: permclient.Client | None = None
        self.sessions: dict[str, FakeSession] = {}
        self.active: str | None = None
        self.answers: list[Answer] = []
        self.requests: list[tuple[str, Any]] = []
        self.turns_cancelled: list[str] = []
        self.gate = trio.Event()
        self.withdraw = trio.Event()
        self.next_ids: list[str] = []
        """Ids for the next new sessions (then ``s-N``)."""
        self.stuck: set[str] = set()
        """Methods that are never answered."""
        self.refuse: dict[str, RequestError] = {}
        """Methods answered with this error."""
        self.grants: list[dict[str, Any]] = [{"tool": "fs.write", "decision": "allow"}]
        """What ``sessionPermissions`` lists."""
        self.stop_reason = "end_turn"
        self.say_outcome = True
        """Whether ``ask`` says ``wrote NAME`` / ``denied NAME`` once answered."""
        self._calls = 0
        self._scope = trio.CancelScope()

    def close(self) -> None:
        """Go away: the connection closes."""
        self._scope.cancel()

    async def serve(
        self,
        stream: trio.abc.Stream,
        *,
        task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED,
    ) -> None:
        async with permclient.open_client(stream, dialect="bridge") as client:
            self.client = client
            for method, handler in {
                "initialize": self.initialize,
                "sessionNew": self.session_new,
                "sessionList": self.session_list,
                "sessionRead": self.session_read,
                "sessionLoad": self.session_load,
                "sessionPermissions": self.session_permissions,
                "sessionSetPermission": self.session_set_permission,
            }.items():
                client.on_request(method, self._recorded(method, handler))
            client.on_request(
                "chatSend",
                self._recorded("chatSend", self.chat_send),
                cancelled_result={"stopReason": "cancelled"},
            )
            task_status.started()
            with self._scope:
                await trio.sleep_forever()

    def _recorded(self, method: str, handler: Callable[[Any], Any]) -> Callable[[Any], Any]:
        async def run(params: Any) -> Any:
            self.requests.append((method, params))
            if method in self.stuck:
                await trio.sleep_forever()
            if method in self.refuse:
                raise self.refuse[method]
            return await handler(params)

        return run

    def methods(self) -> list[str]:
        return [method for method, _ in self.requests]

    # ------------------------------------------------------------ requests

    def _session(self, params: Any) -> FakeSession:
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        if session_id not in self.sessions:
            raise RequestError(-32602, f"unknown session {session_id!r}")
        return self.sessions[session_id]

    async def initialize(self, params: Any) -> Any:
        return {
            "runtimeInfo": {"name": "fake-runtime", "version": "1"},
            "workspace": "/w",
            "policy": "test",
            "presets": ["ask", "read-only", "auto-edit"],
        }

    async def session_new(self, params: Any) -> Any:
        session_id = self.next_ids.pop(0) if self.next_ids else f"s-{len(self.sessions) + 1}"
        title = (params or {}).get("title") or f"Session {len(self.sessions) + 1}"
        self.sessions[session_id] = FakeSession(session_id, title)
        self.active = session_id
        return {"sessionId": session_id}

    def _summary(self, session: FakeSession) -> dict[str, Any]:
        return {
            "sessionId": session.session_id,
            "title": session.title,
            "isActive": session.session_id == self.active,
            "updatedAt": "2025-01-01T00:00:00Z",
        }

    async def session_list(self, params: Any) -> Any:
        return {"sessions": [self._summary(s) for s in self.sessions.values()]}

    async def session_read(self, params: Any) -> Any:
        session = self._session(params)
        return {**self._summary(session), "history": session.history}

    async def session_load(self, params: Any) -> Any:
        session = self._session(params)
        self.active = session.session_id
        return {**self._summary(session), "history": session.history}

    async def session_permissions(self, params: Any) -> Any:
        session = self._session(params)
        return {
            "presetId": session.preset,
            "presets": [
                {"presetId": "ask", "description": "everything but reads asks"},
                {"presetId": "read-only", "description": "writes and shell denied"},
            ],
            "grants": self.grants,
        }

    async def session_set_permission(self, params: Any) -> Any:
        session = self._session(params)
        session.preset = params["presetId"]
        return {"presetId": session.preset}

    # ---------------------------------------------------------------- turns

    async def chat_send(self, params: Any) -> Any:
        session = self._session(params)
        text: str = params["text"]
        session.history.append({"role": "user", "text": text})
        try:
            for step in text.split(";"):
                await self.turn(session.session_id, step.lstrip())
        except trio.Cancelled:
            self.turns_cancelled.append(session.session_id)
            raise
        return {"stopReason": self.stop_reason}

    async def update(self, session_id: str, update: dict[str, Any]) -> None:
        assert self.client is not None
        await self.client.notify("session/update", {"sessionId": session_id, "update": update})

    async def say(self, session_id: str, text: str) -> None:
        await self.update(
            session_id,
            {"sessionUpdate": "agent_message_chunk", "content": {"type": "text", "text": text}},
        )

    def _next_call(self) -> str:
        self._calls += 1
        return f"call-{self._calls}"

    async def turn(self, session_id: str, step: str) -> None:
        verb, _, arg = step.partition(" ")
        if verb == "say":
            await self.say(session_id, arg.replace("\\n", "\n"))
            return
        arg = arg.strip()
        if verb == "":
            pass
        elif verb == "ask":
            await self.ask(session_id, arg.replace("\\n", "\n") or "a.txt")
        elif verb == "unannounced":
            await self.ask(session_id, arg or "a.txt", announce=False)
        elif verb == "ask2":
            await self.ask(session_id, "two files", two_files=True)
        elif verb == "gate":
            await self.gate.wait()
        elif verb == "withdraw":
            await self.ask(session_id, arg.replace("\\n", "\n") or "w.txt", withdraw=True)
        elif verb == "grant":
            call = self._next_call()
            await self.update(session_id, self._tool_call(call, arg))
            await self.update(
                session_id,
                {
                    "sessionUpdate": "tool_call_update",
                    "toolCallId": call,
                    "status": "completed",
                    "_meta": {"simhost": {"decidedBy": "grant", "decision": "allow"}},
                },
            )
        elif verb == "late":
            call = self._next_call()
            await self.update(session_id, self._tool_call(call, arg))
            for status in ("in_progress", "completed", "pending"):
                await self.update(
                    session_id,
                    {"sessionUpdate": "tool_call_update", "toolCallId": call, "status": status},
                )
        elif verb == "burst":
            async with trio.open_nursery() as nursery:
                for i in range(int(arg)):
                    nursery.start_soon(self.ask, session_id, f"burst-{i}.txt")
        elif verb == "hang":
            await trio.sleep_forever()
        else:
            await self.say(session_id, f"You said: {step}\n")

    @staticmethod
    def _tool_call(call: str, name: str, **extra: Any) -> dict[str, Any]:
        return {
            "sessionUpdate": "tool_call",
            "toolCallId": call,
            "title": f"fs.write: {name}",
            "kind": "edit",
            "status": "pending",
            **extra,
        }

    async def ask(
        self,
        session_id: str,
        name: str,
        *,
        two_files: bool = False,
        withdraw: bool = False,
        announce: bool = True,
    ) -> None:
        assert self.client is not None
        call = self._next_call()
        content = [{"type": "diff", "path": f"/w/{name}", "oldText": None, "newText": "hi\n"}]
        if two_files:
            content = [
                {"type": "diff", "path": "/w/one.py", "oldText": "a\n", "newText": "b\n"},
                {"type": "diff", "path": "/w/two.py", "oldText": None, "newText": "c\n"},
            ]
        tool_call = self._tool_call(call, name, content=content, rawInput={"path": name})
        if announce:
            await self.update(session_id, tool_call)
        params = {
            "sessionId": session_id,
            "toolCall": {k: v for k, v in tool_call.items() if k != "sessionUpdate"},
            "options": OPTIONS,
        }
        answer = Answer(session_id, call, None)
        result: Any = None
        with trio.CancelScope() as scope:
            if withdraw:

                async def withdraw_later() -> None:
                    await self.withdraw.wait()
                    scope.cancel()

                async with trio.open_nursery() as nursery:
                    nursery.start_soon(withdraw_later)
                    result = await self.client.request("session/request_permission", params)
                    nursery.cancel_scope.cancel()
            else:
                result = await self.client.request("session/request_permission", params)
        if result is not None:
            answer.outcome = result["outcome"]["outcome"]
            answer.option_id = result["outcome"].get("optionId")
            answer.meta = result["outcome"].get("_meta")
        self.answers.append(answer)
        allowed = answer.option_id in ("allow", "allow-always")
        decided_by = "editor" if result is not None else "timeout"
        await self.update(
            session_id,
            {
                "sessionUpdate": "tool_call_update",
                "toolCallId": call,
                "status": "completed" if allowed else "failed",
                "_meta": {
                    "simhost": {
                        "decidedBy": decided_by,
                        "decision": "allow" if allowed else "deny",
                    }
                },
            },
        )
        if self.say_outcome:
            await self.say(session_id, f"{'wrote' if allowed else 'denied'} {name}\n")


# ------------------------------------------------------------------- harness


@dataclass
class Harness:
    app: ChatApp
    runtime: FakeRuntime
    send: trio.MemorySendChannel[InputEvent]
    output: io.StringIO
    telemetry: MemoryTelemetry
    done: trio.Event
    exit_code: int | None = None

    @property
    def text(self) -> str:
        return self.output.getvalue()

    def events(self, name: str | None = None) -> list[dict[str, Any]]:
        records = self.telemetry.records
        return [r for r in records if name is None or r["event"] == name]

    async def press(self, *keys: Key | str) -> None:
        """Send keys (a str goes through the key decoder, as typed), then let all settle."""
        for key in keys:
            if isinstance(key, str):
                decoder = KeyDecoder()
                for decoded in decoder.feed(key.encode()) + decoder.flush():
                    await self.send.send(decoded)
            else:
                await self.send.send(key)
        await settle()

    async def event(self, event: InputEvent) -> None:
        await self.send.send(event)
        await settle()

    async def type_line(self, text: str) -> None:
        await self.press(text, Key("enter"))


async def settle() -> None:
    """Let every task run until all are blocked (memory streams: nothing is in flight)."""
    await trio.testing.wait_all_tasks_blocked()


@asynccontextmanager
async def running_chat(
    *,
    options: ChatOptions | None = None,
    screen: Callable[[Console], Screen] = PlainScreen,
    runtime: FakeRuntime | None = None,
    wait_ready: bool = True,
) -> AsyncIterator[Harness]:
    """Run a :class:`ChatApp` against a :class:`FakeRuntime`; yields once the prompt is up.

    With ``wait_ready=False`` it yields at once, while the chat starts.
    """
    ours, theirs = trio.testing.memory_stream_pair()
    runtime = runtime or FakeRuntime()
    output = io.StringIO()
    console = Console(file=output, width=120, force_terminal=True, color_system=None)
    telemetry = MemoryTelemetry()
    send, receive = trio.open_memory_channel[InputEvent](256)
    async with trio.open_nursery() as nursery:
        await nursery.start(runtime.serve, theirs)
        async with permclient.open_client(ours, dialect="bridge", telemetry=telemetry) as client:
            # No arming delay nor repeat guard unless a test asks: keys come in at once.
            options = options or ChatOptions(arm_delay=0, repeat_guard=0)
            app = ChatApp(client, screen(console), options)
            harness = Harness(app, runtime, send, output, telemetry, trio.Event())

            async def run() -> None:
                harness.exit_code = await app.run(receive)
                harness.done.set()

            nursery.start_soon(run)
            if wait_ready:
                with trio.fail_after(5):
                    await app.ready.wait()
            await settle()
            yield harness
            if not harness.done.is_set():
                app.quit(0)
            with trio.fail_after(5):
                await harness.done.wait()
        nursery.cancel_scope.cancel()


def answers_of(runtime: FakeRuntime) -> Sequence[tuple[str, str | None, str | None]]:
    return [(a.session_id, a.outcome, a.option_id) for a in runtime.answers]
