"""Run a scenario against an agent and check what it must and what always must hold.

:func:`run_scenario` is the Python API behind ``simhost run`` (and the pytest
plugin). For each repeat it lays out a fresh workspace, starts the agent with
:func:`permclient.open_process` (the reference runtime, ``simhost runtime``, by
default), opens every session (``copies`` of each) at once and runs each
session's turns in order.

A turn sends its prompt with a permission handler for exactly its session in
place. Each permission request is matched to the turn's expectations
(:func:`match_request`: title pattern searched, kind) and answered as scripted
(:func:`choose_decision`) after ``delay_ms`` plus seeded jitter; a request that
matches nothing is answered ``cancelled`` and reported. ``cancel_after_ms`` /
``cancel_after_request`` cancel the turn: in the bridge dialect by cancelling
the ``chatSend`` call (permclient sends ``$/cancelRequest`` and answers the
session's open questions; the runtime's answer is dropped, so the stop reason
is recorded as ``cancelled``), in ACP by sending ``session/cancel`` and waiting
for the agent's own ``stopReason``. After a cancel the turn lasts until the
session's tool calls have settled (bounded by :data:`SETTLE_S`), so late
questions of the cancelled turn are answered by its handler, not reported as
strays. Then the turn's expectations (:class:`~simhost.run.scenario.AfterTurn`)
are checked.

Whatever the scenario says, every run also checks these invariants (from an
in-memory telemetry sink and the handlers' own records):

* every permission request is answered exactly once (an id reused while its
  request is pending is reported);
* every request is handled by the handler of the session it names, and a
  request for a session with no turn running (answered ``cancelled`` by
  permclient: ``approval.unrouted``, or by the turn's handler when it came after
  the turn's prompt had returned) is reported; so is a malformed one;
* no permission card is still open when its turn ends;
* no tool call is reported ``completed`` while its latest approval decision
  was a denial or a cancel (watched until the agent has exited).

In prompts and in expectations' paths, texts and patterns, ``{copy}`` stands for
the copy number (1…copies), ``{session}`` for the session's label (``alpha`` or
``alpha#2``), ``{name}`` for the session's name and ``{repeat}`` for the repeat
number, so that copies can work on files of their own.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import math
import os
import random
import re
import shlex
import shutil
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, Final, Literal

import msgspec
import trio

import permclient
from permclient import (
    Cancelled,
    Client,
    ConnectionClosed,
    Decision,
    InboundNotification,
    PermclientError,
    PermissionOption,
    PermissionRequest,
    Selected,
)
from simhost._updates import message_text, tool_report
from simhost.chat.backends import AcpBackend, Backend, BridgeBackend

from .scenario import (
    AfterTurn,
    AgentSpec,
    Answer,
    ExpectedRequest,
    Scenario,
    TurnSpec,
    fill_placeholders,
    placeholder_values,
)

__all__ = [
    "CANCEL_GRACE_S",
    "DEFAULT_TURN_TIMEOUT_S",
    "SETTLE_S",
    "NoSuchOption",
    "RunEvent",
    "ScenarioResult",
    "TurnResult",
    "agent_argv",
    "answer_delay_ms",
    "choose_decision",
    "match_request",
    "percentile",
    "run_scenario",
]

log = logging.getLogger("simhost.run")

DEFAULT_TURN_TIMEOUT_S: Final = 60.0
"""A turn that has not ended after this long is cancelled and fails."""
CANCEL_GRACE_S: Final = 10.0
"""ACP: how long the agent has to answer the prompt after ``session/cancel``."""
SETTLE_S: Final = 3.0
"""After a cancel: how long to wait for the session's tool calls to become final."""

_OPTION_KIND: Final[dict[str, str]] = {
    "allow": "allow_once",
    "allow_always": "allow_always",
    "reject": "reject_once",
    "reject_always": "reject_always",
}
_PERMISSION_METHOD: Final = "session/request_permission"
_STDERR_TAIL: Final = 2000


# ------------------------------------------------------------------- results


class TurnResult(msgspec.Struct, kw_only=True):
    """What became of one turn of one session (one copy, one repeat)."""

    session: str
    """The session's label: its name, or ``name#K`` for copy K when there are copies."""
    index: int
    """The turn's number in its session, from 1."""
    prompt: str
    passed: bool
    failures: list[str]
    """Each says what was expected and what happened."""
    stop_reason: str | None
    """The agent's stop reason (bridge, cancelled by us: ``cancelled``); None if none came."""
    duration_s: float
    requests: int = 0
    """How many permission requests the turn got."""
    repeat: int = 1


class ScenarioResult(msgspec.Struct, kw_only=True):
    """A whole scenario's outcome (every repeat); JSON-serialisable with msgspec."""

    name: str
    passed: bool
    """Every expectation of every turn held, and no invariant was violated."""
    turns: list[TurnResult]
    violations: list[str]
    """Built-in invariants that did not hold, and failures of the run itself."""
    wall_s: float
    """From the first agent's start to the last one's exit, every repeat included."""
    latencies_ms: list[float]
    """Answer latency of every request a handler answered (telemetry ``latency_ms``)."""
    latency_median_ms: float | None = None
    latency_p99_ms: float | None = None
    dialect: str = "bridge"
    agent: str = ""
    """The agent's command line."""
    seed: int = 0
    repeat: int = 1
    requests: int = 0
    """Permission requests seen, in all."""
    sessions_s: float = 0.0
    """The part of ``wall_s`` the sessions ran (the agent's start and exit left out)."""


class RunEvent(msgspec.Struct, frozen=True, kw_only=True):
    """Progress, for a live view: passed to ``run_scenario(on_event=...)``."""

    kind: Literal[
        "repeat_started",
        "session_started",
        "turn_started",
        "request",
        "turn_finished",
        "session_finished",
    ]
    repeat: int
    session: str = ""
    turn: int = 0
    turns: int = 0
    """How many turns the session has."""
    detail: str = ""
    """The prompt (turn_started), the request's title (request), the first failure."""
    passed: bool = True


EventCallback = Callable[[RunEvent], None]


# ------------------------------------------------------------ pure helpers


class NoSuchOption(ValueError):
    """The scripted answer needs an option kind the request did not offer."""


def match_request(
    expected: Sequence[ExpectedRequest], counts: Sequence[int], title: str, kind: str | None
) -> int | None:
    """Which expectation a permission request meets, as an index into ``expected``.

    An expectation fits when its ``title`` pattern is found in ``title``
    (:func:`re.search`) and its ``kind``, if given, equals ``kind``. The first
    fitting one whose ``count`` is not used up yet (``counts[i]`` requests
    already matched) wins; when all fitting ones are used up, the last of them
    (its count check then fails). Returns ``None`` when none fits.
    """
    fitting = [
        i
        for i, exp in enumerate(expected)
        if re.search(exp.title, title) and (exp.kind is None or exp.kind == kind)
    ]
    for i in fitting:
        count = expected[i].count
        if count is None or counts[i] < count:
            return i
    return fitting[-1] if fitting else None


def choose_decision(answer: Answer, options: Sequence[PermissionOption]) -> Decision | None:
    """The decision a scripted ``answer`` makes for a request offering ``options``.

    ``allow`` / ``allow_always`` / ``reject`` / ``reject_always`` select the
    first offered option of kind ``allow_once`` / ``allow_always`` /
    ``reject_once`` / ``reject_always``, by its id; ``cancel`` is
    :class:`~permclient.Cancelled`; ``ignore`` returns ``None`` (leave the
    question open). Raises :class:`NoSuchOption` when no option of the kind
    was offered: never a fallback to another option.
    """
    if answer == "ignore":
        return None
    if answer == "cancel":
        return Cancelled()
    kind = _OPTION_KIND[answer]
    for option in options:
        if option.kind == kind:
            return Selected(option.option_id)
    offered = ", ".join(f"{o.option_id} ({o.kind})" for o in options) or "nothing"
    raise NoSuchOption(f"answer {answer!r} needs an option of kind {kind}; offered: {offered}")


def answer_delay_ms(expected: ExpectedRequest, seed: int, key: str) -> int:
    """How long to wait before answering: ``delay_ms`` plus 0…``jitter_ms`` from the seed.

    The jitter is drawn from ``seed`` and ``key`` (the runner's key names the
    repeat, the session, the turn and the tool call), never from the order in
    which requests arrive, so the same seed waits the same way again.
    """
    if not expected.jitter_ms:
        return expected.delay_ms
    return expected.delay_ms + random.Random(f"{seed}/{key}").randint(0, expected.jitter_ms)


def percentile(values: Sequence[float], fraction: float) -> float | None:
    """The nearest-rank percentile (``fraction`` 0.5 = median, 0.99 = p99); None if empty."""
    if not values:
        return None
    ordered = sorted(values)
    rank = max(1, math.ceil(fraction * len(ordered)))
    return ordered[min(rank, len(ordered)) - 1]


def agent_argv(
    agent: AgentSpec, workspace: Path, state_dir: Path, base_dir: Path | None = None
) -> list[str]:
    """The agent's command line.

    ``agent.command`` split like a shell would; otherwise the reference runtime:
    ``python -m simhost runtime --stdio --workspace W --state-dir S`` plus
    ``--dialect acp`` and ``--policy P`` when asked. A policy that names a file
    (relative to ``base_dir``, the scenario's folder) is passed as an absolute
    path; anything else as a shipped policy's name.
    """
    if agent.command is not None:
        return shlex.split(agent.command)
    argv = [sys.executable, "-m", "simhost", "runtime", "--stdio"]
    argv += ["--workspace", str(workspace), "--state-dir", str(state_dir)]
    if agent.dialect != "bridge":
        argv += ["--dialect", agent.dialect]
    if agent.policy:
        argv += ["--policy", _policy_arg(agent.policy, base_dir)]
    return argv


def _policy_arg(policy: str, base_dir: Path | None) -> str:
    path = Path(policy).expanduser()
    if not path.is_absolute():
        path = (base_dir or Path.cwd()) / path
    if path.is_file() or policy.endswith(".json") or os.sep in policy:
        return str(path.resolve())
    return policy


def _filled_turn(turn: TurnSpec, values: dict[str, str]) -> TurnSpec:
    """The turn with ``{copy}``, ``{session}``, ``{name}``, ``{repeat}`` filled in."""

    def f(text: str) -> str:
        return fill_placeholders(text, values)

    def p(text: str) -> str:
        return fill_placeholders(text, values, pattern=True)

    expect = turn.expect
    return msgspec.structs.replace(
        turn,
        prompt=f(turn.prompt),
        requests=[msgspec.structs.replace(r, title=p(r.title)) for r in turn.requests],
        expect=msgspec.structs.replace(
            expect,
            files_exist=[f(p) for p in expect.files_exist],
            files_absent=[f(p) for p in expect.files_absent],
            file_contains={f(k): f(v) for k, v in expect.file_contains.items()},
            reply_contains=[f(t) for t in expect.reply_contains],
            tool_status={p(k): v for k, v in expect.tool_status.items()},
        ),
    )


def _short(text: str, limit: int = 60) -> str:
    line = text.splitlines()[0] if text else ""
    return line if len(line) <= limit and "\n" not in text else line[: limit - 1] + "…"


# ----------------------------------------------------------- bookkeeping


class _Approval:
    """One permission request, as the telemetry saw it."""

    __slots__ = ("answers", "session_id", "tool_call_id")

    def __init__(self, session_id: str | None, tool_call_id: str | None) -> None:
        self.session_id = session_id
        self.tool_call_id = tool_call_id
        self.answers = 0


class _ToolRecord:
    """What the run knows of one tool call: its title, approvals and reports."""

    __slots__ = ("allowed", "denied", "status", "title")

    def __init__(self) -> None:
        self.title = ""
        self.status: str | None = None
        self.allowed = False
        """Its latest decision allowed it."""
        self.denied: str | None = None
        """How its latest decision refused it (``denied``/``cancelled``), if it did."""


class _Ledger:
    """The in-memory telemetry sink, and the invariants it proves.

    permclient emits from its reader and handler tasks, in the order things
    happened; the session callbacks (tool-call reports) run in the reader too,
    so one ordered record covers both.
    """

    def __init__(self) -> None:
        self.labels: dict[str, str] = {}
        """Session id -> label."""
        self.approvals: dict[Any, _Approval] = {}
        """Request id -> the request still open (or last seen) under that id."""
        self.open: set[Any] = set()
        self.requests = 0
        self.latencies_ms: list[float] = []
        self.violations: list[str] = []
        self.tools: dict[tuple[str, str], _ToolRecord] = {}
        self.option_kinds: dict[tuple[str, str], dict[str, str]] = {}
        self.frozen = False
        self.arrivals: dict[str, collections.deque[tuple[str | None, bool]]] = {}
        """Tool call id -> (the session each request named, whether it came after its
        session's prompt had returned), in the order the requests arrived; taken by
        the handlers as they start."""
        self.is_late: Callable[[str | None], bool] = lambda session_id: False
        """Whether a request naming this session now comes with no turn running."""

    def take_arrival(self, tool_call_id: str, session_id: str) -> tuple[str | None, bool] | None:
        """The arrival record of a request for ``tool_call_id`` a handler now starts on.

        The oldest that named ``session_id`` (sessions may use the same tool call
        ids, and handlers of different sessions may start in either order), else
        the oldest of all: a request that named another session.
        """
        queue = self.arrivals.get(tool_call_id)
        if not queue:
            return None
        arrival = next((a for a in queue if a[0] == session_id), queue[0])
        queue.remove(arrival)
        if not queue:
            del self.arrivals[tool_call_id]
        return arrival

    def label(self, session_id: str | None) -> str:
        if session_id is None:
            return "an unnamed session"
        label = self.labels.get(session_id)
        return f"session {label}" if label else f"session {session_id!r} (not opened by this run)"

    def tool(self, session_id: str, tool_call_id: str) -> _ToolRecord:
        key = (session_id, tool_call_id)
        record = self.tools.get(key)
        if record is None:
            record = self.tools[key] = _ToolRecord()
        return record

    # The Telemetry protocol: quick, and never raises.
    def emit(self, event: str, /, **fields: Any) -> None:
        if self.frozen:
            return
        try:
            self._record(event, fields)
        except Exception:  # pragma: no cover - telemetry never disturbs an answer
            log.exception("run ledger failed on %s", event)

    def _record(self, event: str, fields: dict[str, Any]) -> None:
        request_id = fields.get("request_id")
        if event == "server_request.start":
            if fields.get("method") != _PERMISSION_METHOD:
                pass
            elif request_id in self.open:
                # permclient refuses the new one (an error answer under the same id);
                # the pending one keeps its record, and its answer is a second one.
                approval = self.approvals[request_id]
                approval.answers += 1
                self.violations.append(
                    f"permission request {request_id!r} of {self.label(approval.session_id)}: "
                    "the agent reused its id for another request while it was still pending"
                )
            else:
                self.requests += 1
                self.approvals[request_id] = _Approval(None, None)
                self.open.add(request_id)
        elif event == "approval.requested":
            approval = self.approvals.setdefault(request_id, _Approval(None, None))
            approval.session_id = fields.get("session_id")
            approval.tool_call_id = fields.get("tool_call_id")
            # Recorded here, in the reader, in the order things came on the wire.
            late = self.is_late(approval.session_id)
            queue = self.arrivals.setdefault(str(approval.tool_call_id), collections.deque())
            queue.append((approval.session_id, late))
        elif event in ("approval.responded", "approval.cancelled"):
            self._answered(request_id, fields)
            if event == "approval.responded" and isinstance(fields.get("latency_ms"), float | int):
                self.latencies_ms.append(float(fields["latency_ms"]))
            self._decided(request_id, event, fields)
        elif event == "approval.unrouted":
            self._answered(request_id, fields)
            self.violations.append(
                f"permission request {request_id!r} named {self.label(fields.get('session_id'))}, "
                "which had no turn running: answered cancelled"
            )
        elif event == "approval.malformed":
            self._answered(request_id, fields)
            self.violations.append(
                f"permission request {request_id!r} for {self.label(fields.get('session_id'))} "
                f"was malformed ({fields.get('reason')}): answered cancelled"
            )

    def _answered(self, request_id: Any, fields: dict[str, Any]) -> None:
        approval = self.approvals.setdefault(request_id, _Approval(fields.get("session_id"), None))
        approval.answers += 1
        self.open.discard(request_id)
        if approval.answers > 1:
            self.violations.append(
                f"permission request {request_id!r} of {self.label(approval.session_id)} "
                f"was answered {approval.answers} times"
            )

    def _decided(self, request_id: Any, event: str, fields: dict[str, Any]) -> None:
        approval = self.approvals.get(request_id)
        if approval is None or approval.session_id is None or approval.tool_call_id is None:
            return
        key = (approval.session_id, approval.tool_call_id)
        record = self.tool(*key)
        option_id = fields.get("option_id")
        if event == "approval.responded" and fields.get("outcome") == "selected":
            kind = self.option_kinds.get(key, {}).get(str(option_id), "")
            if kind.startswith("allow"):
                record.allowed = True
                record.denied = None
            else:
                record.allowed = False
                record.denied = f"denied ({option_id})"
        else:
            record.allowed = False
            record.denied = "cancelled"

    def tool_reported(self, session_id: str, tool_call_id: str, title: str, status: str) -> None:
        """A ``tool_call`` / ``tool_call_update`` with a status arrived."""
        record = self.tool(session_id, tool_call_id)
        if title:
            record.title = title
        record.status = status
        if status == "completed" and record.denied and not self.frozen:
            self.violations.append(
                f"{self.label(session_id)}: tool call {tool_call_id} ({record.title or '?'}) was "
                f"reported completed after its approval was {record.denied}"
            )

    def finish(self) -> list[str]:
        """Stop recording; the violations, including requests never answered."""
        self.frozen = True
        for request_id in sorted(self.open, key=repr):
            approval = self.approvals.get(request_id)
            who = self.label(approval.session_id if approval else None)
            self.violations.append(f"permission request {request_id!r} of {who} was never answered")
        return self.violations


class _Turn:
    """One running turn: its handler, its counts, its failures."""

    def __init__(
        self,
        run: _Run,
        session: _Session,
        spec: TurnSpec,
        index: int,
    ) -> None:
        self.run = run
        self.session = session
        self.spec = spec
        self.index = index
        self.counts = [0] * len(spec.requests)
        self.requests = 0
        self.failures: list[str] = []
        self.reply: list[str] = []
        self.tool_calls: dict[str, None] = {}
        """Tool call ids first seen during this turn, in order."""
        self.cancelling = False
        self.cancel_reason = ""
        self.cancel_requested = trio.Event()
        self.stop_reason: str | None = None
        self.ended = False
        self.prompt_sent = False
        """The prompt has returned (and the turn was not being cancelled)."""

    @property
    def name(self) -> str:
        return f"{self.session.label} turn {self.index}"

    def request_cancel(self, reason: str) -> None:
        if not self.cancelling:
            self.cancelling = True
            self.cancel_reason = reason
            self.cancel_requested.set()

    def see_tool(self, tool_call_id: str) -> None:
        if tool_call_id not in self.session.seen_tools:
            self.session.seen_tools.add(tool_call_id)
            self.tool_calls[tool_call_id] = None

    async def handle(self, request: PermissionRequest) -> Decision:
        """The turn's permission handler (registered for exactly its session)."""
        session = self.session
        arrival = self.run.ledger.take_arrival(request.tool_call.tool_call_id, session.id)
        named, late = arrival if arrival is not None else (request.session_id, False)
        if request.session_id != session.id or named != session.id:
            wrong = named if named != session.id else request.session_id
            self.run.violations.append(
                f"{self.name}: its handler was given a request for session "
                f"{wrong!r}: answered cancelled"
            )
            return Cancelled()
        # Late is judged in wire order when the ledger saw the request arrive; the
        # handler itself may only run once the turn has ended, which proves nothing.
        if (late if arrival is not None else self.ended) and not self.cancelling:
            # The agent asks after its turn ended: no turn is running for the session.
            self.run.violations.append(
                f"{self.name}: permission request {request.tool_call.title or ''!r} "
                f"(tool call {request.tool_call.tool_call_id}) arrived after the turn had "
                "ended, with no turn running: answered cancelled"
            )
            return Cancelled()
        self.requests += 1
        ordinal = self.requests
        call = request.tool_call
        title = call.title or ""
        key = (session.id, call.tool_call_id)
        self.run.ledger.option_kinds[key] = {o.option_id: o.kind for o in request.options}
        record = self.run.ledger.tool(*key)
        record.title = record.title or title
        self.see_tool(call.tool_call_id)
        index = match_request(self.spec.requests, self.counts, title, call.kind)
        if index is not None:
            self.counts[index] += 1
        self.run.event("request", session, turn=self.index, detail=title)
        session.changed()
        if self.cancelling:
            return Cancelled()  # a late question of a cancelled turn
        if self.spec.cancel_after_request == ordinal:
            self.request_cancel(f"at its permission request {ordinal}")
            await trio.sleep_forever()  # the turn cancel answers it
        if index is None:
            self.failures.append(
                f"unexpected permission request {title!r} (kind {call.kind}): no expected "
                "request matches it; answered cancelled"
            )
            return Cancelled()
        expected = self.spec.requests[index]
        jitter_key = f"{self.run.repeat}/{self.name}/{call.tool_call_id}"
        delay_ms = answer_delay_ms(expected, self.run.seed, jitter_key)
        if delay_ms:
            await trio.sleep(delay_ms / 1000)
        if self.cancelling:
            return Cancelled()
        try:
            decision = choose_decision(expected.answer, request.options)
        except NoSuchOption as exc:
            self.failures.append(f"request {title!r}: {exc}; answered cancelled")
            return Cancelled()
        if decision is None:
            await trio.sleep_forever()  # ignore: until the agent withdraws it or the turn ends
        assert decision is not None
        return decision


class _Session:
    """One running session (one copy): its id, label and notifications."""

    def __init__(self, run: _Run, session_id: str, label: str, turns: int) -> None:
        self.run = run
        self.id = session_id
        self.label = label
        self.turns = turns
        self.turn: _Turn | None = None
        self.seen_tools: set[str] = set()
        self._changed = trio.Event()

    def changed(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def on_notification(self, notification: InboundNotification) -> None:
        """Session callback (in permclient's reader): reply text and tool reports."""
        update = notification.update  # typed once, shared with client.tool_calls
        if update is None:
            return
        turn = self.turn
        text = message_text(update)
        report = tool_report(update)
        if text is not None:
            if turn is not None and text:
                turn.reply.append(text)
        elif report is not None:
            if turn is not None:
                turn.see_tool(report.tool_call_id)
            self.run.ledger.tool_reported(
                self.id, report.tool_call_id, report.title or "", report.status or ""
            )
        self.changed()

    def settled(self, client: Client, turn: _Turn) -> bool:
        if client.pending_permissions(self.id):
            return False
        for tool_call_id in turn.tool_calls:
            state = client.tool_calls.get(self.id, tool_call_id)
            if state is not None and not state.is_final:
                return False
        return True

    async def wait_settled(self, client: Client, turn: _Turn) -> None:
        """Wait until no question is open and the turn's tool calls are final."""
        while not self.settled(client, turn) and client.closed_reason is None:
            await self._changed.wait()


# ----------------------------------------------------------------- a run


class _Run:
    """One repeat: one agent process, every session at once."""

    def __init__(
        self,
        scenario: Scenario,
        agent: AgentSpec,
        *,
        seed: int,
        repeat: int,
        workspace: Path,
        on_event: EventCallback | None,
        turn_timeout: float,
    ) -> None:
        self.scenario = scenario
        self.agent = agent
        self.seed = seed
        self.repeat = repeat
        self.workspace = workspace
        self.on_event = on_event
        self.turn_timeout = turn_timeout
        self.ledger = _Ledger()
        self.violations: list[str] = []
        self.turns: list[TurnResult] = []
        self.stderr_tail: Callable[[], str] = lambda: ""
        self.sessions_s = 0.0
        self.sessions: dict[str, _Session] = {}
        self.ledger.is_late = self._is_late
        self.client: Client | None = None

    def _is_late(self, session_id: str | None) -> bool:
        """A request naming ``session_id`` arrives after its turn's prompt has returned."""
        session = self.sessions.get(session_id) if session_id is not None else None
        turn = session.turn if session is not None else None
        if turn is None or turn.cancelling or not turn.prompt_sent:
            return False
        if turn.ended:
            return True
        return (
            self.client is not None
            and session_id is not None
            and not self.client.turn_running(session_id)
        )

    def event(
        self,
        kind: Any,
        session: _Session | None = None,
        *,
        turn: int = 0,
        detail: str = "",
        passed: bool = True,
    ) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(
                RunEvent(
                    kind=kind,
                    repeat=self.repeat,
                    session=session.label if session else "",
                    turn=turn,
                    turns=session.turns if session else 0,
                    detail=detail,
                    passed=passed,
                )
            )
        except Exception:
            log.exception("on_event callback failed")

    async def run(self, client: Client) -> None:
        self.client = client
        backend: Backend = (
            AcpBackend(client, self.workspace) if client.dialect == "acp" else BridgeBackend(client)
        )
        why = ""
        with trio.move_on_after(self.turn_timeout) as limit:
            try:
                await backend.start()
            except PermclientError as exc:
                why = str(exc)
        if limit.cancelled_caught:
            why = f"no answer to initialize within {self.turn_timeout:g} s"
        if why:
            self.violations.append(f"the agent did not initialize: {why}{self._tail()}")
            self._not_run_all("the agent did not initialize")
            return
        started = time.perf_counter()
        async with trio.open_nursery() as nursery:
            for spec in self.scenario.sessions:
                for copy in range(1, spec.copies + 1):
                    values = placeholder_values(spec.name, spec.copies, copy, self.repeat)
                    label = values["session"]
                    turns = [_filled_turn(t, values) for t in spec.turns]
                    nursery.start_soon(self._run_session, client, backend, label, turns)
        self.sessions_s = time.perf_counter() - started

    def _tail(self) -> str:
        tail = self.stderr_tail().strip()
        return f"\nthe agent's stderr ends with:\n{tail}" if tail else ""

    def _not_run(self, label: str, turns: Sequence[TurnSpec], start: int, why: str) -> None:
        for index, spec in enumerate(turns[start:], start + 1):
            self.turns.append(
                TurnResult(
                    session=label,
                    index=index,
                    prompt=spec.prompt,
                    passed=False,
                    failures=[f"not run: {why}"],
                    stop_reason=None,
                    duration_s=0.0,
                    repeat=self.repeat,
                )
            )

    def _not_run_all(self, why: str) -> None:
        for spec in self.scenario.sessions:
            for copy in range(1, spec.copies + 1):
                label = spec.name if spec.copies == 1 else f"{spec.name}#{copy}"
                self._not_run(label, spec.turns, 0, why)

    async def _run_session(
        self, client: Client, backend: Backend, label: str, turns: list[TurnSpec]
    ) -> None:
        session_id = why = ""
        with trio.move_on_after(self.turn_timeout) as limit:
            try:
                session_id, _ = await backend.new_session(label)
            except PermclientError as exc:
                why = str(exc)
        if limit.cancelled_caught:
            why = f"no answer within {self.turn_timeout:g} s"
        if why:
            self._not_run(label, turns, 0, f"the session could not be opened: {why}{self._tail()}")
            return
        self.ledger.labels[session_id] = label
        session = _Session(self, session_id, label, len(turns))
        self.sessions[session_id] = session
        self.event("session_started", session)
        passed = True
        # Kept for the rest of the run: what the agent reports after the session's
        # last turn (a tool call completed after all) is still judged.
        client.on_session_notification(session_id, session.on_notification)
        for index, spec in enumerate(turns, 1):
            result = await self._run_turn(client, backend, session, spec, index)
            passed = passed and result.passed
            if client.closed_reason is not None:
                why = f"the connection closed ({client.closed_reason}){self._tail()}"
                self._not_run(label, turns, index, why)
                passed = False
                break
        self.event("session_finished", session, passed=passed)

    async def _run_turn(
        self, client: Client, backend: Backend, session: _Session, spec: TurnSpec, index: int
    ) -> TurnResult:
        turn = _Turn(self, session, spec, index)
        session.turn = turn
        self.event("turn_started", session, turn=index, detail=spec.prompt)
        started = time.perf_counter()
        with client.permission_handler(session.id, turn.handle):
            await self._drive(client, backend, session, turn)
            open_cards = client.pending_permissions(session.id)
            if open_cards:
                self.violations.append(
                    f"{turn.name}: {open_cards} permission card(s) still open after the turn "
                    f"ended (stop reason {turn.stop_reason!r}); answered cancelled"
                )
        session.turn = None
        duration = time.perf_counter() - started
        turn.failures.extend(self._check(client, session, turn))
        result = TurnResult(
            session=session.label,
            index=index,
            prompt=spec.prompt,
            passed=not turn.failures,
            failures=turn.failures,
            stop_reason=turn.stop_reason,
            duration_s=round(duration, 6),
            requests=turn.requests,
            repeat=self.repeat,
        )
        self.turns.append(result)
        first = turn.failures[0] if turn.failures else ""
        self.event("turn_finished", session, turn=index, detail=first, passed=result.passed)
        return result

    async def _drive(
        self, client: Client, backend: Backend, session: _Session, turn: _Turn
    ) -> None:
        """Send the prompt; cancel it when scripted (or too slow); wait for the end."""
        prompt_scope = trio.CancelScope()
        done = trio.Event()

        async def prompt() -> None:
            try:
                with prompt_scope:
                    turn.prompt_sent = True
                    turn.stop_reason = await backend.prompt(session.id, turn.spec.prompt)
                if not turn.cancelling:
                    turn.ended = True
            except PermclientError as exc:
                turn.failures.append(f"the prompt failed: {exc}{self._tail()}")
            finally:
                done.set()

        async def cancel_later(delay_ms: int) -> None:
            await trio.sleep(delay_ms / 1000)
            turn.request_cancel(f"after {delay_ms} ms")

        async with trio.open_nursery() as nursery:
            nursery.start_soon(prompt)
            if turn.spec.cancel_after_ms is not None:
                nursery.start_soon(cancel_later, turn.spec.cancel_after_ms)
            with trio.move_on_after(self.turn_timeout) as limit:
                await _first_of(done.wait, turn.cancel_requested.wait)
            if limit.cancelled_caught:
                turn.failures.append(
                    f"the turn did not end within {self.turn_timeout:g} s: cancelled it"
                )
                turn.request_cancel("timeout")
            if not done.is_set():
                await self._cancel(client, session, turn, prompt_scope, done)
            nursery.cancel_scope.cancel()
        if turn.cancelling:
            with trio.move_on_after(SETTLE_S):
                await session.wait_settled(client, turn)

    async def _cancel(
        self,
        client: Client,
        session: _Session,
        turn: _Turn,
        prompt_scope: trio.CancelScope,
        done: trio.Event,
    ) -> None:
        if client.dialect == "acp":
            # ACP's way: session/cancel (permclient answers the open questions at
            # once), then the agent ends the turn with stopReason "cancelled".
            with contextlib.suppress(ConnectionClosed):
                await client.notify("session/cancel", {"sessionId": session.id})
            with trio.move_on_after(CANCEL_GRACE_S):
                await done.wait()
            if not done.is_set():
                turn.failures.append(
                    f"the agent did not end the turn within {CANCEL_GRACE_S:g} s of "
                    "session/cancel: abandoned the prompt"
                )
                prompt_scope.cancel()
                await done.wait()
        else:
            # The bridge's way: cancel the chatSend call. permclient sends
            # $/cancelRequest and answers the session's open questions; the
            # runtime's answer is dropped, so the stop reason is ours.
            prompt_scope.cancel()
            await done.wait()
            if turn.stop_reason is None:
                turn.stop_reason = "cancelled"

    def _check(self, client: Client, session: _Session, turn: _Turn) -> list[str]:
        """The turn's expectations: what was expected, and what happened."""
        spec, expect = turn.spec, turn.spec.expect
        failures: list[str] = []
        for expected, count in zip(spec.requests, turn.counts, strict=True):
            what = f"permission request matching {expected.title!r}" + (
                f" (kind {expected.kind})" if expected.kind else ""
            )
            if expected.count is not None and count != expected.count:
                failures.append(f"expected {expected.count} {what}, got {count}")
            elif expected.count is None and count == 0:
                failures.append(f"expected at least one {what}, got none")
        failures.extend(self._check_after(client, session, turn, expect))
        return failures

    def _check_after(
        self, client: Client, session: _Session, turn: _Turn, expect: AfterTurn
    ) -> list[str]:
        failures: list[str] = []
        if expect.stop_reason is not None and turn.stop_reason != expect.stop_reason:
            failures.append(
                f"expected stop reason {expect.stop_reason!r}, got {turn.stop_reason!r}"
            )
        root = self.workspace
        for rel in expect.files_exist:
            target = root / rel
            if not target.is_file():
                what = "it is a folder" if target.is_dir() else "it does not"
                failures.append(f"expected file {rel} to exist; {what}")
        for rel in expect.files_absent:
            if (root / rel).exists():
                failures.append(f"expected file {rel} to be absent; it exists")
        for rel, text in expect.file_contains.items():
            try:
                content = (root / rel).read_text(encoding="utf-8", errors="replace")
            except OSError as exc:
                failures.append(f"expected file {rel} to contain {text!r}; cannot read it: {exc}")
                continue
            if text not in content:
                failures.append(
                    f"expected file {rel} to contain {text!r}; it holds {_short(content)!r}"
                )
        reply = "".join(turn.reply)
        for text in expect.reply_contains:
            if text not in reply:
                failures.append(f"expected the reply to contain {text!r}; it was {_short(reply)!r}")
        calls = []
        for tool_call_id in turn.tool_calls:
            record = self.ledger.tools.get((session.id, tool_call_id))
            state = client.tool_calls.get(session.id, tool_call_id)
            title = (state.title if state else None) or (record.title if record else "")
            status = state.status if state else (record.status if record else None)
            calls.append((tool_call_id, title or "", status or "?"))
        for pattern, status in expect.tool_status.items():
            matching = [c for c in calls if re.search(pattern, c[1])]
            if not matching:
                seen = ", ".join(f"{t!r}" for _, t, _ in calls) or "none"
                failures.append(
                    f"expected tool calls matching {pattern!r} to end {status}; no such tool "
                    f"call in the turn (seen: {seen})"
                )
            for tool_call_id, title, final in matching:
                if final != status:
                    failures.append(
                        f"expected tool call {tool_call_id} ({title}) to end {status}; "
                        f"it is {final}"
                    )
        return failures


async def _first_of(*waits: Callable[[], Awaitable[object]]) -> None:
    """Return as soon as one of ``waits`` returns."""
    async with trio.open_nursery() as nursery:

        async def one(wait: Callable[[], Awaitable[object]]) -> None:
            await wait()
            nursery.cancel_scope.cancel()

        for wait in waits:
            nursery.start_soon(one, wait)


# ------------------------------------------------------------- workspace


@contextlib.contextmanager
def _workspace(scenario: Scenario, base_dir: Path | None) -> Iterator[Path]:
    """The repeat's workspace with ``workspace.files`` written; temporary unless a path."""
    spec = scenario.workspace
    if spec.path is None:
        folder = Path(tempfile.mkdtemp(prefix="simhost-run-")).resolve()
        try:
            _seed(folder, spec.files)
            yield folder
        finally:
            shutil.rmtree(folder, ignore_errors=True)
    else:
        folder = Path(spec.path).expanduser()
        if not folder.is_absolute():
            folder = (base_dir or Path.cwd()) / folder
        folder = folder.resolve()
        folder.mkdir(parents=True, exist_ok=True)
        _seed(folder, spec.files)
        yield folder


def _seed(folder: Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        target = (folder / rel).resolve()
        if not target.is_relative_to(folder):
            raise ValueError(f"workspace file {rel!r} is outside the workspace")
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(text, encoding="utf-8")


async def _until_exit(client: Client) -> None:
    """Close the agent's stdin and read what it still says until it exits (bounded).

    Reports sent after the last turn (a denied tool call ``completed`` after all)
    are judged too; an agent that does not exit is left to ``open_process``.
    """
    process = getattr(client, "process", None)
    if not isinstance(process, trio.Process):
        return
    if process.stdin is not None:
        with contextlib.suppress(trio.ClosedResourceError, trio.BrokenResourceError, OSError):
            await process.stdin.aclose()
    with trio.move_on_after(SETTLE_S):
        await process.wait()
        await client.wait_closed()  # everything it wrote before exiting is read


def _tail_of(file: IO[bytes]) -> Callable[[], str]:
    def tail() -> str:
        try:
            fd = file.fileno()
            size = os.fstat(fd).st_size
            start = max(0, size - _STDERR_TAIL)
            data = os.pread(fd, size - start, start)
        except (OSError, ValueError):
            return ""
        return "\n".join(data.decode("utf-8", "replace").splitlines()[-15:])

    return tail


# --------------------------------------------------------------- the API


async def run_scenario(
    scenario: Scenario,
    *,
    agent: AgentSpec | None = None,
    seed: int | None = None,
    repeat: int | None = None,
    on_event: EventCallback | None = None,
    base_dir: Path | None = None,
    turn_timeout: float = DEFAULT_TURN_TIMEOUT_S,
) -> ScenarioResult:
    """Run ``scenario`` and check its expectations and the built-in invariants.

    ``agent`` replaces the scenario's agent (e.g. from ``--agent``/``--dialect``),
    ``seed`` and ``repeat`` its own. ``on_event`` gets a :class:`RunEvent` as
    sessions and turns start and end (for a live view; it must not block).
    ``base_dir`` is the scenario file's folder: a relative policy file or
    workspace path is taken from there (default: the current folder). A turn
    still running after ``turn_timeout`` seconds is cancelled and fails.

    Returns a :class:`ScenarioResult`; a failing agent (it cannot start, dies,
    answers with errors) makes failed turns and violations in it, never an
    exception. Raises only what cancels the caller (``trio.Cancelled``).
    """
    agent = agent or scenario.agent
    seed = scenario.seed if seed is None else seed
    repeats = scenario.repeat if repeat is None else repeat
    name = scenario.name or "scenario"
    turns: list[TurnResult] = []
    violations: list[str] = []
    latencies: list[float] = []
    requests = 0
    sessions_s = 0.0
    argv_text = ""
    started = time.perf_counter()
    for number in range(1, repeats + 1):
        prefix = f"repeat {number}: " if repeats > 1 else ""
        run_once = _run_once(
            scenario,
            agent,
            seed=seed,
            repeat=number,
            base_dir=base_dir,
            on_event=on_event,
            turn_timeout=turn_timeout,
        )
        run, argv_text = await run_once
        turns.extend(run.turns)
        violations.extend(prefix + v for v in run.violations + run.ledger.violations)
        latencies.extend(run.ledger.latencies_ms)
        requests += run.ledger.requests
        sessions_s += run.sessions_s
    wall = time.perf_counter() - started
    median, p99 = percentile(latencies, 0.5), percentile(latencies, 0.99)
    return ScenarioResult(
        name=name,
        passed=not violations and all(t.passed for t in turns),
        turns=turns,
        violations=violations,
        wall_s=round(wall, 6),
        latencies_ms=latencies,
        latency_median_ms=median,
        latency_p99_ms=p99,
        dialect=agent.dialect,
        agent=argv_text,
        seed=seed,
        repeat=repeats,
        requests=requests,
        sessions_s=round(sessions_s, 6),
    )


async def _run_once(
    scenario: Scenario,
    agent: AgentSpec,
    *,
    seed: int,
    repeat: int,
    base_dir: Path | None,
    on_event: EventCallback | None,
    turn_timeout: float,
) -> tuple[_Run, str]:
    with contextlib.ExitStack() as stack:
        try:
            workspace = stack.enter_context(_workspace(scenario, base_dir))
        except (OSError, ValueError) as exc:
            run = _Run(
                scenario,
                agent,
                seed=seed,
                repeat=repeat,
                workspace=Path("."),
                on_event=on_event,
                turn_timeout=turn_timeout,
            )
            run.violations.append(f"the workspace could not be prepared: {exc}")
            run._not_run_all("no workspace")
            return run, ""
        state_dir = Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="simhost-state-")))
        stderr = stack.enter_context(tempfile.TemporaryFile())
        run = _Run(
            scenario,
            agent,
            seed=seed,
            repeat=repeat,
            workspace=workspace,
            on_event=on_event,
            turn_timeout=turn_timeout,
        )
        run.stderr_tail = _tail_of(stderr)
        argv = agent_argv(agent, workspace, state_dir, base_dir)
        argv_text = shlex.join(argv)
        run.event("repeat_started")
        if not argv:
            run.violations.append("the agent's command is empty")
            run._not_run_all("no agent")
            return run, argv_text
        cwd = workspace if agent.command is not None else None
        spawned = False
        try:
            async with permclient.open_process(
                argv, dialect=agent.dialect, telemetry=run.ledger, stderr=stderr, cwd=cwd
            ) as client:
                spawned = True
                await run.run(client)
                await _until_exit(client)
                run.ledger.finish()
        except OSError as exc:
            if spawned:
                raise
            run.violations.append(f"could not start the agent {argv[0]!r}: {exc}")
            run._not_run_all("the agent could not be started")
        return run, argv_text
    raise AssertionError("unreachable")  # pragma: no cover
