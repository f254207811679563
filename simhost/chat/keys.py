"""Keys without I/O: bytes from a raw terminal in, :class:`Key` events out.

:class:`KeyDecoder` is fed whatever ``read()`` returned and yields keys. A lone
``ESC`` byte is ambiguous (the Esc key, or the start of an arrow key's escape
sequence), so the decoder holds it and reports :attr:`KeyDecoder.pending`; the
reader waits a few milliseconds for more bytes and calls
:meth:`KeyDecoder.flush` if none came, which turns the held byte into an Esc
key. Escape sequences (arrows, function keys) and Alt chords are swallowed:
nothing in the chat reacts to them, and an Alt chord must never be read as
"Esc, then a digit".

Pasted text is one ``paste`` key, never keys one by one, so a pasted line break
cannot submit a prompt and a pasted digit cannot answer a card: a bracketed
paste (``ESC[200~`` ... ``ESC[201~``, once the terminal was asked for them with
:data:`BRACKETED_PASTE_ON`) is one paste; without bracketed paste, a read that
holds a line break followed by more text was pasted too (nobody types that
fast), and its text and line breaks become one paste. A paste longer than
:data:`MAX_PASTE_BYTES` is one ``paste_too_long`` key: refused whole, never cut.

:class:`LineEditor` is the prompt's minimal line editor.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field, replace
from typing import Final, Literal, TypeAlias

__all__ = [
    "BRACKETED_PASTE_OFF",
    "BRACKETED_PASTE_ON",
    "MAX_PASTE_BYTES",
    "Key",
    "KeyDecoder",
    "KeyName",
    "LineEditor",
]

KeyName: TypeAlias = Literal[
    "char",
    "enter",
    "backspace",
    "esc",
    "ctrl_c",
    "ctrl_d",
    "ctrl_u",
    "ctrl_w",
    "paste",
    "paste_too_long",
    "ignored",
]

BRACKETED_PASTE_ON: Final = b"\x1b[?2004h"
BRACKETED_PASTE_OFF: Final = b"\x1b[?2004l"
_PASTE_START: Final = b"\x1b[200~"
_PASTE_END: Final = b"\x1b[201~"
_ESC: Final = 0x1B
_MAX_LINE: Final = 8192
_MAX_SEQUENCE: Final = 32  # a CSI longer than this is garbage: dropped
_CONTROL_KEYS: Final[dict[int, KeyName]] = {
    0x03: "ctrl_c",
    0x04: "ctrl_d",
    0x08: "backspace",
    0x7F: "backspace",
    0x0D: "enter",
    0x0A: "enter",
    0x15: "ctrl_u",
    0x17: "ctrl_w",
}


@dataclass(frozen=True, slots=True)
class Key:
    """One key press.

    ``char`` is the character of a ``char`` key (one printable character), or the
    text of a ``paste`` (printable characters, ``\\n`` and ``\\t``).
    """

    name: KeyName
    char: str = ""
    # When the key was read (trio clock; None when unknown): a key read before a card
    # was on screen and armed must not answer it, however late it is handled.
    at: float | None = field(default=None, compare=False)
    # Read together with other characters (a paste without bracketed paste mode, a
    # burst of typing): text for the line, never an answer to a card.
    burst: bool = field(default=False, compare=False)

    @classmethod
    def of(cls, char: str) -> Key:
        """A printable character key."""
        return cls("char", char)


class KeyDecoder:
    """Turns raw terminal bytes into :class:`Key` events (sans-I/O)."""

    def __init__(self) -> None:
        self._buffer = bytearray()
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self._after_cr = False
        self._paste: bytearray | None = None  # inside a bracketed paste
        self._paste_overflow = False

    @property
    def pending(self) -> bool:
        """True when bytes are held that may be the start of an escape sequence or a paste."""
        return bool(self._buffer) or self._paste is not None

    @property
    def in_paste(self) -> bool:
        """True inside a bracketed paste (the reader then waits longer before :meth:`flush`)."""
        return self._paste is not None

    def feed(self, data: bytes) -> list[Key]:
        """Decode ``data`` (any split of the byte stream; one read of it) into keys."""
        self._buffer += data
        return _pasted_runs(self._drain(final=False))

    def flush(self) -> list[Key]:
        """No more bytes came in time: a held lone ESC is the Esc key; a paste ends."""
        return self._drain(final=True)

    def _drain(self, *, final: bool) -> list[Key]:
        keys: list[Key] = []
        buf = self._buffer
        i = 0
        while i < len(buf) or (final and self._paste is not None):
            if self._paste is not None:
                i = self._paste_bytes(buf, i, keys, final=final)
                if self._paste is not None:
                    break
                continue
            byte = buf[i]
            if byte == _ESC:
                self._after_cr = False
                used = _escape_length(buf, i)
                if used is None:  # incomplete
                    if not final:
                        break
                    # Timed out: a lone ESC is the Esc key; a cut-off sequence is dropped.
                    if len(buf) - i == 1:
                        keys.append(Key("esc"))
                    i = len(buf)
                    break
                if used == 1:
                    keys.append(Key("esc"))
                elif buf[i : i + used] == _PASTE_START:
                    self._paste = bytearray()
                    self._paste_overflow = False
                i += used
                continue
            if byte < 0x20 or byte == 0x7F:
                name = _CONTROL_KEYS.get(byte, "ignored")
                if byte == 0x0A and self._after_cr:
                    name = "ignored"  # CR LF (even split across reads) is one Enter
                self._after_cr = byte == 0x0D
                if name != "ignored":
                    keys.append(Key(name))
                i += 1
                continue
            self._after_cr = False
            # A run of non-control bytes: UTF-8 text (possibly cut mid-character).
            j = i
            while j < len(buf) and buf[j] >= 0x20 and buf[j] != 0x7F and buf[j] != _ESC:
                j += 1
            for char in self._utf8.decode(bytes(buf[i:j])):
                if char.isprintable():
                    keys.append(Key.of(char))
            i = j
        del buf[:i]
        return keys

    def _paste_bytes(self, buf: bytearray, start: int, keys: list[Key], *, final: bool) -> int:
        """Take bracketed-paste bytes from ``start``; returns where to go on."""
        assert self._paste is not None
        end = buf.find(_PASTE_END, start)
        if end >= 0:
            stop, resume = end, end + len(_PASTE_END)
        elif final:  # the end marker never came: the paste ends here
            stop = resume = len(buf)
        else:  # hold back what may be the start of the end marker
            stop = resume = max(start, len(buf) - len(_PASTE_END) + 1)
        room = MAX_PASTE_BYTES - len(self._paste)
        if stop - start > room:
            self._paste_overflow = True
        if not self._paste_overflow:
            self._paste += buf[start:stop]
        if end >= 0 or final:
            if self._paste_overflow:
                keys.append(Key("paste_too_long"))
            else:
                text = paste_text(bytes(self._paste).decode("utf-8", "replace"))
                if text:
                    keys.append(Key("paste", text))
            self._paste = None
        return resume


MAX_PASTE_BYTES: Final = 4 * _MAX_LINE
"""A longer paste cannot fit a prompt line (characters are at most 4 bytes)."""


def paste_text(raw: str) -> str:
    """Pasted text as the line keeps it: line breaks as ``\\n``, no control characters."""
    text = raw.replace("\r\n", "\n").replace("\r", "\n")
    return "".join(c for c in text if c.isprintable() or c in "\n\t")


def _pasted_runs(keys: list[Key]) -> list[Key]:
    """Runs of text and Enter keys from one read, with a line break inside, were pasted.

    Such a run becomes one ``paste`` key (its line breaks kept as text). A run
    that only ends with Enter (``hello`` typed ahead, then Enter) stays typed, its
    characters marked ``burst`` when there are several (none of them answers a card).
    """
    out: list[Key] = []
    run: list[Key] = []

    def close_run() -> None:
        last_char = max((n for n, k in enumerate(run) if k.name == "char"), default=-1)
        if any(k.name == "enter" for k in run[:last_char]):
            text = "".join("\n" if k.name == "enter" else k.char for k in run)
            if len(text.encode()) > MAX_PASTE_BYTES:
                out.append(Key("paste_too_long"))
            else:
                out.append(Key("paste", text))
        elif sum(k.name == "char" for k in run) > 1:
            out.extend(replace(k, burst=True) if k.name == "char" else k for k in run)
        else:
            out.extend(run)
        run.clear()

    for key in keys:
        if key.name in ("char", "enter"):
            run.append(key)
        else:
            close_run()
            out.append(key)
    close_run()
    return out


def _escape_length(buf: bytearray, start: int) -> int | None:
    """Bytes used by the escape sequence at ``start`` (1: a lone Esc), None if incomplete."""
    rest = len(buf) - start
    if rest == 1:
        return None
    second = buf[start + 1]
    if second == _ESC:
        return 1  # ESC ESC: the first one is an Esc key on its own
    if second == ord("["):  # CSI: parameters, then a final byte in @..~
        for k in range(start + 2, min(len(buf), start + _MAX_SEQUENCE)):
            if 0x40 <= buf[k] <= 0x7E:
                return k - start + 1
        return None if rest < _MAX_SEQUENCE else rest
    if second == ord("O"):  # SS3: one more byte (F1-F4, keypad arrows)
        return None if rest < 3 else 3
    return 2  # Alt + key: swallowed


class LineEditor:
    """The prompt's line: printable characters, pastes, Backspace, Ctrl-U, Ctrl-W, Enter."""

    MAX_LENGTH: Final = _MAX_LINE

    def __init__(self) -> None:
        self.text = ""

    def handle(self, key: Key) -> str | None:
        """Apply an editing key; returns the submitted line on Enter, else ``None``.

        Enter on an empty (or blank) line submits nothing and returns ``None``.
        """
        if key.name == "char":
            if len(self.text) < self.MAX_LENGTH:
                self.text += key.char
        elif key.name == "paste":
            if self.fits(key.char):  # whole or not at all: the caller says why not
                self.text += key.char
        elif key.name == "backspace":
            self.text = self.text[:-1]
        elif key.name == "ctrl_u":
            self.text = ""
        elif key.name == "ctrl_w":
            stripped = self.text.rstrip()
            cut = stripped.rfind(" ")
            self.text = stripped[: cut + 1] if cut >= 0 else ""
        elif key.name == "enter":
            line, self.text = self.text, ""
            if line.strip():
                return line
            return None
        return None

    def fits(self, text: str) -> bool:
        """True if ``text`` can be added to the line whole."""
        return len(self.text) + len(text) <= self.MAX_LENGTH
