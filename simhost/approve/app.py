"""The approver's controller: relayed questions in, the person's answers out.

:class:`Approver` is told what the server says (by :mod:`.link`) and what the
person types (the chat's input events: keys from a raw terminal, or lines from a
pipe), one call at a time, in one trio thread. It needs no socket and no
terminal.

* The oldest pending question is up as the chat's permission card, naming its
  session, with the editor rules the server offers for it (``rule_offers``, keys
  ``a``-``d``); the others are counted by the chat's waiting marker.
* A question leaves only when the server says it ended (``resolved``,
  ``withdrawn``), never when the person answers: until then its card says the
  answer (or the rule being saved) is in flight and takes no other.
  ``answer_refused``, or an ``error`` for that answer or rule, makes it answerable
  again.
* Every request carries a ``ref`` of its own, and the server's replies name it: a
  reply or an ``error`` ends the wait of the request it names, and no other.
* The chat's rules decide whether a key answers a card: the card has been on
  screen for ``arm_delay`` before the key was read, the key was read alone (not in
  a burst), it is not the auto-repeat of the key that answered the card before,
  and an ``allow_always`` option or an editor rule picked by key waits for ``y``
  (not Enter, which sends every denial). A deny option picked by key makes the
  prompt a reason prompt: Enter sends the denial with what was typed. A line read
  before its card came up answers nothing.
* ``/`` starts a command line (keys) or a command (lines): ``/rules``, ``/rules rm
  N``, ``/allow-all WHAT``, ``/deny-all WHAT``, ``/help``. The approver has no
  current session: a batch answers questions of the session whose card is up.
* While the connection is down nothing can be answered; the replay that comes
  with the next connection replaces the queue.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

import msgspec
import trio
from rich.text import Text

from permclient.relay import RelayQuestion, Requested, Resolved, Withdrawn
from permclient.rules import MAX_REASON, Effect
from simhost._digits import small_number
from simhost.chat.app import DEFAULT_ARM_DELAY_S, REPEAT_GUARD_S, InputMode
from simhost.chat.approvals import Approval, ApprovalQueue
from simhost.chat.card import (
    EDITOR_RULE_KEYS,
    KEYED_OPTIONS,
    PermissionCard,
    option_label,
    session_label,
)
from simhost.chat.keys import Key, LineEditor
from simhost.chat.render import (
    ListedRule,
    batch_items,
    help_table,
    prompt_line,
    receipt_line,
    rule_list,
)
from simhost.chat.screen import Screen, View
from simhost.chat.terminal import EndOfInput, InputEvent, Interrupt, Line, Terminate
from simhost.chat.text import escaped, one_line
from simhost.serve.protocol import (
    MAX_BATCH,
    Answer,
    AnswerBatch,
    AnswerRefused,
    BatchAnswered,
    BatchPreview,
    CancelledDecision,
    Error,
    ListRules,
    PreviewBatch,
    RevokeRule,
    RuleOffer,
    RuleOffers,
    RuleReceipt,
    RuleRevoked,
    RuleRow,
    Rules,
    RuleSaved,
    SaveRule,
    SelectedDecision,
    ServerMessage,
    SessionEvent,
    Sessions,
    ViewDecision,
    ViewMessage,
)

from .cards import card_request

__all__ = ["COMMANDS", "KEYS", "OFFERS_WAIT_S", "Approver", "Send"]

Send = Callable[[ViewMessage], bool]
"""Queue a message for the server; ``False`` if the connection is gone."""

OFFERS_WAIT_S: Final = 0.25
"""Lines: how long the next line waits for a new card's editor rules (the server sends
them right after the question), so that a line ``a`` finds them."""

COMMANDS: Final[Sequence[tuple[str, str]]] = (
    ("/rules", "list the server's editor rules: what each matches, its hits, its file"),
    ("/rules rm N", "revoke rule N of the last list (lists them first if none was shown)"),
    ("/allow-all WHAT", "answer the pending questions of the session whose card is up: a"),
    ("/deny-all WHAT", "kind (reads) or a path glob (src/**); lists them, then asks y/N"),
    ("/help", "this help"),
)
KEYS: Final[Sequence[tuple[str, str]]] = (
    ("1-9", "on a card: choose that option (a deny option then takes a reason: Enter sends)"),
    ("a-d", "on a card: save that editor rule (its whole scope is shown first)"),
    ("y", "on a card: confirm an always option or an editor rule picked by key"),
    ("Esc", "on a card: answer cancelled (a denial); on a command or a reason: go back"),
    ("v", "on a card: print the whole card into the transcript (answers nothing)"),
    ("/", "start a command line (Enter runs it, Esc drops it)"),
    ("Ctrl-C", "leave (the questions stay pending for the other views)"),
)

_CANCEL_LINES: Final = frozenset({"", "c", "esc", "cancel", "cancelled"})
_YES: Final = frozenset({"y", "yes"})
_CARD_KEYS: Final = frozenset("0123456789")
_VIEW_CARD: Final = Key("char", "v")
_SERVER_CHARS: Final = 200  # of a string from the server on a notice line
_LABEL_CHARS: Final = 1000  # of an editor rule's label, when it asks to be confirmed
_MAX_WHAT: Final = 256  # of a batch's WHAT (the protocol's)


@dataclass(frozen=True)
class _Asked:
    """What a card answers: the relayed question, and whether it shows the whole request."""

    question: RelayQuestion
    whole: bool


@dataclass(frozen=True)
class _Confirming:
    """An ``allow_always`` option (``number``) or an editor rule (``offer``) picked by
    key on ``card``: it waits for ``y``."""

    card: Approval
    number: int
    picked_at: float  # when the key was read
    offer: RuleOffer | None = None


@dataclass(frozen=True)
class _Reasoning:
    """A deny option picked by key on ``card``: the prompt line takes a reason."""

    card: Approval
    number: int


@dataclass(frozen=True)
class _Sent:
    """An answer (or a rule being saved, ``saving``) in flight, as ``ref``: the card
    stays until the server says how its question ended."""

    card: Approval
    what: Text
    ref: str
    saving: bool = False


@dataclass(frozen=True)
class _Batch:
    """``/allow-all`` or ``/deny-all`` for the questions of ``session_id``: asked
    (``preview_batch``), then listed (``question_ids``) and waiting for a yes."""

    command: str  # "/allow-all WHAT"
    session_id: str
    effect: Effect
    what: str
    question_ids: tuple[str, ...] = ()
    listed_at: float = 0.0  # when the list was printed (trio clock)
    ref: str = ""  # of its request in flight (preview_batch, then answer_batch)


class Approver:
    """The ``simhost approve`` controller: see the module docstring.

    ``view`` is this view's name (the server tells the others who answered);
    ``input_mode`` is ``"keys"`` (a raw terminal) or ``"lines"`` (a pipe).
    """

    def __init__(
        self,
        screen: Screen,
        view: str,
        *,
        input_mode: InputMode = "keys",
        arm_delay: float = DEFAULT_ARM_DELAY_S,
        repeat_guard: float = REPEAT_GUARD_S,
    ) -> None:
        self.screen = screen
        self.view = view
        self.input_mode = input_mode
        self.arm_delay = arm_delay
        self.repeat_guard = repeat_guard
        self.queue = ApprovalQueue()
        self.titles: dict[str, str | None] = {}
        self.editor = LineEditor()
        """The command line (``/…``), or the reason of a denial, typed at the keyboard."""
        self.exit_code: int | None = None
        self.failure: str | None = None
        """Why the approver gave up (one sentence, for stderr), or ``None``."""
        self._by_id: dict[str, Approval] = {}
        self._asked: dict[Approval, _Asked] = {}
        self._offers: dict[Approval, tuple[RuleOffer, ...]] = {}
        self._send: Send | None = None  # None until the replay is in, and while disconnected
        self._was_connected = False
        self._where: str | None = None  # the server's host:port, once connected
        self._sent: _Sent | None = None
        self._shown: Approval | None = None
        self._card_key: tuple[Key, float] | None = None  # the last key a card took, and when
        self._confirming: _Confirming | None = None
        self._reasoning: _Reasoning | None = None
        self._line_had_text = False  # the command line, as the last sync saw it
        self._refs = itertools.count(1)  # of the requests sent (see _ask)
        # Editor rules and batches: what was asked of the server, and what it said.
        self._listing: str | None = None  # the list_rules (or revoke_rule) whose list is shown
        self._revoke_after: int | None = None  # /rules rm N before any list was shown
        self._rule_list: list[RuleRow] | None = None  # the last list shown
        self._latest_rules: list[RuleRow] | None = None  # the last list the server sent
        self._revoking: str | None = None  # revoke_rule sent
        self._previewing: _Batch | None = None  # preview_batch sent
        self._batch: _Batch | None = None  # listed, waiting for y/N
        self._batch_sent: _Batch | None = None  # answer_batch sent
        # Answered by a batch: lines wait until that many of its questions left.
        self._batch_leaving: tuple[tuple[str, ...], int] | None = None
        self._changed = trio.Event()
        self._nursery: trio.Nursery | None = None
        self._loop_scope = trio.CancelScope()

    # ------------------------------------------------------------------ running

    async def run(self, events: trio.MemoryReceiveChannel[InputEvent]) -> int:
        """Handle input events until the person leaves or :meth:`quit`; returns the
        exit code (0 for Ctrl-C, the end of input or a signal)."""
        async with trio.open_nursery() as nursery:
            self._nursery = nursery
            with self._loop_scope:
                async for event in events:
                    try:
                        self.handle(event)
                    finally:
                        if isinstance(event, Line) and event.handled is not None:
                            event.handled.set()
                self.quit(0)  # every input source is gone
            nursery.cancel_scope.cancel()
        return self.exit_code if self.exit_code is not None else 0

    def quit(self, code: int, failure: str | None = None) -> None:
        """Leave with ``code`` (the first code given wins), saying ``failure`` on stderr."""
        if self.exit_code is None:
            self.exit_code = code
            self.failure = failure
        self._loop_scope.cancel()
        self._wake()

    async def wait_ready(self) -> None:
        """Wait until the next line can be taken: at once if no card is up and nothing
        was asked of the server, else once its card can be answered (the line reader
        asks before each line)."""
        while not self._ready_for_line():
            await self._changed.wait()

    def _ready_for_line(self) -> bool:
        if self.exit_code is not None:
            return True
        if self._send is None:
            # Lines wait for the first replay (a script's answers may come first); once
            # the connection dropped they do not: a line typed then answers nothing,
            # and the end of input ends the approver.
            return self._was_connected
        if self._sent is not None or self._awaiting():
            return False  # lines wait for the answer in flight, and for the server's reply
        card = self._shown
        return card is None or (self._armed(card) and self._offered(card))

    def _awaiting(self) -> bool:
        """Whether a reply of the server's is awaited (a list, a preview, a batch), or
        the questions a batch answered are still to leave."""
        leaving = self._batch_leaving
        if leaving is not None:
            ids, answered = leaving
            if sum(question_id not in self._by_id for question_id in ids) >= answered:
                self._batch_leaving = leaving = None
        return (
            self._listing is not None
            or self._revoking is not None
            or self._previewing is not None
            or self._batch_sent is not None
            or leaving is not None
        )

    def _offered(self, card: Approval) -> bool:
        """Whether ``card``'s editor rules came, or they had time to (lines only)."""
        if self.input_mode != "lines" or card in self._offers or not self._asked[card].whole:
            return True
        return card.shown_at is not None and trio.current_time() >= card.shown_at + OFFERS_WAIT_S

    @property
    def shown(self) -> Approval | None:
        """The approval whose card is up, if any."""
        return self._shown

    # ----------------------------------------------------------------- the server

    def opened(self, send: Send, where: str, replay: list[RelayQuestion]) -> None:
        """Connected to ``where``, with ``replay`` (every pending question) in:
        it replaces the queue; answers go through ``send``."""
        before = dict(self._by_id)
        for approval in list(self.queue):
            self._forget(approval)
        again = self._where is not None
        self._send, self._where, self._sent = send, where, None
        self._was_connected = True
        for question in replay:
            self._add(question)
        count = len(self.queue)
        line = Text(f"● {'re' if again else ''}connected to {where} as ", style="green")
        line.append_text(escaped(self.view, "green"))
        line.append(f": {count} question{'s' if count != 1 else ''} pending", style="green")
        self.screen.print(line)
        for question_id, approval in before.items():
            if question_id not in self._by_id:
                self._told(Text("⊘ ended while disconnected", style="yellow"), approval)
        self._sync()

    def dropped(self, why: str, retry_in: float) -> None:
        """Not connected (``why``: one line from the link); the next try is in ``retry_in`` s."""
        lost = self._send is not None
        self._send, self._sent, self._confirming = None, None, None
        asked = self._reasoning is not None or self._batch is not None or self._awaiting()
        self._reasoning, self._batch = None, None
        self._forget_requests()
        if self.editor.text and not self.editor.text.startswith("/"):
            self.editor.text = ""  # (a reason: its card asks again once connected)
        line = Text(f"○ {'connection lost' if lost else 'not connected'} (", style="yellow")
        line.append_text(escaped(why, "yellow", limit=_SERVER_CHARS))
        line.append(f"): trying again in {retry_in:g} s", style="yellow")
        self.screen.print(line)
        if asked:
            self._note("the reason, batch or command under way is dropped: nothing more is sent")
        self._sync()

    def receive(self, message: ServerMessage) -> None:
        """A message from the server, after the replay. What it says is printed before
        the screen changes: a plain screen prints the next card as it comes up."""
        if isinstance(message, Requested):
            self._add(message.question)
        elif isinstance(message, Resolved):
            self._resolved(message)
        elif isinstance(message, Withdrawn):
            self._withdrawn(message)
        elif isinstance(message, AnswerRefused):
            self._refused(message)
        elif isinstance(message, RuleOffers):
            self._offered_rules(message)
        elif isinstance(message, RuleReceipt):
            self._receipt(message)
        elif isinstance(message, Rules):
            self._rules(message)
        elif isinstance(message, RuleSaved):
            self._rule_saved(message)
        elif isinstance(message, RuleRevoked):
            self._rule_revoked(message)
        elif isinstance(message, BatchPreview):
            self._preview(message)
        elif isinstance(message, BatchAnswered):
            self._batch_answered(message)
        elif isinstance(message, Sessions):
            self.titles = {info.session_id: info.title or None for info in message.sessions}
        elif isinstance(message, SessionEvent):
            if message.event == "created":
                self.titles[message.session_id] = message.text or None
        elif isinstance(message, Error):
            self._error(message)
        self._sync()

    def unreadable(self, why: str) -> None:
        """A message from the server that does not decode: it changes nothing."""
        self._server_says("ignored a message from the server: ", why)

    def _server_says(self, what: str, text: str) -> None:
        line = Text(what, style="dim yellow")
        line.append_text(escaped(text, "dim yellow", limit=_SERVER_CHARS))
        self.screen.print(line)

    def _add(self, question: RelayQuestion) -> None:
        if question.question_id in self._by_id:
            return  # told twice
        shown = card_request(question)
        if shown is None:  # fail closed: never answered from here
            line = Text(
                "⚠ a question this terminal cannot show is left to other views", style="red"
            )
            line.append(f" · {self._label(question.session_id)}", style="dim")
            self.screen.print(line)
            return
        request, whole = shown
        approval = self.queue.add(question.session_id, request)
        self._by_id[question.question_id] = approval
        self._asked[approval] = _Asked(question, whole)

    def _forget(self, approval: Approval) -> None:
        question_id = self._asked.pop(approval).question.question_id
        del self._by_id[question_id]
        self._offers.pop(approval, None)
        self.queue.remove(approval)
        if self._sent is not None and self._sent.card is approval:
            self._sent = None

    def _resolved(self, resolved: Resolved) -> None:
        approval = self._by_id.get(resolved.question_id)
        if approval is None:
            return
        ours = self._sent is not None and self._sent.card is approval
        self._forget(approval)
        option = approval.request.option(resolved.option_id or "")
        if resolved.outcome == "cancelled":
            what = Text("cancelled", style="red")
        elif option is not None:
            what = option_label(None, option)
        else:
            what = escaped(resolved.option_id or "", limit=_SERVER_CHARS)
        if ours and resolved.by == self.view:
            line = Text("→ ", style="bold")
        else:
            line = Text("✓ answered by ", style="bold")
            line.append_text(escaped(resolved.by, "bold", limit=_SERVER_CHARS))
            line.append(": ")
        line.append_text(what)
        reason = None
        if resolved.reason:
            reason = Text(" · reason: ", style="dim")
            reason.append_text(escaped(resolved.reason, limit=_SERVER_CHARS))
        self._told(line, approval, reason)

    def _withdrawn(self, withdrawn: Withdrawn) -> None:
        approval = self._by_id.get(withdrawn.question_id)
        if approval is None:
            return
        self._forget(approval)
        line = Text("⊘ withdrawn (", style="yellow")
        line.append_text(escaped(withdrawn.reason, "yellow", limit=_SERVER_CHARS))
        line.append(")", style="yellow")
        self._told(line, approval)

    def _refused(self, refused: AnswerRefused) -> None:
        approval = self._by_id.get(refused.question_id)
        if self._sent is not None and refused.ref == self._sent.ref:
            self._sent.card.shown_at = None  # answerable again, after a fresh look
            self._sent = None
        line = Text("✗ the server refused the answer: ", style="red")
        line.append_text(escaped(refused.reason, "red", limit=_SERVER_CHARS))
        if approval is None:
            self.screen.print(line)
            return
        line.append("; the card asks again", style="red")
        self._told(line, approval)

    def _error(self, error: Error) -> None:
        """The server's ``error``: it ends the wait of the request its ref names. An
        answer or a rule being saved leaves its card answerable again; a refused
        revocation is followed by the list as it is, shown."""
        self._server_says("the server: ", error.reason)
        ref = error.ref or None
        if ref is None:
            return  # (no request of ours: each has a ref)
        sent = self._sent
        if sent is not None and ref == sent.ref:
            self._sent = None
            sent.card.shown_at = None  # answerable again, after a fresh look
            self._told(Text("the card asks again", style="yellow"), sent.card)
        elif ref == self._revoking:  # "that rule changed or is gone: the list is sent again"
            self._revoking, self._listing = None, ref
        elif ref == self._listing:
            self._listing, self._revoke_after = None, None
        elif self._previewing is not None and ref == self._previewing.ref:
            self._previewing = None
        elif self._batch_sent is not None and ref == self._batch_sent.ref:
            self._batch_sent = None

    def _forget_requests(self) -> None:
        self._listing, self._revoke_after, self._revoking = None, None, None
        self._previewing, self._batch_sent, self._batch_leaving = None, None, None

    def _told(self, line: Text, approval: Approval, tail: Text | None = None) -> None:
        """Print ``line`` about ``approval``, naming its tool call and session."""
        line.append(" · ", style="dim")
        line.append_text(escaped(approval.tool_title, "dim", limit=_SERVER_CHARS))
        line.append(f" · {self._label(approval.session_id)}", style="dim")
        if tail is not None:
            line.append_text(tail)
        self.screen.print(line)

    def _label(self, session_id: str) -> str:
        return session_label(session_id, self.titles.get(session_id))

    # ------------------------------------------------------------- editor rules

    def _offered_rules(self, offers: RuleOffers) -> None:
        approval = self._by_id.get(offers.question_id)
        if approval is None or approval in self._offers:
            return
        self._offers[approval] = tuple(offers.offers[: len(EDITOR_RULE_KEYS)])
        if approval is self._shown and approval.shown_at is not None and not self.screen.live:
            # A plain screen printed the card before its rules came: say them below it.
            text = Text("Editor rules (kept by the editor; /rules lists them):", style="bold")
            for key, label in zip(EDITOR_RULE_KEYS, self._rule_labels(approval), strict=False):
                text.append(f"\n {key}  ", style="bold")
                style = "green" if label.startswith("Always allow") else "red"
                text.append_text(escaped(label, style, limit=_LABEL_CHARS))
            self.screen.print(text)
            self.screen.print(self._hint(approval))

    def _rule_labels(self, card: Approval) -> list[str]:
        return [offer.label for offer in self._offers.get(card, ())]

    def _receipt(self, receipt: RuleReceipt) -> None:
        self.screen.print(
            receipt_line(
                receipt.number,
                receipt.outcome == "allowed",
                receipt.title or receipt.tool_call_id,
                self._label(receipt.session_id),
                receipt.rule,
            )
        )
        # The server sends no list per answer: the receipt's hits keep the last list
        # current (it is shown when a revocation finds the list shown stale).
        for row in self._latest_rules or ():
            if (row.number, row.rule) == (receipt.number, receipt.rule):
                row.hits = receipt.hits

    def _save(self, card: Approval, offer: RuleOffer) -> None:
        """Ask the server to keep ``offer``: it answers the card (and every pending
        question it covers), or the server says why not."""
        question = self._asked[card].question
        ref = self._ask(SaveRule(question.question_id, question.session_id, offer.index))
        if ref is None:
            self._note("not connected: no rule was saved", style="red")
            return
        what = Text("editor rule ")
        what.append_text(escaped(offer.label, limit=_SERVER_CHARS))
        self._sent = _Sent(card, what, ref, saving=True)

    def _rule_saved(self, saved: RuleSaved) -> None:
        """This view's rule was kept (only the view that saved it is told): its card
        leaves as the rule answers it."""
        line = Text(f"rule {saved.number} saved: ", style="green")
        line.append_text(escaped(saved.rule, limit=_LABEL_CHARS))
        self.screen.print(line)

    def _rules(self, rules: Rules) -> None:
        """A list of the rules: shown if it is the reply to this view's ``list_rules``
        (or refused ``revoke_rule``); the server's news is kept, not shown."""
        self._latest_rules = rules.rules
        if self._listing is None or rules.ref != self._listing:
            return
        self._listing = None
        self._show_rules(rules.rules)
        number, self._revoke_after = self._revoke_after, None
        if number is not None:
            self._revoke(number)

    def _show_rules(self, rows: list[RuleRow]) -> None:
        self._rule_list = rows
        listed = [
            ListedRule(
                row.number,
                row.effect,
                row.rule,
                row.hits,
                None if row.kept_in == "memory" else row.kept_in,
            )
            for row in rows
        ]
        empty = "no editor rules yet: a card's a-d keys save one"
        self.screen.print(rule_list(listed, empty=empty))

    def _revoke(self, number: int) -> None:
        """Revoke rule ``number`` of the last list shown: the server checks it still reads
        the same words (numbers move when a rule goes)."""
        rows = self._rule_list or []
        row = next((row for row in rows if row.number == number), None)
        if row is None:
            self._note(f"there is no rule {number} in the last list: /rules lists them", "red")
            return
        latest = self._latest_rules
        if latest is not None and not any(
            (known.number, known.rule) == (number, row.rule) for known in latest
        ):
            self._note(f"rule {number} changed or is gone since the last list: nothing revoked")
            self._show_rules(latest)
            return
        if (ref := self._request(RevokeRule(number, row.rule))) is not None:
            self._revoking = ref

    def _rule_revoked(self, revoked: RuleRevoked) -> None:
        """A revocation of this view's took (only the view that revoked it is told)."""
        if revoked.ref == self._revoking:
            self._revoking = None
        line = Text(f"rule {revoked.number} revoked: ", style="green")
        line.append_text(escaped(revoked.rule, limit=_LABEL_CHARS))
        self.screen.print(line)

    def _ask(self, message: ViewMessage) -> str | None:
        """Send ``message`` with a ref of its own: the ref its replies carry, or None if
        it could not be sent."""
        ref = str(next(self._refs))
        if self._send is None or not self._send(msgspec.structs.replace(message, ref=ref)):
            return None
        return ref

    def _request(self, message: ViewMessage) -> str | None:
        """:meth:`_ask`, saying so when it could not be sent."""
        ref = self._ask(message)
        if ref is None:
            self._note("not connected: nothing was asked", style="red")
        return ref

    # -------------------------------------------------------------------- batches

    def _preview(self, preview: BatchPreview) -> None:
        asked = self._previewing
        if asked is None or preview.ref != asked.ref:
            return  # not the one asked for last
        self._previewing = None
        questions = preview.questions
        if not questions:
            where = self._label(asked.session_id)
            self._note(f"{one_line(asked.command)}: no pending question of {where}")
            return
        if len(questions) > MAX_BATCH:
            self._note(
                f"{one_line(asked.command)}: {len(questions)} questions, more than a batch answers "
                f"({MAX_BATCH}): name fewer",
                style="red",
            )
            return
        items = []
        for item in questions:
            approval = self._by_id.get(item.question_id)
            tag = f"#{approval.seq}" if approval is not None else "#?"
            items.append((tag, item.title, item.option_name))
        command, _, what = asked.command.partition(" ")
        self.screen.print(batch_items(command, what, items, where=self._label(asked.session_id)))
        ids = tuple(item.question_id for item in questions)
        self._batch = _Batch(
            asked.command, asked.session_id, asked.effect, asked.what, ids, trio.current_time()
        )

    def _decide_batch(self, yes: bool) -> None:
        batch, self._batch = self._batch, None
        assert batch is not None
        if not yes:
            self._note(f"{one_line(batch.command)}: nothing answered")
            return
        message = AnswerBatch(batch.session_id, batch.effect, batch.what, list(batch.question_ids))
        if (ref := self._request(message)) is not None:
            self._batch_sent = dataclasses.replace(batch, ref=ref)

    def _batch_answered(self, answered: BatchAnswered) -> None:
        sent = self._batch_sent
        if sent is not None and answered.ref == sent.ref:
            self._batch_sent = None
            self._note(f"{one_line(sent.command)}: {answered.answered} answered", style="green")
            self._batch_leaving = (sent.question_ids, answered.answered)

    # ----------------------------------------------------------------- the person

    def handle(self, event: InputEvent) -> None:
        """Act on one input event."""
        if isinstance(event, Key):
            self._on_key(event)
        elif isinstance(event, Line):
            self._on_line(event.text, event.at)
        elif isinstance(event, Interrupt | EndOfInput):
            self.quit(0)
        elif isinstance(event, Terminate):
            self.screen.print(Text(f"received {event.signal_name}: leaving", style="yellow"))
            self.quit(0)
        self._sync()

    def _on_key(self, key: Key) -> None:
        read_at = key.at if key.at is not None else trio.current_time()
        if key.name in ("ctrl_c", "ctrl_d"):
            self.quit(0)
            return
        if self._batch is not None:
            yes = key.name == "char" and key.char in "yY"
            if yes and (key.burst or read_at <= self._batch.listed_at):
                self._note("read the list first: the next y answers them")
                return
            self._decide_batch(yes)
            return
        if self._reasoning is not None:
            self._on_reason_key(self._reasoning, key)
            return
        if self._confirming is not None:
            self._on_confirm_key(self._confirming, key, read_at)
            return
        if self.editor.text or key == Key("char", "/") or self._pastes_command(key):
            self._on_command_key(key)
            return
        card = self._shown
        if card is None:
            return
        if key == _VIEW_CARD:  # the whole card, into the transcript; it stays up
            title = self.titles.get(card.session_id)
            labels = self._rule_labels(card)
            self.screen.show_card(
                PermissionCard(card.request, session_title=title, editor_rules=labels)
            )
            return
        if not self._card_takes(card, key, read_at):
            return
        self._card_key = (key, read_at)
        if key.name == "esc":
            self._answer(card, CancelledDecision(), Text("cancelled", style="red"))
            return
        offers = self._offers.get(card, ())
        if key.char in EDITOR_RULE_KEYS:
            offer = offers[EDITOR_RULE_KEYS.index(key.char)]
            self._confirming = _Confirming(card, 0, read_at, offer)
            if not self.screen.live:  # a plain screen drew the card once: say it below
                self.screen.print(self._hint(card))
            return
        number = int(key.char)
        options = card.request.options
        option = options[number - 1] if 1 <= number <= len(options) else None
        if option is not None and option.kind.startswith("reject"):
            self._reasoning = _Reasoning(card, number)
            self.editor.text = ""
            if not self.screen.live:
                self.screen.print(self._hint(card))
            return
        if option is not None and option.kind == "allow_always":
            self._confirming = _Confirming(card, number, read_at)
            if not self.screen.live:
                self.screen.print(self._hint(card))
            return
        self._pick(card, number)

    @staticmethod
    def _pastes_command(key: Key) -> bool:
        return key.name == "paste" and key.char.startswith("/")

    def _card_takes(self, card: Approval, key: Key, read_at: float) -> bool:
        """Whether ``key`` answers ``card``: see the module docstring."""
        rule_keys = EDITOR_RULE_KEYS[: len(self._offers.get(card, ()))]
        if key.name != "esc" and not (
            key.name == "char" and (key.char in _CARD_KEYS or key.char in rule_keys)
        ):
            return False
        if self._card_key is not None:
            last, last_at = self._card_key
            if key == last and read_at - last_at < self.repeat_guard:
                # A held key, repeating: it answers no more, also while the next card
                # arms or an answer is in flight.
                self._card_key = (key, read_at)
                return False
        if key.burst or not self._answerable(card):
            return False
        assert card.shown_at is not None  # (armed)
        return read_at >= card.shown_at + self.arm_delay  # (on screen long enough)

    def _on_confirm_key(self, confirming: _Confirming, key: Key, read_at: float) -> None:
        """``y`` read after the key confirms a standing grant or an editor rule; any other
        key goes back. Not Enter: it sends every denial, so "digit, Enter" is a habit,
        and the 2 that denied one card may be "Always allow" on the next."""
        card = confirming.card
        if key.name == "char" and key.char in "yY":
            if key.burst or read_at <= confirming.picked_at:
                self._note("read the confirmation first: the next y confirms it")
                return
            self._confirming = None
            if confirming.offer is not None:
                self._save(card, confirming.offer)
            else:
                self._pick(card, confirming.number)
            return
        self._confirming = None
        if self._card_key is not None and key == self._card_key[0]:
            self._card_key = (key, read_at)  # a held key keeps repeating: still its repeat
        self._note("not confirmed: nothing answered, the card still asks")

    def _on_reason_key(self, reasoning: _Reasoning, key: Key) -> None:
        """A key while a denial waits for its reason: Enter sends it, Esc goes back."""
        if key.name == "enter":
            reason, self.editor.text = self.editor.text, ""
            self._reasoning = None
            self._pick(reasoning.card, reasoning.number, reason=reason)
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

    def _on_command_key(self, key: Key) -> None:
        """A key of the command line (it starts with ``/``): Enter runs it, Esc drops it."""
        if key.name == "esc":
            self.editor.text = ""
        elif key.name == "paste_too_long" or (
            key.name == "paste" and not self.editor.fits(key.char)
        ):
            self._note("the paste was not taken: too long for a command", style="red")
        else:
            line = self.editor.handle(key)
            if line is not None:
                self._command(line.strip())

    def _on_line(self, text: str, read_at: float | None) -> None:
        answer = text.strip()
        if self._batch is not None:
            self._decide_batch(answer.lower() in _YES)
            return
        if answer.startswith("/"):
            self._command(answer)
            return
        card = self._shown
        if card is None:
            self._note(f"no question is waiting: '{one_line(answer)}' ignored", style="red")
            return
        if read_at is not None and (card.shown_at is None or read_at < card.shown_at):
            self._note(
                f"the card changed before '{one_line(answer)}' was read: ignored, not an answer",
                style="red",
            )
            return
        first, _, rest = answer.partition(" ")
        offers = self._offers.get(card, ())
        lowered = answer.lower()
        if not self._answerable(card):
            self._note(f"the card cannot be answered now: '{one_line(answer)}' ignored", "red")
        elif lowered in _CANCEL_LINES:
            self._answer(card, CancelledDecision(), Text("cancelled", style="red"))
        elif (number := small_number(first)) is not None:
            self._pick(card, number, reason=rest)
        elif len(lowered) == 1 and lowered in EDITOR_RULE_KEYS[: len(offers)]:
            self._save(card, offers[EDITOR_RULE_KEYS.index(lowered)])
        else:
            count = len(card.request.options)
            rules = f", {_letters(len(offers))} (an editor rule)" if offers else ""
            self._note(
                f"answer 1-{count}{rules}, or c (cancelled): got '{one_line(answer)}'",
                style="red",
            )

    def _pick(self, card: Approval, number: int, *, reason: str = "") -> None:
        options = card.request.options
        if not 1 <= number <= len(options):
            self._note(f"there is no option {number}: choose 1-{len(options)}", style="red")
            return
        option = options[number - 1]
        reason = reason.strip()
        if reason and not option.kind.startswith("reject"):
            self._note("a reason goes only with a deny option: nothing answered", style="red")
            return
        decision = SelectedDecision(option.option_id)
        self._answer(card, decision, option_label(None, option), reason[:MAX_REASON] or None)

    def _answer(
        self, card: Approval, decision: ViewDecision, what: Text, reason: str | None = None
    ) -> None:
        """Send the answer; the card stays until the server says how its question ended."""
        question = self._asked[card].question
        ref = self._ask(Answer(question.question_id, question.session_id, decision, reason))
        if ref is None:
            self._note("not connected: nothing was answered", style="red")
            return
        self._sent = _Sent(card, what, ref)

    def _command(self, line: str) -> None:
        name, _, arg = line.partition(" ")
        arg = arg.strip()
        if name == "/help":
            self.screen.print(help_table(COMMANDS, KEYS))
        elif self._send is None:
            self._note(f"not connected: '{one_line(line)}' ignored", style="red")
        elif name == "/rules":
            self._cmd_rules(arg)
        elif name in ("/allow-all", "/deny-all"):
            self._cmd_batch(name, arg)
        else:
            self._note(f"no command '{one_line(name)}': /help lists them", style="red")

    def _cmd_rules(self, arg: str) -> None:
        verb, _, rest = arg.partition(" ")
        if not verb:
            if (ref := self._request(ListRules())) is not None:
                self._listing = ref
        elif verb == "rm":
            number = small_number(rest.strip())
            if number is None:
                self._note("usage: /rules rm N (N from /rules)", style="red")
            elif self._rule_list is not None:
                self._revoke(number)
            elif (ref := self._request(ListRules())) is not None:  # no list yet: list first
                self._listing, self._revoke_after = ref, number
        else:
            self._note("usage: /rules, /rules rm N", style="red")

    def _cmd_batch(self, command: str, what: str) -> None:
        """``/allow-all WHAT`` or ``/deny-all WHAT``: ask what it would answer, in the
        session whose card is up (the approver has no current session of its own)."""
        card = self._shown
        if not what or len(what) > _MAX_WHAT:
            self._note(
                f"usage: {command} KIND|GLOB (e.g. {command} reads, {command} src/**)", "red"
            )
            return
        if card is None:
            self._note(
                f"no card is up: {command} answers questions of the session whose card is up",
                style="red",
            )
            return
        effect: Effect = "allow" if command == "/allow-all" else "deny"
        if (ref := self._request(PreviewBatch(card.session_id, effect, what))) is not None:
            self._previewing = _Batch(f"{command} {what}", card.session_id, effect, what, ref=ref)

    def _note(self, message: str, style: str = "yellow") -> None:
        self.screen.print(Text(message, style=style))

    # ----------------------------------------------------------------- the screen

    def _armed(self, card: Approval) -> bool:
        return card.shown_at is not None and trio.current_time() >= card.shown_at + self.arm_delay

    def _answerable(self, card: Approval) -> bool:
        return (
            card is self._shown
            and self._send is not None
            and self._sent is None
            and self._armed(card)
        )

    def _sync(self) -> None:
        """Recompute which card is up, redraw, and wake whoever waits for a change."""
        card = self.queue.head if self.exit_code is None else None
        if self._confirming is not None and self._confirming.card is not card:
            self._confirming = None  # the question belongs to its card and goes with it
        if self._reasoning is not None and self._reasoning.card is not card:
            self._reasoning = None
            self.editor.text = ""
            if self.exit_code is None:
                self._note("the card went before the denial was sent: nothing answered", "red")
        if card is not self._shown:
            if self._shown is not None:
                self._shown.shown_at = None
            self._shown = card
        elif card is not None and self._line_had_text and not self.editor.text:
            card.shown_at = None  # the command line was just emptied: a fresh look
        self._line_had_text = bool(self.editor.text)
        self.screen.refresh(self._view())
        if card is not None and card.shown_at is None:
            # Stamped once the card is drawn: keys read while it was drawn come too early.
            card.shown_at = trio.current_time()
            delay = self.arm_delay
            if self.input_mode == "lines" and card not in self._offers:
                delay = max(delay, OFFERS_WAIT_S)
            if delay > 0 and self._nursery is not None and self.exit_code is None:
                self._nursery.start_soon(self._arm, card, delay)
        self._wake()

    async def _arm(self, card: Approval, delay: float) -> None:
        await trio.sleep(delay)
        if card is self._shown:
            self._sync()  # its hint now says which keys answer

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _view(self) -> View:
        view = View(prompt=self._status())
        card = self._shown
        queue = list(self.queue) if self.exit_code is None else []  # (leaving: no card)
        hint = self._hint(card) if card else None
        labels = self._rule_labels(card) if card else []
        view.show_queue(card, queue, self.titles, hint, editor_rules=labels)
        return view

    def _status(self) -> Text | None:
        if self.exit_code is not None:
            return None
        typed = one_line(self.editor.text.replace("\n", "⏎"))  # (a paste's line breaks)
        if self._reasoning is not None:
            return prompt_line("reason", typed)
        if self.editor.text:
            return prompt_line("command", typed)
        if self._batch is not None:
            count = len(self._batch.question_ids)
            return Text(
                f"{one_line(self._batch.command)}: answer the {count} listed? y/N",
                style="bold yellow",
            )
        if self._send is None:
            where = self._where or "the server"
            return Text(f"○ connecting to {where} … (Ctrl-C leaves)", style="yellow")
        line = Text(f"● connected to {self._where} as ", style="green")
        line.append_text(escaped(self.view, "green"))
        if self._shown is None:
            line.append(" · waiting for questions", style="dim")
        line.append(" · / starts a command (/help) · Ctrl-C leaves", style="dim")
        return line

    def _hint(self, card: Approval) -> Text:
        hint = Text()
        if not self._asked[card].whole:
            hint.append(
                "⚠ the agent's request could not be read in full: shown as it arrived · ", "yellow"
            )
        count = len(card.request.options)
        rules = len(self._offers.get(card, ()))
        if self._send is None:
            hint.append("… not connected: no answer can be sent until the connection is back")
        elif self._sent is not None and self._sent.card is card:
            hint.append("… sent ", style="dim italic")
            hint.append_text(self._sent.what)
            hint.append(": waiting for the server", style="dim italic")
        elif self.input_mode == "lines":
            also = f", {_letters(rules)} (an editor rule)" if rules else ""
            hint.append(
                f"Answer with a line: 1-{count} (a deny option may be followed by a reason)"
                f"{also}, or c or an empty line (cancelled).",
                "bold",
            )
        elif self._reasoning is not None and self._reasoning.card is card:
            hint.append(
                "Reason for denying (optional, sent to the agent): type it · "
                "Enter sends the denial · Esc goes back",
                style="bold",
            )
        elif self._confirming is not None and self._confirming.offer is not None:
            hint.append("Save editor rule: ", style="bold yellow")
            label = self._confirming.offer.label
            hint.append_text(escaped(label, "bold yellow", limit=_LABEL_CHARS))
            hint.append("? y saves it (it answers this card) · any other key goes back")
        elif self._confirming is not None and self._confirming.card is card:
            option = card.request.options[self._confirming.number - 1]
            hint.append("Confirm: ", style="bold yellow")
            hint.append_text(escaped(option.name, "bold yellow", limit=_SERVER_CHARS))
            hint.append(" (a standing grant)? ", style="bold yellow")
            hint.append("y confirms · any other key goes back, answering nothing")
        elif self.editor.text:
            hint.append(
                "A command is being typed: Enter runs it, Esc drops it; then keys answer the card.",
                style="bold",
            )
        elif not self._armed(card):
            hint.append("… (read the card: keys answer it in a moment)", style="dim italic")
        else:
            keyed = min(count, KEYED_OPTIONS)
            hint.append(f"Press {f'1-{keyed}' if keyed > 1 else '1'} to choose", style="bold")
            if rules:
                hint.append(f" · {_letters(rules)} saves a rule")
            hint.append(" · Esc answers cancelled · v shows it whole · Ctrl-C leaves")
        return hint


def _letters(count: int) -> str:
    """``a``, or ``a-c``: the keys of ``count`` editor rules."""
    return "a" if count == 1 else f"a-{EDITOR_RULE_KEYS[count - 1]}"
