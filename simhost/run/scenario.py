"""Scenario files for ``simhost run``: TOML, read with :mod:`tomllib`, checked with msgspec.

A scenario names the agent (the reference runtime by default), a workspace (a
fresh temporary folder by default) and sessions; each session has turns, run in
order, and the sessions run at once. See docs/scenarios.md for the format.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path
from typing import Annotated, Literal

import msgspec

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


class _Spec(msgspec.Struct, forbid_unknown_fields=True, kw_only=True):
    """Scenario tables: an unknown key is an error (a typo must not be ignored)."""


class AgentSpec(_Spec, kw_only=True):
    """Which agent to run; by default the reference runtime (``simhost runtime``)."""

    command: str | None = None
    """A command line (split like a shell); ``None``: the reference runtime."""
    dialect: Literal["bridge", "acp"] = "bridge"
    policy: str | None = None
    """For the reference runtime: a shipped policy name or a JSON policy file."""


class WorkspaceSpec(_Spec, kw_only=True):
    """The folder the agent works in."""

    path: str | None = None
    """``None``: a fresh temporary folder for each run."""
    files: dict[str, str] = msgspec.field(default_factory=dict)
    """Files to create first, relative path -> text."""


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


class AfterTurn(_Spec, kw_only=True):
    """What must hold once the turn has ended."""

    stop_reason: str | None = None
    files_exist: list[str] = msgspec.field(default_factory=list)
    files_absent: list[str] = msgspec.field(default_factory=list)
    file_contains: dict[str, str] = msgspec.field(default_factory=dict)
    reply_contains: list[str] = msgspec.field(default_factory=list)
    tool_status: dict[str, ToolStatus] = msgspec.field(default_factory=dict)
    """Tool call title (regular expression) -> final status of every matching call."""


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
        names = [session.name for session in self.sessions]
        if not names:
            raise ValueError("a scenario needs at least one session")
        if len(set(names)) != len(names):
            raise ValueError("session names must be unique")
        for session in self.sessions:
            for turn in session.turns:
                for expected in turn.requests:
                    try:
                        re.compile(expected.title)
                    except re.error as exc:
                        raise ValueError(f"bad title pattern {expected.title!r}: {exc}") from None


class ScenarioError(Exception):
    """A scenario file that cannot be used; the message names the file, line and field."""

    def __init__(self, path: Path, message: str, line: int | None = None) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")
        self.path = path
        self.line = line


def load_scenario(path: Path) -> Scenario:
    """Read and check one scenario file. Raises :class:`ScenarioError`, never anything else."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ScenarioError(path, f"cannot read: {exc}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ScenarioError(path, f"not valid TOML: {exc}") from None
    try:
        scenario = msgspec.convert(data, Scenario)
    except msgspec.ValidationError as exc:
        raise ScenarioError(path, str(exc)) from None
    if scenario.name is None:
        scenario.name = path.stem
    return scenario
