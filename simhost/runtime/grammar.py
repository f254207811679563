"""The runtime's prompt grammar: one prompt is one command (pure, no I/O).

See docs/runtime.md for the user-facing description. :func:`parse` never
raises: anything that is not a well-formed command becomes :class:`Say` (plain
text), and a known verb with bad arguments becomes :class:`Usage` (the answer
says how to write it).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Final, TypeAlias

from simhost._digits import small_number

__all__ = [
    "MAX_BURST",
    "Burst",
    "Command",
    "Create",
    "Delete",
    "Edit",
    "Help",
    "Read",
    "Run",
    "Say",
    "Usage",
    "help_text",
    "parse",
    "unescape",
]

MAX_BURST: Final = 200
"""The largest ``burst N``."""

USAGE: Final = {
    "create": "create PATH with TEXT",
    "edit": "edit PATH: OLD => NEW",
    "read": "read PATH",
    "delete": "delete PATH",
    "run": "run COMMAND",
    "burst": f"burst N  (1 <= N <= {MAX_BURST})",
}


@dataclass(frozen=True, slots=True)
class Create:
    """``create PATH with TEXT``: write TEXT (plus a final newline) to PATH."""

    path: str
    text: str


@dataclass(frozen=True, slots=True)
class Edit:
    """``edit PATH: OLD => NEW``: replace every occurrence of OLD in PATH by NEW."""

    path: str
    old: str
    new: str


@dataclass(frozen=True, slots=True)
class Read:
    """``read PATH``."""

    path: str


@dataclass(frozen=True, slots=True)
class Delete:
    """``delete PATH``."""

    path: str


@dataclass(frozen=True, slots=True)
class Run:
    """``run COMMAND``: a shell command, run in the workspace."""

    command: str


@dataclass(frozen=True, slots=True)
class Burst:
    """``burst N``: N file writes at once (``burst-1.txt`` ... ``burst-N.txt``)."""

    count: int


@dataclass(frozen=True, slots=True)
class Help:
    """``help``: the grammar."""


@dataclass(frozen=True, slots=True)
class Usage:
    """A known verb with bad arguments; ``usage`` is how to write it."""

    verb: str
    usage: str
    problem: str


@dataclass(frozen=True, slots=True)
class Say:
    """Anything else: answered as plain text."""

    text: str


Command: TypeAlias = Create | Edit | Read | Delete | Run | Burst | Help | Usage | Say

_ESCAPES: Final = {"n": "\n", "t": "\t", "\\": "\\"}
_ESCAPE_RE: Final = re.compile(r"\\(.)", re.DOTALL)


def unescape(text: str) -> str:
    r"""Turn ``\n``, ``\t`` and ``\\`` into a newline, a tab and a backslash.

    Any other backslash pair is kept as written.
    """
    return _ESCAPE_RE.sub(lambda m: _ESCAPES.get(m.group(1), m.group(0)), text)


def _split_path(rest: str, stop: str | None) -> tuple[str, str] | None:
    """Split ``rest`` into a path and what follows it.

    A path is ``"quoted"``/``'quoted'`` (may contain spaces), or else runs up to
    ``stop`` (``" with "``, ``":"``) when given, or to the end. Returns ``None``
    when there is no path, or the quote is never closed.
    """
    rest = rest.lstrip()
    if not rest:
        return None
    if rest[0] in "\"'":
        end = rest.find(rest[0], 1)
        if end <= 1:
            return None
        return rest[1:end], rest[end + 1 :]
    if stop is None:
        return rest.rstrip(), ""
    at = rest.lower().find(stop)
    if at < 0:
        return rest.rstrip(), ""
    path = rest[:at].strip()
    return (path, rest[at:]) if path else None


def _usage(verb: str, problem: str) -> Usage:
    return Usage(verb, USAGE[verb], problem)


def parse(prompt: str) -> Command:
    """Parse one prompt into a :data:`Command`; never raises."""
    text = prompt.strip()
    verb, _, rest = text.partition(" ")
    verb = verb.lower()
    rest = rest.strip()
    if verb in ("help", "?") and not rest:
        return Help()
    if verb == "create":
        split = _split_path(rest + " ", " with ")  # "create a.txt with" is an empty file
        if split is None:
            return _usage(verb, "no PATH")
        path, after = split
        after = after.lstrip()
        if not after.lower().startswith("with"):
            return _usage(verb, "no `with TEXT`")
        body = after[4:]
        if body and not body[0].isspace():
            return _usage(verb, "no `with TEXT`")
        return Create(path, unescape(body.strip()))
    if verb == "edit":
        split = _split_path(rest, ":")
        if split is None:
            return _usage(verb, "no PATH")
        path, after = split
        after = after.lstrip()
        if not after.startswith(":"):
            return _usage(verb, "no `:` after PATH")
        old, arrow, new = after[1:].partition("=>")
        if not arrow:
            return _usage(verb, "no `=>` between OLD and NEW")
        old = unescape(old.strip())
        if not old:
            return _usage(verb, "OLD is empty")
        return Edit(path, old, unescape(new.strip()))
    if verb in ("read", "delete"):
        split = _split_path(rest, None)
        if split is None or split[1].strip():
            return _usage(verb, "no PATH" if split is None else "text after PATH")
        return Read(split[0]) if verb == "read" else Delete(split[0])
    if verb == "run":
        if not rest:
            return _usage(verb, "no COMMAND")
        return Run(rest)
    if verb == "burst":
        count = small_number(rest)
        if count is None or not 1 <= count <= MAX_BURST:
            return _usage(verb, f"N must be a whole number from 1 to {MAX_BURST}")
        return Burst(count)
    return Say(text)


def help_text() -> str:
    """The grammar, one command per line."""
    lines = ["I am the simhost reference runtime (no LLM). One prompt is one command:"]
    lines += [f"  {usage}" for usage in USAGE.values()]
    lines.append(r"In TEXT, OLD and NEW, \n is a newline and \t a tab. Quote a PATH with spaces.")
    return "\n".join(lines)
