"""Keys without I/O: bytes from a raw terminal in, :class:`Key` events out.

:class:`KeyDecoder` is fed whatever ``read()`` returned and yields keys. A lone
``ESC`` byte is ambiguous (the Esc key, or the start of an arrow key's escape
sequence), so the decoder holds it and reports :attr:`KeyDecoder.pending`; the
reader waits a few milliseconds for more bytes and calls
:meth:`KeyDecoder.flush` if none came, which turns the held byte into an Esc
key. Escape sequences (arrows, function keys) and Alt chords are swallowed:
nothing in the chat reacts to them, and an Alt chord must never be read as
"Esc, then a digit".

:class:`LineEditor` is the prompt's minimal line editor.
"""

from __future__ import annotations

import codecs
from dataclasses import dataclass, field
from typing import Final, Literal, TypeAlias

__all__ = ["Key", "KeyDecoder", "KeyName", "LineEditor"]

KeyName: TypeAlias = Literal[
    "char", "enter", "backspace", "esc", "ctrl_c", "ctrl_d", "ctrl_u", "ctrl_w", "ignored"
]

_ESC: Final = 0x1B
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
    """One key press. ``char`` is set for ``name == "char"`` (one printable character)."""

    name: KeyName
    char: str = ""
    # When the key was read (trio clock; None when unknown): a key read before a card
    # was on screen and armed must not answer it, however late it is handled.
    at: float | None = field(default=None, compare=False)

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

    @property
    def pending(self) -> bool:
        """True when bytes are held that may be the start of an escape sequence."""
        return bool(self._buffer)

    def feed(self, data: bytes) -> list[Key]:
        """Decode ``data`` (any split of the byte stream) into keys."""
        self._buffer += data
        return self._drain(final=False)

    def flush(self) -> list[Key]:
        """No more bytes came in time: a held lone ESC is the Esc key."""
        return self._drain(final=True)

    def _drain(self, *, final: bool) -> list[Key]:
        keys: list[Key] = []
        buf = self._buffer
        i = 0
        while i < len(buf):
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
    """The prompt's line: printable characters, Backspace, Ctrl-U, Ctrl-W, Enter."""

    MAX_LENGTH: Final = 8192

    def __init__(self) -> None:
        self.text = ""

    def handle(self, key: Key) -> str | None:
        """Apply an editing key; returns the submitted line on Enter, else ``None``.

        Enter on an empty (or blank) line submits nothing and returns ``None``.
        """
        if key.name == "char":
            if len(self.text) < self.MAX_LENGTH:
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
