"""Sessions and their persistence: one JSON file per session under the state folder.

Layout of the state folder (``--state-dir``)::

    sessions/<sessionId>.json   one session: title, times, preset, grants, history
    active.json                 {"sessionId": ...}: which session is active

Every file is written atomically (a temporary file in the same folder, then
``os.replace``), so a crash leaves the old or the new version, never half of
one. Files are created ``0600`` in a ``0700`` folder. A file that does not
decode is skipped with a warning, never fatal. Several runtimes sharing a
state folder do not see each other's sessions until they restart (last writer
wins).
"""

from __future__ import annotations

import logging
import os
import secrets
import tempfile
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Final

import msgspec

from simhost.runtime.policy import DEFAULT_PRESET
from simhost.runtime.wire import GrantDecision, HistoryEntry

__all__ = ["HISTORY_LIMIT", "SessionStore", "StoredSession", "UnknownSession", "default_state_dir"]

log = logging.getLogger("simhost.runtime")

HISTORY_LIMIT: Final = 2000
"""A session keeps its last this-many history entries."""

_FORMAT: Final = 1


def now_iso() -> str:
    """The current time as ISO 8601 UTC with milliseconds, e.g. ``2025-01-02T03:04:05.678Z``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def default_state_dir() -> Path:
    """``$XDG_STATE_HOME/simhost``, or ``~/.local/state/simhost``."""
    base = os.environ.get("XDG_STATE_HOME")
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".local" / "state"
    return root / "simhost"


class StoredSession(msgspec.Struct, rename="camel"):
    """One session as persisted.

    ``grants`` maps a workspace (absolute path) to tool -> ``allow``/``reject``:
    a standing grant applies only in the workspace where it was given.
    ``next_call`` numbers the session's tool calls (``call-1``, ``call-2``, ...),
    across restarts.
    """

    session_id: str
    title: str
    created_at: str
    updated_at: str
    preset_id: str = DEFAULT_PRESET
    grants: dict[str, dict[str, GrantDecision]] = msgspec.field(default_factory=dict)
    history: list[HistoryEntry] = msgspec.field(default_factory=list)
    next_call: int = 1
    format: int = _FORMAT

    def new_tool_call_id(self) -> str:
        """A tool-call id not used before in this session."""
        number = self.next_call
        self.next_call += 1
        return f"call-{number}"

    def grant_for(self, workspace: str, tool: str) -> GrantDecision | None:
        """The standing grant of ``tool`` in ``workspace``, if any."""
        return self.grants.get(workspace, {}).get(tool)

    def set_grant(self, workspace: str, tool: str, decision: GrantDecision) -> None:
        """Remember ``decision`` for ``tool`` in ``workspace``."""
        self.grants.setdefault(workspace, {})[tool] = decision

    def add_history(self, entry: HistoryEntry) -> HistoryEntry:
        """Append ``entry`` (dropping the oldest beyond :data:`HISTORY_LIMIT`); returns it."""
        self.history.append(entry)
        if len(self.history) > HISTORY_LIMIT:
            del self.history[: len(self.history) - HISTORY_LIMIT]
        return entry

    def touch(self) -> None:
        """Set ``updated_at`` to now."""
        self.updated_at = now_iso()


class _Active(msgspec.Struct, rename="camel"):
    session_id: str | None = None


class UnknownSession(KeyError):
    """No session has this id."""

    def __init__(self, session_id: str) -> None:
        super().__init__(session_id)
        self.session_id = session_id

    def __str__(self) -> str:
        return f"unknown session {self.session_id!r}"


_encoder: Final = msgspec.json.Encoder()
_session_decoder: Final = msgspec.json.Decoder(StoredSession)
_active_decoder: Final = msgspec.json.Decoder(_Active)


def write_atomic(path: Path, data: bytes) -> None:
    """Replace ``path`` with ``data`` in one step (temporary file + ``os.replace``).

    Raises :class:`OSError` if it cannot; the old file is then left as it was.
    """
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as file:
            file.write(data)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temp, path)
    except BaseException:
        with suppress(OSError):
            os.unlink(temp)
        raise


class SessionStore:
    """All sessions of a state folder, in memory, written through to disk.

    Raises :class:`OSError` from the constructor if the folder cannot be created.
    """

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self._folder = state_dir / "sessions"
        self._folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        self._active_path = state_dir / "active.json"
        self._sessions: dict[str, StoredSession] = {}
        self._active: str | None = None
        self._load()

    # ------------------------------------------------------------------ reading

    def _load(self) -> None:
        for path in sorted(self._folder.glob("*.json")):
            try:
                session = _session_decoder.decode(path.read_bytes())
            except (OSError, msgspec.DecodeError) as exc:
                log.warning("skipped session file %s: %s", path, exc)
                continue
            if session.session_id != path.stem:
                log.warning("skipped session file %s: it holds %r", path, session.session_id)
                continue
            self._sessions[session.session_id] = session
        try:
            active = _active_decoder.decode(self._active_path.read_bytes()).session_id
        except FileNotFoundError:
            active = None
        except (OSError, msgspec.DecodeError) as exc:
            log.warning("ignored %s: %s", self._active_path, exc)
            active = None
        self._active = active if active in self._sessions else None

    @property
    def active_id(self) -> str | None:
        """The active session's id, or ``None``."""
        return self._active

    def get(self, session_id: str) -> StoredSession:
        """The session ``session_id``; raises :class:`UnknownSession`."""
        session = self._sessions.get(session_id)
        if session is None:
            raise UnknownSession(session_id)
        return session

    def sessions(self) -> list[StoredSession]:
        """Every session, oldest first."""
        return sorted(self._sessions.values(), key=lambda s: (s.created_at, s.session_id))

    # ------------------------------------------------------------------ writing

    def create(self, title: str | None) -> StoredSession:
        """Create a session, make it the active one, and persist both.

        Raises :class:`OSError` if it cannot be written.
        """
        session_id = f"s-{secrets.token_hex(6)}"
        while session_id in self._sessions:  # pragma: no cover - 48 random bits
            session_id = f"s-{secrets.token_hex(6)}"
        stamp = now_iso()
        title = (title or "").strip() or f"Session {len(self._sessions) + 1}"
        session = StoredSession(session_id, title, stamp, stamp)
        self._write(session)
        self._sessions[session_id] = session
        self.activate(session_id)
        return session

    def activate(self, session_id: str) -> None:
        """Make ``session_id`` the active session (persisted); raises :class:`UnknownSession`."""
        self.get(session_id)
        self._active = session_id
        try:
            write_atomic(self._active_path, _encoder.encode(_Active(session_id)))
        except OSError as exc:
            log.error("could not record the active session in %s: %s", self._active_path, exc)

    def save(self, session: StoredSession) -> bool:
        """Write ``session`` to disk; returns False (and logs) if that failed."""
        try:
            self._write(session)
        except OSError as exc:
            log.error("could not save session %s: %s", session.session_id, exc)
            return False
        return True

    def _write(self, session: StoredSession) -> None:
        write_atomic(self._folder / f"{session.session_id}.json", _encoder.encode(session))
