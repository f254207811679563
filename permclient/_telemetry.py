"""Telemetry: a record of what happened to every approval, one JSON object per line.

Telemetry proves what happened; it is never the enforcement. A sink that fails
to write logs the failure and never disturbs an answer.
"""

from __future__ import annotations

import logging
import os
import time
from typing import IO, Any, Final, Protocol

import msgspec

log = logging.getLogger("permclient")

_encoder: Final = msgspec.json.Encoder()


class Telemetry(Protocol):
    """Anything with ``emit(event, **fields)`` can receive permclient's events."""

    def emit(self, event: str, /, **fields: Any) -> None:
        """Record one event; must not block for long and must not raise."""


class JsonlTelemetry:
    """Appends one JSON object per event to a file: ``{"ts": ..., "event": ..., ...}``.

    Events: ``server_request.start``, ``approval.requested``,
    ``approval.responded`` (outcome, option_id, latency_ms), ``approval.cancelled``
    (by: peer, turn, teardown; latency_ms), ``approval.unrouted``,
    ``approval.malformed`` (reason). Each carries ``session_id`` (when known) and
    ``request_id``. ``ts`` is seconds since the epoch.

    Pass a path (opened for appending, closed by :meth:`close`) or an open text
    file (left open). Each line is flushed as it is written so a crash loses nothing.
    """

    def __init__(self, target: str | os.PathLike[str] | IO[str]) -> None:
        if isinstance(target, str | os.PathLike):
            self._file: IO[str] = open(target, "a", encoding="utf-8")  # noqa: SIM115
            self._owned = True
        else:
            self._file = target
            self._owned = False

    def emit(self, event: str, /, **fields: Any) -> None:
        record = {"ts": time.time(), "event": event, **fields}
        try:
            self._file.write(_encoder.encode(record).decode() + "\n")
            self._file.flush()
        except (OSError, ValueError, TypeError) as exc:
            log.warning("telemetry: could not record %s: %s", event, exc)

    def close(self) -> None:
        """Close the file if this sink opened it."""
        if self._owned:
            self._file.close()

    def __enter__(self) -> JsonlTelemetry:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()
