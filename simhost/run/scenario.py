"""Scenario files for ``simhost run``: TOML, read with :mod:`tomllib`, checked with msgspec.

A scenario names the agent (the reference runtime by default), a workspace (a
fresh temporary folder by default) and sessions; each session has turns, run in
order, and the sessions run at once. See docs/scenarios.md for the format.

A file that cannot be used raises :class:`ScenarioError`, whose message reads
``PATH:LINE: FIELD: what is wrong``. msgspec reports where a value is wrong as a
path (``$.sessions[0].turns[1].prompt``); a small scanner of the TOML text maps
that path back to the line where the key (or the table that lacks it) is written.
"""

from __future__ import annotations

import difflib
import re
import shlex
import types
import typing
from pathlib import Path, PureWindowsPath
from typing import Annotated, Any, Literal, Union

import msgspec

from permclient._toml import BARE_KEY, Key, TomlFileError, locate, read_toml

__all__ = [
    "AfterTurn",
    "AgentSpec",
    "Answer",
    "ExpectedRequest",
    "Scenario",
    "ScenarioError",
    "SessionSpec",
    "TurnSpec",
    "WorkspaceSpec",
    "load_scenario",
]

Answer = Literal["allow", "allow_always", "reject", "reject_always", "cancel", "ignore"]
"""What to answer a matched permission request: the offered option of that kind
(``allow`` = ``allow_once``, ``reject`` = ``reject_once``), ``cancel`` (the
``cancelled`` outcome), or ``ignore`` (leave it open until the agent withdraws it)."""

ToolStatus = Literal["pending", "in_progress", "completed", "failed"]
_NonNegative = Annotated[int, msgspec.Meta(ge=0)]
_Positive = Annotated[int, msgspec.Meta(ge=1)]

# ACP's StopReason and ToolKind; the bridge dialect uses a subset of each.
_STOP_REASONS = ("end_turn", "max_tokens", "max_turn_requests", "refusal", "cancelled")
_TOOL_KINDS = (
    "read",
    "edit",
    "delete",
    "move",
    "search",
    "execute",
    "think",
    "fetch",
    "switch_mode",
    "other",
)

_Key = Key


def _render_key(key: _Key) -> str:
    """``sessions[0].turns[1].expect.file_contains."a b.txt"``."""
    out = ""
    for part in key:
        if isinstance(part, int):
            out += f"[{part}]"
            continue
        name = part if BARE_KEY.fullmatch(part) else msgspec.json.encode(part).decode()
        out += f".{name}" if out else name
    return out


class _FieldError(ValueError):
    """A check of ``__post_init__`` failed at ``key`` (relative to that struct)."""

    def __init__(self, key: _Key, reason: str) -> None:
        super().__init__(f"{_render_key(key)}: {reason}")
        self.key = key
        self.reason = reason


def _check_pattern(key: _Key, pattern: str) -> None:
    try:
        re.compile(pattern)
    except re.error as exc:
        raise _FieldError(key, f"not a valid regular expression: {exc}") from None
    except OverflowError as exc:
        raise _FieldError(key, f"not a valid regular expression: too large ({exc})") from None
    except RecursionError:
        raise _FieldError(key, "not a valid regular expression: nested too deeply") from None


def fill_placeholders(text: str, values: dict[str, str], *, pattern: bool = False) -> str:
    """``text`` with ``{key}`` replaced by its value (escaped when ``text`` is a pattern)."""
    for key, value in values.items():
        text = text.replace("{" + key + "}", re.escape(value) if pattern else value)
    return text


def placeholder_values(name: str, copies: int, copy: int, repeat: int) -> dict[str, str]:
    """What ``{copy}``, ``{session}``, ``{name}`` and ``{repeat}`` stand for."""
    label = name if copies == 1 else f"{name}#{copy}"
    return {"copy": str(copy), "session": label, "name": name, "repeat": str(repeat)}


# A session's name labels it (``name#K`` for its copies) and fills paths.
_BAD_NAME_CHARS = re.compile(r"[/\\#:\x00-\x1f\x7f]")


def _check_one_of(key: _Key, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise _FieldError(key, f"expected one of {', '.join(allowed)}; got {value!r}")


def _check_inside(key: _Key, path: str) -> None:
    """A path the runner joins to the workspace must stay in it."""
    # Windows rules see both separators and every anchor: "/x", "C:x", "a\\..\\b".
    if "\x00" in path:
        raise _FieldError(key, f"must not contain a NUL character; got {path!r}")
    parsed = PureWindowsPath(path)
    if not path or parsed.anchor or ".." in parsed.parts:
        raise _FieldError(
            key, f"must be a relative path inside the workspace (no '..'); got {path!r}"
        )


class _Spec(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Scenario tables: an unknown key is an error (a typo must not be ignored)."""


class AgentSpec(_Spec, kw_only=True):
    """Which agent to run; by default the reference runtime (``simhost runtime``)."""

    command: str | None = None
    """A command line (split like a shell); ``None``: the reference runtime."""
    dialect: Literal["bridge", "acp"] = "bridge"
    policy: str | None = None
    """For the reference runtime: a shipped policy name or a JSON policy file."""

    def __post_init__(self) -> None:
        if self.command is None:
            return
        try:
            words = shlex.split(self.command)
        except ValueError as exc:
            raise _FieldError(("command",), f"cannot split like a shell: {exc}") from None
        if not words or not words[0]:
            raise _FieldError(("command",), "empty command (leave it out for the reference one)")


class WorkspaceSpec(_Spec, kw_only=True):
    """The folder the agent works in."""

    path: str | None = None
    """``None``: a fresh temporary folder for each run."""
    files: dict[str, str] = msgspec.field(default_factory=dict)
    """Files to create first, relative path -> text."""

    def __post_init__(self) -> None:
        for name in self.files:
            _check_inside(("files", name), name)


class ExpectedRequest(_Spec, kw_only=True):
    """Permission requests the turn expects, and what to answer them."""

    title: str
    """A regular expression searched in the tool call's title."""
    kind: str | None = None
    """The tool call's kind (``edit``, ``execute``, ...), if it must be that."""
    count: _Positive | None = None
    """Exactly this many matching requests; ``None``: at least one."""
    answer: Answer = "allow"
    delay_ms: _NonNegative = 0
    """Wait this long before answering (plus up to ``jitter_ms``, from the seed)."""
    jitter_ms: _NonNegative = 0

    def __post_init__(self) -> None:
        _check_pattern(("title",), self.title)
        if self.kind is not None:
            _check_one_of(("kind",), self.kind, _TOOL_KINDS)


class AfterTurn(_Spec, kw_only=True):
    """What must hold once the turn has ended."""

    stop_reason: str | None = None
    files_exist: list[str] = msgspec.field(default_factory=list)
    files_absent: list[str] = msgspec.field(default_factory=list)
    file_contains: dict[str, str] = msgspec.field(default_factory=dict)
    reply_contains: list[str] = msgspec.field(default_factory=list)
    tool_status: dict[str, ToolStatus] = msgspec.field(default_factory=dict)
    """Tool call title (regular expression) -> final status of every matching call."""

    def __post_init__(self) -> None:
        if self.stop_reason is not None:
            _check_one_of(("stop_reason",), self.stop_reason, _STOP_REASONS)
        for index, name in enumerate(self.files_exist):
            _check_inside(("files_exist", index), name)
        for index, name in enumerate(self.files_absent):
            _check_inside(("files_absent", index), name)
        for name in self.file_contains:
            _check_inside(("file_contains", name), name)
        for pattern in self.tool_status:
            _check_pattern(("tool_status", pattern), pattern)
        for index, text in enumerate(self.reply_contains):
            if not text:
                raise _FieldError(("reply_contains", index), "must not be empty (always true)")


class TurnSpec(_Spec, kw_only=True):
    """One prompt and what it must lead to."""

    prompt: str
    requests: list[ExpectedRequest] = msgspec.field(default_factory=list)
    cancel_after_ms: _NonNegative | None = None
    """Cancel the turn this long after it started."""
    cancel_after_request: _Positive | None = None
    """Cancel the turn when its Kth permission request arrives (before answering it)."""
    expect: AfterTurn = msgspec.field(default_factory=AfterTurn)


class SessionSpec(_Spec, kw_only=True):
    """A conversation: its turns run in order."""

    name: str
    copies: _Positive = 1
    """Run this many identical sessions at once."""
    turns: list[TurnSpec]

    def __post_init__(self) -> None:
        if not self.name:
            raise _FieldError(("name",), "must not be empty")
        if _BAD_NAME_CHARS.search(self.name) or self.name in (".", ".."):
            raise _FieldError(
                ("name",),
                "must be usable as a file name (it fills {name} and {session} in paths): "
                f"no '/', '\\', '#', ':' or control characters, not '.' or '..'; "
                f"got {self.name!r}",
            )
        if not self.turns:
            raise _FieldError(("turns",), "a session needs at least one turn")
        for copy in sorted({1, self.copies}):
            values = placeholder_values(self.name, self.copies, copy, 1)
            for index, turn in enumerate(self.turns):
                _check_filled(("turns", index, "expect"), turn.expect, values)


def _check_filled(key: _Key, expect: AfterTurn, values: dict[str, str]) -> None:
    """With the placeholders filled in, paths stay inside and keys stay distinct."""
    for field, paths in (
        ("files_exist", expect.files_exist),
        ("files_absent", expect.files_absent),
    ):
        for index, path in enumerate(paths):
            _check_inside((*key, field, index), fill_placeholders(path, values))
    tables: tuple[tuple[str, dict[str, str], bool], ...] = (
        ("file_contains", expect.file_contains, False),
        ("tool_status", dict(expect.tool_status), True),
    )
    for field, table, pattern in tables:
        seen: dict[str, str] = {}
        for name in table:
            filled = fill_placeholders(name, values, pattern=pattern)
            if field == "file_contains":
                _check_inside((*key, field, name), filled)
            earlier = seen.setdefault(filled, name)
            if earlier != name:
                raise _FieldError(
                    (*key, field, name),
                    f"the same key as {earlier!r} once placeholders are filled ({filled!r})",
                )


class Scenario(_Spec, kw_only=True):
    """A whole scenario file."""

    name: str | None = None
    description: str = ""
    seed: int = 0
    repeat: _Positive = 1
    agent: AgentSpec = msgspec.field(default_factory=AgentSpec)
    workspace: WorkspaceSpec = msgspec.field(default_factory=WorkspaceSpec)
    sessions: list[SessionSpec]

    def __post_init__(self) -> None:
        if not self.sessions:
            raise _FieldError(("sessions",), "a scenario needs at least one session")
        first: dict[str, int] = {}
        for index, session in enumerate(self.sessions):
            earlier = first.setdefault(session.name, index)
            if earlier != index:
                raise _FieldError(
                    ("sessions", index, "name"),
                    f"duplicate session name {session.name!r} (also sessions[{earlier}])",
                )


class ScenarioError(Exception):
    """A scenario file that cannot be used; the message names the file, line and field.

    ``line`` is 1-based, or ``None`` when no line is to blame (a missing file, a
    required top-level key that is absent); ``field`` is the key's path, such as
    ``sessions[0].turns[1].prompt``, or ``None``.
    """

    def __init__(
        self, path: Path, message: str, line: int | None = None, *, field: str | None = None
    ) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        what = f"{field}: {message}" if field else message
        super().__init__(f"{where}: {what}")
        self.path = path
        self.line = line
        self.field = field


def load_scenario(path: Path) -> Scenario:
    """Read and check one scenario file and return it (``name`` defaults to the file's stem).

    Raises :class:`ScenarioError`, never anything else: for a file that cannot be
    read or is not UTF-8, for TOML syntax errors (with tomllib's line and column),
    and for keys that are unknown, missing or of the wrong type or value (with the
    line and the field).
    """
    try:
        text, data = read_toml(path)
    except TomlFileError as exc:
        raise ScenarioError(path, exc.message, exc.line) from None
    try:
        scenario = msgspec.convert(data, Scenario)
    except msgspec.ValidationError as exc:
        key, reason, line_key = _explain(exc, data)
        field = _render_key(key) or None
        raise ScenarioError(path, reason, locate(text, line_key), field=field) from None
    if scenario.name is None:
        scenario.name = path.stem
    return scenario


# ---------------------------------------------------------------- msgspec errors

_MSGSPEC_AT = " - at `"
_PATH_PART = re.compile(r"\.([^.\[`]+)|\[(\d+)\]|\[\.\.\.\]")
_UNKNOWN = re.compile(r"Object contains unknown field `(?P<name>.*)`")
_MISSING = re.compile(r"Object missing required field `(?P<name>.*)`")


def _explain(exc: msgspec.ValidationError, data: dict[str, Any]) -> tuple[_Key, str, _Key]:
    """``(field, what is wrong, where to look for its line)`` for a failed convert."""
    message, sep, rest = str(exc).rpartition(_MSGSPEC_AT)
    if not sep or not rest.endswith("`"):
        message, rest = str(exc), "$`"
    at = _parse_path(rest[:-1], data)

    cause = exc.__cause__
    if isinstance(cause, _FieldError):
        key = at + cause.key
        return key, cause.reason, key
    if isinstance(cause, ValueError | TypeError):
        return at, str(cause), at
    if unknown := _UNKNOWN.fullmatch(message):
        key = (*at, unknown["name"])
        return key, _unknown_key(unknown["name"], _type_at(at)), key
    if missing := _MISSING.fullmatch(message):
        return (*at, missing["name"]), "required key is missing", at
    expected = _type_at(at)
    found, value = _value_at(data, at)
    if expected is None or not found:
        return at, message, at
    return at, f"expected {_describe(expected)}; got {_show(value)}", at


def _parse_path(text: str, data: Any) -> _Key:
    """msgspec's ``$.a[0].b`` as a key; ``[...]`` (a table's key) is found again."""
    key: _Key = ()
    pos = 1 if text.startswith("$") else 0
    while pos < len(text):
        match = _PATH_PART.match(text, pos)
        if match is None:
            break
        pos = match.end()
        if match[1] is not None:
            key += (match[1],)
        elif match[2] is not None:
            key += (int(match[2]),)
        else:
            name = _bad_entry(data, key)
            if name is None:
                break
            key += (name,)
    return key


def _bad_entry(data: Any, key: _Key) -> str | None:
    """The first key of the table at ``key`` whose value does not convert."""
    found, table = _value_at(data, key)
    expected = _type_at(key)
    if not found or not isinstance(table, dict) or expected is None:
        return None
    for option in _options(expected):
        if typing.get_origin(option) is dict:
            value_type = typing.get_args(option)[1]
            for name, value in table.items():
                try:
                    msgspec.convert(value, value_type)
                except msgspec.ValidationError:
                    return str(name)
    return None


def _value_at(data: Any, key: _Key) -> tuple[bool, Any]:
    for part in key:
        if isinstance(part, int):
            if not isinstance(data, list) or not 0 <= part < len(data):
                return False, None
        elif not isinstance(data, dict) or part not in data:
            return False, None
        data = data[part]
    return True, data


def _options(tp: Any) -> list[Any]:
    """The alternatives of a type, Annotated stripped and ``None`` left out."""
    if typing.get_origin(tp) is Annotated:
        tp = typing.get_args(tp)[0]
    if typing.get_origin(tp) in (Union, types.UnionType):
        return [
            option
            for arg in typing.get_args(tp)
            if arg is not type(None)
            for option in _options(arg)
        ]
    return [tp]


def _is_struct(tp: Any) -> bool:
    return isinstance(tp, type) and issubclass(tp, msgspec.Struct)


def _type_at(key: _Key) -> Any:
    """The declared type of the value at ``key`` (``None`` if there is no such key)."""
    tp: Any = Scenario
    for part in key:
        for option in _options(tp):
            if isinstance(part, int) and typing.get_origin(option) is list:
                tp = typing.get_args(option)[0]
                break
            if isinstance(part, str) and typing.get_origin(option) is dict:
                tp = typing.get_args(option)[1]
                break
            if isinstance(part, str) and _is_struct(option):
                hints = typing.get_type_hints(option, include_extras=True)
                if part in hints and part in option.__struct_fields__:
                    tp = hints[part]
                    break
        else:
            return None
    return tp


def _unknown_key(name: str, table: Any) -> str:
    fields = next((o.__struct_fields__ for o in _options(table) if _is_struct(o)), ())
    close = difflib.get_close_matches(name, fields, n=1)
    if close:
        return f"unknown key; did you mean {close[0]!r}?"
    if fields:
        return f"unknown key; the keys here are {', '.join(fields)}"
    return "unknown key"


def _describe(tp: Any) -> str:
    """A type as the TOML author thinks of it: ``an integer >= 1``, ``one of a, b``."""
    if typing.get_origin(tp) in (Union, types.UnionType):
        # TOML has no null: a key that may be None is one that may be left out.
        options = [arg for arg in typing.get_args(tp) if arg is not type(None)]
        return " or ".join(_describe(option) for option in options)
    bounds = ""
    if typing.get_origin(tp) is Annotated:
        tp, *metas = typing.get_args(tp)
        for meta in metas:
            if isinstance(meta, msgspec.Meta) and meta.ge is not None:
                bounds = f" >= {meta.ge}"
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(str(value) for value in typing.get_args(tp))
    if origin is list:
        item = _options(typing.get_args(tp)[0])[0]
        plural = {str: "strings", int: "integers"}.get(item, "tables" if _is_struct(item) else "")
        return f"an array of {plural}" if plural else "an array"
    if origin is dict or _is_struct(tp):
        return "a table"
    if tp is bool:
        return "true or false"
    if tp is int:
        return "an integer" + bounds
    if tp is str:
        return "a string"
    return str(getattr(tp, "__name__", tp))


def _show(value: Any) -> str:
    """A TOML value as found, for ``got ...``."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str | int | float):
        return repr(value)
    if isinstance(value, dict):
        return "a table"
    if isinstance(value, list):
        return "an array"
    return f"the date/time {value}"
