"""Strings from the runtime, made safe to put on a terminal.

Everything the chat shows comes from the runtime: a command, a path, a diff,
a session title. None of it may drive the terminal (an ESC sequence could move
the cursor and paint over the command you are about to approve) or hide in
plain sight (a bidi override or a zero-width character can make a command read
differently than it runs). :func:`visible` escapes such characters so they show
as ``\\x1b``, ``\\u202e``...; newlines and tabs are kept. Rich markup is never
parsed from these strings: the chat builds :class:`rich.text.Text` objects.
"""

from __future__ import annotations

import json
import re
from typing import Any, Final

__all__ = ["compact_json", "has_hidden", "pretty_json", "visible"]

# C0 controls but \t and \n, DEL and C1 controls, zero-width and bidi controls, BOM.
_HIDDEN: Final = re.compile(
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200b-\u200f\u2028-\u202e\u2060-\u2064\u2066-\u2069\ufeff]"
)


def _escape(match: re.Match[str]) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def visible(text: str) -> str:
    """``text`` with control, zero-width and bidi characters written as escapes."""
    return _HIDDEN.sub(_escape, text)


def has_hidden(text: str) -> bool:
    """True if :func:`visible` would change ``text``."""
    return _HIDDEN.search(text) is not None


def pretty_json(value: Any) -> str:
    """Indented JSON of a decoded value (non-JSON values shown with ``str``)."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def compact_json(value: Any) -> str:
    """One-line JSON of a decoded value."""
    return json.dumps(value, ensure_ascii=False, default=str, separators=(", ", ": "))
