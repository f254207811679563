"""What a standing grant covers: a shell command's program and subcommand, or one file.

Answering ``allow-always`` or ``deny-always`` keeps a standing grant for the
*scope* of the call, never for the whole tool:

* the shell: the command's program and, if it has one, its subcommand
  (``git status``, ``npm test``, ``ls``). The grant covers later commands whose
  words start with those words (``git status --short``), as Claude Code's
  ``Bash(git status:*)`` rules and Gemini CLI's per-command allowlist do. A
  command with anything the shell could turn into another command (operators
  ``; & |``, ``$``, backticks, parentheses, redirections, a backslash, a
  newline or another unprintable character) never matches a grant, and is
  never offered one: it asks every time.
* a file tool: that tool on that one file (the path relative to the workspace,
  symlinks resolved): ``edits to notes.txt``, ``reading notes.txt``,
  ``deleting notes.txt``.

A call that has no scope (a compound command, an over-long one, a path that
cannot be named on one short line) is offered no "always" option. The option's
name says the scope (:func:`option_name`); the same words name the grant when
it later answers a call (:func:`receipt`).
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Final

from simhost.runtime.policy import SHELL
from simhost.runtime.wire import GrantDecision

__all__ = ["MAX_SCOPE_CHARS", "GrantSubject", "option_name", "receipt", "subject_of"]

MAX_SCOPE_CHARS: Final = 60
"""The longest scope an option names; a longer one is not offered as a grant."""

_UNSAFE: Final = frozenset(";&|$`()<>\\\n\r")
"""Characters that let ``sh`` run or redirect something other than the words show."""
_PROGRAM: Final = re.compile(r"[A-Za-z0-9_./+][A-Za-z0-9_./+-]*")
_SUBCOMMAND: Final = re.compile(r"[A-Za-z][A-Za-z0-9_:-]*")
_FILE_ACTIONS: Final = {"fs.write": "edits to", "fs.read": "reading", "fs.delete": "deleting"}


@dataclass(frozen=True, slots=True)
class GrantSubject:
    """What grants are matched against for one call, and what an "always" answer would grant.

    ``words``: the shell command's words, or the file's workspace-relative path
    (one word). ``scope``: the words an "always" answer keeps (a prefix of
    ``words``), or ``None`` when the call is offered no grant. ``matchable``:
    whether a standing grant may decide this call at all.
    """

    tool: str
    words: tuple[str, ...]
    scope: tuple[str, ...] | None
    matchable: bool

    def covered_by(self, tool: str, scope: tuple[str, ...]) -> bool:
        """True if a grant of ``scope`` on ``tool`` covers this call."""
        return (
            self.matchable
            and tool == self.tool
            and bool(scope)
            and self.words[: len(scope)] == scope
            and (tool == SHELL or len(scope) == len(self.words))
        )


def _shell_words(command: str) -> tuple[str, ...] | None:
    """The words of a plain command, or ``None`` if ``sh`` might run something else."""
    if any(c in _UNSAFE or not c.isprintable() for c in command):
        return None
    try:
        words = tuple(shlex.split(command))
    except ValueError:  # an unterminated quote
        return None
    return words or None


def _shell_scope(words: tuple[str, ...]) -> tuple[str, ...] | None:
    program = words[0]
    if not _PROGRAM.fullmatch(program):
        return None  # `FOO=1 cmd`, a glob, `~/bin/x`: name no program to grant
    scope = words[:2] if len(words) > 1 and _SUBCOMMAND.fullmatch(words[1]) else words[:1]
    return scope if len(" ".join(scope)) <= MAX_SCOPE_CHARS else None


def subject_of(
    tool: str, raw_input: dict[str, Any], locations: list[Any], workspace: Path
) -> GrantSubject | None:
    """The grant subject of a call, or ``None`` if grants never apply to it."""
    if tool == SHELL:
        command = raw_input.get("command")
        words = _shell_words(command) if isinstance(command, str) else None
        if words is None:
            return GrantSubject(tool, (), None, matchable=False)
        return GrantSubject(tool, words, _shell_scope(words), matchable=True)
    if tool not in _FILE_ACTIONS or len(locations) != 1:
        return None
    try:
        relative = Path(locations[0].path).relative_to(workspace).as_posix()
    except ValueError:
        return None
    plain = relative.isprintable() and len(relative) <= MAX_SCOPE_CHARS
    return GrantSubject(tool, (relative,), (relative,) if plain else None, matchable=True)


def _what(tool: str, scope: tuple[str, ...]) -> str:
    if tool == SHELL:
        return f"`{' '.join(scope)} …`"
    return f"{_FILE_ACTIONS.get(tool, tool)} {scope[0] if scope else '?'}"


def option_name(decision: GrantDecision, tool: str, scope: tuple[str, ...]) -> str:
    """The option that keeps this grant, e.g. ``Always allow `git status …` in this session``."""
    verb = "allow" if decision == "allow" else "deny"
    return f"Always {verb} {_what(tool, scope)} in this session"


def receipt(decision: GrantDecision, tool: str, scope: tuple[str, ...]) -> str:
    """The line that says a grant answered a call: ``allowed by your grant "…"``."""
    verb = "allowed" if decision == "allow" else "denied"
    return f'{verb} by your grant "{option_name(decision, tool, scope)}"'
