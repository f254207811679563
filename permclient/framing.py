"""The sans-I/O framing layer: feed received bytes in, pull complete frame bodies out.

This module is public (``from permclient.framing import NewlineFramer``): the client uses
these framers, and a host that moves bytes itself can use them the same way.

Two wire formats are supported:

* :class:`ContentLengthFramer` -- LSP / VS Code-style ``Content-Length: N\\r\\n\\r\\n`` headers
  followed by exactly ``N`` body bytes.
* :class:`NewlineFramer` -- one message per ``\\n``-terminated line (ACP over stdio).

Nothing here does I/O: the caller feeds whatever bytes the transport produced to
``receive_data`` and calls ``next_frame`` until it returns ``None``. Errors caused by the
peer are :class:`~permclient._errors.RemoteProtocolError`; ``recoverable=True`` means the
offending frame was skipped and the stream is still in sync, ``False`` means it is not and
the connection must be closed. Errors caused by us are
:class:`~permclient._errors.LocalProtocolError`.
"""

from __future__ import annotations

from typing import Final, NoReturn, Protocol

from ._errors import LocalProtocolError, RemoteProtocolError

__all__ = [
    "DEFAULT_MAX_FRAME_SIZE",
    "DEFAULT_MAX_HEADER_SIZE",
    "ContentLengthFramer",
    "Framer",
    "NewlineFramer",
]

DEFAULT_MAX_FRAME_SIZE: Final = 64 * 1024 * 1024
DEFAULT_MAX_HEADER_SIZE: Final = 8 * 1024

_HEADER_END: Final = b"\r\n\r\n"
# The header nearly every peer sends, alone and spelled exactly so; parsed without decoding.
_FAST_PREFIX: Final = b"Content-Length: "
_FAST_PREFIX_LEN: Final = len(_FAST_PREFIX)
# No real body is 10**19 bytes long; refusing longer values also keeps int() away from
# Python's int-from-str digit limit (a ValueError we would otherwise have to catch).
_MAX_LENGTH_DIGITS: Final = 19
_JSON_MEDIA_TYPES: Final = frozenset({"application/json", "application/vscode-jsonrpc"})
_UTF8_CHARSETS: Final = frozenset({"utf-8", "utf8"})  # LSP asks peers to accept "utf8" too
_CR: Final = 0x0D
# Don't compact a bytearray buffer until this much of its start has been consumed.
_COMPACT_THRESHOLD: Final = 64 * 1024
# Pieces of a frame that spans reads shorter than this are merged into a bytearray, so
# that a peer trickling bytes cannot make per-object overhead outweigh the bytes held.
_MIN_PART: Final = 16 * 1024


def _show(data: bytes | str, limit: int = 60) -> str:
    """Return a short repr of peer input for error messages."""
    if len(data) > limit:
        return f"{data[:limit]!r}..."
    return repr(data)


class Framer(Protocol):
    """What the connection needs from a framer; both framers here satisfy it."""

    def receive_data(self, data: bytes | bytearray) -> None:
        """Append bytes received from the peer. Never raises."""
        ...

    def next_frame(self) -> bytes | None:
        """Return the next complete body, or ``None`` if more data is needed.

        The body is ``bytes``, so later calls never change it. Raises
        :class:`RemoteProtocolError` if the peer broke the framing rules.
        """
        ...

    @property
    def buffered(self) -> int:
        """Number of bytes held that are not yet part of a returned frame."""
        ...

    @staticmethod
    def encode(body: bytes) -> bytes:
        """Return ``body`` framed for sending. Raises :class:`LocalProtocolError`."""
        ...


def _content_type_problem(value: str) -> str | None:
    """Return why a Content-Type value is unacceptable, or ``None`` if it is JSON in UTF-8."""
    media_type, *params = value.split(";")
    media_type = media_type.strip(" \t").lower()
    if not (
        media_type in _JSON_MEDIA_TYPES
        or (media_type.startswith("application/") and media_type.endswith("+json"))
    ):
        return f"peer sent a non-JSON Content-Type {_show(value)}"
    for param in params:
        key, _, val = param.partition("=")
        if key.strip(" \t").lower() == "charset":
            charset = val.strip(" \t").strip('"').lower()
            if charset not in _UTF8_CHARSETS:
                return f"peer sent a non-UTF-8 Content-Type {_show(value)}"
    return None


class _Buffer:
    """Receive buffer shared by the framers: ``_buf[_pos:]`` is held, unconsumed data.

    While nothing is held, an incoming ``bytes`` chunk is adopted as the buffer without
    copying (the common case: one read carries whole messages), and frames are sliced
    straight out of it. Only when data must accumulate does it become a ``bytearray``.

    A frame body that spans reads is kept apart, in ``_parts``: the reads themselves (or
    views of them), in order, joined once when the frame is complete. That join is the
    only copy its bytes make on their way out, and once it is made the framer holds
    nothing of the frame, so a frame of N bytes peaks at 2N in the framer.
    """

    __slots__ = ("_buf", "_parts", "_parts_len", "_pos", "_scan")

    def __init__(self) -> None:
        self._buf: bytes | bytearray = b""
        self._pos = 0  # start of the unconsumed data in _buf
        # Where the search for the frame delimiter resumes, so a frame arriving in small
        # chunks is scanned once overall; stale (and ignored) when below _pos.
        self._scan = 0
        # The frame body being collected across reads; _buf then holds what follows it.
        self._parts: list[bytes | bytearray | memoryview] = []
        self._parts_len = 0

    @property
    def buffered(self) -> int:
        """Return the number of bytes held that are not yet part of a returned frame.

        Bytes of a skipped (rejected) frame are never held and so never counted.
        """
        return len(self._buf) - self._pos + self._parts_len

    def _append(self, chunk: bytes | bytearray | memoryview) -> None:
        """Add ``chunk`` after the held data."""
        buf = self._buf
        pos = self._pos
        if pos == len(buf):
            if type(chunk) is bytes:
                self._buf = chunk  # immutable, so safe to keep without copying
            else:
                self._buf = bytearray(chunk)
            self._pos = self._scan = 0
        elif isinstance(buf, bytes):
            # Keep only the unconsumed tail; each byte is copied here at most once.
            grown = bytearray(memoryview(buf)[pos:])
            grown += chunk
            self._buf = grown
            self._pos = 0
            self._scan -= pos
        else:
            # Compact only when the consumed prefix is big and outweighs the live data, so
            # the memmove is paid for by bytes already consumed (amortised O(1) per byte).
            if pos >= _COMPACT_THRESHOLD and pos * 2 > len(buf):
                del buf[:pos]
                self._pos = 0
                self._scan -= pos
            buf += chunk

    def _append_from(self, data: bytes, start: int) -> None:
        """Add ``data[start:]`` after the held data, adopting ``data`` if nothing is held."""
        if start == len(data):
            return
        if self._pos == len(self._buf):
            self._buf = data  # immutable, so safe to keep without copying
            self._pos = self._scan = start
        else:
            self._append(memoryview(data)[start:])

    def _start_parts(self, pos: int) -> None:
        """Move the held data from ``pos`` on into ``_parts``: a frame body spans reads."""
        buf = self._buf
        self._buf = b""
        self._pos = self._scan = 0
        if pos == len(buf):
            return
        if isinstance(buf, bytearray):
            del buf[:pos]  # ours alone: it becomes the first piece, without a copy
            self._parts.append(buf)
            self._parts_len += len(buf)
        else:
            self._add_part(memoryview(buf)[pos:])

    def _add_part(self, piece: bytes | memoryview) -> None:
        """Add the next piece of the frame body being collected; ``piece`` is immutable."""
        if not piece:
            return
        parts = self._parts
        self._parts_len += len(piece)
        if len(piece) >= _MIN_PART:
            parts.append(piece)
            return
        last = parts[-1] if parts else None
        if isinstance(last, bytearray) and len(last) < _MIN_PART:
            last += piece
            if len(last) >= _MIN_PART:
                parts[-1] = bytes(last)  # exact: a growing bytearray over-allocates up to 1/8
        else:
            parts.append(bytearray(piece))

    def _take_parts(self) -> bytes:
        """Return the collected frame body and hold nothing of it any more."""
        parts = self._parts
        self._parts = []
        self._parts_len = 0
        return b"".join(parts)  # the one copy; the pieces go when this returns

    def _drop_all(self) -> None:
        """Discard everything held."""
        self._buf = b""
        self._pos = self._scan = 0
        self._parts = []
        self._parts_len = 0


class ContentLengthFramer(_Buffer):
    """Framer for ``Content-Length: N\\r\\n\\r\\n<N bytes>`` messages (LSP base protocol).

    Header names are case-insensitive and may come in any order; unknown headers are
    ignored; ``Content-Type`` must, if present, name JSON in UTF-8. A frame longer than
    ``max_frame_size`` is reported (recoverably) as soon as its header arrives and its body
    is then discarded as it arrives, never stored.
    """

    __slots__ = (
        "_body_len",
        "_dead",
        "_header_len",
        "_max_frame_size",
        "_max_header_size",
        "_skip",
    )

    def __init__(
        self,
        *,
        max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
        max_header_size: int = DEFAULT_MAX_HEADER_SIZE,
    ) -> None:
        """Create an empty framer. Raises ``ValueError`` if a limit is below 1."""
        if max_frame_size < 1 or max_header_size < 1:
            raise ValueError("max_frame_size and max_header_size must be at least 1")
        self._max_frame_size = max_frame_size
        self._max_header_size = max_header_size
        super().__init__()
        self._body_len = -1  # length of the body being collected; -1 while reading headers
        self._header_len = 0  # size of the collected body's (already parsed) header section
        self._skip = 0  # bytes of a rejected body still to discard
        self._dead: str | None = None  # set by a fatal error; the stream is out of sync

    def receive_data(self, data: bytes | bytearray) -> None:
        """Append bytes received from the peer. Never raises; errors surface in next_frame."""
        if self._dead is not None:
            return  # nothing more will be parsed; don't hoard the peer's bytes
        chunk: bytes | bytearray | memoryview = data
        if self._skip:
            # next_frame drained the buffer when it began skipping, so these bytes come
            # straight after the rejected body's already-discarded part: drop them unstored.
            if len(data) <= self._skip:
                self._skip -= len(data)
                return
            chunk = memoryview(data)[self._skip :]
            self._skip = 0
        missing = self._body_len - self._parts_len
        if missing > 0:  # (never while skipping: a rejected body is not collected)
            if type(chunk) is not bytes:
                chunk = bytes(chunk)  # the caller may reuse its buffer
            if len(chunk) <= missing:
                self._add_part(chunk)
                return
            self._add_part(memoryview(chunk)[:missing])
            self._append_from(chunk, missing)
            return
        self._append(chunk)

    @property
    def buffered(self) -> int:
        """Return the number of bytes held that are not yet part of a returned frame.

        Includes the header of a body still being collected; bytes of a rejected
        (skipped) body are never held and so never counted.
        """
        held = len(self._buf) - self._pos + self._parts_len
        if self._body_len >= 0:
            held += self._header_len
        return held

    def next_frame(self) -> bytes | None:
        """Return the next complete body, or ``None`` if more data is needed.

        Raises :class:`RemoteProtocolError`. With ``recoverable=True`` (Content-Length above
        ``max_frame_size``, or a non-JSON/non-UTF-8 Content-Type) the body is skipped and the
        next call carries on with the following frame. With ``recoverable=False`` (missing,
        duplicate or malformed Content-Length, malformed or oversized header section) the
        framer is dead and every later call raises again.
        """
        if self._dead is not None:
            raise RemoteProtocolError(self._dead, recoverable=False)
        if self._body_len >= 0:
            if self._parts_len < self._body_len:
                return None
            self._body_len = -1
            return self._take_parts()
        buf = self._buf
        pos = self._pos
        if pos == len(buf):
            return None  # nothing held (also the case while skipping a rejected body)
        scan = self._scan  # may be stale (below pos) once a frame was taken
        end = buf.find(_HEADER_END, scan if scan > pos else pos)
        if end < 0:
            # The terminator could start in the last 3 bytes, so only what precedes
            # them is certainly header.
            if len(buf) - pos - 3 > self._max_header_size:
                self._fail(
                    f"peer sent a header section longer than {self._max_header_size} "
                    "bytes without a terminating blank line"
                )
            self._scan = len(buf) - 3
            return None
        if end - pos > self._max_header_size:
            self._fail(
                f"peer sent a {end - pos}-byte header section (limit {self._max_header_size})"
            )
        # Fast path for the usual lone header; bytes.isdigit() is ASCII-only and false
        # for b"", so it is the same strict rule _parse_headers applies.
        if (
            buf.startswith(_FAST_PREFIX, pos)
            and (digits := buf[pos + _FAST_PREFIX_LEN : end]).isdigit()
            and len(digits) <= _MAX_LENGTH_DIGITS
        ):
            n = int(digits)
            problem = None
        else:
            n, problem = self._parse_headers(pos, end)
        header_len = end + 4 - pos
        pos = end + 4
        if n > self._max_frame_size and problem is None:
            problem = f"peer sent a {n}-byte frame (limit {self._max_frame_size}); skipped it"
        if problem is not None:
            # The length is trustworthy, so drop the body (what is held now here, the
            # rest in receive_data) and stay in sync.
            held = min(n, len(buf) - pos)
            self._pos = pos + held
            self._skip = n - held
            raise RemoteProtocolError(problem, recoverable=True)
        end = pos + n
        if len(buf) < end:
            self._body_len = n
            self._header_len = header_len
            self._start_parts(pos)
            return None
        self._pos = end
        if type(buf) is bytes:
            return buf[pos:end]
        return bytes(memoryview(buf)[pos:end])

    def _parse_headers(self, start: int, end: int) -> tuple[int, str | None]:
        """Parse ``_buf[start:end]``; return (Content-Length, Content-Type problem or None).

        Raises a fatal :class:`RemoteProtocolError` for a malformed header section.
        """
        raw = bytes(self._buf[start:end])
        try:
            text = raw.decode("ascii")
        except UnicodeDecodeError:
            self._fail(f"peer sent a non-ASCII header section {_show(raw)}")
        length: int | None = None
        problem: str | None = None
        for line in text.split("\r\n"):
            name, colon, value = line.partition(":")
            name = name.strip(" \t").lower()
            if not colon or not name:
                self._fail(f"peer sent a malformed header line {_show(line)}")
            value = value.strip(" \t")
            if name == "content-length":
                if length is not None:
                    self._fail("peer sent more than one Content-Length header")
                # Text is ASCII here, where str.isdigit() means [0-9]+; no sign, not empty.
                if not value.isdigit():
                    self._fail(f"peer sent an invalid Content-Length {_show(value)}")
                if len(value.lstrip("0")) > _MAX_LENGTH_DIGITS:
                    self._fail(f"peer sent an absurd Content-Length {_show(value)}")
                length = int(value)
            elif name == "content-type" and problem is None:
                problem = _content_type_problem(value)
        if length is None:
            self._fail(f"peer sent a header section without Content-Length {_show(raw)}")
        return length, problem

    def _fail(self, message: str) -> NoReturn:
        """Kill the framer (the stream is out of sync) and raise a fatal error."""
        self._dead = message
        self._drop_all()
        self._body_len = -1
        self._skip = 0
        raise RemoteProtocolError(message, recoverable=False)

    @staticmethod
    def encode(body: bytes) -> bytes:
        """Return ``b"Content-Length: N\\r\\n\\r\\n" + body``. Never raises."""
        return b"Content-Length: %d\r\n\r\n%b" % (len(body), body)


class NewlineFramer(_Buffer):
    """Framer for newline-delimited messages (one JSON document per line).

    A ``\\r`` before the ``\\n`` is stripped and blank or whitespace-only lines are skipped.
    A line longer than ``max_frame_size`` is reported (recoverably) as soon as that is
    certain, without buffering it whole, and discarded up to its ``\\n``.
    """

    __slots__ = ("_in_line", "_line_done", "_max_frame_size", "_skipping")

    def __init__(self, *, max_frame_size: int = DEFAULT_MAX_FRAME_SIZE) -> None:
        """Create an empty framer. Raises ``ValueError`` if ``max_frame_size`` is below 1."""
        if max_frame_size < 1:
            raise ValueError("max_frame_size must be at least 1")
        self._max_frame_size = max_frame_size
        super().__init__()
        self._skipping = False  # discarding the rest of an oversized line
        self._in_line = False  # collecting a line that spans reads in _parts
        self._line_done = False  # ... and its b"\n" has arrived

    def receive_data(self, data: bytes | bytearray) -> None:
        """Append bytes received from the peer. Never raises; errors surface in next_frame."""
        chunk: bytes | bytearray | memoryview = data
        if self._skipping:
            # The buffer was emptied when skipping began: drop input up to the newline.
            nl = data.find(b"\n")
            if nl < 0:
                return
            chunk = memoryview(data)[nl + 1 :]
            self._skipping = False
        if self._in_line and not self._line_done:  # (never while skipping)
            if type(chunk) is not bytes:
                chunk = bytes(chunk)  # the caller may reuse its buffer
            nl = chunk.find(b"\n")
            if nl < 0:
                self._add_part(chunk)
                return
            self._line_done = True
            if nl == 0:
                self._drop_trailing_cr()
            else:
                self._add_part(memoryview(chunk)[: nl - 1 if chunk[nl - 1] == _CR else nl])
            self._append_from(chunk, nl + 1)
            return
        self._append(chunk)

    def _drop_trailing_cr(self) -> None:
        """Drop the collected line's last byte if it is a ``\\r`` (its ``\\n`` came next)."""
        parts = self._parts
        if parts and parts[-1][-1] == _CR:
            last = parts[-1]
            if isinstance(last, bytearray):
                del last[-1]
            else:
                parts[-1] = memoryview(last)[:-1]
            self._parts_len -= 1

    def next_frame(self) -> bytes | None:
        """Return the next non-blank line without its line ending, or ``None`` if more
        data is needed.

        Raises :class:`RemoteProtocolError` (always ``recoverable=True``) for a line longer
        than ``max_frame_size``; the line is discarded and the next call carries on after it.
        """
        limit = self._max_frame_size
        if self._in_line:
            frame = self._collected_line(limit)
            if frame is None or (frame and not frame.isspace()):
                return frame  # (a blank line is skipped, as below)
        buf = self._buf
        while True:
            pos = self._pos
            if pos == len(buf):
                return None  # nothing held (also the case while skipping a long line)
            nl = buf.find(b"\n", pos)
            if nl < 0:
                self._check_unfinished(len(buf) - pos, buf[-1], limit)
                self._in_line = True
                self._start_parts(pos)
                return None
            end = nl - 1 if nl > pos and buf[nl - 1] == _CR else nl
            self._pos = nl + 1
            if end - pos > limit:
                raise RemoteProtocolError(
                    f"peer sent a {end - pos}-byte line (limit {limit}); skipped it",
                    recoverable=True,
                )
            if end == pos:
                continue
            frame = buf[pos:end] if type(buf) is bytes else bytes(memoryview(buf)[pos:end])
            if frame.isspace():  # stops at the first non-space byte, so cheap for JSON
                continue
            return frame

    def _collected_line(self, limit: int) -> bytes | None:
        """The line collected across reads once its ``\\n`` arrived (maybe blank), else None.

        Raises :class:`RemoteProtocolError` as :meth:`next_frame` does.
        """
        length = self._parts_len
        if not self._line_done:
            self._check_unfinished(length, self._parts[-1][-1], limit)
            return None
        self._in_line = self._line_done = False
        if length > limit:
            self._parts = []
            self._parts_len = 0
            raise RemoteProtocolError(
                f"peer sent a {length}-byte line (limit {limit}); skipped it", recoverable=True
            )
        return self._take_parts()

    def _check_unfinished(self, held: int, last_byte: int, limit: int) -> None:
        """Start skipping a line that is already too long without its ``\\n``."""
        # One byte of slack for a trailing b"\r" that the b"\n" may yet follow.
        if held > limit + 1 or (held == limit + 1 and last_byte != _CR):
            self._drop_all()
            self._in_line = False
            self._skipping = True
            raise RemoteProtocolError(
                f"peer sent a line longer than {limit} bytes; skipping it",
                recoverable=True,
            )

    @staticmethod
    def encode(body: bytes) -> bytes:
        """Return ``body + b"\\n"``.

        Raises :class:`LocalProtocolError` if ``body`` contains ``\\n`` or ``\\r`` or is
        empty or all whitespace (the receiver would split it, or drop it as a blank line).
        """
        # An int needle is a memchr; a bytes needle takes the slower general search.
        if 10 in body or 13 in body:  # b"\n", b"\r"
            raise LocalProtocolError("newline-framed message body contains a line break")
        if not body or body.isspace():
            raise LocalProtocolError("newline-framed message body is empty or blank")
        return body + b"\n"
