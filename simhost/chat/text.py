"""Strings from the runtime, made safe to put on a terminal.

Everything the chat shows comes from the runtime: a command, a path, a diff,
a session title. None of it may drive the terminal (an ESC sequence could move
the cursor and paint over the command you are about to approve), break a line
where the chat did not mean one (a newline in an option's name could draw a
fake option row), or hide in plain sight (a bidi override, a zero-width or
tag character, a Hangul filler can make a command read differently than it
runs).

One rule decides what is *hidden*: every character that is not printable
(Unicode categories Cc, Cf, Cs, Co, Cn, Zl, Zp and Zs but the ASCII space;
Python's :meth:`str.isprintable`) and every other default-ignorable code point
(combining grapheme joiner, Hangul fillers, variation selectors, Mongolian
free variation selectors, the Khmer inherent vowels, the braille blank). A
second rule adds the characters of *uneven width*: those Rich may count wider
or narrower than the terminal draws them (spacing and enclosing marks, skin
tone modifiers, regional indicators and a few symbols; see
:func:`is_uneven`), and every combining mark past the second on one
character (a "Zalgo" stack drawn over the rows around it). Text after such a
character would land in another column than Rich planned, and could wrap to
where an option row starts. A hidden character is shown as an escape:
``\\n``, ``\\t``, ``\\r``, ``\\x1b``, ``\\u202e``, ``\\u0903``, ``\\U000e0041``.

:func:`escaped` is the one function a card puts every runtime string through:
one line, nothing kept, escapes in their own style, and at most ``limit``
characters. :func:`visible` is its plain-string twin for the transcript, which
keeps ``\\n`` and ``\\t``. Rich markup is never parsed from these strings: the
chat builds :class:`rich.text.Text` objects.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Iterator
from typing import Any, Final

from rich.text import Text

__all__ = [
    "ESCAPE_STYLE",
    "compact_json",
    "escaped",
    "has_hidden",
    "is_hidden",
    "is_uneven",
    "one_line",
    "pretty_json",
    "visible",
]

ESCAPE_STYLE: Final = "bold reverse magenta"
"""How an escape is drawn on a card: never the style of text the runtime sent."""

# Default_Ignorable_Code_Point (Unicode's DerivedCoreProperties) that Python
# counts as printable, and the braille blank, which draws nothing either.
_IGNORABLE_PRINTABLE: Final = (
    "\u034f\u115f\u1160\u17b4\u17b5\u180b-\u180d\u180f\u2800\u3164\ufe00-\ufe0f\uffa0"
    "\U000e0100-\U000e01ef"
)
_IGNORABLE: Final = re.compile(f"[{_IGNORABLE_PRINTABLE}]")
# Anything but printable ASCII is a candidate; ``is_hidden`` decides.
_CANDIDATE: Final = re.compile("[^ -~]")
_NAMED: Final = {"\n": "\\n", "\t": "\\t", "\r": "\\r"}
_MORE_STYLE: Final = "dim italic"


# ------------------------------------------------------- characters of uneven width


def _class(codes: list[int]) -> str:
    """A regular expression character class's body for the sorted code points ``codes``."""
    parts = []
    start = 0
    for index in range(1, len(codes) + 1):
        if index == len(codes) or codes[index] != codes[index - 1] + 1:
            first, last = codes[start], codes[index - 1]
            parts.append(f"\\U{first:08x}" + (f"-\\U{last:08x}" if last > first else ""))
            start = index
    return "".join(parts)


def _marks() -> tuple[str, str]:
    """Character classes of the non-spacing marks (Mn) and of the spacing and enclosing ones.

    Every combining mark is below U+20000 but the variation selectors
    (ignorable, so hidden anyway): 25 ms at import.
    """
    nonspacing: list[int] = []
    spacing: list[int] = []
    for code in range(0x300, 0x20000):
        category = unicodedata.category(chr(code))
        if category == "Mn":
            nonspacing.append(code)
        elif category in ("Mc", "Me"):
            spacing.append(code)
    return _class(nonspacing), _class(spacing)


_NONSPACING_CLASS, _SPACING_CLASS = _marks()
# Printable characters Rich (15) counts with another width than glibc's wcwidth
# (what xterm, VTE and pyte draw) or the wcwidth package, besides the spacing and
# enclosing marks: trigrams, monograms, digrams and tetragrams and counting rods
# (Rich 2, glibc 1), circled numbers on black squares (1, 2), regional indicators
# (1, 2 in pairs), emoji skin tone modifiers (0, 2). tests/test_chat_card.py
# checks every code point against both.
_UNEVEN_SYMBOLS: Final = (
    "\u2630-\u2637\u268a-\u268f\u3248-\u324f\U0001d300-\U0001d356\U0001d360-\U0001d376"
    "\U0001f1e6-\U0001f1ff\U0001f3fb-\U0001f3ff"
)
_UNEVEN: Final = re.compile(f"[{_SPACING_CLASS}{_UNEVEN_SYMBOLS}]")
_NONSPACING: Final = re.compile(f"[{_NONSPACING_CLASS}]")
MARKS_PER_CHARACTER: Final = 2
"""Combining marks shown on one character; the ones past these are shown escaped."""
_STACK: Final = re.compile(f"[{_NONSPACING_CLASS}]{{{MARKS_PER_CHARACTER + 1}}}")


def is_uneven(char: str) -> bool:
    """True if Rich may count the one character ``char`` wider or narrower than a terminal."""
    return _UNEVEN.match(char) is not None


# ---------------------------------------------------------------------------------


def is_hidden(char: str) -> bool:
    """True if the one character ``char`` is shown as an escape (wherever it stands)."""
    return not char.isprintable() or _IGNORABLE.match(char) is not None or is_uneven(char)


def _code(char: str) -> str:
    named = _NAMED.get(char)
    if named is not None:
        return named
    code = ord(char)
    if code < 0x100:
        return f"\\x{code:02x}"
    if code < 0x10000:
        return f"\\u{code:04x}"
    return f"\\U{code:08x}"


def _pieces(text: str, keep: str) -> Iterator[tuple[str, bool]]:
    """``text`` cut into runs of shown characters and escapes (``True``)."""
    start = 0
    marks = 0  # combining marks in a row, up to this character
    end = -1
    for match in _CANDIDATE.finditer(text):
        char = match.group()
        if _NONSPACING.match(char) is not None:
            marks = marks + 1 if match.start() == end else 1
        else:
            marks = 0
        end = match.end()
        if char in keep or not (marks > MARKS_PER_CHARACTER or is_hidden(char)):
            continue
        if match.start() > start:
            yield text[start : match.start()], False
        yield _code(char), True
        start = match.end()
    if start < len(text):
        yield text[start:], False


def escaped(text: str, style: str = "", *, limit: int | None = None) -> Text:
    """``text`` as one line of :class:`~rich.text.Text`: every hidden character escaped.

    Line breaks, tabs, controls and invisible characters become escapes drawn in
    :data:`ESCAPE_STYLE`; the rest is in ``style``. With ``limit``, at most
    that many characters of ``text`` are shown, then ``… N more characters``.
    """
    cut = text if limit is None or len(text) <= limit else text[:limit]
    line = Text(style=style, end="")
    for piece, is_escape in _pieces(cut, ""):
        if is_escape:
            line.append(piece, style=ESCAPE_STYLE)
        else:
            line.append(piece)
    if len(cut) < len(text):
        line.append(f" … {len(text) - len(cut):,} more characters", style=_MORE_STYLE)
    return line


def visible(text: str, *, keep: str = "\n\t") -> str:
    """``text`` with every hidden character but those in ``keep`` written as an escape.

    ``keep=""`` makes one line of it, as :func:`escaped` does.
    """
    return "".join(piece for piece, _ in _pieces(text, keep))


def one_line(text: str) -> str:
    """``text`` as one line: every hidden character, line breaks and tabs too, as an escape."""
    return visible(text, keep="")


def has_hidden(text: str, *, keep: str = "") -> bool:
    """True if ``text`` has a hidden character other than those in ``keep``.

    Runs at C speed on long strings (a whole diff is checked, not only what is shown).
    """
    for char in keep:
        text = text.replace(char, "")
    if not text.isprintable():
        return True
    return not text.isascii() and any(
        pattern.search(text) is not None for pattern in (_IGNORABLE, _UNEVEN, _STACK)
    )


def pretty_json(value: Any) -> str:
    """Indented JSON of a decoded value (non-JSON values shown with ``str``)."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def compact_json(value: Any) -> str:
    """One-line JSON of a decoded value."""
    return json.dumps(value, ensure_ascii=False, default=str, separators=(", ", ": "))
