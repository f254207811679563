"""Where the chat's output goes: a live terminal region, or plain lines.

The chat prints two kinds of things. The transcript (agent text, finished
tool calls, answers, notices, command output) is printed once and scrolls
away. The live part (running tool calls, the current partial line of agent
text, the permission card, the waiting marker, the prompt) changes in place.

:class:`LiveScreen` keeps the live part in a Rich ``Live`` region at the
bottom of a terminal and prints the transcript above it. The region always
fits the terminal: the card is a live card budgeted to the rows left by the
marker and the prompt, never taller (its head and the options a key can
choose show whenever the terminal has room for them; ``v`` prints the full
card into the transcript), and running tool lines give way to the card.
While :meth:`LiveScreen.run` runs, changes are drawn at most once a frame
(a new card or a card taken away at once), each frame in one write wrapped in
a synchronized update (``ESC[?2026h`` … ``ESC[?2026l``: a terminal that knows
it shows the frame whole, others ignore it), and a terminal resize
(``SIGWINCH``) redraws. :class:`PlainScreen` is for a pipe or a file: it
prints the transcript and prints each full card once, when it comes up, and
the waiting marker when it changes.

Both call ``before_output`` (when given) before they write anything: the chat
flushes its telemetry there, so a record made before something was shown is on
file by the time it is shown (a test, or a person, reading the file after seeing
the line finds it there).
"""

from __future__ import annotations

import signal
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final, Protocol

import trio
from rich.console import Console, ConsoleOptions, Group, RenderableType, RenderResult
from rich.control import Control
from rich.live import Live
from rich.segment import Segment
from rich.text import Text

from .approvals import Approval
from .card import PermissionCard
from .render import waiting_marker

__all__ = ["FRAME_S", "LiveScreen", "PlainScreen", "Screen", "View"]

FRAME_S: Final = 1 / 30
"""The shortest time between two redraws of the live region."""
_SPARE_LINES: Final = 1
_SYNC_BEGIN: Final = "\x1b[?2026h"
_SYNC_END: Final = "\x1b[?2026l"


@dataclass
class View:
    """A snapshot of the live part of the screen."""

    lines: list[RenderableType] = field(default_factory=list)
    card: PermissionCard | None = None
    card_id: int | None = None
    marker: Text | None = None
    prompt: Text | None = None

    def show_queue(
        self,
        shown: Approval | None,
        queue: Sequence[Approval],
        titles: Mapping[str, str | None],
        hint: Text | None,
        note: str | None = None,
        editor_rules: Sequence[str] = (),
    ) -> None:
        """``shown``'s card (with ``hint`` and the ``editor_rules`` it offers), and a
        marker for the rest of ``queue``."""
        if shown is not None:
            self.card = PermissionCard(
                shown.request,
                session_title=titles.get(shown.session_id),
                position=(1, len(queue)),
                hint=hint,
                editor_rules=editor_rules,
            )
            self.card_id = shown.seq
        waiting = [approval for approval in queue if approval is not shown]
        if waiting:
            self.marker = waiting_marker(waiting, titles, note=note)


class Screen(Protocol):
    """What the chat needs from its output."""

    @property
    def live(self) -> bool:
        """True if the live part is redrawn in place (tool lines need not be printed)."""

    def print(self, *renderables: RenderableType) -> None:
        """Add to the transcript."""

    def refresh(self, view: View) -> None:
        """Show the live part as ``view`` says."""

    def show_card(self, card: PermissionCard) -> None:
        """Print ``card`` in full (as far as it is shown at all) into the transcript."""

    def start(self) -> None:
        """Begin showing the live part."""

    def stop(self) -> None:
        """Stop showing it (the terminal is left clean)."""

    def suspend(self) -> None:
        """Leave the terminal to another program (an editor): nothing is drawn, and
        what is printed meanwhile waits for :meth:`resume`."""

    def resume(self) -> None:
        """Take the terminal back: draw what waited, and the live part."""

    async def run(self) -> None:
        """Keep the screen up to date until cancelled (batched redraws, resizes)."""


class _Sequence(Control):
    """A raw escape sequence Rich has no control type for."""

    def __init__(self, sequence: str) -> None:
        self.segment = Segment(sequence, None, [])


class _Rendered:
    """Lines rendered once (to measure them), shown as they are."""

    def __init__(self, lines: list[list[Segment]]) -> None:
        self.lines = lines

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        for line in self.lines:
            yield from line
            yield Segment.line()


class LiveScreen:
    """A terminal: the live part is redrawn in place under the transcript.

    ``before_output`` is called before each write to the terminal (see the module
    docstring).
    """

    def __init__(
        self,
        console: Console,
        *,
        frame_s: float = FRAME_S,
        before_output: Callable[[], object] | None = None,
    ) -> None:
        self.console = console
        self._before_output = before_output or _nothing
        self._live = Live(
            Text(""),
            console=console,
            auto_refresh=False,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
            vertical_overflow="visible",
        )
        self._frame_s = frame_s
        self._synchronized = console.is_terminal and not console.is_dumb_terminal
        self._started = False
        self._held = False  # suspended: prints wait, nothing is drawn
        self._running = False
        self._view = View()
        self._shown_card_id: int | None = None
        self._transcript: list[RenderableType] = []
        self._region: RenderableType = Text("")
        self._dirty = False
        self._wanted = trio.Event()
        self.frames = 0
        """How many times the live region was drawn (tests count work with it)."""

    @property
    def live(self) -> bool:
        return True

    def start(self) -> None:
        if not self._started:
            self._live.start()
            self._started = True

    def stop(self) -> None:
        if self._started:
            self._draw()  # the transcript still held back
            self._started = False
            self._before_output()
            self._live.update(Text(""), refresh=True)
            self._live.stop()

    def suspend(self) -> None:
        self.stop()
        self._held = True

    def resume(self) -> None:
        self._held = False
        self._dirty = True
        self.start()
        self._draw()

    def print(self, *renderables: RenderableType) -> None:
        if self._held:
            self._transcript.extend(renderables)
            return
        if not self._started:
            self._before_output()
            self.console.print(*renderables)
            return
        self._transcript.extend(renderables)
        self._want_draw()

    def show_card(self, card: PermissionCard) -> None:
        self.print(card.fitted(None))

    def refresh(self, view: View) -> None:
        if self._held:
            self._view, self._dirty = view, True
            return
        if not self._started:
            return
        self._view = view
        self._dirty = True
        if view.card_id != self._shown_card_id:
            self._draw()  # a card comes or goes at once: keys are routed by what is shown
        else:
            self._want_draw()

    async def run(self) -> None:
        """Draw what changed at most once a frame; redraw when the terminal is resized."""
        self._running = True
        try:
            async with trio.open_nursery() as nursery:
                if hasattr(signal, "SIGWINCH"):
                    nursery.start_soon(self._redraw_on_resize)
                while True:
                    await self._wanted.wait()
                    self._wanted = trio.Event()
                    self._draw()
                    await trio.sleep(self._frame_s)
        finally:
            self._running = False

    async def _redraw_on_resize(self) -> None:
        with trio.open_signal_receiver(signal.SIGWINCH) as resizes:
            async for _ in resizes:
                self._dirty = True
                self._wanted.set()

    def _want_draw(self) -> None:
        if self._running:
            self._wanted.set()
        else:
            self._draw()

    def _draw(self) -> None:
        """One frame: the transcript held back, then the live region, in one write."""
        if not self._started or not (self._dirty or self._transcript):
            return
        self._before_output()  # (what it logs, if anything, goes in this frame)
        if self._dirty:
            self._region = self._compose(self._view)
            self._shown_card_id = self._view.card_id
            self._dirty = False
        transcript, self._transcript = self._transcript, []
        self.frames += 1
        with self.console:  # one write for the whole frame
            if self._synchronized:
                self.console.control(_Sequence(_SYNC_BEGIN))
            if transcript:
                # Printing under a Live region redraws the region it last drew: take
                # that away first, so the region is drawn once, new, under the lines.
                self._live.update(Text(""), refresh=True)
                self.console.print(Group(*transcript))
            self._live.update(self._region, refresh=True)
            if self._synchronized:
                self.console.control(_Sequence(_SYNC_END))

    def _render(self, renderable: RenderableType) -> list[list[Segment]]:
        return self.console.render_lines(renderable, self.console.options, pad=False)

    def _compose(self, view: View) -> RenderableType:
        """The live region, at most as tall as the terminal; the card comes first.

        The marker and the prompt stay; the card gets the rows left (it always
        keeps its head and options); running tool lines and streamed text get
        what the card leaves, the newest kept.
        """
        height = self.console.size.height - _SPARE_LINES
        tail = [self._render(part) for part in (view.marker, view.prompt) if part is not None]
        left = height - sum(len(lines) for lines in tail)
        card: list[list[Segment]] = []
        if view.card is not None:
            # A row is kept for the running lines, or for the note that counts them.
            card = self._render(view.card.fitted(max(1, left - (1 if view.lines else 0))))
            left -= len(card)
        rendered = [self._render(part) for part in view.lines]
        above: list[list[Segment]] = []
        if sum(len(lines) for lines in rendered) <= left:
            above = [line for lines in rendered for line in lines]
        else:
            left -= 1  # the note that says how many were left out
            kept = 0
            for lines in reversed(rendered):
                if len(lines) > left:
                    break
                left -= len(lines)
                above[:0] = lines
                kept += 1
            if left >= 0:
                note = Text(f"… {len(rendered) - kept} more running or streaming", style="dim")
                above[:0] = self._render(note)
        return _Rendered([*above, *card, *(line for lines in tail for line in lines)])


class PlainScreen:
    """Not a terminal: transcript lines; each card (in full) and marker printed once.

    ``before_output`` is called before each print (see the module docstring).
    """

    def __init__(
        self, console: Console, *, before_output: Callable[[], object] | None = None
    ) -> None:
        self.console = console
        self._before_output = before_output or _nothing
        self._card_id: int | None = None
        self._marker: str | None = None

    @property
    def live(self) -> bool:
        return False

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def suspend(self) -> None:
        pass

    def resume(self) -> None:
        pass

    async def run(self) -> None:
        pass

    def print(self, *renderables: RenderableType) -> None:
        self._before_output()
        self.console.print(*renderables)

    def show_card(self, card: PermissionCard) -> None:
        self._before_output()
        self.console.print(card.fitted(None))

    def refresh(self, view: View) -> None:
        if view.card is None:
            self._card_id = None
        elif view.card_id != self._card_id:
            self._card_id = view.card_id
            self._before_output()
            self.console.print(view.card.fitted(None))
        marker = view.marker.plain if view.marker is not None else None
        if marker != self._marker:
            self._marker = marker
            if view.marker is not None:
                self._before_output()
                self.console.print(view.marker)


def _nothing() -> None:
    pass
