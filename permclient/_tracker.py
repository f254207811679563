"""Fold ``session/update`` tool-call events into one state per tool call (invariant 9).

Status only moves forward: ``pending`` < ``in_progress`` < ``completed`` | ``failed``,
and the last two are final. A late or reordered event can add detail but never
rewinds what the user was shown. While a permission request for a tool call is
pending, the call is marked ``awaiting_approval`` so a UI shows the card, not a
racing status line.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any, Final

import msgspec

from ._messages import DECODE_ERRORS, json_cost, str_cost
from ._notifications import InboundNotification
from ._wire import (
    SessionUpdate,
    ToolCallContent,
    ToolCallLocation,
    ToolCallProgress,
    ToolCallStarted,
    ToolCallUpdate,
    UnknownUpdate,
    decode_raw,
    decode_session_update,
)

log = logging.getLogger("permclient")

_ABSENT: Final = msgspec.Raw()
_NULL: Final = msgspec.Raw(b"null")
_STATUS_RANK: Final = {"pending": 0, "in_progress": 1, "completed": 2, "failed": 2}
_FINAL_RANK: Final = 2
# What a ToolCallState and its table entry cost besides the strings and JSON it keeps.
_STATE_OVERHEAD: Final = 320
DEFAULT_MAX_BYTES: Final = 64 * 1024 * 1024
_encoder: Final = msgspec.json.Encoder()


class ToolCallState:
    """What is known of one tool call of one session, folded from its events."""

    __slots__ = (
        "_announced",
        "_approvals",
        "_content_size",
        "_locations_size",
        "_size",
        "content",
        "kind",
        "locations",
        "raw_input_json",
        "raw_output_json",
        "session_id",
        "status",
        "title",
        "tool_call_id",
    )

    def __init__(self, session_id: str, tool_call_id: str) -> None:
        self.session_id = session_id
        self.tool_call_id = tool_call_id
        self.title: str | None = None
        self.kind: str | None = None
        self.status: str = "pending"
        self.content: list[ToolCallContent] | None = None
        self.locations: list[ToolCallLocation] | None = None
        # Undecoded, as in ToolCallUpdate: decoded on access by raw_input/raw_output.
        self.raw_input_json: msgspec.Raw = _ABSENT
        self.raw_output_json: msgspec.Raw = _ABSENT
        self._approvals = 0
        self._announced = False  # seen in a session/update, not only in a permission request
        # What content and locations take decoded (json_cost of their JSON).
        self._content_size = 0
        self._locations_size = 0
        self._size = 0  # what the tracker counts for it, as of its last fold

    @property
    def raw_input(self) -> Any:
        """The tool's latest arguments as decoded JSON (``None`` if never given)."""
        return decode_raw(self.raw_input_json)

    @property
    def raw_output(self) -> Any:
        """The tool's latest result as decoded JSON (``None`` if never given)."""
        return decode_raw(self.raw_output_json)

    @property
    def awaiting_approval(self) -> bool:
        """True while at least one permission request for this tool call is pending."""
        return self._approvals > 0

    @property
    def is_final(self) -> bool:
        """True once the call completed or failed; its status will not change again."""
        return _STATUS_RANK[self.status] == _FINAL_RANK

    def __repr__(self) -> str:
        return (
            f"ToolCallState({self.session_id!r}, {self.tool_call_id!r}, status={self.status!r}, "
            f"title={self.title!r}, awaiting_approval={self.awaiting_approval})"
        )


class _UntypedToolCall(msgspec.Struct, rename="camel"):
    """What can still be read of a tool-call update that did not type (an unknown
    kind or status, content of an unknown type ...): each part on its own."""

    tool_call_id: str
    title: str | None = None
    kind: str | None = None
    status: str | None = None
    content: Any = None
    locations: Any = None
    raw_input: Any = None
    raw_output: Any = None


_TOOL_CALL_UPDATES: Final = frozenset({"tool_call", "tool_call_update"})


class ToolCallTracker:
    """Per (session, toolCallId) state of every tool call the client has heard of.

    A :class:`~permclient.Client` keeps one as ``client.tool_calls`` and feeds it
    every ``session/update`` and every permission request; hosts read it.

    Memory is bounded, in count and in bytes: past ``max_per_session`` tool calls
    not awaiting approval in one session, the oldest of them are forgotten (those
    awaiting approval are bounded by the client's ``max_pending``); past
    ``max_sessions`` sessions, the oldest session with nothing awaiting approval
    is. What the states keep (strings at their size in memory, ``rawInput`` /
    ``rawOutput`` at their JSON bytes as they stay undecoded, content and locations
    at what they take decoded as estimated from their JSON, plus about 320 bytes a
    call) is held to ``max_bytes``: past it the oldest tool calls not awaiting approval are
    forgotten, and when that is not enough the update that went over keeps only
    its status (the details are dropped, with a warning). The settled calls not yet
    forgotten may take up to a quarter more (they go a quarter at a time).
    """

    def __init__(
        self,
        *,
        max_per_session: int = 1024,
        max_sessions: int = 4096,
        max_bytes: int = DEFAULT_MAX_BYTES,
    ) -> None:
        if max_per_session < 1 or max_sessions < 1 or max_bytes < 1:
            raise ValueError("max_per_session, max_sessions and max_bytes must be at least 1")
        self._max_per_session = max_per_session
        self._max_sessions = max_sessions
        self._max_bytes = max_bytes
        self._bytes = 0  # counted for every ToolCallState held
        self._settled_bytes = 0  # ... of those not awaiting approval (the evictable ones)
        # A tool call known only from one pending permission request is held as
        # that request's own ToolCallUpdate (it is in memory anyway) and becomes a
        # ToolCallState when anything more happens to it or anyone asks for it.
        self._calls: dict[str, dict[str, ToolCallState | ToolCallUpdate]] = {}
        # Tool calls awaiting approval per session: those are never evicted.
        self._awaiting: dict[str, int] = {}

    def get(self, session_id: str, tool_call_id: str) -> ToolCallState | None:
        """Return the state of one tool call, or ``None`` if it was never seen."""
        calls = self._calls.get(session_id)
        if calls is None or tool_call_id not in calls:
            return None
        return self._materialised(calls, session_id, tool_call_id)

    def session(self, session_id: str) -> list[ToolCallState]:
        """Return the tool calls of one session, in the order they were first seen."""
        calls = self._calls.get(session_id, {})
        return [self._materialised(calls, session_id, key) for key in list(calls)]

    @property
    def held_bytes(self) -> int:
        """What the tracker counts against ``max_bytes`` now."""
        return self._bytes

    def forget_session(self, session_id: str) -> None:
        """Drop what is known of a session (e.g. when the host closes it)."""
        for held in self._calls.pop(session_id, {}).values():
            self._uncount(held)
        self._awaiting.pop(session_id, None)

    def apply(self, notification: InboundNotification) -> ToolCallState | None:
        """Fold a ``session/update`` notification, from its typed ``update``.

        That update is decoded once and shared with the notification callbacks.
        Returns the tool call's new state, or ``None`` when the notification is
        not about a tool call or cannot be read (never raises).
        """
        update = notification.update
        if update is None or notification.session_id is None:
            return None
        return self.apply_session_update(notification.session_id, update)

    def apply_notification(self, params: bytes) -> ToolCallState | None:
        """Fold the raw JSON params of a ``session/update`` (a tracker used on its own)."""
        try:
            session_id, update = decode_session_update(params)
        except DECODE_ERRORS as exc:
            log.debug("tracker: ignoring unreadable session/update: %s", exc)
            return None
        return self.apply_session_update(session_id, update)

    def apply_session_update(self, session_id: str, update: SessionUpdate) -> ToolCallState | None:
        """Fold one typed ``session/update`` of ``session_id``; ``None`` unless it is a
        tool call's (``tool_call`` / ``tool_call_update``). Never raises.

        One that did not type (an :class:`UnknownUpdate`: an unknown kind or
        status, content of an unknown type) still moves the status, and keeps
        whichever of its other parts read on their own.
        """
        if isinstance(update, (ToolCallStarted, ToolCallProgress)):  # (a tuple: no union made)
            if not update.tool_call_id:
                return None
            state = self._state(session_id, update.tool_call_id)
            self._fold(state, update)
        elif isinstance(update, UnknownUpdate) and update.session_update in _TOOL_CALL_UPDATES:
            try:
                call = msgspec.convert(update.data, _UntypedToolCall)
            except msgspec.ValidationError as exc:
                log.debug("tracker: ignoring unreadable tool call update: %s", exc)
                return None
            if not call.tool_call_id:
                return None
            state = self._state(session_id, call.tool_call_id)
            self._fold_untyped(state, call)
        else:
            return None
        state._announced = True
        self._resize(state)
        return state

    def apply_update(self, session_id: str, update: ToolCallUpdate) -> ToolCallState:
        """Fold a typed tool call update (e.g. the one inside a permission request)."""
        state = self._state(session_id, update.tool_call_id)
        self._fold(state, update)
        self._resize(state)
        return state

    def _fold(self, state: ToolCallState, update: ToolCallUpdate) -> None:
        self._merge(
            state,
            update.title,
            update.kind,
            update.status,
            update.raw_input_json,
            update.raw_output_json,
        )
        if update.content is not None:
            state.content = update.content
            state._content_size = _encoded_cost(update.content)
        if update.locations is not None:
            state.locations = update.locations
            state._locations_size = _encoded_cost(update.locations)

    def _fold_untyped(self, state: ToolCallState, call: _UntypedToolCall) -> None:
        # Kept as JSON text like a typed update's: encoded once more, but only for
        # the rare update this version cannot type.
        self._merge(
            state,
            call.title,
            call.kind,
            call.status,
            _ABSENT if call.raw_input is None else msgspec.Raw(_encoder.encode(call.raw_input)),
            _ABSENT if call.raw_output is None else msgspec.Raw(_encoder.encode(call.raw_output)),
        )
        if call.content is not None:
            try:
                state.content = msgspec.convert(call.content, list[ToolCallContent])
                state._content_size = _encoded_cost(state.content)
            except msgspec.ValidationError as exc:
                log.debug("tracker: ignoring unreadable tool call content: %s", exc)
        if call.locations is not None:
            try:
                state.locations = msgspec.convert(call.locations, list[ToolCallLocation])
                state._locations_size = _encoded_cost(state.locations)
            except msgspec.ValidationError as exc:
                log.debug("tracker: ignoring unreadable tool call locations: %s", exc)

    def fold_answered(self, session_id: str, update: ToolCallUpdate) -> None:
        """Fold the tool call of a request answered as it arrived (by a rule).

        A tool call the tracker does not know yet is not kept: known only through
        requests that are all answered, no update will ever move it.
        """
        calls = self._calls.get(session_id)
        if calls is not None and update.tool_call_id in calls:
            self.apply_update(session_id, update)

    def begin_approval(self, session_id: str, update: ToolCallUpdate) -> None:
        """Fold the request's tool call and mark it awaiting approval."""
        calls = self._calls.get(session_id)
        tool_call_id = update.tool_call_id
        if calls is None or tool_call_id not in calls:
            awaiting = self._awaiting.get(session_id, 0)
            if calls is None or len(calls) - awaiting >= self._max_per_session:
                self._make_room(session_id)  # (the common case, room left, checked inline)
                calls = self._calls[session_id]
            calls[tool_call_id] = update
            self._awaiting[session_id] = awaiting + 1
            return
        state = self.apply_update(session_id, update)
        if state._approvals == 0:
            self._awaiting[session_id] = self._awaiting.get(session_id, 0) + 1
            self._settled_bytes -= state._size
        state._approvals += 1

    def end_approval(self, session_id: str, tool_call_id: str) -> None:
        """Mark one permission request for the tool call as answered.

        A tool call known only through permission requests (never announced by a
        ``session/update``) is forgotten once its last request is answered.
        """
        calls = self._calls.get(session_id)
        state = calls.get(tool_call_id) if calls is not None else None
        if state is None:
            return
        if isinstance(state, ToolCallState):
            if state._approvals == 0:
                return
            state._approvals -= 1
            if state._approvals:
                return
            self._settled_bytes += state._size
        left = self._awaiting[session_id] - 1
        if left:
            self._awaiting[session_id] = left
        else:
            del self._awaiting[session_id]
        if not isinstance(state, ToolCallState):
            # Known only through its permission request, answered now: no update
            # will ever move it, so there is nothing left to track.
            assert calls is not None
            del calls[tool_call_id]  # (a request's own update: never counted)
        elif not state._announced:
            assert calls is not None  # (the same, for a state its requests made)
            self._uncount(calls.pop(tool_call_id))

    def _state(self, session_id: str, tool_call_id: str) -> ToolCallState:
        calls = self._calls.get(session_id)
        if calls is None or tool_call_id not in calls:
            self._make_room(session_id)
            state = self._calls[session_id][tool_call_id] = ToolCallState(session_id, tool_call_id)
            return state
        return self._materialised(calls, session_id, tool_call_id)

    def _make_room(self, session_id: str) -> None:
        """See that ``session_id`` has a table with room for one more tool call."""
        calls = self._calls.get(session_id)
        if calls is None:
            if len(self._calls) >= self._max_sessions:
                self._evict_session()
            self._calls[session_id] = {}
            return
        # Only when something can go: a scan that frees nothing would make a
        # flood of pending approvals quadratic.
        settled = len(calls) - self._awaiting.get(session_id, 0)
        if settled >= self._max_per_session:
            self._evict(calls, settled)

    def _materialised(
        self, calls: dict[str, ToolCallState | ToolCallUpdate], session_id: str, tool_call_id: str
    ) -> ToolCallState:
        """The state of a tool call in ``calls``, made from its request's update if need be."""
        held = calls[tool_call_id]
        if isinstance(held, ToolCallState):
            return held
        state = calls[tool_call_id] = ToolCallState(session_id, tool_call_id)
        state._approvals = 1
        self._fold(state, held)
        self._resize(state)
        return state

    def _evict_session(self) -> None:
        for session_id in self._calls:
            if session_id not in self._awaiting:
                self.forget_session(session_id)
                return

    def _evict(self, calls: dict[str, ToolCallState | ToolCallUpdate], settled: int) -> None:
        # Dicts keep insertion order: the first entries are the oldest. Drop a
        # quarter at once so eviction is amortised, never one awaiting approval.
        excess = settled - self._max_per_session + 1
        target = max(excess, self._max_per_session // 4)
        stale = list(
            itertools.islice(
                (
                    key
                    for key, held in calls.items()
                    if isinstance(held, ToolCallState) and not held.awaiting_approval
                ),
                target,
            )
        )
        for key in stale:
            self._uncount(calls.pop(key))

    def _uncount(self, held: ToolCallState | ToolCallUpdate) -> None:
        """Take a state that is no longer held out of the byte count."""
        if isinstance(held, ToolCallState):
            self._bytes -= held._size
            if not held._approvals:
                self._settled_bytes -= held._size

    def _resize(self, state: ToolCallState) -> None:
        """Count ``state`` as it is now, and keep the total within ``max_bytes``."""
        size = _size(state)
        grown = size - state._size
        state._size = size
        self._bytes += grown
        if not state._approvals:
            self._settled_bytes += grown
        if grown > 0 and self._bytes > self._max_bytes:
            self._shrink(state)

    def _shrink(self, grown: ToolCallState) -> None:
        # Forgetting settled calls means a scan; only when it frees a quarter of
        # the budget at least, so that the scans are paid for by that much input.
        if self._settled_bytes - (0 if grown._approvals else grown._size) >= self._max_bytes // 4:
            self._forget_oldest(grown, self._max_bytes * 3 // 4)
        if self._bytes > self._max_bytes:
            log.warning(
                "tracker: over its %d bytes; kept only the status of tool call %r of session %r",
                self._max_bytes,
                grown.tool_call_id[:64],
                grown.session_id[:64],
            )
            grown.title = grown.kind = grown.content = grown.locations = None
            grown.raw_input_json = grown.raw_output_json = _ABSENT
            grown._content_size = grown._locations_size = 0
            self._resize(grown)

    def _forget_oldest(self, keep: ToolCallState, target: int) -> None:
        """Forget settled tool calls, oldest session and call first, down to ``target`` bytes."""
        forgotten = 0
        for session_id, calls in list(self._calls.items()):
            for key, held in list(calls.items()):
                if self._bytes <= target:
                    break
                if isinstance(held, ToolCallState) and not held._approvals and held is not keep:
                    self._uncount(calls.pop(key))
                    forgotten += 1
            if not calls and session_id not in self._awaiting and session_id != keep.session_id:
                del self._calls[session_id]
            if self._bytes <= target:
                break
        log.warning(
            "tracker: over its %d bytes; forgot the %d oldest settled tool calls",
            self._max_bytes,
            forgotten,
        )

    @staticmethod
    def _merge(
        state: ToolCallState,
        title: str | None,
        kind: str | None,
        status: str | None,
        raw_input: msgspec.Raw,
        raw_output: msgspec.Raw,
    ) -> None:
        if title is not None:
            state.title = title
        if kind is not None:
            state.kind = kind
        # Absent or null leaves what is known; a view into a frame is copied out of it.
        if raw_input and raw_input != _NULL:
            state.raw_input_json = raw_input.copy()
        if raw_output and raw_output != _NULL:
            state.raw_output_json = raw_output.copy()
        rank = _STATUS_RANK.get(status) if status is not None else None
        current = _STATUS_RANK[state.status]
        # Forward only; final is final; an unknown status is ignored.
        if rank is not None and rank > current:
            state.status = status  # type: ignore[assignment]


def _encoded_cost(value: object) -> int:
    """What typed content or locations take, estimated from their JSON: encoding
    them gave each non-ASCII string a UTF-8 copy, counted too."""
    encoded = _encoder.encode(value)
    return json_cost(encoded) + (0 if encoded.isascii() else len(encoded))


def _size(state: ToolCallState) -> int:
    return (
        _STATE_OVERHEAD
        + str_cost(state.session_id)
        + str_cost(state.tool_call_id)
        + (0 if state.title is None else str_cost(state.title))
        + (0 if state.kind is None else str_cost(state.kind))
        + len(state.raw_input_json)
        + len(state.raw_output_json)
        + state._content_size
        + state._locations_size
    )
