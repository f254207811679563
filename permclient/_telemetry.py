"""Telemetry: a record of what happened to every approval, one JSON object per line.

Telemetry proves what happened; it is never the enforcement. The client calls a
sink's ``emit`` on its reader's path (in guest mode, the host's UI thread), so
``emit`` only appends to a bounded buffer in memory: no file I/O, no blocking,
no exception. A sink that writes somewhere does it from a task of its own (see
:class:`RunsInBackground`); one that fails to write logs the failure and never
disturbs an answer.
"""

from __future__ import annotations

import collections
import contextlib
import logging
import os
import threading
import time
from typing import IO, Any, Final, Protocol, runtime_checkable

import msgspec
import outcome
import trio

log = logging.getLogger("permclient")

_encoder: Final = msgspec.json.Encoder()

DEFAULT_MAX_BUFFERED: Final = 10_000
"""Records a sink holds before it drops new ones."""

FINAL_WRITE_TIMEOUT_S: Final = 5.0
"""How long :meth:`JsonlTelemetry.run` may spend writing what is left once it is cancelled."""


class Telemetry(Protocol):
    """Anything with ``emit(event, **fields)`` can receive permclient's events."""

    def emit(self, event: str, /, **fields: Any) -> None:
        """Record one event: must not block, must not raise, must not do I/O.

        It is called on the client's reader's path, from the thread running trio.
        """


@runtime_checkable
class RunsInBackground(Protocol):
    """A sink that writes its records from a task of its own (an optional addition to
    :class:`Telemetry`).

    The client does, for a sink that has these methods: when it opens,
    ``nursery.start_soon(sink.run)``; when it closes, ``sink.flush()``. A program that
    uses such a sink without a client does the same, or only calls ``flush()``.
    """

    async def run(self) -> None:
        """Write records as they come until cancelled; then write what is left."""

    def flush(self) -> None:
        """Write every buffered record now, from the calling thread."""


def _record(event: str, fields: dict[str, Any]) -> dict[str, Any]:
    return {"ts": time.time(), "event": event, **fields}


def _log_thread_failure(result: outcome.Outcome[None]) -> None:
    """What a writing thread raised beyond the errors it handles: logged, never lost."""
    if isinstance(result, outcome.Error):
        log.error("telemetry: writing a batch failed", exc_info=result.error)


class MemoryTelemetry:
    """Keeps every record in :attr:`records`, a list of dicts shaped like
    :class:`JsonlTelemetry`'s lines: ``{"ts": ..., "event": ..., **fields}``.

    For tests, and for hosts that ship records elsewhere (take them with
    :meth:`drain`). Bounded: past ``max_records`` kept records, new ones are dropped
    and counted in :attr:`dropped`, with one warning each time dropping starts.
    """

    def __init__(self, *, max_records: int = DEFAULT_MAX_BUFFERED) -> None:
        self.records: list[dict[str, Any]] = []
        self.max_records = max_records
        self.dropped = 0
        """Records dropped because :attr:`records` was full."""
        self._dropping = False

    def emit(self, event: str, /, **fields: Any) -> None:
        if len(self.records) >= self.max_records:
            self.dropped += 1
            if not self._dropping:
                self._dropping = True
                log.warning(
                    "telemetry: %d records kept and none taken; dropping new records",
                    self.max_records,
                )
            return
        self._dropping = False
        self.records.append(_record(event, fields))

    def drain(self) -> list[dict[str, Any]]:
        """The records kept so far, oldest first; :attr:`records` starts empty again."""
        taken, self.records = self.records, []
        return taken

    def of(self, event: str) -> list[dict[str, Any]]:
        """The records of one event, oldest first."""
        return [record for record in self.records if record["event"] == event]


class JsonlTelemetry:
    """Appends one JSON object per event to a file: ``{"ts": ..., "event": ..., ...}``.

    Events: ``server_request.start``, ``approval.requested``,
    ``approval.responded`` (outcome, option_id, latency_ms), ``approval.cancelled``
    (by: peer, turn, teardown, timeout; latency_ms), ``approval.unrouted``,
    ``approval.malformed`` (reason), ``approval.refused`` (reason). Each carries
    ``session_id`` (when known) and ``request_id``. ``ts`` is seconds since the epoch,
    taken when the event happened (not when it was written).

    Pass a path (opened for appending, closed by :meth:`close`) or an open text
    file (left open). :meth:`emit` only buffers the record; the file is written by
    :meth:`run` (a task: the client runs it while it is open, see
    :class:`RunsInBackground`), by :meth:`flush`, and by :meth:`close` (also on
    leaving a ``with`` block). Each write is one batch, flushed to the OS.
    ``write_in_thread=False`` has :meth:`run` write from its own task instead of a
    worker thread: for a program whose trio loop is its own (no guest mode), where the
    file then keeps step with what the program shows. Past ``max_buffered`` records
    waiting to be written, new ones are dropped and counted in :attr:`dropped`; the
    next write logs how many.
    """

    def __init__(
        self,
        target: str | os.PathLike[str] | IO[str],
        *,
        max_buffered: int = DEFAULT_MAX_BUFFERED,
        write_in_thread: bool = True,
    ) -> None:
        if isinstance(target, str | os.PathLike):
            self._file: IO[str] = open(target, "a", encoding="utf-8")  # noqa: SIM115
            self._owned = True
        else:
            self._file = target
            self._owned = False
        self.max_buffered = max_buffered
        self.write_in_thread = write_in_thread
        self.dropped = 0
        """Records dropped because the buffer was full."""
        self._reported_dropped = 0
        # Appended on the trio thread, taken on it (run) or on the caller's (flush):
        # deque's append and popleft are atomic, so no record is lost between them.
        self._buffer: collections.deque[dict[str, Any]] = collections.deque()
        self._records_waiting: trio.Event | None = None
        self._one_batch_at_a_time = trio.Lock()  # keeps batches in order across run() tasks
        self._batch_written = trio.Event()  # the last batch given to a worker thread is out
        self._batch_written.set()
        self._file_lock = threading.Lock()  # a worker thread's write against flush()/close()
        # Each batch gets a ticket as it leaves the buffer, and is written only after
        # the one before it: a worker thread waits its turn (off the trio thread), a
        # flush() waits, within its bound, for every batch taken before. The lock is
        # held only to take and count, never for I/O (the trio thread takes it too).
        self._turns = threading.Condition()
        self._tickets_issued = 0
        self._tickets_written = 0

    def emit(self, event: str, /, **fields: Any) -> None:
        if len(self._buffer) >= self.max_buffered:
            self.dropped += 1
            return
        self._buffer.append(_record(event, fields))
        if self._records_waiting is not None:
            self._records_waiting.set()

    async def run(self) -> None:
        """Write buffered records, in batches, until cancelled; then write what is left.

        The final write is shielded and bounded (``FINAL_WRITE_TIMEOUT_S``). Several
        ``run()`` tasks on one sink are harmless: batches are written one at a time,
        in order.
        """
        try:
            while True:
                if not self._buffer:
                    if self._records_waiting is None or self._records_waiting.is_set():
                        self._records_waiting = trio.Event()
                    await self._records_waiting.wait()
                async with self._one_batch_at_a_time:
                    if self.write_in_thread:
                        # After the batch before (a run() cancelled mid-write, then
                        # started again, must not write past it).
                        await self._batch_written.wait()
                        await self._write_in_thread()
                    else:
                        self._write(self._take())
        finally:
            await self._write_rest()

    async def _write_in_thread(self) -> None:
        """Write what is buffered, as one batch, from a worker thread; on
        cancellation, stop waiting for it."""
        with self._turns:
            batch, ticket = self._take_with_ticket()
        if not batch:
            return
        written = self._batch_written = trio.Event()
        token = trio.lowlevel.current_trio_token()

        def write_and_tell(wait_at_most: float | None = None) -> None:
            try:
                self._write_in_turn(batch, ticket, wait_at_most)
            finally:
                with contextlib.suppress(trio.RunFinishedError):
                    token.run_sync_soon(written.set)

        # The thread starts whatever happens next: the batch is out of the buffer, so
        # nothing may stand between here and its write (trio.to_thread.run_sync can be
        # cancelled before its thread starts, and the batch was lost).
        try:
            trio.lowlevel.start_thread_soon(write_and_tell, _log_thread_failure)
        except RuntimeError:  # no thread to be had: written here rather than lost
            _log_thread_failure(outcome.capture(write_and_tell, FINAL_WRITE_TIMEOUT_S))
        # Abandoned if cancelled (a stuck disk must not hold run() up); the final write
        # waits, within its bound, for this batch to land first, so batches stay in order.
        await written.wait()

    async def _write_rest(self) -> None:
        if not self.write_in_thread:
            self.flush()
            return
        deadline = trio.current_time() + FINAL_WRITE_TIMEOUT_S
        with trio.CancelScope(shield=True, deadline=deadline) as final:
            async with self._one_batch_at_a_time:  # after another run()'s batch, in order
                await self._batch_written.wait()
                await self._write_in_thread()
        if final.cancelled_caught:
            log.warning(
                "telemetry: records were still being written after %.0f s; not waiting longer",
                FINAL_WRITE_TIMEOUT_S,
            )

    def flush(self) -> None:
        """Write every buffered record now, from the calling thread.

        A batch a worker thread is writing lands first: this waits for it (at most
        ``FINAL_WRITE_TIMEOUT_S``), so that what ``flush()`` returns after is on file.
        """
        with self._turns:
            if not self._turns.wait_for(
                lambda: self._tickets_written >= self._tickets_issued, FINAL_WRITE_TIMEOUT_S
            ):
                # Its thread holds the file: writing now would wait on it without end.
                log.warning(
                    "telemetry: a batch was still being written after %.0f s; "
                    "%d records stay buffered for a later flush()",
                    FINAL_WRITE_TIMEOUT_S,
                    len(self._buffer),
                )
                return
            batch, ticket = self._take_with_ticket()  # next in turn: no batch is out
        if batch:
            self._write_in_turn(batch, ticket)

    def close(self) -> None:
        """Write what is buffered, then close the file if this sink opened it."""
        self.flush()
        if not self._owned:
            return
        if not self._file_lock.acquire(timeout=FINAL_WRITE_TIMEOUT_S):
            log.warning(
                "telemetry: the file was still being written after %.0f s; left open",
                FINAL_WRITE_TIMEOUT_S,
            )
            return
        try:
            self._file.close()
        finally:
            self._file_lock.release()

    def __enter__(self) -> JsonlTelemetry:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    def _take_with_ticket(self) -> tuple[list[dict[str, Any]], int]:
        """The buffered records and their turn to be written (the caller holds _turns)."""
        batch = self._take()
        ticket = self._tickets_issued
        if batch:
            self._tickets_issued += 1
        return batch, ticket

    def _write_in_turn(
        self, batch: list[dict[str, Any]], ticket: int, wait_at_most: float | None = None
    ) -> None:
        """Write ``batch`` once every batch taken before it is written (waiting at most
        ``wait_at_most`` seconds, then writing it anyway, out of order)."""
        with self._turns:
            in_turn = self._turns.wait_for(lambda: self._tickets_written >= ticket, wait_at_most)
        if not in_turn:
            log.warning(
                "telemetry: the batch before was still being written after %.0f s; "
                "writing the next one out of order",
                wait_at_most,
            )
        try:
            self._write(batch)
        finally:
            with self._turns:
                self._tickets_written = max(self._tickets_written, ticket + 1)
                self._turns.notify_all()

    def _take(self) -> list[dict[str, Any]]:
        taken = []
        with contextlib.suppress(IndexError):  # a flush() on another thread took the rest
            for _ in range(len(self._buffer)):
                taken.append(self._buffer.popleft())
        return taken

    def _write(self, batch: list[dict[str, Any]]) -> None:
        """Encode and write one batch (on a worker thread or the caller's)."""
        lines = []
        for record in batch:
            try:
                lines.append(_encoder.encode(record).decode())
            except (TypeError, ValueError, OverflowError) as exc:
                log.warning("telemetry: could not record %s: %s", record.get("event"), exc)
        dropped = self.dropped - self._reported_dropped
        if dropped:
            self._reported_dropped += dropped
            log.warning(
                "telemetry: %d records dropped: more than %d were waiting to be written",
                dropped,
                self.max_buffered,
            )
        if not lines:
            return
        with self._file_lock:
            try:
                self._file.write("\n".join(lines) + "\n")
                self._file.flush()
            except (OSError, ValueError) as exc:
                log.warning("telemetry: could not write %d records: %s", len(lines), exc)
