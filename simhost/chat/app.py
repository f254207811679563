"""The chat's controller: one UI task owns the keyboard; everything else reports to it.

:class:`ChatApp` talks to a bridge runtime or an ACP agent through a
:class:`permclient.Client` (the dialect's requests go through a
:class:`~simhost.chat.backends.Backend`) and shows everything on a
:class:`~simhost.chat.screen.Screen`. It is driven by
input events (keys from a raw terminal, or lines from a pipe) that
:meth:`ChatApp.run` consumes one at a time; it needs no terminal, so tests
feed it events directly.

Concurrency model:

* Turns (``chatSend``, ACP ``session/prompt``) and commands run as tasks. At most one of them is the
  *foreground job*: the prompt waits for it, and Ctrl-C cancels it. ``/bg``
  turns run beside it; several sessions can have turns at once (one per session).
* Each session the chat uses has a permission handler for as long as the chat
  runs (``client.permission_handler``). The handler puts an
  :class:`~simhost.chat.approvals.Approval` in the queue and waits. The UI task
  shows the head of the queue as a card; the others are summed up by a marker.
  Whatever cancels the handler's scope (the runtime withdrawing the question,
  the turn being cancelled, the connection closing) takes the card away at once
  and prints why; the next key goes to whatever is on screen then.
* A card takes a key (a digit, Esc) only when the person can see it asks: the
  prompt line is empty, and the card has been on screen for ``arm_delay``
  (half a second; trio's clock) before the key was read. Every other key goes
  to the prompt line, where it shows: a line being typed when a card opens
  keeps its digits, and a key typed for a card that was just answered or
  withdrawn cannot answer the next one. The key that answered a card, read
  again within ``repeat_guard`` (a second), is its auto-repeat and answers nothing.
  There is no default option.
* Digits pick by position, which differs between cards: an ``allow_always``
  option (or an editor rule) picked by key waits for ``y`` (read after it; not
  Enter, which sends a denial and so is in every person's habits); any other key
  goes back, and the question goes with its card.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Awaitable, Callable
from contextlib import ExitStack
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final, Literal

import trio
from rich.text import Text

from permclient import (
    Cancelled,
    Client,
    ConnectionClosed,
    Decision,
    InboundNotification,
    PermissionOption,
    PermissionRequest,
    RemoteProtocolError,
    RequestError,
    Selected,
)
from permclient.rules import (
    TOOL_KINDS,
    EditorRule,
    Effect,
    RuleAnswer,
    RuleEngine,
    reason_of,
    save_rules,
    suggested_rules,
    with_reason,
)
from simhost._digits import small_number
from simhost._updates import message_text, tool_report
from simhost.audit import AnsweredBy, AuditLog, record_for
from simhost.rulebook import RuleBook

from .approvals import Approval, ApprovalQueue
from .backends import Backend, BridgeBackend, Unsupported
from .card import EDITOR_RULE_KEYS as _RULE_KEYS
from .card import KEYED_OPTIONS, PermissionCard, option_label, session_label
from .keys import Key, LineEditor
from .protocol import InitializeResult
from .render import (
    banner,
    batch_list,
    busy_line,
    help_table,
    history_view,
    permissions_view,
    prompt_line,
    receipt_line,
    rules_table,
    sessions_table,
    tool_line,
)
from .screen import Screen, View
from .terminal import EndOfInput, InputEvent, Interrupt, Line, Terminate
from .text import escaped, one_line, visible

__all__ = ["ChatApp", "ChatOptions", "Job"]

DEFAULT_ARM_DELAY_S: Final = 0.5
DEFAULT_START_TIMEOUT_S: Final = 30.0
REPEAT_GUARD_S: Final = 1.0
"""Longer than a keyboard's delay before it repeats a held key (0.25-1 s)."""
MIN_GUARD_S: Final = 0.1
MAX_GUARD_S: Final = 5.0
"""The range (inclusive) of ``--arm-delay`` and ``--repeat-guard`` at a keyboard: never
off (0 would let a key typed for something else answer a card that just appeared), and
never so long that a card cannot be answered in time."""
_CARD_KEYS: Final = frozenset("0123456789")
_CONFIRM_CHARS: Final = 120  # of the option's name on the confirmation line
_MAX_PARTIAL: Final = 4000
_MAX_CANDIDATES: Final = 5
_VIEW_CARD: Final = Key("char", "v")

InputMode = Literal["keys", "lines"]


@dataclass(frozen=True)
class _Confirming:
    """An ``allow_always`` option (``number``) or an editor rule (``rule``) picked by
    key on ``card``: it waits for ``y``."""

    card: Approval
    number: int
    picked_at: float  # when the key was read
    rule: EditorRule | None = None


@dataclass(frozen=True)
class _Reasoning:
    """A deny option picked by key on ``card``: the prompt line takes a reason."""

    card: Approval
    decision: Selected


@dataclass(frozen=True)
class _Batch:
    """``/allow-all`` or ``/deny-all``: the listed answers, waiting for a yes."""

    command: str
    answers: tuple[tuple[Approval, Selected], ...]


@dataclass
class ChatOptions:
    """How the chat behaves.

    ``input_mode`` is ``"keys"`` (a raw terminal: number keys, Esc) or
    ``"lines"`` (a pipe: ``3``, ``esc``). ``arm_delay`` is how long a card must
    have been on screen before a key can answer it (seconds; 0 in line mode).
    The key that answered a card, read again within ``repeat_guard`` seconds, is
    taken for its auto-repeat and answers no other card. ``start_timeout`` bounds
    the start: the answer to ``initialize`` and the first session, in seconds.
    """

    input_mode: InputMode = "keys"
    arm_delay: float = DEFAULT_ARM_DELAY_S
    repeat_guard: float = REPEAT_GUARD_S
    start_timeout: float = DEFAULT_START_TIMEOUT_S
    history_limit: int = 40


class Job:
    """A task the chat runs: a turn or a command."""

    __slots__ = ("is_turn", "label", "scope", "session_id")

    def __init__(self, label: str, session_id: str | None, *, is_turn: bool = False) -> None:
        self.label = label
        self.session_id = session_id
        self.is_turn = is_turn
        self.scope = trio.CancelScope()


class ChatApp:
    """The ``simhost chat`` controller: see the module docstring."""

    def __init__(
        self,
        client: Client,
        screen: Screen,
        options: ChatOptions | None = None,
        *,
        log_tail: Callable[[], str] | None = None,
        backend: Backend | None = None,
        rulebook: RuleBook | None = None,
        audit: AuditLog | None = None,
        edit: Callable[[Path], Awaitable[int]] | None = None,
    ) -> None:
        self.client = client
        self._edit = edit
        """Opens a file in the person's editor, on this terminal (``None``: cannot)."""
        self.rulebook = rulebook
        """The editor's rules (``None``: no rules, every question goes to the person)."""
        self.audit = audit
        self.backend: Backend = backend or BridgeBackend(client)
        self.screen = screen
        self.options = options or ChatOptions()
        self.queue = ApprovalQueue()
        self.editor = LineEditor()
        self.titles: dict[str, str | None] = {}
        self.current: str | None = None
        self.foreground: Job | None = None
        self.turns: dict[str, Job] = {}
        self.exit_code: int | None = None
        self.init: InitializeResult | None = None
        self.ready = trio.Event()
        """Set once the first session is open and the prompt is up."""
        self.start_failure: str | None = None
        """Why the chat could not start (one sentence): told by the caller, with the peer's log."""
        self._log_tail = log_tail
        self._registrations = ExitStack()
        self._adopted: set[str] = set()
        self._partial: dict[str, str] = {}
        self._live_calls: dict[tuple[str, str], None] = {}
        self._plain_status: dict[tuple[str, str], str] = {}
        self._final_shown: set[tuple[str, str]] = set()
        self._tool_meta: dict[tuple[str, str], dict[str, Any]] = {}
        # Tool calls the editor answered without the person (a rule, a batch): the runtime
        # says "the editor" decided, and the transcript names which rule or batch.
        self._decided_by: dict[tuple[str, str], str] = {}
        self._shown: Approval | None = None
        self._card_key: tuple[Key, float] | None = None  # the last key a card took, and when
        self._confirming: _Confirming | None = None  # an allow_always pick waiting for y
        self._reasoning: _Reasoning | None = None  # a deny pick waiting for its reason
        self._batch: _Batch | None = None  # a batch answer waiting for a yes
        self._cancelled_turns: set[str] = set()  # sessions whose turn we cancelled
        self._asking_to_quit = False
        self._line_had_text = False  # the prompt line, as the last sync saw it
        self._changed = trio.Event()
        self._closing = False
        self._nursery: trio.Nursery | None = None
        self._loop_scope = trio.CancelScope()
        if rulebook is not None:
            rulebook.engine.on_answer = self._rule_answered

    # ------------------------------------------------------------------ running

    async def run(self, events: trio.MemoryReceiveChannel[InputEvent]) -> int:
        """Start (``initialize``, ``sessionNew``), then handle events until quit.

        Returns the exit code: 0 after ``/quit``, Ctrl-C at the prompt or end of
        input; 1 if the runtime failed or went away; 130 if interrupted while
        starting. On the way out every running turn is cancelled and every open
        card answered ``cancelled``.
        """
        try:
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                starting = Job(f"starting the {self.backend.role}", None)
                self._spawn(starting, self._start, foreground=True)
                if self.client.process is not None:
                    nursery.start_soon(self._watch_process, self.client.process)
                nursery.start_soon(self._watch_connection)
                with self._loop_scope:
                    async for event in events:
                        try:
                            self.handle(event)
                        finally:
                            if isinstance(event, Line) and event.handled is not None:
                                event.handled.set()
                    self.quit(0)  # every input source is gone
                self._closing = True
                nursery.cancel_scope.cancel()
        finally:
            self._closing = True
            self._registrations.close()
            self._wake()
        return self.exit_code if self.exit_code is not None else 0

    def quit(self, code: int) -> None:
        """Leave the event loop with ``code`` (the first code given wins)."""
        if self.exit_code is None:
            self.exit_code = code
        self._closing = True
        self._loop_scope.cancel()
        self._wake()

    async def wait_ready(self) -> None:
        """Wait until the chat takes a line: at the prompt, or while a card is up."""
        while not self._ready_for_line():
            await self._changed.wait()

    def _ready_for_line(self) -> bool:
        if self.exit_code is not None:
            return True
        if self._keyboard_card() is not None:
            return True
        return self.foreground is None and self.ready.is_set()

    @property
    def mode(self) -> Literal["card", "busy", "prompt", "starting"]:
        """What the keyboard drives now."""
        if self._shown is not None:
            return "card"
        if self.foreground is not None:
            return "busy" if self.ready.is_set() else "starting"
        return "prompt"

    @property
    def shown(self) -> Approval | None:
        """The approval whose card is on screen, if any."""
        return self._shown

    # ------------------------------------------------------------- input events

    def handle(self, event: InputEvent) -> None:
        """Act on one input event (synchronously: routing is decided here, atomically)."""
        if self._withdrawn():
            self._sync()  # a card permclient already answered never takes this key
        if isinstance(event, Key):
            self._on_key(event)
        elif isinstance(event, Line):
            self._on_line(event.text, event.at)
        elif isinstance(event, Interrupt):
            self._on_interrupt()
        elif isinstance(event, EndOfInput):
            self.quit(0)
        elif isinstance(event, Terminate):
            self._note(f"received {event.signal_name}: leaving", style="yellow")
            self.quit(0)
        self._sync()

    def _on_key(self, key: Key) -> None:
        read_at = key.at if key.at is not None else trio.current_time()
        if self._asking_to_quit:
            self._asking_to_quit = False
            if key.name == "char" and key.char in "yY":
                self.quit(0)
            else:
                self._note("not quitting: the turns go on")
            return
        if self._batch is not None:
            batch, self._batch = self._batch, None
            if key.name == "char" and key.char in "yY":
                self._answer_batch(batch)
            else:
                self._note(f"{batch.command}: nothing answered")
            return
        if self._reasoning is not None:
            if key.name != "ctrl_c":
                self._on_reason_key(self._reasoning, key)
                return
            self._reasoning = None  # Ctrl-C does what it always does; the denial is not sent
            self.editor.text = ""
        if self._confirming is not None:
            if key.name != "ctrl_c":
                self._on_confirm_key(self._confirming, key, read_at)
                return
            self._confirming = None  # Ctrl-C does what it always does, and drops the question
        if key.name == "ctrl_c":
            if self.foreground is None and self.editor.text:
                self.editor.text = ""  # at the prompt, Ctrl-C clears the line, nothing else
            else:
                self._on_interrupt()
            return
        card = self._shown
        if card is not None and self._card_takes(card, key, read_at):
            if key == _VIEW_CARD:  # the whole card, into the transcript; it stays up
                title = self.titles.get(card.session_id)
                self.screen.show_card(PermissionCard(card.request, session_title=title))
                return
            self._card_key = (key, read_at)
            if key.name == "esc":
                self._answer(card, Cancelled(), how="Esc")
            elif key.char in _RULE_KEYS:
                rule = card.suggestions[_RULE_KEYS.index(key.char)]
                self._confirming = _Confirming(card, 0, read_at, rule)
                if not self.screen.live:
                    self.screen.print(self._card_hint(card))
            else:
                number = int(key.char)
                option = self._option(card, number)
                if option is not None and option.kind.startswith("reject"):
                    self._reasoning = _Reasoning(card, Selected(option.option_id))
                elif self._grants_standing(card, number):
                    self._confirming = _Confirming(card, number, read_at)
                    if not self.screen.live:  # a plain screen drew the card once: say it below
                        self.screen.print(self._card_hint(card))
                else:
                    self._pick(card, number)
            return
        # Not for a card: the key belongs to the prompt line.
        if key.name == "esc":
            return
        if key.name == "ctrl_d":
            if self.foreground is None and not self.editor.text:
                self._leave()
            return
        if key.name == "paste_too_long" or (key.name == "paste" and not self.editor.fits(key.char)):
            self._note(
                f"the paste was not taken: a prompt holds at most {LineEditor.MAX_LENGTH:,} "
                "characters",
                style="red",
            )
            return
        line = self.editor.handle(key)
        if line is not None:
            if self.foreground is not None and not _answers_now(line):
                self.editor.text = line  # the prompt waits for the turn: keep the line
                return
            self._submit(line)

    def _card_takes(self, card: Approval, key: Key, read_at: float) -> bool:
        """Whether ``key`` answers ``card``: see the module docstring."""
        rule_keys = _RULE_KEYS[: len(card.suggestions)]
        if (
            key.name != "esc"
            and key != _VIEW_CARD
            and not (key.name == "char" and (key.char in _CARD_KEYS or key.char in rule_keys))
        ):
            return False
        if self._card_key is not None:
            last, last_at = self._card_key
            if key == last and read_at - last_at < self.options.repeat_guard:
                # The held key that answered the last card, repeating: while it is held
                # (each repeat comes well within the guard), it answers nothing more,
                # also while the next card arms.
                self._card_key = (key, read_at)
                return False
        if key.burst or self.editor.text or self._keyboard_card() is not card:
            return False  # (a burst: read with other characters, typed or pasted text)
        assert card.shown_at is not None
        return read_at >= card.shown_at + self.options.arm_delay  # (on screen long enough)

    @staticmethod
    def _grants_standing(card: Approval, number: int) -> bool:
        options = card.request.options
        return 1 <= number <= len(options) and options[number - 1].kind == "allow_always"

    def _on_confirm_key(self, confirming: _Confirming, key: Key, read_at: float) -> None:
        """A key while an ``allow_always`` pick (or an editor rule) waits: ``y`` confirms
        it, any other goes back.

        A digit is position, and positions differ between cards: the 2 that denied
        the last card can be "always allow" on this one. So a standing grant picked
        by key needs a second, different key, read after the question was drawn; and
        not Enter, which follows every denial (it sends the reason) and so comes by habit.
        """
        card = confirming.card
        if key.name == "char" and key.char in "yY":
            if key.burst or read_at <= confirming.picked_at:
                # Read with the digit ("2y" in one read): not a second look.
                self._note("read the confirmation first: the next y confirms it")
                return
            self._confirming = None
            if confirming.rule is not None:
                self._save_rule(card, confirming.rule)
                return
            options = card.request.options
            self._answer(
                card,
                Selected(options[confirming.number - 1].option_id),
                how=f"{confirming.number}, y",
            )
            return
        self._confirming = None
        if self._card_key is not None and key == self._card_key[0]:
            self._card_key = (key, read_at)  # a held digit keeps repeating: still its repeat
        self._note(f"not confirmed: nothing answered, the card still asks ({_key_name(key)})")

    def _on_reason_key(self, reasoning: _Reasoning, key: Key) -> None:
        """A key while a denial waits for its reason: Enter sends it, Esc goes back."""
        if key.name == "enter":
            reason, self.editor.text = self.editor.text, ""
            self._reasoning = None
            self._answer(reasoning.card, reasoning.decision, how="key", reason=reason)
        elif key.name == "esc":
            self._reasoning = None
            self.editor.text = ""
            self._note("not denied: the card still asks")
        elif key.name == "paste_too_long" or (
            key.name == "paste" and not self.editor.fits(key.char)
        ):
            self._note("the paste was not taken: too long for a reason", style="red")
        else:
            self.editor.handle(key)

    def _leave(self) -> None:
        """``/quit`` or Ctrl-D: at a keyboard, ask first while turns run (default no)."""
        if self.turns and self.options.input_mode == "keys":
            self._asking_to_quit = True
            return
        self.quit(0)

    def _on_line(self, text: str, read_at: float | None = None) -> None:
        text = text.strip()
        if not text:
            return
        card = self._shown
        # A line read before this card was up was meant for something else.
        stale = (
            card is not None
            and read_at is not None
            and (card.shown_at is None or read_at < card.shown_at)
        )
        if stale:
            self._note(
                f"the card changed before '{one_line(text)}' was read: ignored, not an answer",
                style="red",
            )
            return
        if self._batch is not None:
            batch, self._batch = self._batch, None
            if text.lower() in ("y", "yes"):
                self._answer_batch(batch)
            else:
                self._note(f"{batch.command}: nothing answered")
            return
        if card is not None:
            lowered = text.lower()
            first, _, rest = text.partition(" ")
            if lowered in ("esc", "cancel", "cancelled"):
                self._answer(card, Cancelled(), how=lowered)
            elif (number := small_number(first)) is not None:
                self._pick(card, number, reason=rest)
            elif lowered in _RULE_KEYS[: len(card.suggestions)]:
                self._save_rule(card, card.suggestions[_RULE_KEYS.index(lowered)])
            elif lowered in ("/quit", "/exit"):
                self.quit(0)
            elif _answers_now(text):
                self._submit(text)
            else:
                count = len(card.request.options)
                self._note(
                    f"a permission card waits: answer 1-{count} or esc (got '{one_line(text)}')",
                    style="red",
                )
            return
        if self.foreground is not None and not _answers_now(text):
            self._note("busy: the line was ignored", style="red")
            return
        self._submit(text)

    def _on_interrupt(self) -> None:
        if self.foreground is not None:
            if not self.ready.is_set():
                self.quit(130)
                return
            self._cancel_job(self.foreground)
            return
        card = self._shown
        if card is not None:
            turn = self.turns.get(card.session_id)
            if turn is not None:
                self._cancel_job(turn)
            else:
                self._answer(card, Cancelled(), how="Ctrl-C")
            return
        self.quit(0)

    # ------------------------------------------------------------------- cards

    def _visible_card(self) -> Approval | None:
        head = self.queue.head
        if head is None or self.exit_code is not None:
            return None
        if self._reasoning is not None and self._reasoning.card in self.queue:
            return self._reasoning.card
        if self.foreground is None and self.editor.text:
            return None  # you are typing at the prompt: the marker says a card waits
        return head

    def _keyboard_card(self) -> Approval | None:
        card = self._shown
        if card is None or card.shown_at is None:
            return None
        if trio.current_time() < card.shown_at + self.options.arm_delay:
            return None
        return card

    @staticmethod
    def _option(card: Approval, number: int) -> PermissionOption | None:
        options = card.request.options
        return options[number - 1] if 1 <= number <= len(options) else None

    def _pick(self, card: Approval, number: int, *, reason: str = "") -> None:
        option = self._option(card, number)
        if option is None:
            count = len(card.request.options)
            self._note(f"there is no option {number}: choose 1-{count}", style="red")
            return
        if reason and not option.kind.startswith("reject"):
            self._note("a reason goes only with a deny option: nothing answered", style="red")
            return
        self._answer(card, Selected(option.option_id), how=str(number), reason=reason)

    def _answer(
        self,
        card: Approval,
        decision: Decision,
        *,
        how: str,
        reason: str = "",
        by: AnsweredBy = "person",
    ) -> None:
        if isinstance(decision, Selected) and reason:
            decision = with_reason(decision, reason)
        card.answer(decision)
        self.queue.remove(card)
        self._sync()  # the live region first, so the line below never redraws a stale card
        line = Text("→ ", style="bold")
        if isinstance(decision, Selected):
            option = card.request.option(decision.option_id)
            assert option is not None
            line.append_text(option_label(None, option))
        else:
            line.append(f"cancelled ({how})", style="red")
        line.append(f" · {one_line(card.tool_title)} · {self._label(card.session_id)}", style="dim")
        given = reason_of(decision.meta)
        if given is not None:
            line.append(" · reason: ", style="dim")
            line.append_text(escaped(given, limit=_CONFIRM_CHARS))
        self.screen.print(line)
        if by == "batch":
            self._decided_by[(card.session_id, card.request.tool_call.tool_call_id)] = how
        self._audit(card.request, decision, by=by, detail=how, reason=given)

    # ------------------------------------------------------------- editor rules

    def _audit(
        self,
        request: PermissionRequest,
        decision: Decision | None,
        *,
        by: AnsweredBy,
        detail: str | None = None,
        reason: str | None = None,
    ) -> None:
        if self.audit is None or self.rulebook is None:
            return
        record = record_for(
            request,
            decision,
            by=by,
            workspace=self.rulebook.engine.workspace,
            detail=detail,
            reason=reason,
        )
        if not self.audit.append(record) and self.audit.failed is not None:
            self._note(self.audit.failed, style="red")
            self.audit.failed = None

    def _rule_answered(self, answer: RuleAnswer) -> None:
        """A receipt for a question an editor rule answered (it never reached a card)."""
        request = answer.request
        self._flush_partial(request.session_id)
        option = request.option(answer.decision.option_id)
        allowed = option is not None and option.kind.startswith("allow")
        workspace = self.rulebook.engine.workspace if self.rulebook is not None else None
        described = answer.rule.describe(workspace)
        title = request.tool_call.title or request.tool_call.tool_call_id
        where = self._label(request.session_id)
        self.screen.print(receipt_line(answer.number, allowed, title, where, described))
        key = (request.session_id, request.tool_call.tool_call_id)
        self._decided_by[key] = f"rule {answer.number}"
        self._audit(
            request, answer.decision, by="rule", detail=f"rule {answer.number}: {described}"
        )

    def _save_rule(self, card: Approval, rule: EditorRule) -> None:
        """Keep ``rule``, then let it answer ``card`` and every queued card it covers."""
        book = self.rulebook
        if book is None:
            return
        try:
            number = book.add(rule)
        except OSError as exc:
            self._note(f"the rule was not saved: {exc.strerror or exc}", style="red")
            return
        where = book.file_of(rule)
        self._note(
            f"rule {number} saved: {rule.describe(book.engine.workspace)}"
            + (f" ({where})" if where else ""),
            style="green",
        )
        for approval in self.queue:
            found = book.engine.match(approval.request)
            if found is not None and found.rule is rule:
                book.engine.record(found)  # counted, with its receipt
                approval.answer(found.decision)
                self.queue.remove(approval)
        if card in self.queue:
            self._note(
                "the rule does not answer this card (no option of the kind it needs): "
                "choose an option",
                style="yellow",
            )
        self._sync()

    def _suggest(self, approval: Approval) -> None:
        if self.rulebook is None:
            return
        workspace = self.rulebook.engine.workspace
        found: list[EditorRule] = []
        for effect in ("allow", "deny"):
            found += suggested_rules(
                approval.request, workspace=workspace, effect=effect, created=datetime.now(UTC)
            )
        approval.suggestions = tuple(found[: len(_RULE_KEYS)])

    def _cmd_rules(self, arg: str) -> None:
        book = self.rulebook
        if book is None:
            self._note("no editor rules in this chat", style="red")
            return
        verb, _, rest = arg.partition(" ")
        if not verb:
            self.screen.print(rules_table(book))
        elif verb == "rm":
            number = small_number(rest.strip())
            if number is None:
                self._note("usage: /rules rm N (N from /rules)", style="red")
                return
            try:
                rule = book.revoke(number)
            except IndexError:
                self._note(f"there is no rule {number}: /rules lists them", style="red")
                return
            except OSError as exc:
                self._note(f"the rule was not revoked: {exc.strerror or exc}", style="red")
                return
            self._note(f"rule {number} revoked: {rule.describe(book.engine.workspace)}")
        elif verb == "edit" and self._edit is not None and self.foreground is None:
            self._spawn(Job("editing the rules", None), self._cmd_rules_edit, foreground=True)
        elif verb == "edit":
            why = "set $VISUAL or $EDITOR to open it from here; " if self._edit is None else ""
            self._note(
                f"this workspace's rules: {book.workspace_file}; everywhere: {book.user_file}. "
                f"{why}edit them, then /rules reload (a rule that cannot be read is skipped)",
            )
        elif verb == "reload":
            self._reload_rules(book)
        else:
            self._note("usage: /rules, /rules rm N, /rules edit, /rules reload", style="red")

    def _reload_rules(self, book: RuleBook) -> None:
        for warning in book.load():
            self._note(warning, style="yellow")
        self._note(f"{len(book.engine.rules)} rules: /rules lists them")

    async def _cmd_rules_edit(self) -> None:
        """Open this workspace's rules file in the person's editor, then read it again."""
        book, edit = self.rulebook, self._edit
        assert book is not None and edit is not None
        path = book.workspace_file
        try:
            if not path.exists():  # a file with its header, to write rules in
                save_rules(path, [rule for rule in book.engine.rules if book.file_of(rule) == path])
        except OSError as exc:
            self._note(f"cannot write {path}: {exc.strerror or exc}", style="red")
            return
        self.screen.suspend()
        try:
            code = await edit(path)
        except OSError as exc:
            self._note(f"the editor did not start: {exc.strerror or exc}", style="red")
            return
        finally:
            self.screen.resume()
        if code != 0:
            self._note(f"the editor exited with code {code}", style="yellow")
        self._reload_rules(book)

    def _cmd_batch(self, command: str, arg: str) -> None:
        """``/allow-all WHAT`` or ``/deny-all WHAT``: list, then ask."""
        session_id = self.current
        if not arg or session_id is None or self.rulebook is None:
            self._note(f"usage: {command} KIND|GLOB (e.g. {command} reads, {command} 'src/**')")
            return
        effect: Effect = "allow" if command == "/allow-all" else "deny"
        kind = arg[:-1] if arg.endswith("s") and arg[:-1] in TOOL_KINDS else arg
        try:
            matching = EditorRule(
                effect=effect,
                scope="session",
                lifetime="session",
                session_id=session_id,
                kinds=(kind,) if kind in TOOL_KINDS else (),
                paths=() if kind in TOOL_KINDS else (arg,),
            )
        except ValueError as exc:
            self._note(f"{command}: {exc}", style="red")
            return
        engine = RuleEngine(
            [matching], workspace=self.rulebook.engine.workspace, resolve=os.path.realpath
        )
        answers = []
        for approval in self.queue:
            if approval.session_id == session_id:
                found = engine.match(approval.request)
                if found is None:
                    continue
                if effect == "allow" and self.rulebook.engine.denies(approval.request):
                    continue  # a batch never allows what a deny rule covers
                answers.append((approval, found.decision))
        if not answers:
            self._note(f"{command} {arg}: no pending question in this session it answers")
            return
        self.screen.print(batch_list(command, arg, answers))
        self._batch = _Batch(f"{command} {arg}", tuple(answers))

    def _answer_batch(self, batch: _Batch) -> None:
        answered = 0
        for approval, decision in batch.answers:
            if approval in self.queue:
                self._answer(approval, decision, how=batch.command, by="batch")
                answered += 1
        self._note(f"{batch.command}: {answered} answered")

    async def _ask(self, session_id: str, request: PermissionRequest) -> Decision:
        """The permission handler of every session the chat uses."""
        # The text streamed before the question goes above its card, not after it.
        self._flush_partial(session_id)
        approval = self.queue.add(session_id, request)
        self._suggest(approval)
        self._sync()
        try:
            return await approval.wait()
        finally:
            # Withdrawn, turn cancelled, or closing: the card goes, and says why.
            if approval.decision is None:
                self._audit(request, None, by=self._withdrawn_by(session_id))
                if self.queue.remove(approval):
                    self._sync()
                    if not self._closing:
                        self._withdrawn_notice(approval, self._withdraw_reason())

    def _withdrawn_by(self, session_id: str) -> AnsweredBy:
        if self._closing or self.client.closed_reason is not None:
            return "teardown"
        return "turn" if session_id in self._cancelled_turns else "runtime"

    def _withdrawn_notice(self, approval: Approval, reason: str) -> None:
        self._flush_partial(approval.session_id)
        line = Text("⊘ ", style="bold yellow")
        line.append(reason, style="yellow")
        line.append(
            f" · {one_line(approval.tool_title)} · {self._label(approval.session_id)}", style="dim"
        )
        self.screen.print(line)

    # -------------------------------------------------------------- the screen

    def _withdrawn(self) -> list[Approval]:
        """Queued approvals that permclient no longer waits on (withdrawn, cancelled, closed).

        permclient retires a request synchronously when the runtime cancels it,
        while the handler task that queued the card runs later: the tracker's
        ``awaiting_approval`` tells at once.
        """
        tracker = self.client.tool_calls
        gone = []
        for approval in self.queue:
            state = tracker.get(approval.session_id, approval.request.tool_call.tool_call_id)
            # None: a call known only from its permission requests is forgotten once
            # they are all answered; it existed while this card's request was pending.
            if state is None or not state.awaiting_approval:
                gone.append(approval)
        return gone

    def _sync(self) -> None:
        """Recompute which card is shown, redraw, and wake whoever waits for a change."""
        gone = self._withdrawn()
        for approval in gone:
            self.queue.remove(approval)
        card = self._visible_card()
        if self._confirming is not None and self._confirming.card is not card:
            self._confirming = None  # the question belongs to its card and goes with it
        if self._reasoning is not None and self._reasoning.card not in self.queue:
            self._reasoning = None  # withdrawn while the reason was typed
            self.editor.text = ""
            self._note("the card went before the denial was sent: nothing answered", style="red")
        if card is not self._shown:
            if self._shown is not None:
                self._shown.shown_at = None
            self._shown = card
        elif card is not None and self._line_had_text and not self.editor.text:
            card.shown_at = None  # the line was just emptied: the card gets a fresh look
        self._line_had_text = bool(self.editor.text)
        self.screen.refresh(self._view())
        if card is not None and card.shown_at is None:
            # Stamped once the card is drawn: a large card can take a while to draw,
            # and keys typed meanwhile must not count as answers to it.
            card.shown_at = trio.current_time()
            if self.options.arm_delay > 0 and self._nursery is not None and not self._closing:
                self._nursery.start_soon(self._arm, card)
        if not self._closing:
            for approval in gone:
                self._withdrawn_notice(approval, self._withdraw_reason())
        self._wake()

    def _withdraw_reason(self) -> str:
        if self.client.closed_reason is not None:
            return "answered cancelled: the connection closed"
        return "withdrawn by the runtime"

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    async def _arm(self, card: Approval) -> None:
        await trio.sleep(self.options.arm_delay)
        if card is self._shown:
            self._sync()

    def _card_hint(self, card: Approval) -> Text:
        count = len(card.request.options)
        keys = f"1-{count}" if count > 1 else "1"
        rules = len(card.suggestions)
        if self.options.input_mode == "lines":
            letters = "a" if rules == 1 else f"a-{_RULE_KEYS[rules - 1]}"
            also = f", {letters} (an editor rule)" if rules else ""
            return Text(
                f"Answer with a line: {keys} (a deny option may be followed by a reason){also}, "
                "or esc (cancelled).",
                style="bold",
            )
        if self._reasoning is not None and self._reasoning.card is card:
            return Text(
                "Reason for denying (optional, sent to the agent): type it · "
                "Enter sends the denial · Esc goes back",
                style="bold",
            )
        if self.editor.text:
            return Text(
                "Your prompt line has text: clear it (Ctrl-U) to answer this card.", style="bold"
            )
        if self._confirming is not None and self._confirming.rule is not None:
            workspace = self.rulebook.engine.workspace if self.rulebook else None
            hint = Text("Save editor rule: ", style="bold yellow")
            hint.append_text(
                escaped(self._confirming.rule.describe(workspace), "bold yellow", limit=400)
            )
            hint.append("? y saves it (it answers this card) · any other key goes back")
            return hint
        if self._confirming is not None and self._confirming.card is card:
            option = card.request.options[self._confirming.number - 1]
            hint = Text("Confirm: ", style="bold yellow")
            hint.append_text(escaped(option.name, "bold yellow", limit=_CONFIRM_CHARS))
            hint.append(" (a standing grant)? ", style="bold yellow")
            hint.append("y confirms · any other key goes back, answering nothing")
            return hint
        if self._keyboard_card() is None:
            return Text("… (read the card: keys go to the prompt line for now)", style="dim italic")
        keyed = min(count, KEYED_OPTIONS)  # the hint names only keys that answer
        hint = Text(f"Press {f'1-{keyed}' if keyed > 1 else '1'} to choose", style="bold")
        if rules:
            hint.append(f" · {'a' if rules == 1 else f'a-{_RULE_KEYS[rules - 1]}'} saves a rule")
        if count > KEYED_OPTIONS:
            hint.append(" (options after 9 have no key)", style="dim")
        hint.append(" · Esc answers cancelled · Enter does nothing · Ctrl-C cancels the turn")
        hint.append(" · other keys type on the prompt line", style="dim")
        return hint

    def _view(self) -> View:
        view = View()
        tracker = self.client.tool_calls
        if self.screen.live:
            for key in self._live_calls:
                state = tracker.get(*key)
                if state is None or state.awaiting_approval or state.is_final:
                    continue  # a card (or the queue marker) speaks for it
                view.lines.append(
                    tool_line(state, prefix=self._prefix(key[0]), meta=self._tool_meta.get(key))
                )
            for session_id, partial in self._partial.items():
                if partial:
                    view.lines.append(self._agent_line(session_id, partial + "▍"))
        card = self._shown
        hint = self._card_hint(card) if card is not None else None
        note = "send or clear (Ctrl-U) your line to answer" if card is None else None
        view.show_queue(card, list(self.queue), self.titles, hint, note, self._rule_labels(card))
        if self.exit_code is None:
            typed = _typed(self.editor.text)
            if self._asking_to_quit:
                running = len(self.turns)
                view.prompt = Text(
                    f"{running} turn{'s' if running != 1 else ''} still running: quit? y/N",
                    style="bold yellow",
                )
            elif self._reasoning is not None:
                view.prompt = prompt_line("reason", typed)
            elif self.foreground is not None:
                view.prompt = busy_line(self.foreground.label, typed)
            elif self.current is not None and card is None:
                view.prompt = prompt_line(self._prompt_label(), typed)
        return view

    def _rule_labels(self, card: Approval | None) -> list[str]:
        if card is None or self.rulebook is None:
            return []
        workspace = self.rulebook.engine.workspace
        return [
            f"Always {rule.effect} {rule.describe(workspace).partition(' ')[2]}"
            for rule in card.suggestions
        ]

    def _label(self, session_id: str) -> str:
        return session_label(session_id, self.titles.get(session_id))

    def _prompt_label(self) -> str:
        if self.current is None:
            return "?"
        title = self.titles.get(self.current)
        return session_label(self.current, title) if title else one_line(self.current)

    def _prefix(self, session_id: str) -> str:
        return "" if session_id == self.current else f"[{one_line(session_id)}] "

    def _agent_line(self, session_id: str, text: str) -> Text:
        line = Text()
        line.append(self._prefix(session_id), style="dim")
        line.append(visible(text))
        return line

    def _note(self, message: str, *, style: str = "dim") -> None:
        self.screen.print(Text(message, style=style))

    # ------------------------------------------------------------ notifications

    def _on_notification(self, notification: InboundNotification) -> None:
        session_id = notification.session_id
        update = notification.update  # typed once, shared with client.tool_calls
        if update is None or session_id is None:
            return
        text = message_text(update)
        report = tool_report(update)
        if text is not None:
            if text:
                self._stream(session_id, text)
        elif report is not None:
            self._tool_event(session_id, report.tool_call_id, report.simhost_meta)
        else:
            return
        self._sync()

    def _stream(self, session_id: str, text: str) -> None:
        pending = self._partial.get(session_id, "") + text
        *done, rest = pending.split("\n")
        for line in done:
            self.screen.print(self._agent_line(session_id, line))
        if len(rest) > _MAX_PARTIAL or (rest and session_id not in self.turns):
            # Too long to hold, or no turn of ours will end it: print it now.
            self.screen.print(self._agent_line(session_id, rest))
            rest = ""
        self._partial[session_id] = rest

    def _flush_partial(self, session_id: str) -> None:
        rest = self._partial.pop(session_id, "")
        if rest:
            self.screen.print(self._agent_line(session_id, rest))

    def _tool_event(self, session_id: str, tool_call_id: str, meta: dict[str, Any]) -> None:
        key = (session_id, tool_call_id)
        if meta:
            decided_by = self._decided_by.get(key)
            if decided_by is not None and meta.get("decidedBy") == "editor":
                meta = {**meta, "decidedBy": decided_by}
            self._tool_meta[key] = meta
        # A tool call ends the message streamed before it: later text starts a new line.
        self._flush_partial(session_id)
        state = self.client.tool_calls.get(session_id, tool_call_id)
        if state is None or key in self._final_shown:
            return
        if state.is_final:
            self._live_calls.pop(key, None)
            self._decided_by.pop(key, None)
            self._final_shown.add(key)
            self.screen.print(
                tool_line(state, prefix=self._prefix(session_id), meta=self._tool_meta.get(key))
            )
        elif self.screen.live:
            self._live_calls[key] = None
        elif self._plain_status.get(key) != state.status:
            self._plain_status[key] = state.status
            self.screen.print(
                tool_line(state, prefix=self._prefix(session_id), meta=self._tool_meta.get(key))
            )

    def _end_of_turn(self, session_id: str) -> None:
        """Print what the live region still held for the session."""
        self._flush_partial(session_id)
        tracker = self.client.tool_calls
        for key in [k for k in self._live_calls if k[0] == session_id]:
            del self._live_calls[key]
            state = tracker.get(*key)
            if state is not None and key not in self._final_shown:
                self.screen.print(
                    tool_line(state, prefix=self._prefix(session_id), meta=self._tool_meta.get(key))
                )

    # -------------------------------------------------------------------- jobs

    def _spawn(
        self, job: Job, fn: Callable[..., Awaitable[None]], *args: Any, foreground: bool
    ) -> None:
        assert self._nursery is not None
        if foreground:
            self.foreground = job
        if job.is_turn and job.session_id is not None:
            self.turns[job.session_id] = job
        self._nursery.start_soon(self._run_job, job, fn, *args)

    async def _run_job(self, job: Job, fn: Callable[..., Awaitable[None]], *args: Any) -> None:
        failed = False
        try:
            with job.scope:
                await fn(*args)
            if job.scope.cancelled_caught and not self._closing:
                if job.is_turn and job.session_id is not None:
                    self._end_of_turn(job.session_id)
                    self._note(f"⏹ turn cancelled · {self._label(job.session_id)}", style="yellow")
                else:
                    self._note(f"cancelled: {job.label}", style="yellow")
        except Unsupported as exc:
            self._note(f"{job.label}: {exc}", style="yellow")
        except RequestError as exc:
            failed = True
            self._note(
                f"{job.label}: the {self.backend.role} answered with an error {one_line(str(exc))}",
                style="red",
            )
        except RemoteProtocolError as exc:
            failed = True
            self._note(
                f"{job.label}: unexpected answer from the {self.backend.role}: "
                f"{one_line(str(exc))}",
                style="red",
            )
        except ConnectionClosed as exc:
            failed = True
            self._connection_lost(str(exc))
        finally:
            if self.foreground is job:
                self.foreground = None
            if job.is_turn and job.session_id is not None:
                if self.turns.get(job.session_id) is job:
                    del self.turns[job.session_id]
                if failed:
                    self._end_of_turn(job.session_id)
            if not self.ready.is_set() and not self._closing:
                # The start failed or was cancelled: there is no session to talk to.
                self.quit(1 if failed else 130)
            self._sync()

    def _cancel_job(self, job: Job) -> None:
        if job.is_turn and job.session_id is not None:
            self._cancelled_turns.add(job.session_id)
            # permclient answers the session's open questions ``cancelled`` as the
            # chatSend is abandoned; take their cards down now, in this same step.
            taken = [a for a in self.queue if a.session_id == job.session_id]
            for approval in taken:
                self.queue.remove(approval)
            self._sync()
            for approval in taken:
                self._withdrawn_notice(approval, "answered cancelled: you cancelled the turn")
        job.scope.cancel()

    def _connection_lost(self, reason: str) -> None:
        if not self._closing:
            self._peer_gone(f"the {self.backend.role} connection is gone ({reason})")

    def _peer_gone(self, message: str) -> None:
        if self.ready.is_set():
            self._note(one_line(message), style="bold red")
            self._show_log_tail()
            self.quit(1)
        else:
            self._start_failed(f"{message}, before the first session was open")

    def _start_failed(self, message: str) -> None:
        if self.start_failure is None and self.exit_code is None:
            self.start_failure = message
        self.quit(1)

    def _show_log_tail(self) -> None:
        if self._log_tail is None:
            return
        tail = self._log_tail().strip()
        if tail:
            self.screen.print(Text("runtime log (last lines):", style="bold"))
            self.screen.print(Text(visible(tail), style="dim"))

    async def _watch_connection(self) -> None:
        # A request in flight learns of a closed connection at once
        # (ConnectionClosed); this covers an idle chat.
        self._connection_lost(await self.client.wait_closed())

    async def _watch_process(self, process: trio.Process) -> None:
        code = await process.wait()
        if not self._closing:
            self._peer_gone(f"the {self.backend.role} exited (code {code})")

    # -------------------------------------------------------------- sessions

    def _adopt(self, session_id: str, title: str | None) -> None:
        """Remember a session and route its questions and updates to us from now on."""
        self.titles[session_id] = title
        if session_id in self._adopted:
            return
        self._adopted.add(session_id)
        self._registrations.enter_context(
            self.client.permission_handler(session_id, functools.partial(self._ask, session_id))
        )
        if self.rulebook is not None:  # above the person: what no rule decides, they do
            self._registrations.enter_context(
                self.client.permission_handler(session_id, self.rulebook.engine)
            )
        self._registrations.enter_context(
            self.client.on_session_notification(session_id, self._on_notification)
        )

    async def _start(self) -> None:
        """``initialize`` and a first session, within ``start_timeout``.

        Any way it fails is a start failure (:attr:`start_failure`, exit code 1),
        never a transcript note: there is no chat to write it in.
        """
        role = self.backend.role
        timeout = self.options.start_timeout
        step = "initialize"
        with trio.move_on_after(timeout):
            try:
                self.init = await self.backend.start()
                pid = self.client.process.pid if self.client.process is not None else None
                self.screen.print(banner(self.init, pid=pid, role=role))
                step = "the request for a first session"
                await self._new_session(None)
            except RequestError as exc:
                self._start_failed(f"the {role} answered {step} with an error {exc}")
                return
            except RemoteProtocolError as exc:
                self._start_failed(f"unexpected answer from the {role} to {step}: {exc}")
                return
            self.ready.set()
            return
        self._start_failed(
            f"the {role} did not answer {step} within {timeout:g} s (see --start-timeout)"
        )

    async def _new_session(self, title: str | None) -> None:
        session_id, title = await self.backend.new_session(title)
        self._adopt(session_id, title)
        self.current = session_id
        self._note(f"● new session {self._label(session_id)} — current", style="green")

    # -------------------------------------------------------------- commands

    def _submit(self, line: str) -> None:
        text = line.strip()
        self.screen.print(prompt_line(self._prompt_label(), _typed(text), cursor=False))
        if not text.startswith("/"):
            self._start_turn(text, background=False)
            return
        name, _, arg = text.partition(" ")
        arg = arg.strip()
        session_id = self.current
        if name in ("/quit", "/exit"):
            self._leave()
        elif name == "/help":
            self.screen.print(help_table())
        elif name == "/new":
            self._spawn(
                Job("creating a session", None), self._new_session, arg or None, foreground=True
            )
        elif name == "/sessions":
            self._spawn(Job("listing sessions", None), self._cmd_sessions, foreground=True)
        elif name in ("/switch", "/peek"):
            if not arg:
                self._note(
                    f"usage: {name} SESSION (an id, a unique prefix of one, or a title)",
                    style="red",
                )
                return
            peek = name == "/peek"
            label = f"reading {one_line(arg)}" if peek else f"switching to {one_line(arg)}"
            self._spawn(Job(label, arg), self._cmd_open, arg, peek, foreground=True)
        elif name == "/policy":
            if session_id is not None:
                self._spawn(
                    Job("permissions", session_id),
                    self._cmd_policy,
                    session_id,
                    arg,
                    foreground=True,
                )
        elif name == "/bg":
            if not arg:
                self._note("usage: /bg TEXT", style="red")
                return
            self._start_turn(arg, background=True)
        elif name == "/cancel":
            target = arg or session_id
            turn = self.turns.get(target) if target else None
            if turn is None:
                self._note(f"no turn runs in {one_line(target or '?')}", style="red")
            else:
                self._cancel_job(turn)
        elif name == "/rules":
            self._cmd_rules(arg)
        elif name in ("/allow-all", "/deny-all"):
            self._cmd_batch(name, arg)
        elif name == "/wait":
            self._spawn(
                Job("waiting for a card or the end of the turns", None),
                self._cmd_wait,
                foreground=True,
            )
        else:
            self._note(f"unknown command '{one_line(name)}': /help lists them", style="red")

    def _start_turn(self, text: str, *, background: bool) -> None:
        session_id = self.current
        if session_id is None:
            return
        if session_id in self.turns:
            self._note(
                f"{self._label(session_id)} already has a turn running: wait, /cancel it, "
                "or /new a session",
                style="red",
            )
            return
        self._cancelled_turns.discard(session_id)
        where = "in the background " if background else ""
        job = Job(f"turn {where}in {self._label(session_id)}", session_id, is_turn=True)
        if background:
            self._note(f"▶ background turn started in {self._label(session_id)}")
        self._spawn(job, self._turn, session_id, text, background, foreground=not background)

    async def _turn(self, session_id: str, text: str, background: bool) -> None:
        stop_reason = await self.backend.prompt(session_id, text)
        self._end_of_turn(session_id)
        where = f" · {self._label(session_id)}" if background or session_id != self.current else ""
        style = "yellow" if stop_reason == "cancelled" else "dim"
        self._note(f"⏹ turn ended: {one_line(stop_reason)}{where}", style=style)

    async def _cmd_sessions(self) -> None:
        sessions = await self.backend.list_sessions()
        for row in sessions:
            if row.session_id in self.titles or row.session_id == self.current:
                self.titles[row.session_id] = row.title
        waiting = {
            row.session_id: self.client.pending_permissions(row.session_id) for row in sessions
        }
        running = {
            sid: ("foreground" if job is self.foreground else "background")
            for sid, job in self.turns.items()
        }
        self.screen.print(
            sessions_table(sessions, current=self.current, waiting=waiting, running=running)
        )

    async def _cmd_open(self, wanted: str, peek: bool) -> None:
        session_id = await self._resolve_session(wanted)
        if session_id is None:
            return
        history = await self.backend.open(session_id, peek=peek)
        if not peek:
            self._adopt(history.session_id, history.title)
            self.current = history.session_id
        elif history.session_id in self.titles:
            self.titles[history.session_id] = history.title
        self.screen.print(history_view(history, peek=peek, limit=self.options.history_limit))

    async def _resolve_session(self, wanted: str) -> str | None:
        """The session ``wanted`` names: an id, a unique id prefix, or a title.

        ``None`` (after saying so) when it names several. A name that matches no
        listed session goes to the agent as an id, which answers for it (an ACP
        agent may load a session this chat never opened).
        """
        try:
            sessions = await self.backend.list_sessions()
        except RequestError:  # no session list: the agent answers for the id
            return wanted
        if any(row.session_id == wanted for row in sessions):
            return wanted
        folded = wanted.casefold()
        matches = {
            row.session_id: row
            for row in sessions
            if row.session_id.startswith(wanted)
            or (row.title is not None and row.title.strip().casefold() == folded)
        }
        if len(matches) == 1:
            return next(iter(matches))
        if not matches:
            return wanted
        listed = ", ".join(
            one_line(row.session_id) + (f" '{one_line(row.title)}'" if row.title else "")
            for row in list(matches.values())[:_MAX_CANDIDATES]
        )
        more = " …" if len(matches) > _MAX_CANDIDATES else ""
        self._note(
            f"'{one_line(wanted)}' names {len(matches)} sessions: {listed}{more}; "
            "give more of the id",
            style="red",
        )
        return None

    async def _cmd_policy(self, session_id: str, preset: str) -> None:
        if preset:
            now = await self.backend.set_permission(session_id, preset)
            self._note(
                f"permission preset of {self._label(session_id)} is now {one_line(now)}",
                style="green",
            )
            return
        permissions = await self.backend.permissions(session_id)
        self.screen.print(permissions_view(session_id, self.titles.get(session_id), permissions))

    async def _cmd_wait(self) -> None:
        while self.queue.head is None and self.turns:
            await self._changed.wait()


def _answers_now(line: str) -> bool:
    """Whether ``line`` is a command that runs while a turn waits (rules, batches)."""
    return line.strip().partition(" ")[0] in ("/rules", "/allow-all", "/deny-all")


def _key_name(key: Key) -> str:
    if key.name == "char":
        return f"key {one_line(key.char)}"
    return key.name.replace("_", "-")


def _typed(text: str) -> str:
    """The prompt line as one line: a pasted line break shown as ``⏎``, the rest escaped."""
    return one_line(text.replace("\n", "⏎"))
