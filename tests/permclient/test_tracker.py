"""The tool-call fold (invariant 9), sans-I/O."""

from __future__ import annotations

import sys
import tracemalloc
from typing import Any

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from permclient import Diff, InboundNotification, ToolCallState, ToolCallTracker, ToolCallUpdate
from permclient._tracker import DEFAULT_MAX_BYTES, _size

RANK = {"pending": 0, "in_progress": 1, "completed": 2, "failed": 2}


def _note(session: str, update_kind: str, **update: Any) -> InboundNotification:
    """A ``session/update`` as the client hands it to the tracker."""
    params = {
        "sessionId": session,
        "update": {"sessionUpdate": update_kind, "toolCallId": "c"} | update,
    }
    return InboundNotification("session/update", msgspec.json.encode(params), session)


@given(st.lists(st.sampled_from([*RANK, "bogus", None]), max_size=12))
def test_status_never_rewinds_and_final_is_final(statuses: list[str | None]) -> None:
    tracker = ToolCallTracker()
    shown = []
    for status in statuses:
        fields = {} if status is None else {"status": status}
        state = tracker.apply(_note("s", "tool_call_update", **fields))
        assert state is not None
        shown.append(state.status)
    ranks = [RANK[s] for s in shown]
    assert ranks == sorted(ranks)
    finals = [s for s in shown if RANK[s] == 2]
    assert len(set(finals)) <= 1  # completed never turns into failed, nor back


def test_sessions_are_kept_apart_and_details_merge() -> None:
    tracker = ToolCallTracker()
    tracker.apply(_note("a", "tool_call", title="ls", kind="execute"))
    tracker.apply(
        _note(
            "b",
            "tool_call",
            title="write",
            content=[{"type": "diff", "path": "/w/x", "oldText": None, "newText": "hi"}],
            locations=[{"path": "/w/x", "line": 3}],
        )
    )
    a, b = tracker.get("a", "c"), tracker.get("b", "c")
    assert a is not None and b is not None
    assert (a.title, a.kind, a.content) == ("ls", "execute", None)
    assert b.content == [Diff(path="/w/x", new_text="hi")]
    assert b.locations is not None and b.locations[0].line == 3
    assert [s.tool_call_id for s in tracker.session("a")] == ["c"]
    tracker.forget_session("a")
    assert tracker.get("a", "c") is None and tracker.get("b", "c") is b


def test_awaiting_approval_counts_overlapping_requests() -> None:
    tracker = ToolCallTracker()
    update = ToolCallUpdate(tool_call_id="c", title="rm", status="pending")
    tracker.apply(_note("s", "tool_call", title="rm"))
    tracker.begin_approval("s", update)
    tracker.begin_approval("s", update)
    state = tracker.get("s", "c")
    assert state is not None
    tracker.end_approval("s", "c")
    assert state.awaiting_approval
    tracker.end_approval("s", "c")
    assert not state.awaiting_approval


def test_a_call_known_only_from_pending_requests_reads_like_any_other() -> None:
    tracker = ToolCallTracker()
    update = ToolCallUpdate(tool_call_id="c", title="rm -rf build", kind="delete")
    tracker.begin_approval("s", update)
    assert tracker._calls["s"]["c"] is update  # held as the request's own update, no copy
    state = tracker.get("s", "c")
    assert state is not None and state is tracker.get("s", "c")
    assert (state.title, state.kind, state.status) == ("rm -rf build", "delete", "pending")
    assert state.awaiting_approval
    tracker.begin_approval("s", ToolCallUpdate(tool_call_id="c"))  # a second question
    tracker.end_approval("s", "c")
    assert state.awaiting_approval
    tracker.end_approval("s", "c")
    assert not state.awaiting_approval and tracker.get("s", "c") is None


def test_an_update_for_a_call_held_from_its_request_folds_into_it() -> None:
    tracker = ToolCallTracker()
    tracker.begin_approval("s", ToolCallUpdate(tool_call_id="c", title="write a.py"))
    folded = tracker.apply(_note("s", "tool_call_update", status="in_progress"))
    assert folded is not None and folded is tracker.get("s", "c")
    assert (folded.title, folded.status, folded.awaiting_approval) == (
        "write a.py",
        "in_progress",
        True,
    )
    tracker.end_approval("s", "c")
    assert tracker.get("s", "c") is folded and not folded.awaiting_approval  # announced: kept


def test_listing_a_session_shows_calls_held_from_their_requests_in_order() -> None:
    tracker = ToolCallTracker()
    tracker.apply(_note("s", "tool_call", title="first"))  # toolCallId "c"
    tracker.begin_approval("s", ToolCallUpdate(tool_call_id="asked", title="second"))
    assert [(s.tool_call_id, s.title, s.awaiting_approval) for s in tracker.session("s")] == [
        ("c", "first", False),
        ("asked", "second", True),
    ]
    assert tracker.session("s")[1] is tracker.get("s", "asked")


def test_updates_that_are_not_tool_calls_or_unreadable_are_ignored() -> None:
    tracker = ToolCallTracker()
    assert tracker.apply(_note("s", "agent_message_chunk")) is None
    assert tracker.apply(InboundNotification("session/update", b"[1, 2]", None)) is None
    assert tracker.apply(InboundNotification("session/update", b"{not json", None)) is None
    assert tracker.apply_notification(b"[1, 2]") is None  # the tracker used on its own
    assert tracker.apply_notification(b"{not json") is None
    other = InboundNotification("other/method", _note("s", "tool_call").raw, "s")
    assert tracker.apply(other) is None and tracker.get("s", "c") is None


def test_a_tool_call_update_that_does_not_type_still_folds_what_reads() -> None:
    tracker = ToolCallTracker()
    odd = tracker.apply(
        _note(
            "s",
            "tool_call",
            title="odd",
            kind="teleport",
            status="in_progress",
            content=[{"type": "hologram"}],
            locations=[{"path": "/w/x", "line": 3}],
            rawInput={"command": "beam"},
        )
    )
    assert odd is not None and odd.content is None  # unknown content kept out ...
    assert (odd.title, odd.kind, odd.status) == (
        "odd",
        "teleport",
        "in_progress",
    )  # ... the rest in
    assert odd.locations is not None and odd.locations[0].line == 3
    assert odd.raw_input == {"command": "beam"}
    assert tracker.held_bytes == _counted(tracker)


def test_memory_is_bounded_but_calls_awaiting_approval_are_kept() -> None:
    tracker = ToolCallTracker(max_per_session=8)
    tracker.begin_approval("s", ToolCallUpdate(tool_call_id="asking"))
    for n in range(100):
        tracker.apply_update("s", ToolCallUpdate(tool_call_id=f"c{n}", status="completed"))
    ids = [state.tool_call_id for state in tracker.session("s")]
    assert len(ids) <= 8 + 1  # eight settled at most, plus the one awaiting approval
    assert "asking" in ids and "c99" in ids


def test_a_flood_of_pending_approvals_never_scans_in_vain() -> None:
    tracker = ToolCallTracker(max_per_session=4)
    scans = []
    original = tracker._evict
    tracker._evict = lambda calls, settled: (scans.append(settled), original(calls, settled))  # type: ignore[method-assign]
    for n in range(200):
        tracker.begin_approval("s", ToolCallUpdate(tool_call_id=f"p{n}"))
    assert scans == []  # nothing could be dropped, so nothing was scanned
    assert len(tracker.session("s")) == 200


def test_sessions_are_bounded_but_one_awaiting_approval_is_kept() -> None:
    tracker = ToolCallTracker(max_sessions=3)
    tracker.begin_approval("asking", ToolCallUpdate(tool_call_id="c"))
    for n in range(10):
        tracker.apply_update(f"s{n}", ToolCallUpdate(tool_call_id="c"))
    assert tracker.get("asking", "c") is not None
    assert tracker.get("s9", "c") is not None
    assert tracker.get("s0", "c") is None


def test_a_call_known_only_from_permission_requests_is_forgotten_once_answered() -> None:
    tracker = ToolCallTracker()
    tracker.begin_approval("s", ToolCallUpdate(tool_call_id="asked-only"))
    tracker.apply(_note("s", "tool_call", title="announced"))  # toolCallId "c"
    tracker.begin_approval("s", ToolCallUpdate(tool_call_id="c"))
    tracker.end_approval("s", "asked-only")
    tracker.end_approval("s", "c")
    assert tracker.get("s", "asked-only") is None
    announced = tracker.get("s", "c")
    assert announced is not None and not announced.awaiting_approval


# ------------------------------------------------------------------ bounded in bytes


def _counted(tracker: ToolCallTracker) -> int:
    """What held_bytes should say: every state held, measured afresh."""
    return sum(
        _size(held)
        for calls in tracker._calls.values()
        for held in calls.values()
        if isinstance(held, ToolCallState)
    )


def test_a_hundred_updates_with_megabyte_titles_stay_within_the_byte_budget() -> None:
    tracker = ToolCallTracker()  # the default budget, 64 MiB
    title = "x" * (1024 * 1024)
    for n in range(100):
        state = tracker.apply(_note("s", "tool_call", toolCallId=f"c{n}", title=f"{n}{title}"))
        assert state is not None and state.title is not None  # the newest is kept whole
    assert tracker.held_bytes == _counted(tracker)
    assert tracker.held_bytes <= DEFAULT_MAX_BYTES
    assert tracker.get("s", "c99") is not None and tracker.get("s", "c0") is None


@pytest.mark.parametrize(
    "big",
    [
        {"title": "t" * 50_000},
        {"kind": "k" * 50_000},
        {"rawInput": {"command": "c" * 50_000}},
        {"rawOutput": ["o" * 50_000]},
        {"content": [{"type": "diff", "path": "/w/a", "newText": "n" * 50_000}]},
        {"locations": [{"path": "p" * 50_000}]},
        {"toolCallId": "i" * 50_000},
    ],
    ids=lambda big: next(iter(big)),
)
def test_every_field_a_peer_fills_counts_against_the_budget(big: dict[str, Any]) -> None:
    tracker = ToolCallTracker(max_bytes=200_000)
    for n in range(40):
        fields = {"toolCallId": f"c{n}", **big}
        if "toolCallId" in big:
            fields["toolCallId"] = f"{n}{big['toolCallId']}"
        assert tracker.apply(_note(f"s{n % 3}", "tool_call", **fields)) is not None
        assert tracker.held_bytes == _counted(tracker)
        assert tracker.held_bytes <= 200_000 * 5 // 4


def test_calls_awaiting_approval_keep_only_their_status_when_over_budget() -> None:
    tracker = ToolCallTracker(max_bytes=100_000)
    for n in range(5):
        tracker.apply(_note("s", "tool_call", toolCallId=f"a{n}", title="asked"))
        tracker.begin_approval("s", ToolCallUpdate(tool_call_id=f"a{n}"))
    for n in range(5):
        state = tracker.apply(
            _note(
                "s",
                "tool_call_update",
                toolCallId=f"a{n}",
                status="in_progress",
                title="t" * 40_000,
            )
        )
        assert state is not None and state.status == "in_progress"
        assert tracker.held_bytes == _counted(tracker) <= 100_000
    states = [tracker.get("s", f"a{n}") for n in range(5)]
    assert all(state is not None and state.awaiting_approval for state in states)
    assert sum(state.title is None for state in states if state is not None) >= 3  # dropped


@given(
    st.lists(
        st.tuples(
            st.sampled_from(["note", "ask", "answer", "forget", "typed"]),
            st.integers(0, 5),  # which session
            st.integers(0, 7),  # which tool call
            st.integers(0, 30_000),  # how big
        ),
        max_size=60,
    )
)
def test_the_byte_count_is_exact_and_bounded_whatever_happens(
    steps: list[tuple[str, int, int, int]],
) -> None:
    budget = 60_000
    tracker = ToolCallTracker(max_per_session=4, max_sessions=3, max_bytes=budget)
    asked: list[tuple[str, str]] = []
    for action, session, call, size in steps:
        sid, cid = f"s{session}", f"c{call}"
        if action == "note":
            tracker.apply(_note(sid, "tool_call", toolCallId=cid, title="t" * size))
        elif action == "typed":
            tracker.apply_update(sid, ToolCallUpdate(tool_call_id=cid, title="u" * size))
        elif action == "ask":
            update = ToolCallUpdate(
                tool_call_id=cid, content=[Diff(path="/p", new_text="d" * size)]
            )
            tracker.begin_approval(sid, update)
            asked.append((sid, cid))
        elif action == "answer" and asked:
            tracker.end_approval(*asked.pop(0))
        elif action == "forget":
            tracker.forget_session(sid)
            asked = [key for key in asked if key[0] != sid]
        assert tracker.held_bytes == _counted(tracker)
        # Settled calls go a quarter of the budget at a time; one update may be whole.
        assert tracker.held_bytes <= budget * 5 // 4 + 30_000 + 1000
    for sid, cid in asked:
        state = tracker.get(sid, cid)
        assert state is not None and state.awaiting_approval


# ------------------------------------------------------ counted as what it costs decoded


def _bomb_note(n: int, meta: Any) -> bytes:
    return _note(
        "s",
        "tool_call",
        toolCallId=f"c{n}",
        title="x",
        content=[{"type": "content", "content": {"type": "text", "text": "x", "_meta": meta}}],
    )


@pytest.mark.parametrize(
    "meta",
    [{"x": [[]] * 20_000}, {"x": [{"a": []}] * 5_000}, {"x": ["\u0100\u0100"] * 10_000}],
    ids=["lists", "dicts", "strings"],
)
def test_content_that_decodes_into_many_objects_is_held_within_the_budget(meta: Any) -> None:
    budget = 2 * 1024 * 1024
    tracker = ToolCallTracker(max_bytes=budget)
    tracemalloc.start()
    try:
        before = tracemalloc.get_traced_memory()[0]
        for n in range(40):
            tracker.apply(_bomb_note(n, meta))
        held = tracemalloc.get_traced_memory()[0] - before
    finally:
        tracemalloc.stop()
    assert tracker.held_bytes == _counted(tracker) <= budget * 5 // 4
    assert held <= budget * 5 // 4


def test_astral_text_counts_at_its_size_in_memory_not_in_characters() -> None:
    tracker = ToolCallTracker()
    title = "\U0001f600" * 100_000  # 4 bytes a character in memory, 4 in UTF-8
    state = tracker.apply(_note("s", "tool_call", title=title))
    assert state is not None
    assert tracker.held_bytes >= 4 * len(title)


def test_typed_content_counts_the_utf8_copy_its_measuring_leaves_behind() -> None:
    text = "\u6587" * 100_000  # 2 bytes a character, and 3 more once encoded
    tracker = ToolCallTracker()
    update = ToolCallUpdate(tool_call_id="c", content=[Diff(path="/p", new_text=text)])
    tracker.apply_update("s", update)
    assert tracker.held_bytes >= sys.getsizeof(text)
