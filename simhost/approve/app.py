"""The approver's controller: relayed questions in, the person's answers out.

:class:`Approver` is told what the server says (by :mod:`.link`) and what the
person types (the chat's input events: keys from a raw terminal, or lines from a
pipe), one call at a time, in one trio thread. It needs no socket and no
terminal.

* The oldest pending question is up as the chat's permission card, naming its
  session; the others are counted by the chat's waiting marker.
* A question leaves only when the server says it ended (``resolved``,
  ``withdrawn``), never when the person answers: until then its card says the
  answer is in flight and takes no other. ``answer_refused`` makes it answerable
  again.
* The chat's rules decide whether a key answers a card: the card has been on
  screen for ``arm_delay`` before the key was read, the key was read alone (not in
  a burst), it is not the auto-repeat of the key that answered the card before,
  and an ``allow_always`` option picked by key waits for Enter. A line read
  before its card came up answers nothing.
* While the connection is down nothing can be answered; the replay that comes
  with the next connection replaces the queue.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Final

import trio
from rich.text import Text

from permclient.relay import AnswerRefused, RelayQuestion, Requested, Resolved, Withdrawn
from simhost._digits import small_number
from simhost.chat.app import DEFAULT_ARM_DELAY_S, REPEAT_GUARD_S, InputMode
from simhost.chat.approvals import Approval, ApprovalQueue
from simhost.chat.card import KEYED_OPTIONS, PermissionCard, option_label, session_label
from simhost.chat.keys import Key
from simhost.chat.screen import Screen, View
from simhost.chat.terminal import EndOfInput, InputEvent, Interrupt, Line, Terminate
from simhost.chat.text import escaped, one_line
from simhost.serve.protocol import (
    Answer,
    CancelledDecision,
    Error,
    SelectedDecision,
    ServerMessage,
    SessionEvent,
    Sessions,
    ViewDecision,
    ViewMessage,
)

from .cards import card_request

__all__ = ["Approver", "Send"]

Send = Callable[[ViewMessage], bool]
"""Queue a message for the server; ``False`` if the connection is gone."""

_CANCEL_LINES: Final = frozenset({"", "c", "esc", "cancel", "cancelled"})
_CARD_KEYS: Final = frozenset("0123456789")
_VIEW_CARD: Final = Key("char", "v")
_SERVER_CHARS: Final = 200  # of a string from the server on a notice line


@dataclass(frozen=True)
class _Asked:
    """What a card answers: the relayed question, and whether it shows the whole request."""

    question: RelayQuestion
    whole: bool


@dataclass(frozen=True)
class _Confirming:
    """An ``allow_always`` option picked by key on ``card``: it waits for Enter."""

    card: Approval
    number: int
    picked_at: float  # when the digit was read


@dataclass(frozen=True)
class _Sent:
    """An answer in flight: the card stays until the server says how it ended."""

    card: Approval
    what: Text


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
        self.exit_code: int | None = None
        self.failure: str | None = None
        """Why the approver gave up (one sentence, for stderr), or ``None``."""
        self._by_id: dict[str, Approval] = {}
        self._asked: dict[Approval, _Asked] = {}
        self._send: Send | None = None  # None until the replay is in, and while disconnected
        self._was_connected = False
        self._where: str | None = None  # the server's host:port, once connected
        self._sent: _Sent | None = None
        self._shown: Approval | None = None
        self._card_key: tuple[Key, float] | None = None  # the last key a card took, and when
        self._confirming: _Confirming | None = None
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
        """Wait until the next line can be taken: at once if no card is up, else once
        its card can be answered (the line reader asks before each line)."""
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
        if self._sent is not None:
            return False  # lines wait for the answer in flight
        card = self._shown
        return card is None or self._armed(card)

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
        line = Text(f"○ {'connection lost' if lost else 'not connected'} (", style="yellow")
        line.append_text(escaped(why, "yellow", limit=_SERVER_CHARS))
        line.append(f"): trying again in {retry_in:g} s", style="yellow")
        self.screen.print(line)
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
        elif isinstance(message, Sessions):
            self.titles = {info.session_id: info.title or None for info in message.sessions}
        elif isinstance(message, SessionEvent):
            if message.event == "created":
                self.titles[message.session_id] = message.text or None
        elif isinstance(message, Error):
            self._server_says("the server: ", message.reason)
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
            line.append(
                f" · {session_label(question.session_id, self.titles.get(question.session_id))}",
                style="dim",
            )
            self.screen.print(line)
            return
        request, whole = shown
        approval = self.queue.add(question.session_id, request)
        self._by_id[question.question_id] = approval
        self._asked[approval] = _Asked(question, whole)

    def _forget(self, approval: Approval) -> None:
        question_id = self._asked.pop(approval).question.question_id
        del self._by_id[question_id]
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
        self._told(line, approval)

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
        if approval is not None and self._sent is not None and self._sent.card is approval:
            self._sent = None
            approval.shown_at = None  # answerable again, after a fresh look
        line = Text("✗ the server refused the answer: ", style="red")
        line.append_text(escaped(refused.reason, "red", limit=_SERVER_CHARS))
        if approval is None:
            self.screen.print(line)
            return
        line.append("; the card asks again", style="red")
        self._told(line, approval)

    def _told(self, line: Text, approval: Approval) -> None:
        """Print ``line`` about ``approval``, naming its tool call and session."""
        line.append(" · ", style="dim")
        line.append_text(escaped(approval.tool_title, "dim", limit=_SERVER_CHARS))
        title = self.titles.get(approval.session_id)
        line.append(f" · {session_label(approval.session_id, title)}", style="dim")
        self.screen.print(line)

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
        if self._confirming is not None:
            self._on_confirm_key(self._confirming, key, read_at)
            return
        card = self._shown
        if card is None:
            return
        if key == _VIEW_CARD:  # the whole card, into the transcript; it stays up
            title = self.titles.get(card.session_id)
            self.screen.show_card(PermissionCard(card.request, session_title=title))
            return
        if not self._card_takes(card, key, read_at):
            return
        self._card_key = (key, read_at)
        if key.name == "esc":
            self._answer(card, CancelledDecision(), Text("cancelled", style="red"))
            return
        number = int(key.char)
        options = card.request.options
        if 1 <= number <= len(options) and options[number - 1].kind == "allow_always":
            self._confirming = _Confirming(card, number, read_at)
            if not self.screen.live:  # a plain screen drew the card once: say it below
                self.screen.print(self._hint(card))
            return
        self._pick(card, number)

    def _card_takes(self, card: Approval, key: Key, read_at: float) -> bool:
        """Whether ``key`` answers ``card``: see the module docstring."""
        if key.name != "esc" and not (key.name == "char" and key.char in _CARD_KEYS):
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
        """Enter read after the digit confirms a standing grant; any other key goes back."""
        card = confirming.card
        if key.name == "enter":
            if key.burst or read_at <= confirming.picked_at:
                self._note("read the confirmation first: the next Enter confirms it")
                return
            self._confirming = None
            self._pick(card, confirming.number)
            return
        self._confirming = None
        if self._card_key is not None and key == self._card_key[0]:
            self._card_key = (key, read_at)  # a held digit keeps repeating: still its repeat
        self._note("not confirmed: nothing answered, the card still asks")

    def _on_line(self, text: str, read_at: float | None) -> None:
        card = self._shown
        answer = text.strip()
        if card is None:
            self._note(f"no question is waiting: '{one_line(answer)}' ignored", style="red")
            return
        if read_at is not None and (card.shown_at is None or read_at < card.shown_at):
            self._note(
                f"the card changed before '{one_line(answer)}' was read: ignored, not an answer",
                style="red",
            )
            return
        if not self._answerable(card):
            self._note(f"the card cannot be answered now: '{one_line(answer)}' ignored", "red")
        elif answer.lower() in _CANCEL_LINES:
            self._answer(card, CancelledDecision(), Text("cancelled", style="red"))
        elif (number := small_number(answer)) is not None:
            self._pick(card, number)
        else:
            count = len(card.request.options)
            self._note(f"answer 1-{count}, or c (cancelled): got '{one_line(answer)}'", style="red")

    def _pick(self, card: Approval, number: int) -> None:
        options = card.request.options
        if not 1 <= number <= len(options):
            self._note(f"there is no option {number}: choose 1-{len(options)}", style="red")
            return
        option = options[number - 1]
        self._answer(card, SelectedDecision(option.option_id), option_label(None, option))

    def _answer(self, card: Approval, decision: ViewDecision, what: Text) -> None:
        """Send the answer; the card stays until the server says how its question ended."""
        question = self._asked[card].question
        message = Answer(question.question_id, question.session_id, decision)
        if self._send is None or not self._send(message):
            self._note("not connected: nothing was answered", style="red")
            return
        self._sent = _Sent(card, what)

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
        if card is not self._shown:
            if self._shown is not None:
                self._shown.shown_at = None
            self._shown = card
        self.screen.refresh(self._view())
        if card is not None and card.shown_at is None:
            # Stamped once the card is drawn: keys read while it was drawn come too early.
            card.shown_at = trio.current_time()
            if self.arm_delay > 0 and self._nursery is not None and self.exit_code is None:
                self._nursery.start_soon(self._arm, card)
        self._wake()

    async def _arm(self, card: Approval) -> None:
        await trio.sleep(self.arm_delay)
        if card is self._shown:
            self._sync()  # its hint now says which keys answer

    def _wake(self) -> None:
        self._changed.set()
        self._changed = trio.Event()

    def _view(self) -> View:
        view = View(prompt=self._status())
        card = self._shown
        queue = list(self.queue) if self.exit_code is None else []  # (leaving: no card)
        view.show_queue(card, queue, self.titles, self._hint(card) if card else None)
        return view

    def _status(self) -> Text | None:
        if self.exit_code is not None:
            return None
        if self._send is None:
            where = self._where or "the server"
            return Text(f"○ connecting to {where} … (Ctrl-C leaves)", style="yellow")
        line = Text(f"● connected to {self._where} as ", style="green")
        line.append_text(escaped(self.view, "green"))
        if self._shown is None:
            line.append(" · waiting for questions", style="dim")
        line.append(" · Ctrl-C leaves", style="dim")
        return line

    def _hint(self, card: Approval) -> Text:
        hint = Text()
        if not self._asked[card].whole:
            hint.append(
                "⚠ the agent's request could not be read in full: shown as it arrived · ", "yellow"
            )
        count = len(card.request.options)
        if self._send is None:
            hint.append("… not connected: no answer can be sent until the connection is back")
        elif self._sent is not None and self._sent.card is card:
            hint.append("… sent ", style="dim italic")
            hint.append_text(self._sent.what)
            hint.append(": waiting for the server", style="dim italic")
        elif self.input_mode == "lines":
            hint.append(
                f"Answer with a line: 1-{count}, or c or an empty line (cancelled).", "bold"
            )
        elif self._confirming is not None and self._confirming.card is card:
            option = card.request.options[self._confirming.number - 1]
            hint.append("Confirm: ", style="bold yellow")
            hint.append_text(escaped(option.name, "bold yellow", limit=_SERVER_CHARS))
            hint.append(" (a standing grant)? ", style="bold yellow")
            hint.append("Enter confirms · any other key goes back, answering nothing")
        elif not self._armed(card):
            hint.append("… (read the card: keys answer it in a moment)", style="dim italic")
        else:
            keyed = min(count, KEYED_OPTIONS)
            hint.append(f"Press {f'1-{keyed}' if keyed > 1 else '1'} to choose", style="bold")
            hint.append(" · Esc answers cancelled · v shows it whole · Ctrl-C leaves")
        return hint
