"""The dialect-neutral runtime: sessions, turns, decisions and tools.

:class:`Runtime` holds one editor connection's state (the session store, the
policy, the workspace); :class:`Turn` runs one prompt: it parses it
(:mod:`simhost.runtime.grammar`), announces each tool call as an ACP-shaped
``session/update``, decides it (:mod:`simhost.runtime.policy`), asks the editor
with ``session/request_permission`` when it must, and runs the tool only after
an allow. Both dialects send these same messages; what differs between them
(method names, framing, how a turn is cancelled) lives in
:mod:`simhost.runtime.bridge` and :mod:`simhost.runtime.acp`.

A turn runs in its caller's cancel scope. Cancelling it abandons every open
``session/request_permission`` of the turn (permclient then sends the
dialect's cancel notification for it), kills a running shell command, and
fails the turn's open tool calls (:meth:`Turn.stopped`).
"""

from __future__ import annotations

import logging
import math
from contextlib import suppress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import trio

from permclient import (
    Client,
    ConnectionClosed,
    DialectName,
    ErrorCode,
    PermissionResponse,
    RemoteProtocolError,
    RequestError,
    Selected,
)
from permclient.rules import reason_of
from simhost.runtime import grammar
from simhost.runtime.grants import GrantSubject, option_name, receipt, subject_of
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
    DecidedBy,
    GrantDecision,
    HistoryEntry,
    PermissionOptionOut,
    PermissionRequestOut,
    SessionUpdate,
    SessionUpdateKind,
    SimhostDecision,
    StopReason,
    TextBlock,
    ToolCallOut,
    ToolCallStart,
    ToolCallUpdateOut,
    ToolStatus,
)

__all__ = ["Runtime", "RuntimeConfig", "Turn", "agent_message", "options_for"]

log = logging.getLogger("simhost.runtime")


def options_for(subject: GrantSubject | None) -> list[PermissionOptionOut]:
    """The options of a ``session/request_permission``, in this order.

    ``allow``, ``allow-always``, ``deny``, ``deny-always``; the two "always"
    options name their scope, and are left out when the call has none
    (:mod:`simhost.runtime.grants`).
    """
    scope = subject.scope if subject is not None else None
    if subject is None or scope is None:
        return [
            PermissionOptionOut("allow", "Allow", "allow_once"),
            PermissionOptionOut("deny", "Deny", "reject_once"),
        ]
    return [
        PermissionOptionOut("allow", "Allow", "allow_once"),
        PermissionOptionOut(
            "allow-always", option_name("allow", subject.tool, scope), "allow_always"
        ),
        PermissionOptionOut("deny", "Deny", "reject_once"),
        PermissionOptionOut(
            "deny-always", option_name("reject", subject.tool, scope), "reject_always"
        ),
    ]


@dataclass(frozen=True, slots=True)
class RuntimeConfig:
    """What a runtime serves: a workspace (resolved), a policy, a state folder, a dialect."""

    workspace: Path
    policy: Policy
    policy_label: str
    state_dir: Path
    dialect: DialectName = "bridge"


@dataclass(slots=True)
class _Decision:
    meta: SimhostDecision
    reason: str
    receipt: str | None = None
    """Set when a standing grant decided: the line that says which."""

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
    """One editor connection's state, and what both dialects do with it.

    The dialect modules register the editor's methods on :attr:`client` and
    call these.
    """

    def __init__(self, client: Client, config: RuntimeConfig, store: SessionStore) -> None:
        self.client = client
        self.config = config
        self.store = store
        self.workspace_key = str(config.workspace)

    def session(self, session_id: str, missing: int = ErrorCode.INVALID_PARAMS) -> StoredSession:
        """The session ``session_id``.

        Raises :class:`RequestError` with code ``missing`` if there is none.
        """
        try:
            return self.store.get(session_id)
        except UnknownSession as exc:
            raise RequestError(missing, str(exc)) from None

    def create_session(self, title: str | None) -> StoredSession:
        """Create a session; it becomes the active one.

        Raises :class:`RequestError` (-32603) if it cannot be saved.
        """
        try:
            return self.store.create(title)
        except OSError as exc:
            raise RequestError(
                ErrorCode.INTERNAL_ERROR, f"cannot save the new session: {exc}"
            ) from exc

    def set_preset(self, session: StoredSession, preset_id: str) -> None:
        """Switch ``session`` to the preset ``preset_id`` (persisted).

        Raises :class:`RequestError` (-32602) for an unknown preset.
        """
        if preset_id not in PRESETS:
            raise RequestError(
                ErrorCode.INVALID_PARAMS,
                f"unknown preset {preset_id!r}: expected one of {', '.join(PRESETS)}",
            )
        session.preset_id = preset_id
        session.touch()
        self.store.save(session)

    async def run_turn(self, session: StoredSession, prompt: str) -> StopReason:
        """Run one turn of ``session``; returns ``"end_turn"``.

        Returns ``"cancelled"`` if the connection closed under it. When the
        caller's scope is cancelled, the turn's open tool calls are failed (and
        that is said) before ``trio.Cancelled`` propagates. The session is saved
        on every path.
        """
        turn = Turn(self, session)
        try:
            await turn.run(prompt)
        except ConnectionClosed:
            return "cancelled"  # nobody is left to read it
        except BaseException as exc:
            with trio.CancelScope(shield=True):
                await turn.stopped(cancelled=_stopped_by_cancel(exc))
            raise
        finally:
            session.touch()
            self.store.save(session)
        return "end_turn"


class Turn:
    """One turn (bridge ``chatSend``, ACP ``session/prompt``) of one session."""

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
        """Send agent text (one whole message) and record it in the history."""
        self.session.add_history(HistoryEntry("agent", text))
        await self._send(agent_message(text))

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
        await self._send_quietly(agent_message(text))

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
        decision = await self._decide(tool_call_id, call, meta, grantable=fallback_for is None)
        outcome_meta = {"simhost": decision.meta}
        if decision.receipt is not None and decision.allowed:
            await self.say(decision.receipt)  # a denial's own line names the grant
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

    async def _decide(
        self, tool_call_id: str, call: ToolCall, meta: dict[str, Any], *, grantable: bool
    ) -> _Decision:
        """Decide ``call``; a call that is not ``grantable`` (a shell fallback for a refused
        file tool, whose words no person typed) is never answered by a standing grant
        and is offered no "always" option."""
        runtime = self.runtime
        preset = PRESETS.get(self.session.preset_id, PRESETS["ask"])
        subject = (
            subject_of(call.tool, call.raw_input, call.locations, runtime.config.workspace)
            if grantable
            else None
        )
        grant, grant_receipt = self._standing_grant(subject)
        verdict = evaluate(runtime.config.policy, preset, call.tool, grant, grant_receipt)
        if not isinstance(verdict, Ask):
            by_grant = grant_receipt if verdict.decided_by == "grant" else None
            return _Decision(
                SimhostDecision(verdict.decided_by, verdict.decision, grant=by_grant),
                verdict.reason,
                by_grant,
            )
        return await self._ask(tool_call_id, call, meta, verdict.timeout_s, subject)

    def _standing_grant(self, subject: GrantSubject | None) -> tuple[GrantDecision | None, str]:
        """The standing grant covering ``subject`` (a reject beats an allow), and its receipt."""
        if subject is None:
            return None, ""
        found: GrantDecision | None = None
        text = ""
        workspace = self.runtime.config.workspace
        for grant in self.session.grants_in(self.runtime.workspace_key):
            scope = tuple(grant.scope)
            if subject.covered_by(grant.tool, scope, workspace) and found != "reject":
                found, text = grant.decision, receipt(grant.decision, grant.tool, scope)
        return found, text

    async def _ask(
        self,
        tool_call_id: str,
        call: ToolCall,
        meta: dict[str, Any],
        timeout_s: float | None,
        subject: GrantSubject | None,
    ) -> _Decision:
        """Ask the editor; withdraw (and deny) after ``timeout_s`` seconds."""
        request_meta = dict(meta)
        if timeout_s is not None:
            request_meta["timeoutS"] = timeout_s
        options = options_for(subject)
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
            options,
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
        chosen = next((o for o in options if o.option_id == option_id), None)
        if chosen is None:
            return self._denied("editor", f"the editor chose {option_id!r}, which was not offered")
        allowed = chosen.kind in ("allow_once", "allow_always")
        reason = "the editor allowed it" if allowed else "the editor denied it"
        if chosen.kind in ("allow_always", "reject_always") and subject is not None:
            self._grant(subject, "allow" if allowed else "reject")
            reason = f'the editor chose "{chosen.name}"'
        given = None if allowed else reason_of(outcome.meta)
        if given is not None:  # the person's own words, shown to the model as they are
            reason += f", saying: {' '.join(given.split())}"
        return _Decision(
            SimhostDecision("editor", "allow" if allowed else "deny", option_id), reason
        )

    @staticmethod
    def _denied(decided_by: DecidedBy, reason: str) -> _Decision:
        return _Decision(SimhostDecision(decided_by, "deny"), reason)

    def _grant(self, subject: GrantSubject, decision: GrantDecision) -> None:
        assert subject.scope is not None  # only then are "always" options offered
        self.session.set_grant(self.runtime.workspace_key, subject.tool, subject.scope, decision)
        self.session.touch()
        self.runtime.store.save(self.session)


def agent_message(text: str) -> AgentMessageChunk:
    """An ``agent_message_chunk`` of one whole message: it ends with a newline.

    So a client that prints agent text as it streams starts the next message on
    a line of its own. The history keeps the text without it.
    """
    return AgentMessageChunk(TextBlock(text if text.endswith("\n") else text + "\n"))


def _plain_answer(text: str) -> str:
    if not text:
        return "(an empty prompt) " + grammar.help_text()
    return f"You said: {text}\n(no tool for that; type `help` for what I can do)"
