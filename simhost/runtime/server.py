"""The runtime side of the bridge dialect, on permclient's connection core.

:func:`serve` answers the editor's requests (``initialize``, ``sessionNew``,
``sessionList``, ``sessionRead``, ``sessionLoad``, ``sessionPermissions``,
``sessionSetPermission``, ``chatSend``) on any ``trio.abc.Stream`` until the
editor closes it; :func:`serve_stdio` does so on the process's stdin/stdout.

A turn (``chatSend``) runs in the cancel scope permclient gives its handler.
The editor cancelling it (``$/cancelRequest``) cancels that scope: every open
``session/request_permission`` of the turn is abandoned, which makes permclient
send ``$/cancelRequest`` for it, a running shell command is killed, and
permclient answers ``{"stopReason": "cancelled"}`` at once.
"""

from __future__ import annotations

import logging
import math
import os
import signal
import sys
from collections.abc import Sequence
from contextlib import ExitStack, suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

import trio

import simhost
from permclient import (
    Client,
    ConnectionClosed,
    ErrorCode,
    PermissionResponse,
    RemoteProtocolError,
    RequestError,
    Selected,
    open_client,
)
from simhost.runtime import grammar
from simhost.runtime.policy import PRESETS, Ask, Policy, evaluate
from simhost.runtime.sessions import SessionStore, StoredSession, UnknownSession
from simhost.runtime.tools import (
    ToolCall,
    ToolResult,
    new_file_text,
    plan_delete,
    plan_edit,
    plan_read,
    plan_shell,
    plan_write,
    shell_fallback,
    text_content,
)
from simhost.runtime.wire import (
    AgentMessageChunk,
    ChatSendParams,
    ChatSendResult,
    DecidedBy,
    GrantInfo,
    HistoryEntry,
    InitializeParams,
    InitializeResult,
    PermissionOptionOut,
    PermissionRequestOut,
    PresetInfo,
    RuntimeInfo,
    SessionIdParams,
    SessionListResult,
    SessionNewParams,
    SessionNewResult,
    SessionPermissionsResult,
    SessionReadResult,
    SessionSummary,
    SessionUpdate,
    SessionUpdateKind,
    SetPermissionParams,
    SetPermissionResult,
    SimhostDecision,
    TextBlock,
    ToolCallOut,
    ToolCallStart,
    ToolCallUpdateOut,
    ToolStatus,
    parse_params,
)

__all__ = ["OPTIONS", "Runtime", "RuntimeConfig", "serve", "serve_stdio"]

log = logging.getLogger("simhost.runtime")

OPTIONS: Final = [
    PermissionOptionOut("allow", "Allow", "allow_once"),
    PermissionOptionOut("allow-always", "Always allow in this session", "allow_always"),
    PermissionOptionOut("deny", "Deny", "reject_once"),
    PermissionOptionOut("deny-always", "Always deny in this session", "reject_always"),
]
"""The options of every ``session/request_permission``, in this order."""

_ALLOW_OPTIONS: Final = {"allow": None, "allow-always": "allow"}
_DENY_OPTIONS: Final = {"deny": None, "deny-always": "reject"}
_CANCELLED_TURN: Final = {"stopReason": "cancelled"}


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    """What a runtime serves: a workspace (resolved), a policy, a state folder."""

    workspace: Path
    policy: Policy
    policy_label: str
    state_dir: Path


@dataclass(slots=True)
class _Decision:
    meta: SimhostDecision
    reason: str

    @property
    def allowed(self) -> bool:
        return self.meta.decision == "allow"


def _stopped_by_cancel(exc: BaseException) -> bool:
    """True if ``exc`` is a ``trio.Cancelled``, or a group of nothing else."""
    if isinstance(exc, trio.Cancelled):
        return True
    if isinstance(exc, BaseExceptionGroup):
        _, rest = exc.split(trio.Cancelled)
        return rest is None
    return False


class Runtime:
    """Answers one editor connection. Create it, then :meth:`register` its handlers."""

    def __init__(self, client: Client, config: RuntimeConfig, store: SessionStore) -> None:
        self.client = client
        self.config = config
        self.store = store
        self.workspace_key = str(config.workspace)

    def register(self, stack: ExitStack) -> None:
        """Register a handler for every editor → runtime method (undone when ``stack`` closes)."""
        client = self.client
        handlers = {
            "initialize": self.initialize,
            "sessionNew": self.session_new,
            "sessionList": self.session_list,
            "sessionRead": self.session_read,
            "sessionLoad": self.session_load,
            "sessionPermissions": self.session_permissions,
            "sessionSetPermission": self.session_set_permission,
        }
        for method, handler in handlers.items():
            stack.enter_context(client.on_request(method, handler))
        stack.enter_context(
            client.on_request("chatSend", self.chat_send, cancelled_result=_CANCELLED_TURN)
        )

    # ------------------------------------------------------------------ sessions

    def _session(self, session_id: str) -> StoredSession:
        try:
            return self.store.get(session_id)
        except UnknownSession as exc:
            raise RequestError(ErrorCode.INVALID_PARAMS, str(exc)) from None

    def _read_result(self, session: StoredSession) -> SessionReadResult:
        return SessionReadResult(
            session.session_id,
            session.title,
            session.session_id == self.store.active_id,
            session.updated_at,
            list(session.history),
        )

    async def initialize(self, params: Any) -> InitializeResult:
        """``initialize``: who we are, where we act, under which policy."""
        parse_params(params, InitializeParams)
        return InitializeResult(
            RuntimeInfo("simhost-runtime", simhost.__version__),
            self.workspace_key,
            self.config.policy_label,
            list(PRESETS),
        )

    async def session_new(self, params: Any) -> SessionNewResult:
        """``sessionNew``: create a session; it becomes the active one."""
        request = parse_params(params, SessionNewParams)
        try:
            session = self.store.create(request.title)
        except OSError as exc:
            raise RequestError(
                ErrorCode.INTERNAL_ERROR, f"cannot save the new session: {exc}"
            ) from exc
        return SessionNewResult(session.session_id)

    async def session_list(self, params: Any) -> SessionListResult:
        """``sessionList``: every session, oldest first."""
        active = self.store.active_id
        return SessionListResult(
            [
                SessionSummary(s.session_id, s.title, s.session_id == active, s.updated_at)
                for s in self.store.sessions()
            ]
        )

    async def session_read(self, params: Any) -> SessionReadResult:
        """``sessionRead``: a session's history; never changes which session is active."""
        request = parse_params(params, SessionIdParams)
        return self._read_result(self._session(request.session_id))

    async def session_load(self, params: Any) -> SessionReadResult:
        """``sessionLoad``: like ``sessionRead``, and the session becomes the active one."""
        request = parse_params(params, SessionIdParams)
        session = self._session(request.session_id)
        self.store.activate(session.session_id)
        return self._read_result(session)

    async def session_permissions(self, params: Any) -> SessionPermissionsResult:
        """``sessionPermissions``: the session's preset, every preset, its standing grants."""
        request = parse_params(params, SessionIdParams)
        session = self._session(request.session_id)
        grants = session.grants.get(self.workspace_key, {})
        return SessionPermissionsResult(
            session.preset_id,
            [PresetInfo(p.preset_id, p.description) for p in PRESETS.values()],
            [GrantInfo(tool, decision) for tool, decision in sorted(grants.items())],
        )

    async def session_set_permission(self, params: Any) -> SetPermissionResult:
        """``sessionSetPermission``: switch the session's preset (persisted)."""
        request = parse_params(params, SetPermissionParams)
        session = self._session(request.session_id)
        if request.preset_id not in PRESETS:
            raise RequestError(
                ErrorCode.INVALID_PARAMS,
                f"unknown preset {request.preset_id!r}: expected one of {', '.join(PRESETS)}",
            )
        session.preset_id = request.preset_id
        session.touch()
        self.store.save(session)
        return SetPermissionResult(session.preset_id)

    # --------------------------------------------------------------------- turns

    async def chat_send(self, params: Any) -> ChatSendResult:
        """``chatSend``: run one turn. A peer cancel answers ``cancelled`` (permclient)."""
        request = parse_params(params, ChatSendParams)
        session = self._session(request.session_id)
        turn = Turn(self, session)
        try:
            await turn.run(request.text)
        except ConnectionClosed:
            return ChatSendResult("cancelled")  # nobody is left to read it
        except BaseException as exc:
            with trio.CancelScope(shield=True):
                await turn.stopped(cancelled=_stopped_by_cancel(exc))
            raise
        finally:
            session.touch()
            self.store.save(session)
        return ChatSendResult("end_turn")


class Turn:
    """One ``chatSend`` of one session."""

    def __init__(self, runtime: Runtime, session: StoredSession) -> None:
        self.runtime = runtime
        self.client = runtime.client
        self.session = session
        self.workspace = runtime.config.workspace
        self._open: dict[str, HistoryEntry] = {}
        """Tool calls of this turn not yet completed/failed, by id."""

    # ----------------------------------------------------------------- sending

    async def _send(self, update: SessionUpdateKind) -> None:
        await self.client.notify("session/update", SessionUpdate(self.session.session_id, update))

    async def _send_quietly(self, update: SessionUpdateKind) -> None:
        """Send while cleaning up: a closed connection is no longer anyone's business."""
        with suppress(ConnectionClosed):
            await self._send(update)

    async def say(self, text: str) -> None:
        """Send agent text and record it in the history."""
        self.session.add_history(HistoryEntry("agent", text))
        await self._send(AgentMessageChunk(TextBlock(text)))

    async def stopped(self, *, cancelled: bool) -> None:
        """The turn stopped early: fail its open tool calls and say so. Call it shielded."""
        why = "the turn was cancelled" if cancelled else "the turn failed"
        for tool_call_id, entry in list(self._open.items()):
            self._close(tool_call_id, entry, "failed", f"{why}")
            await self._send_quietly(
                ToolCallUpdateOut(tool_call_id, "failed", content=[text_content(why)])
            )
        text = "cancelled: the turn was cancelled" if cancelled else "error: the turn failed"
        self.session.add_history(HistoryEntry("agent", text))
        await self._send_quietly(AgentMessageChunk(TextBlock(text)))

    def _close(self, tool_call_id: str, entry: HistoryEntry, status: ToolStatus, note: str) -> None:
        entry.status = status
        entry.text = f"{entry.text} — {status}: {note}"
        self._open.pop(tool_call_id, None)

    # ------------------------------------------------------------------- a turn

    async def run(self, prompt: str) -> None:
        """Run ``prompt`` (one command of the grammar)."""
        self.session.add_history(HistoryEntry("user", prompt))
        command = grammar.parse(prompt)
        workspace = self.workspace
        match command:
            case grammar.Create(path, text):
                raw = {"path": path, "text": text}
                await self.run_tool(plan_write(workspace, path, new_file_text(text), raw))
            case grammar.Edit(path, old, new):
                await self.run_tool(plan_edit(workspace, path, old, new))
            case grammar.Read(path):
                await self.run_tool(plan_read(workspace, path))
            case grammar.Delete(path):
                await self.run_tool(plan_delete(workspace, path))
            case grammar.Run(shell_command):
                await self.run_tool(plan_shell(workspace, shell_command))
            case grammar.Burst(count):
                await self.burst(count)
            case grammar.Help():
                await self.say(grammar.help_text())
            case grammar.Usage(verb, usage, problem):
                await self.say(f"{verb}: {problem}. Usage: {usage}")
            case grammar.Say(text):
                await self.say(_plain_answer(text))

    async def burst(self, count: int) -> None:
        """``burst N``: N writes at once, each decided (and usually asked) on its own."""
        await self.say(f"burst {count}: writing burst-1.txt … burst-{count}.txt at once")
        outcomes: list[str] = []
        failure: list[ConnectionClosed] = []

        async def one(call: ToolCall, tool_call_id: str, cancel_scope: trio.CancelScope) -> None:
            try:
                outcome = await self.run_tool(call, tool_call_id=tool_call_id)
            except ConnectionClosed as exc:
                failure.append(exc)
                cancel_scope.cancel()
                return
            outcomes.append(outcome)

        async with trio.open_nursery() as nursery:
            for number in range(1, count + 1):
                name, text = f"burst-{number}.txt", f"burst {number}"
                raw = {"path": name, "text": text}
                call = plan_write(self.workspace, name, new_file_text(text), raw)
                # Ids in order (burst-K.txt is the K-th new id); the tasks then race.
                tool_call_id = self.session.new_tool_call_id()
                nursery.start_soon(one, call, tool_call_id, nursery.cancel_scope)
        if failure:
            raise failure[0]
        tally = {key: outcomes.count(key) for key in ("completed", "denied", "failed")}
        await self.say(
            f"burst {count}: {tally['completed']} completed, {tally['denied']} denied, "
            f"{tally['failed']} failed"
        )

    # -------------------------------------------------------------------- tools

    async def run_tool(
        self, call: ToolCall, *, tool_call_id: str | None = None, fallback_for: str | None = None
    ) -> str:
        """Announce, decide, run and report one tool call.

        Returns ``"completed"``, ``"denied"`` or ``"failed"`` (refused or the
        action failed). A refusal outside the workspace falls back to the shell.
        """
        if tool_call_id is None:
            tool_call_id = self.session.new_tool_call_id()
        meta: dict[str, Any] = {"tool": call.tool}
        if fallback_for is not None:
            meta["fallbackFor"] = fallback_for
        entry = self.session.add_history(
            HistoryEntry("tool", call.title, tool_call_id=tool_call_id, status="pending")
        )
        self._open[tool_call_id] = entry
        await self._send(
            ToolCallStart(
                tool_call_id,
                call.title,
                call.kind,
                "pending",
                call.raw_input,
                call.content,
                call.locations,
                {"simhost": meta},
            )
        )
        if call.refusal is not None:
            return await self._refuse(tool_call_id, entry, call)
        decision = await self._decide(tool_call_id, call, meta)
        outcome_meta = {"simhost": decision.meta}
        if decision.meta.decided_by == "grant":
            await self.say(f"standing grant applied to {call.title}: {decision.reason}")
        if not decision.allowed:
            text = f"denied: {call.title} ({decision.reason})"
            self._close(tool_call_id, entry, "failed", f"denied ({decision.reason})")
            await self._send(
                ToolCallUpdateOut(
                    tool_call_id,
                    "failed",
                    content=[text_content(text)],
                    raw_output={"error": "denied", "reason": decision.reason},
                    meta=outcome_meta,
                )
            )
            await self.say(text)
            return "denied"
        entry.status = "in_progress"
        await self._send(ToolCallUpdateOut(tool_call_id, "in_progress", meta=outcome_meta))
        result: ToolResult = await call.action()
        status: ToolStatus = "completed" if result.ok else "failed"
        self._close(tool_call_id, entry, status, result.text)
        await self._send(
            ToolCallUpdateOut(
                tool_call_id,
                status,
                content=[*result.content, text_content(result.text)],
                raw_output=result.raw_output,
                meta=outcome_meta,
            )
        )
        await self.say(result.text if result.ok else f"failed: {call.title}: {result.text}")
        return status

    async def _refuse(self, tool_call_id: str, entry: HistoryEntry, call: ToolCall) -> str:
        assert call.refusal is not None
        text = f"refused: {call.refusal.reason}"
        self._close(tool_call_id, entry, "failed", text)
        await self._send(
            ToolCallUpdateOut(
                tool_call_id,
                "failed",
                content=[text_content(text)],
                raw_output={"error": "refused", "reason": call.refusal.reason},
            )
        )
        fallback = shell_fallback(self.workspace, call)
        if fallback is None:
            await self.say(f"{call.tool} {text}")
            return "failed"
        await self.say(f"{call.tool} {text}; falling back to the shell (it asks like any command)")
        return await self.run_tool(fallback, fallback_for=tool_call_id)

    async def _decide(self, tool_call_id: str, call: ToolCall, meta: dict[str, Any]) -> _Decision:
        runtime = self.runtime
        preset = PRESETS.get(self.session.preset_id, PRESETS["ask"])
        grant = self.session.grant_for(runtime.workspace_key, call.tool)
        verdict = evaluate(runtime.config.policy, preset, call.tool, grant)
        if not isinstance(verdict, Ask):
            return _Decision(SimhostDecision(verdict.decided_by, verdict.decision), verdict.reason)
        return await self._ask(tool_call_id, call, meta, verdict.timeout_s)

    async def _ask(
        self, tool_call_id: str, call: ToolCall, meta: dict[str, Any], timeout_s: float | None
    ) -> _Decision:
        """Ask the editor; withdraw (and deny) after ``timeout_s`` seconds."""
        request_meta = dict(meta)
        if timeout_s is not None:
            request_meta["timeoutS"] = timeout_s
        params = PermissionRequestOut(
            self.session.session_id,
            ToolCallOut(
                tool_call_id,
                call.title,
                call.kind,
                "pending",
                call.raw_input,
                call.content,
                call.locations,
            ),
            OPTIONS,
            {"simhost": request_meta},
        )
        response: PermissionResponse | None = None
        with trio.move_on_after(math.inf if timeout_s is None else timeout_s) as deadline:
            try:
                response = await self.client.request(
                    "session/request_permission", params, result_type=PermissionResponse
                )
            except (RequestError, RemoteProtocolError) as exc:
                return self._denied("editor", f"the editor's answer was unusable: {exc}")
        if response is None:
            assert deadline.cancelled_caught
            return self._denied(
                "timeout", f"no answer within {timeout_s:g} s: the question was withdrawn"
            )
        outcome = response.outcome
        if not isinstance(outcome, Selected):
            return self._denied("editor", "the editor cancelled the question")
        option_id = outcome.option_id
        if option_id in _ALLOW_OPTIONS:
            grant = _ALLOW_OPTIONS[option_id]
            reason = "the editor allowed it"
            if grant is not None:
                self._grant(call, "allow")
                reason = f"the editor allowed {call.tool} for the rest of this session"
            return _Decision(SimhostDecision("editor", "allow", option_id), reason)
        if option_id in _DENY_OPTIONS:
            reason = "the editor denied it"
            if _DENY_OPTIONS[option_id] is not None:
                self._grant(call, "reject")
                reason = f"the editor denied {call.tool} for the rest of this session"
            return _Decision(SimhostDecision("editor", "deny", option_id), reason)
        return self._denied("editor", f"the editor chose {option_id!r}, which was not offered")

    @staticmethod
    def _denied(decided_by: DecidedBy, reason: str) -> _Decision:
        return _Decision(SimhostDecision(decided_by, "deny"), reason)

    def _grant(self, call: ToolCall, decision: Any) -> None:
        self.session.set_grant(self.runtime.workspace_key, call.tool, decision)
        self.session.touch()
        self.runtime.store.save(self.session)


def _plain_answer(text: str) -> str:
    if not text:
        return "(an empty prompt) " + grammar.help_text()
    return f"You said: {text}\n(no tool for that; type `help` for what I can do)"


# ------------------------------------------------------------------- serving


class _DrainAtEof(trio.abc.Stream):
    """A stream that, at end of input, first lets every task run until all are blocked.

    So requests already received and answerable without waiting (``initialize``,
    ``sessionList``, ...) are answered before permclient tears the connection
    down: ``printf … | simhost runtime --stdio`` gets its answers. Whatever
    still waits then (a question to the editor, a running command) is cancelled.
    """

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self.inner.receive_some(max_bytes)
        if not data:
            import trio.testing  # only at the end: it is a heavy import

            await trio.testing.wait_all_tasks_blocked()
        return data

    async def aclose(self) -> None:
        await self.inner.aclose()


async def serve(stream: trio.abc.Stream, config: RuntimeConfig) -> None:
    """Serve one editor over ``stream`` until it closes its side.

    Raises :class:`OSError` if the state folder cannot be created.
    """
    store = SessionStore(config.state_dir)
    async with open_client(_DrainAtEof(stream), dialect="bridge") as client:
        with ExitStack() as stack:
            Runtime(client, config, store).register(stack)
            reason = await client.wait_closed()
    log.info("the editor closed the connection: %s", reason)


async def _stop_on_signal(scope: trio.CancelScope) -> None:
    # SIGTERM or SIGHUP (the editor or its terminal went away): unwind like a
    # cancelled turn, so running commands' process groups are killed, not orphaned.
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP) as signals:
        async for signum in signals:
            log.info("received %s: stopping", signal.Signals(signum).name)
            scope.cancel()
            return


def _claim_stdio() -> tuple[int, int]:
    """Take stdin/stdout for the protocol; point fds 0 and 1 elsewhere.

    Returns the protocol's (input, output) descriptors. From then on, anything
    that writes to fd 1 (a stray ``print``, a child process) lands on stderr,
    and nothing can read the editor's bytes from fd 0.
    """
    protocol_in = os.dup(0)
    protocol_out = os.dup(1)
    try:
        os.dup2(2, 1)
    except OSError:
        null_out = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null_out, 1)
        os.close(null_out)
    null_in = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null_in, 0)
    os.close(null_in)
    sys.stdout = sys.stderr
    return protocol_in, protocol_out


async def serve_stdio(config: RuntimeConfig, fds: Sequence[int] | None = None) -> None:
    """Serve on stdin/stdout (or on the given ``(input, output)`` descriptors).

    Raises :class:`OSError` if the state folder cannot be created.
    """
    protocol_in, protocol_out = fds if fds is not None else _claim_stdio()
    # FdStream makes the descriptors non-blocking, and that flag belongs to the
    # open file, which a terminal shares with the shell: put it back afterwards.
    keep = [os.dup(fd) for fd in (protocol_in, protocol_out)]
    try:
        stream = trio.StapledStream(
            trio.lowlevel.FdStream(protocol_out), trio.lowlevel.FdStream(protocol_in)
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stop_on_signal, nursery.cancel_scope)
            await serve(stream, config)
            nursery.cancel_scope.cancel()
    finally:
        for fd in keep:
            with suppress(OSError):
                os.set_blocking(fd, True)
            os.close(fd)
