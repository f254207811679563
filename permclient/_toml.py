"""TOML files whose errors name their line: ``PATH:LINE: what is wrong``.

:mod:`tomllib` gives a syntax error's line but no line for a value it parsed; a
small scanner of the text maps a key path (table keys and array indices, from
the top) back to the line that writes it. Shared by ``simhost run``'s scenario
files and :mod:`permclient.rules`' rules files.
"""

from __future__ import annotations

import re
import tomllib
from bisect import bisect_left
from pathlib import Path
from typing import Any

Key = tuple[str | int, ...]
"""Where a value is in a TOML document: table keys and array indices, from the top."""

BARE_KEY = re.compile(r"[A-Za-z0-9_-]+")


class TomlFileError(Exception):
    """A TOML file that cannot be read or parsed: ``message`` and the 1-based
    ``line`` to blame (``None`` when no line is)."""

    def __init__(self, message: str, line: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.line = line


def read_toml(path: Path) -> tuple[str, dict[str, Any]]:
    """The text of ``path`` and what it parses to; :class:`TomlFileError` for a
    file that cannot be read, is not UTF-8 or is not TOML."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise TomlFileError(f"cannot read: {exc.strerror or exc}") from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        bad = f"not UTF-8 text: byte 0x{raw[exc.start]:02x} ({exc.reason})"
        raise TomlFileError(bad, raw.count(b"\n", 0, exc.start) + 1) from None
    try:
        return text, tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise TomlFileError(*toml_error(str(exc), text)) from None
    except RecursionError:  # (tomllib recurses into nested arrays and tables)
        raise TomlFileError("invalid TOML: nested too deep") from None


_TOML_AT = re.compile(
    r"^(?P<what>.*) \(at (?:line (?P<line>\d+), column (?P<col>\d+)|end of document)\)$", re.S
)


def toml_error(message: str, text: str) -> tuple[str, int | None]:
    """tomllib's ``What (at line L, column C)`` as ``(message, line)``."""
    match = _TOML_AT.match(message)
    if match is None:
        return f"invalid TOML: {message}", None
    if match["line"] is None:
        return f"invalid TOML at the end of the file: {match['what']}", text.count("\n") + 1
    return f"invalid TOML at column {match['col']}: {match['what']}", int(match["line"])


# ---------------------------------------------------------------- the locator


class _ScanError(Exception):
    """The scanner met something it does not know; the lines found so far stand."""


def locate(text: str, key: Key) -> int | None:
    """The line where ``key`` (or, failing that, its nearest enclosing table) is written."""
    lines = _Locator(text).scan()
    for end in range(len(key), 0, -1):
        line = lines.get(key[:end])
        if line is not None:
            return line
    return None


class _Locator:
    """Maps every key path of a valid TOML text to the 1-based line that writes it.

    Tables ``[a.b]``, arrays of tables ``[[a.b]]`` (each header appends an index),
    dotted keys, inline tables and arrays (an element's line is where it starts).
    Strings are skipped, never interpreted, except quoted keys.
    """

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.newlines = [index for index, char in enumerate(text) if char == "\n"]
        self.lines: dict[Key, int] = {}
        self.counts: dict[Key, int] = {}

    def scan(self) -> dict[Key, int]:
        table: Key = ()
        try:
            while True:
                self.skip(newlines=True)
                if self.pos >= len(self.text):
                    break
                if self.text.startswith("[[", self.pos):
                    line = self.line()
                    self.pos += 2
                    table = self.array_table(self.key(), line)
                    self.expect("]]")
                elif self.peek() == "[":
                    line = self.line()
                    self.pos += 1
                    table = self.table(self.key(), line)
                    self.expect("]")
                else:
                    self.keyval(table)
        except (_ScanError, IndexError, ValueError):
            pass  # not valid TOML after all: the lines found so far
        return self.lines

    # -- positions

    def line(self) -> int:
        return bisect_left(self.newlines, self.pos) + 1

    def peek(self) -> str:
        return self.text[self.pos] if self.pos < len(self.text) else ""

    def expect(self, token: str) -> None:
        self.skip()
        if not self.text.startswith(token, self.pos):
            raise _ScanError(token)
        self.pos += len(token)

    def skip(self, *, newlines: bool = False) -> None:
        blanks = " \t\r\n" if newlines else " \t"
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char in blanks:
                self.pos += 1
            elif char == "#":
                end = self.text.find("\n", self.pos)
                self.pos = len(self.text) if end < 0 else (end + 1 if newlines else end)
            else:
                return

    # -- headers and keys

    def resolve(self, path: Key, name: str) -> Key:
        """``path.name``, into the last element if that is an array of tables."""
        path += (name,)
        count = self.counts.get(path)
        return (*path, count - 1) if count else path

    def table(self, names: list[str], line: int) -> Key:
        path: Key = ()
        for name in names[:-1]:
            path = self.resolve(path, name)
            self.lines.setdefault(path, line)
        path = self.resolve(path, names[-1])
        self.lines[path] = line
        return path

    def array_table(self, names: list[str], line: int) -> Key:
        path: Key = ()
        for name in names[:-1]:
            path = self.resolve(path, name)
            self.lines.setdefault(path, line)
        path += (names[-1],)
        self.lines.setdefault(path, line)
        index = self.counts.get(path, 0)
        self.counts[path] = index + 1
        path += (index,)
        self.lines[path] = line
        return path

    def key(self) -> list[str]:
        names: list[str] = []
        while True:
            self.skip()
            char = self.peek()
            if char == '"':
                names.append(self.basic_string())
            elif char == "'":
                names.append(self.literal_string())
            else:
                match = BARE_KEY.match(self.text, self.pos)
                if match is None:
                    raise _ScanError("key")
                names.append(match.group())
                self.pos = match.end()
            self.skip()
            if self.peek() != ".":
                return names
            self.pos += 1

    def keyval(self, table: Key) -> None:
        line = self.line()
        path = table
        for name in self.key():
            path += (name,)
            self.lines.setdefault(path, line)
        self.expect("=")
        self.skip()
        self.value(path)

    # -- values

    def value(self, path: Key) -> None:
        char = self.peek()
        if self.text.startswith('"""', self.pos):
            self.multiline('"""')
        elif self.text.startswith("'''", self.pos):
            self.multiline("'''")
        elif char == '"':
            self.basic_string()
        elif char == "'":
            self.literal_string()
        elif char == "[":
            self.array(path)
        elif char == "{":
            self.inline_table(path)
        else:
            match = _SCALAR.match(self.text, self.pos)
            if match is None:
                raise _ScanError("value")
            self.pos = match.end()

    def array(self, path: Key) -> None:
        self.pos += 1
        index = 0
        while True:
            self.skip(newlines=True)
            if self.peek() == "]":
                self.pos += 1
                return
            element = (*path, index)
            self.lines.setdefault(element, self.line())
            self.value(element)
            self.skip(newlines=True)
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() != "]":
                raise _ScanError("array")
            index += 1

    def inline_table(self, path: Key) -> None:
        self.pos += 1
        while True:
            self.skip(newlines=True)
            if self.peek() == "}":
                self.pos += 1
                return
            self.keyval(path)
            self.skip(newlines=True)
            if self.peek() == ",":
                self.pos += 1
            elif self.peek() != "}":
                raise _ScanError("inline table")

    def multiline(self, quotes: str) -> None:
        self.pos += 3
        while self.pos < len(self.text):
            if quotes == '"""' and self.text[self.pos] == "\\":
                self.pos += 2
            elif self.text.startswith(quotes, self.pos):
                self.pos += 3
                for _ in range(2):  # up to two quotes may end the content
                    if self.peek() == quotes[0]:
                        self.pos += 1
                return
            else:
                self.pos += 1
        raise _ScanError("string")

    def literal_string(self) -> str:
        end = self.text.find("'", self.pos + 1)
        if end < 0:
            raise _ScanError("string")
        name = self.text[self.pos + 1 : end]
        self.pos = end + 1
        return name

    def basic_string(self) -> str:
        self.pos += 1
        out: list[str] = []
        while self.pos < len(self.text):
            char = self.text[self.pos]
            if char == '"':
                self.pos += 1
                return "".join(out)
            if char == "\\":
                code = self.text[self.pos + 1]
                width = {"u": 4, "U": 8}.get(code, 0)
                if width:
                    out.append(chr(int(self.text[self.pos + 2 : self.pos + 2 + width], 16)))
                else:
                    out.append(_ESCAPES.get(code, code))
                self.pos += 2 + width
            else:
                out.append(char)
                self.pos += 1
        raise _ScanError("string")


_SCALAR = re.compile(r"[^,\]}\r\n#]+")
_ESCAPES = {"b": "\b", "t": "\t", "n": "\n", "f": "\f", "r": "\r", "e": "\x1b"}
