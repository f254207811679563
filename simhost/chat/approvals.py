"""The approval queue: permission requests waiting for the one person at the keyboard.

Each session's permission handler puts an :class:`Approval` in the queue and
waits for its answer; the chat's UI task shows the head of the queue as a card
and answers it from the keyboard. A request the runtime withdraws (or a turn
that is cancelled) leaves the queue without an answer.
"""

from __future__ import annotations

from collections.abc import Iterator

from permclient import Answer, Decision, PermissionRequest
from permclient.rules import EditorRule

__all__ = ["Approval", "ApprovalQueue"]


class Approval:
    """One permission request waiting for an answer from the person."""

    __slots__ = ("_answer", "request", "seq", "session_id", "shown_at", "suggestions")

    def __init__(self, seq: int, session_id: str, request: PermissionRequest) -> None:
        self.seq = seq
        self.session_id = session_id
        self.request = request
        self._answer = Answer()
        self.shown_at: float | None = None
        """When the card last became visible (trio clock), ``None`` while hidden."""
        self.suggestions: tuple[EditorRule, ...] = ()
        """The editor rules the card offers to save (keys ``a``, ``b``, ...)."""

    @property
    def tool_title(self) -> str:
        """The tool call's title, or its id when it has none."""
        call = self.request.tool_call
        return call.title or call.tool_call_id

    @property
    def decision(self) -> Decision | None:
        """The person's decision, or ``None`` while there is none."""
        return self._answer.decision

    def answer(self, decision: Decision) -> None:
        """Record the person's decision (the first one counts) and wake the handler."""
        self._answer.set(decision)

    async def wait(self) -> Decision:
        """The person's decision, once given."""
        return await self._answer

    def __repr__(self) -> str:
        return f"Approval(#{self.seq}, {self.session_id!r}, {self.tool_title!r})"


class ApprovalQueue:
    """First come, first shown."""

    def __init__(self) -> None:
        self._items: list[Approval] = []
        self._next_seq = 1

    def add(self, session_id: str, request: PermissionRequest) -> Approval:
        """Queue a request; returns its :class:`Approval`."""
        approval = Approval(self._next_seq, session_id, request)
        self._next_seq += 1
        self._items.append(approval)
        return approval

    def remove(self, approval: Approval) -> bool:
        """Take ``approval`` out of the queue; False if it was not in it."""
        try:
            self._items.remove(approval)
        except ValueError:
            return False
        return True

    @property
    def head(self) -> Approval | None:
        """The approval to show now, if any."""
        return self._items[0] if self._items else None

    def count(self, session_id: str | None = None) -> int:
        """How many approvals wait (of one session, or in all)."""
        return sum(1 for a in self._items if session_id is None or a.session_id == session_id)

    def __iter__(self) -> Iterator[Approval]:
        return iter(list(self._items))

    def __len__(self) -> int:
        return len(self._items)

    def __contains__(self, approval: object) -> bool:
        return approval in self._items
