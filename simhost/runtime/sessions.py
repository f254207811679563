"""Sessions and their persistence: one JSON file per session under the state folder.

Layout of the state folder (``--state-dir``)::

    sessions/<sessionId>.json   one session: title, times, preset, grants, history
    active.json                 {"sessionId": ...}: which session is active

Every file is written atomically (a temporary file in the same folder, then
``os.replace``), so a crash leaves the old or the new version, never half of
one. Files are created ``0600`` in a ``0700`` folder. A session file that
cannot be used (not JSON, nested too deep, larger than
:data:`MAX_SESSION_BYTES`, a symlink, a FIFO or anything but a regular file) is
skipped with a warning, never fatal, and never opened in a way that could
block. A ``sessions`` that is not a folder is a :class:`StateFolderError`.
Several runtimes sharing a state folder do not see each other's sessions
until they restart (last writer wins).

By default each workspace has a state folder of its own
(:func:`default_state_dir`), so its sessions are not another project's.
"""

from __future__ import annotations

import errno
import hashlib
import logging
import os
import re
import secrets
import stat
import tempfile
from contextlib import suppress
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Final

import msgspec

from simhost.runtime.policy import DEFAULT_PRESET
from simhost.runtime.wire import GrantDecision, HistoryEntry

__all__ = [
    "HISTORY_LIMIT",
    "HISTORY_TEXT_LIMIT",
    "MAX_SESSION_BYTES",
    "TITLE_LIMIT",
    "SessionStore",
    "StandingGrant",
    "StateFolderError",
    "StoredSession",
    "UnknownSession",
    "default_state_dir",
]

log = logging.getLogger("simhost.runtime")

HISTORY_LIMIT: Final = 2000
"""A session keeps its last this-many history entries."""
HISTORY_TEXT_LIMIT: Final = 2000
"""A history entry keeps the first this-many characters of its text."""
TITLE_LIMIT: Final = 200
"""A session title keeps the first this-many characters."""
MAX_SESSION_BYTES: Final = 32 * 1024 * 1024
"""A larger session file is skipped. The limits above keep a saved session well under it
(2,000 entries of 2,000 characters, each at most 6 bytes as JSON, is 24 MB)."""

_FORMAT: Final = 2
"""2: grants are scoped (:class:`StandingGrant`); format 1's per-tool grants are dropped."""
_NAME_CHARS: Final = re.compile(r"[^A-Za-z0-9._-]+")


def now_iso() -> str:
    """The current time as ISO 8601 UTC with milliseconds, e.g. ``2025-01-02T03:04:05.678Z``."""
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def default_state_dir(workspace: Path) -> Path:
    """The state folder of ``workspace`` (a resolved path): one per workspace.

    ``$XDG_STATE_HOME/simhost/workspaces/<hash>-<name>`` (``~/.local/state``
    without an absolute ``$XDG_STATE_HOME``): ``<hash>`` is the first 16 hex
    digits of the SHA-256 of the workspace path, ``<name>`` its last component
    (letters, digits, ``._-``; at most 40), so a listing shows whose it is.
    """
    base = os.environ.get("XDG_STATE_HOME")
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".local" / "state"
    digest = hashlib.sha256(os.fsencode(workspace)).hexdigest()[:16]
    name = _NAME_CHARS.sub("_", workspace.name)[:40].strip("._") or "root"
    return root / "simhost" / "workspaces" / f"{digest}-{name}"


class StateFolderError(OSError):
    """The state folder cannot be used (``sessions`` is not a folder, ...): the message says why."""


class StandingGrant(msgspec.Struct, rename="camel"):
    """An ``allow-always``/``deny-always`` answer: ``tool`` on ``scope`` (:mod:`.grants`).

    ``scope`` is a shell command's program and subcommand words, or a file's
    workspace-relative path (one element).
    """

    tool: str
    scope: list[str]
    decision: GrantDecision


class StoredSession(msgspec.Struct, rename="camel"):
    """One session as persisted.

    ``grants`` maps a workspace (absolute path) to its standing grants: a grant
    applies only in the workspace where it was given. (Format 1 kept one grant
    per tool under ``grants``; those covered more than they said, and a session
    of that format loads without them.)
    ``next_call`` numbers the session's tool calls (``call-1``, ``call-2``, ...),
    across restarts.
    """

    session_id: str
    title: str
    created_at: str
    updated_at: str
    preset_id: str = DEFAULT_PRESET
    grants: dict[str, list[StandingGrant]] = msgspec.field(
        default_factory=dict, name="scopedGrants"
    )
    history: list[HistoryEntry] = msgspec.field(default_factory=list)
    next_call: int = 1
    format: int = _FORMAT

    def new_tool_call_id(self) -> str:
        """A tool-call id not used before in this session."""
        number = self.next_call
        self.next_call += 1
        return f"call-{number}"

    def grants_in(self, workspace: str) -> list[StandingGrant]:
        """The standing grants given in ``workspace``, oldest first."""
        return list(self.grants.get(workspace, ()))

    def set_grant(
        self, workspace: str, tool: str, scope: tuple[str, ...], decision: GrantDecision
    ) -> None:
        """Remember ``decision`` for ``tool`` on ``scope`` in ``workspace`` (replacing one)."""
        kept = [
            g for g in self.grants.get(workspace, ()) if (g.tool, tuple(g.scope)) != (tool, scope)
        ]
        self.grants[workspace] = [*kept, StandingGrant(tool, list(scope), decision)]

    def add_history(self, entry: HistoryEntry) -> HistoryEntry:
        """Append ``entry`` (dropping the oldest beyond :data:`HISTORY_LIMIT`); returns it."""
        self.history.append(entry)
        if len(self.history) > HISTORY_LIMIT:
            del self.history[: len(self.history) - HISTORY_LIMIT]
        return entry

    def clip(self) -> None:
        """Cut the title and every history text to their limits (before saving)."""
        self.title = _clipped(self.title, TITLE_LIMIT)
        for entry in self.history:
            entry.text = _clipped(entry.text, HISTORY_TEXT_LIMIT)

    def touch(self) -> None:
        """Set ``updated_at`` to now."""
        self.updated_at = now_iso()


def _clipped(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"


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


def read_state_file(path: Path) -> bytes:
    """The bytes of a regular file of the state folder, at most :data:`MAX_SESSION_BYTES`.

    Never follows a symlink and never blocks (a FIFO is refused, not opened for
    good). Raises :class:`OSError` saying why the file cannot be used.
    """
    flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, "it is a symbolic link") from None
        raise
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise OSError(errno.EINVAL, "it is not a regular file")
        if info.st_size > MAX_SESSION_BYTES:
            raise OSError(errno.EFBIG, f"it is larger than {MAX_SESSION_BYTES} bytes")
        with os.fdopen(os.dup(fd), "rb") as file:
            data = file.read(MAX_SESSION_BYTES + 1)
    finally:
        os.close(fd)
    if len(data) > MAX_SESSION_BYTES:
        raise OSError(errno.EFBIG, f"it is larger than {MAX_SESSION_BYTES} bytes")
    return data


def _decoded(decoder: msgspec.json.Decoder[Any], data: bytes) -> Any:
    """Decode ``data``; a document nested too deep is a :class:`msgspec.DecodeError` too."""
    try:
        return decoder.decode(data)
    except RecursionError:
        raise msgspec.DecodeError("the JSON is nested too deeply") from None


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

    Raises :class:`OSError` from the constructor if the folder cannot be created,
    :class:`StateFolderError` if ``sessions`` is there but is not a folder.
    """

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self._folder = state_dir / "sessions"
        with suppress(FileExistsError):  # checked just below, with a clearer message
            self._folder.mkdir(parents=True, exist_ok=True, mode=0o700)
        if self._folder.is_symlink() or not self._folder.is_dir():
            raise StateFolderError(
                f"{self._folder} is not a folder: move it away, or pick another --state-dir"
            )
        self._active_path = state_dir / "active.json"
        self._sessions: dict[str, StoredSession] = {}
        self._active: str | None = None
        self._load()

    # ------------------------------------------------------------------ reading

    def _load(self) -> None:
        for path in sorted(self._folder.glob("*.json")):
            try:
                session = _decoded(_session_decoder, read_state_file(path))
            except (OSError, msgspec.DecodeError) as exc:
                log.warning("skipped session file %s: %s", path, _why(exc))
                continue
            if session.session_id != path.stem:
                log.warning("skipped session file %s: it holds %r", path, session.session_id)
                continue
            self._sessions[session.session_id] = session
        try:
            active = _decoded(_active_decoder, read_state_file(self._active_path)).session_id
        except FileNotFoundError:
            active = None
        except (OSError, msgspec.DecodeError) as exc:
            log.warning("ignored %s: %s", self._active_path, _why(exc))
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
        title = _clipped((title or "").strip(), TITLE_LIMIT) or f"Session {len(self._sessions) + 1}"
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
        session.clip()
        write_atomic(self._folder / f"{session.session_id}.json", _encoder.encode(session))


def _why(exc: Exception) -> str:
    """An error as one short line (an OSError's reason, without its errno)."""
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)
