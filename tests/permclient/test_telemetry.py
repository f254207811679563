"""Telemetry sinks: `emit` only buffers; `run()`, `flush()` and `close()` write the file."""

from __future__ import annotations

import io
import json
import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import trio
import trio.testing

import permclient
from permclient._telemetry import (
    FINAL_WRITE_TIMEOUT_S,
    JsonlTelemetry,
    MemoryTelemetry,
    RunsInBackground,
)
from tests.support.peer import FakePeer


class SpyFile(io.StringIO):
    """A text file that remembers every write and flush, and from which thread."""

    def __init__(self, on_write: Callable[[], None] | None = None) -> None:
        super().__init__()
        self.calls: list[tuple[str, int]] = []
        self.on_write = on_write

    def write(self, text: str) -> int:
        self.calls.append(("write", threading.get_ident()))
        written = super().write(text)
        if self.on_write is not None:
            self.on_write()
        return written

    def flush(self) -> None:
        self.calls.append(("flush", threading.get_ident()))
        super().flush()

    def records(self) -> list[dict[str, Any]]:
        return [json.loads(line) for line in self.getvalue().splitlines()]


class StuckFile(SpyFile):
    """A disk that does not answer: the writes ``stuck_when(file)`` picks (all by
    default) wait until :attr:`release` is set; :attr:`writing` is set as one starts."""

    def __init__(self, stuck_when: Callable[[StuckFile], bool] = lambda file: True) -> None:
        super().__init__()
        self.release = threading.Event()
        self.writing = threading.Event()
        self.written = threading.Condition()
        self.stuck_when = stuck_when

    def write(self, text: str) -> int:
        if self.stuck_when(self):
            self.writing.set()
            self.release.wait(30)
        with self.written:
            count = super().write(text)
            self.written.notify_all()
        return count

    def wait_for_records(self, count: int) -> None:
        """Block (a thread: the writes come from threads) until ``count`` records are in."""
        with self.written:
            self.written.wait_for(lambda: len(self.records()) >= count, timeout=10)


def _emit_some(sink: permclient.Telemetry, count: int, start: int = 0) -> None:
    for n in range(start, start + count):
        sink.emit("approval.requested", session_id="s", request_id=n)


class ForbiddenFile(io.StringIO):
    """Any write or flush fails the test: for what must not touch the file."""

    def write(self, text: str) -> int:
        raise AssertionError("the file was written")

    def flush(self) -> None:
        raise AssertionError("the file was flushed")


# ------------------------------------------------------------------ emit


def test_emit_never_touches_the_file_whatever_the_target() -> None:
    sink = JsonlTelemetry(ForbiddenFile())
    _emit_some(sink, 1000)
    sink.emit("approval.responded", session_id="s", request_id=1, outcome="selected")
    assert sink.dropped == 0


def test_emit_opens_nothing_given_a_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    target = tmp_path / "t.jsonl"
    with JsonlTelemetry(target) as sink:

        def no_open(*args: object, **kwargs: object) -> None:
            raise AssertionError("a file was opened")

        with monkeypatch.context() as patched:
            patched.setattr("builtins.open", no_open)
            _emit_some(sink, 10)
        assert target.read_text() == ""  # nothing written yet
    assert [r["request_id"] for r in map(json.loads, target.read_text().splitlines())] == list(
        range(10)
    )


async def test_a_whole_approval_writes_nothing_on_the_trio_thread() -> None:
    trio_thread = threading.get_ident()
    file = SpyFile()
    sink = JsonlTelemetry(file)
    ours, theirs = trio.testing.memory_stream_pair()
    peer = FakePeer(theirs, "bridge")

    async def allow(request: permclient.PermissionRequest) -> permclient.Selected:
        return permclient.Selected("allow")

    async with trio.open_nursery() as nursery:
        nursery.start_soon(sink.run)
        async with permclient.open_client(ours, dialect="bridge", telemetry=sink) as client:
            with client.permission_handler("s", allow):
                for n in range(3):
                    await peer.ask_permission("s", request_id=n)
                    assert (await peer.receive())["id"] == n
        nursery.cancel_scope.cancel()
    events = [r["event"] for r in file.records()]
    assert events.count("approval.responded") == 3
    assert file.calls and all(thread != trio_thread for _, thread in file.calls)


# ------------------------------------------------------------------ run()


async def test_run_writes_each_batch_from_a_worker_thread_in_order() -> None:
    token = trio.lowlevel.current_trio_token()
    wrote = trio.Event()
    file = SpyFile(on_write=lambda: token.run_sync_soon(wrote.set))
    sink = JsonlTelemetry(file)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sink.run)
        _emit_some(sink, 3)
        with trio.fail_after(10):
            await wrote.wait()
        wrote = trio.Event()
        _emit_some(sink, 2, start=3)
        with trio.fail_after(10):
            await wrote.wait()
        nursery.cancel_scope.cancel()
    assert [r["request_id"] for r in file.records()] == [0, 1, 2, 3, 4]
    # Two batches: one write and one flush each, none of them on the trio thread.
    assert [call for call, _ in file.calls] == ["write", "flush", "write", "flush"]
    assert threading.get_ident() not in {thread for _, thread in file.calls}


async def test_run_in_the_loop_writes_a_batch_before_the_tasks_settle() -> None:
    file = SpyFile()
    sink = JsonlTelemetry(file, write_in_thread=False)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sink.run)
        await trio.testing.wait_all_tasks_blocked()
        assert file.calls == []
        _emit_some(sink, 3)
        assert file.calls == []  # emit itself wrote nothing
        await trio.testing.wait_all_tasks_blocked()
        assert [r["request_id"] for r in file.records()] == [0, 1, 2]
        assert [call for call, _ in file.calls] == ["write", "flush"]
        nursery.cancel_scope.cancel()


@pytest.mark.parametrize("write_in_thread", [True, False])
async def test_a_cancelled_run_writes_what_is_left(write_in_thread: bool) -> None:
    file = SpyFile()
    sink = JsonlTelemetry(file, write_in_thread=write_in_thread)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sink.run)
        await trio.testing.wait_all_tasks_blocked()
        _emit_some(sink, 5)
        nursery.cancel_scope.cancel()  # before run() had a chance to write them
    assert [r["request_id"] for r in file.records()] == [0, 1, 2, 3, 4]


async def test_the_final_write_of_a_cancelled_run_is_bounded(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    file = StuckFile()
    sink = JsonlTelemetry(file)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sink.run)
            await trio.testing.wait_all_tasks_blocked()
            _emit_some(sink, 2)
            start = trio.current_time()
            nursery.cancel_scope.cancel()
        assert trio.current_time() - start == pytest.approx(FINAL_WRITE_TIMEOUT_S)
        assert "still being written" in caplog.text
    finally:
        file.release.set()


async def test_cancelling_run_during_a_stuck_write_is_bounded_and_keeps_the_order(
    autojump_clock: trio.abc.Clock, caplog: pytest.LogCaptureFixture
) -> None:
    file = StuckFile()
    sink = JsonlTelemetry(file)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sink.run)
            _emit_some(sink, 2)
            await trio.to_thread.run_sync(file.writing.wait, 10)  # run() is writing them
            _emit_some(sink, 2, start=2)
            start = trio.current_time()
            nursery.cancel_scope.cancel()
        assert trio.current_time() - start == pytest.approx(FINAL_WRITE_TIMEOUT_S)
        assert "still being written" in caplog.text
    finally:
        file.release.set()
    # What was left waited in the buffer; flush() writes it after the stuck batch.
    sink.flush()
    assert [r["request_id"] for r in file.records()] == [0, 1, 2, 3]


@pytest.mark.parametrize("steps_before_the_cancel", range(6))
async def test_a_run_cancelled_as_it_hands_a_batch_to_a_thread_loses_nothing(
    steps_before_the_cancel: int,
) -> None:
    # run() takes a batch out of the buffer, then starts a worker thread for it: a
    # cancellation between the two must not drop the batch. Each step count puts
    # the cancel at another point of that path (trio's order varies: 10 rounds).
    for _ in range(10):
        file = SpyFile()
        sink = JsonlTelemetry(file)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sink.run)
            await trio.testing.wait_all_tasks_blocked()  # run() waits for records
            _emit_some(sink, 3)
            for _ in range(steps_before_the_cancel):
                await trio.lowlevel.checkpoint()
            nursery.cancel_scope.cancel()
        sink.flush()
        assert [r["request_id"] for r in file.records()] == [0, 1, 2]


async def test_a_batch_is_written_on_the_trio_thread_when_no_thread_can_start(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    def no_thread(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("can't start new thread")

    monkeypatch.setattr(trio.lowlevel, "start_thread_soon", no_thread)
    file = SpyFile()
    sink = JsonlTelemetry(file)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sink.run)
        _emit_some(sink, 3)
        await trio.testing.wait_all_tasks_blocked()
        assert [r["request_id"] for r in file.records()] == [0, 1, 2]
        nursery.cancel_scope.cancel()


async def test_a_failed_write_on_the_trio_thread_is_logged_and_run_goes_on(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    def no_thread(*args: Any, **kwargs: Any) -> None:
        raise RuntimeError("can't start new thread")

    class BrokenFile(SpyFile):
        def write(self, text: str) -> int:
            raise RuntimeError("disk driver bug")

    monkeypatch.setattr(trio.lowlevel, "start_thread_soon", no_thread)
    sink = JsonlTelemetry(BrokenFile())
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sink.run)
        _emit_some(sink, 2)
        await trio.testing.wait_all_tasks_blocked()
        _emit_some(sink, 2, start=2)  # run() is still there to take these
        await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert caplog.text.count("writing a batch failed") == 2


async def test_a_run_started_again_writes_after_the_batch_a_cancelled_one_left_writing(
    autojump_clock: trio.abc.Clock,
) -> None:
    file = StuckFile(stuck_when=lambda file: not file.writing.is_set())  # the first write
    sink = JsonlTelemetry(file)
    try:
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sink.run)
            _emit_some(sink, 2)
            await trio.to_thread.run_sync(file.writing.wait, 10)
            nursery.cancel_scope.cancel()  # gives up on that batch after its bound
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sink.run)  # started again: newer records come
            _emit_some(sink, 2, start=2)
            await trio.testing.wait_all_tasks_blocked()
            assert file.records() == []  # not before the batch still being written
            file.release.set()
            await trio.to_thread.run_sync(file.wait_for_records, 4)
            nursery.cancel_scope.cancel()
    finally:
        file.release.set()
    assert [r["request_id"] for r in file.records()] == [0, 1, 2, 3]


async def test_a_flush_writing_on_another_thread_never_holds_up_the_trio_thread() -> None:
    file = StuckFile(stuck_when=lambda file: threading.current_thread().name == "flusher")
    sink = JsonlTelemetry(file)
    _emit_some(sink, 2)
    flusher = threading.Thread(target=sink.flush, name="flusher")
    flusher.start()
    # Were the trio thread held up by the flush, only this would let it go on.
    watchdog = threading.Timer(3, file.release.set)
    watchdog.start()
    try:
        await trio.to_thread.run_sync(file.writing.wait, 10)
        async with trio.open_nursery() as nursery:
            nursery.start_soon(sink.run)
            _emit_some(sink, 2, start=2)
            await trio.testing.wait_all_tasks_blocked()  # run() took them, on this thread
            assert not file.release.is_set()  # ... while the flush was still writing
            file.release.set()
            nursery.cancel_scope.cancel()
    finally:
        watchdog.cancel()
        file.release.set()
        flusher.join(10)
    sink.flush()
    assert [r["request_id"] for r in file.records()] == [0, 1, 2, 3]


def test_close_past_its_bound_leaves_a_stuck_file_open_and_returns(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    import permclient._telemetry as telemetry_module

    file = StuckFile()
    monkeypatch.setattr(telemetry_module, "open", lambda *a, **k: file, raising=False)
    monkeypatch.setattr(telemetry_module, "FINAL_WRITE_TIMEOUT_S", 0.05)
    sink = JsonlTelemetry(tmp_path / "t.jsonl")  # a path: the sink owns its file
    _emit_some(sink, 1)
    writer = threading.Thread(target=sink.flush)
    writer.start()  # stuck in the file's write, holding it
    try:
        assert file.writing.wait(10)
        sink.close()  # bounded: it neither waits on the file nor closes it
        assert "left open" in caplog.text
    finally:
        file.release.set()
        writer.join(10)


async def test_two_runs_on_one_sink_write_every_record_once_in_order() -> None:
    file = SpyFile()
    sink = JsonlTelemetry(file, write_in_thread=False)
    async with trio.open_nursery() as nursery:
        nursery.start_soon(sink.run)
        nursery.start_soon(sink.run)
        for start in range(0, 30, 10):
            _emit_some(sink, 10, start=start)
            await trio.testing.wait_all_tasks_blocked()
        nursery.cancel_scope.cancel()
    assert [r["request_id"] for r in file.records()] == list(range(30))


# ------------------------------------------------------------- flush, close


def test_flush_writes_what_is_buffered_in_one_batch_and_then_nothing() -> None:
    file = SpyFile()
    sink = JsonlTelemetry(file)
    _emit_some(sink, 4)
    sink.flush()
    assert [r["request_id"] for r in file.records()] == [0, 1, 2, 3]
    assert [call for call, _ in file.calls] == ["write", "flush"]
    sink.flush()
    assert len(file.calls) == 2


def test_close_writes_what_is_left_and_closes_only_a_file_it_opened(tmp_path: Path) -> None:
    given = SpyFile()
    with JsonlTelemetry(given) as sink:
        _emit_some(sink, 2)
    assert [r["request_id"] for r in given.records()] == [0, 1]
    assert not given.closed

    path = tmp_path / "t.jsonl"
    owned = JsonlTelemetry(path)
    _emit_some(owned, 2)
    owned.close()
    assert [json.loads(line)["request_id"] for line in path.read_text().splitlines()] == [0, 1]


def test_a_record_that_cannot_be_encoded_is_skipped_and_the_others_written(
    caplog: pytest.LogCaptureFixture,
) -> None:
    file = SpyFile()
    sink = JsonlTelemetry(file)
    sink.emit("approval.requested", request_id=0)
    sink.emit("approval.requested", request_id=object())
    sink.emit("approval.requested", request_id=2)
    sink.flush()
    assert [r["request_id"] for r in file.records()] == [0, 2]
    assert "could not record approval.requested" in caplog.text


def test_a_failing_file_is_logged_and_never_raises(caplog: pytest.LogCaptureFixture) -> None:
    file = io.StringIO()
    sink = JsonlTelemetry(file)
    file.close()
    _emit_some(sink, 1)
    sink.flush()
    assert "could not write 1 records" in caplog.text


# ------------------------------------------------------------------ the bound


def test_past_the_bound_new_records_are_dropped_counted_and_reported(
    caplog: pytest.LogCaptureFixture,
) -> None:
    file = SpyFile()
    sink = JsonlTelemetry(file, max_buffered=3)
    with caplog.at_level(logging.WARNING, logger="permclient"):
        _emit_some(sink, 5)
        assert caplog.records == []  # emit logs nothing either: the writer reports
        assert sink.dropped == 2
        sink.flush()
    assert [r["request_id"] for r in file.records()] == [0, 1, 2]
    assert "2 records dropped" in caplog.text
    # Written, the buffer has room again.
    _emit_some(sink, 3, start=5)
    sink.flush()
    assert sink.dropped == 2
    assert [r["request_id"] for r in file.records()] == [0, 1, 2, 5, 6, 7]


# -------------------------------------------------------------- MemoryTelemetry


def test_memory_records_have_the_shape_of_the_jsonl_lines() -> None:
    file = SpyFile()
    jsonl = JsonlTelemetry(file)
    memory = MemoryTelemetry()
    for sink in (jsonl, memory):
        sink.emit("approval.requested", session_id="s", request_id=1)
        sink.emit(
            "approval.responded",
            session_id="s",
            request_id=1,
            outcome="selected",
            option_id="allow",
            latency_ms=1.5,
        )
    jsonl.flush()

    def without_ts(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        assert all(isinstance(r["ts"], float) for r in records)
        return [{k: v for k, v in r.items() if k != "ts"} for r in records]

    assert without_ts(memory.records) == without_ts(file.records())
    assert [list(r) for r in memory.records] == [list(r) for r in file.records()]
    assert [r["request_id"] for r in memory.of("approval.responded")] == [1]


def test_memory_telemetry_is_bounded_and_drain_makes_room(
    caplog: pytest.LogCaptureFixture,
) -> None:
    memory = MemoryTelemetry(max_records=3)
    _emit_some(memory, 5)
    assert [r["request_id"] for r in memory.records] == [0, 1, 2]
    assert memory.dropped == 2
    assert caplog.text.count("dropping new records") == 1  # once, when dropping starts
    assert [r["request_id"] for r in memory.drain()] == [0, 1, 2]
    assert memory.records == []
    _emit_some(memory, 1, start=5)
    assert [r["request_id"] for r in memory.records] == [5]


async def test_memory_telemetry_records_a_client_approval() -> None:
    memory = MemoryTelemetry()
    ours, theirs = trio.testing.memory_stream_pair()
    peer = FakePeer(theirs, "bridge")

    async def allow(request: permclient.PermissionRequest) -> permclient.Selected:
        return permclient.Selected("allow")

    async with permclient.open_client(ours, dialect="bridge", telemetry=memory) as client:
        with client.permission_handler("s", allow):
            await peer.ask_permission("s", request_id=7)
            await peer.receive()
    (responded,) = memory.of("approval.responded")
    assert (responded["request_id"], responded["session_id"], responded["option_id"]) == (
        7,
        "s",
        "allow",
    )


def test_which_sinks_run_in_the_background() -> None:
    assert isinstance(JsonlTelemetry(io.StringIO()), RunsInBackground)
    assert not isinstance(MemoryTelemetry(), RunsInBackground)
