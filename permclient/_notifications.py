"""Inbound notifications as callbacks see them: decoded once, and only when asked."""

from __future__ import annotations

import contextlib
from typing import Any, Final

import msgspec

from ._messages import DECODE_ERRORS
from ._wire import SessionUpdate, decode_session_update

_any_decoder: Final = msgspec.json.Decoder()
_UNDECODED: Final = object()


class InboundNotification:
    """A notification from the runtime, as given to notification callbacks.

    ``raw`` is its params as they came on the wire (JSON bytes, ``b""`` when it
    had none); ``params`` decodes them on first use, once, into plain JSON values
    (``None`` when absent or not JSON). ``session_id`` is ``params["sessionId"]``
    when that is a non-empty string, else ``None``. For a ``session/update``,
    ``update`` is its typed update, decoded once from ``raw`` and shared by the
    client's tool-call tracker and every callback.
    """

    __slots__ = ("_params", "_update", "method", "raw", "session_id")

    def __init__(self, method: str, raw: bytes, session_id: str | None) -> None:
        self.method = method
        self.raw = raw
        self.session_id = session_id
        self._params: Any = _UNDECODED
        self._update: Any = _UNDECODED

    @property
    def params(self) -> Any:
        """The params as plain JSON values (dicts, lists, str, ...), decoded once."""
        if self._params is _UNDECODED:
            try:
                self._params = _any_decoder.decode(self.raw) if self.raw else None
            except DECODE_ERRORS:
                self._params = None
        return self._params

    @property
    def update(self) -> SessionUpdate | None:
        """The typed update of a ``session/update`` (an :class:`UnknownUpdate` for
        one not typed here), decoded once on first use; ``None`` for any other
        method and for params that are no session update at all."""
        if self._update is _UNDECODED:
            self._update = None
            if self.method == "session/update" and self.raw:
                with contextlib.suppress(*DECODE_ERRORS):
                    self._update = decode_session_update(self.raw)[1]
        update: SessionUpdate | None = self._update
        return update

    @classmethod
    def session_update(cls, raw: bytes) -> InboundNotification:
        """A ``session/update`` decoded once, its typed update and its session with it
        (``session_id`` stays ``None`` when the params are no session update)."""
        notification = cls("session/update", raw, None)
        notification._update = None
        if raw:
            with contextlib.suppress(*DECODE_ERRORS):
                session_id, notification._update = decode_session_update(raw)
                notification.session_id = session_id or None
        return notification

    def forget_decoded(self) -> None:
        """Drop what was decoded (kept as bytes only, e.g. while held: a peer's few
        bytes of JSON can decode into many times as many of objects)."""
        self._params = self._update = _UNDECODED

    def __repr__(self) -> str:
        return f"<InboundNotification {self.method!r} session={self.session_id!r}>"
