"""Inbound notifications as callbacks see them: decoded once, and only when asked."""

from __future__ import annotations

from typing import Any, Final

import msgspec

from ._messages import DECODE_ERRORS

_any_decoder: Final = msgspec.json.Decoder()
_UNDECODED: Final = object()


class InboundNotification:
    """A notification from the runtime, as given to notification callbacks.

    ``raw`` is its params as they came on the wire (JSON bytes, ``b""`` when it
    had none); ``params`` decodes them on first use, once, into plain JSON values
    (``None`` when absent or not JSON). ``session_id`` is ``params["sessionId"]``
    when that is a non-empty string, else ``None``.
    """

    __slots__ = ("_params", "method", "raw", "session_id")

    def __init__(self, method: str, raw: bytes, session_id: str | None) -> None:
        self.method = method
        self.raw = raw
        self.session_id = session_id
        self._params: Any = _UNDECODED

    @property
    def params(self) -> Any:
        """The params as plain JSON values (dicts, lists, str, ...), decoded once."""
        if self._params is _UNDECODED:
            try:
                self._params = _any_decoder.decode(self.raw) if self.raw else None
            except DECODE_ERRORS:
                self._params = None
        return self._params

    def __repr__(self) -> str:
        return f"<InboundNotification {self.method!r} session={self.session_id!r}>"
