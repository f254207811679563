"""Where the chat's output goes: a live terminal region, or plain lines.

The chat prints two kinds of things. The transcript (agent text, finished
tool calls, answers, notices, command output) is printed once and scrolls
away. The live part (running tool calls, the current partial line of agent
text, the permission card, the waiting marker, the prompt) changes in place.

:class:`LiveScreen` keeps the live part in a Rich ``Live`` region at the
bottom of a terminal and prints the transcript above it. A card taller than
the screen is printed in full into the transcript once, and the live region
keeps a compact card (session, tool, command, options) so the options always
stay on screen. :class:`PlainScreen` is for a pipe or a file: it prints the
transcript and prints each card once, when it comes up, and the waiting marker
when it changes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Final, Protocol

from rich.console import Console, Group, RenderableType
from rich.live import Live
from rich.text import Text

from .card import PermissionCard

__all__ = ["LiveScreen", "PlainScreen", "Screen", "View"]

_SPARE_LINES: Final = 1


@dataclass
class View:
    """A snapshot of the live part of the screen."""

    lines: list[RenderableType] = field(default_factory=list)
    card: PermissionCard | None = None
    card_id: int | None = None
    marker: Text | None = None
    prompt: Text | None = None


class Screen(Protocol):
    """What the chat needs from its output."""

    @property
    def live(self) -> bool:
        """True if the live part is redrawn in place (tool lines need not be printed)."""

    def print(self, *renderables: RenderableType) -> None:
        """Add to the transcript."""

    def refresh(self, view: View) -> None:
        """Show the live part as ``view`` says."""

    def start(self) -> None:
        """Begin showing the live part."""

    def stop(self) -> None:
        """Stop showing it (the terminal is left clean)."""


class LiveScreen:
    """A terminal: the live part is redrawn in place under the transcript."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._live = Live(
            Text(""),
            console=console,
            auto_refresh=False,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
            vertical_overflow="visible",
        )
        self._started = False
        self._printed_in_full: set[int] = set()
        self._card_heights: dict[tuple[int | None, int, str], int] = {}

    @property
    def live(self) -> bool:
        return True

    def start(self) -> None:
        if not self._started:
            self._live.start()
            self._started = True

    def stop(self) -> None:
        if self._started:
            self._started = False
            self._live.update(Text(""), refresh=True)
            self._live.stop()

    def print(self, *renderables: RenderableType) -> None:
        self.console.print(*renderables)

    def _height(self, renderable: RenderableType) -> int:
        return len(self.console.render_lines(renderable, self.console.options, pad=False))

    def refresh(self, view: View) -> None:
        if not self._started:
            return
        parts: list[RenderableType] = list(view.lines)
        tail = [part for part in (view.marker, view.prompt) if part is not None]
        card = view.card
        if card is not None:
            budget = self.console.size.height - _SPARE_LINES
            budget -= sum(self._height(part) for part in (*parts, *tail))
            hint = card.hint.plain if isinstance(card.hint, Text) else str(card.hint)
            key = (view.card_id, self.console.width, hint)
            height = self._card_heights.get(key)
            if height is None:  # a big diff is costly to measure: once per card and width
                if len(self._card_heights) > 256:
                    self._card_heights.clear()
                height = self._card_heights[key] = self._height(card)
            if height > budget:
                if view.card_id is not None and view.card_id not in self._printed_in_full:
                    self._printed_in_full.add(view.card_id)
                    full = PermissionCard(
                        card.request,
                        session_title=card.session_title,
                        hint=Text("answer in the card below", style="italic"),
                    )
                    self.console.print(full)
                card = PermissionCard(
                    card.request,
                    session_title=card.session_title,
                    position=card.position,
                    hint=card.hint,
                    compact=True,
                )
            parts.append(card)
        parts.extend(tail)
        self._live.update(Group(*parts), refresh=True)


class PlainScreen:
    """Not a terminal: transcript lines; each card and marker printed once as it comes up."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._card_id: int | None = None
        self._marker: str | None = None

    @property
    def live(self) -> bool:
        return False

    def start(self) -> None:
        pass

    def stop(self) -> None:
        pass

    def print(self, *renderables: RenderableType) -> None:
        self.console.print(*renderables)

    def refresh(self, view: View) -> None:
        if view.card is None:
            self._card_id = None
        elif view.card_id != self._card_id:
            self._card_id = view.card_id
            self.console.print(view.card)
        marker = view.marker.plain if view.marker is not None else None
        if marker != self._marker:
            self._marker = marker
            if view.marker is not None:
                self.console.print(view.marker)
