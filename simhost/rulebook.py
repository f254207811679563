"""The editor's rules for one workspace, in the files the person owns.

Two files: the workspace's (``rules.toml`` in the workspace's state folder,
``$XDG_STATE_HOME/simhost/workspaces/<hash>-<name>/``) and the user's
(``$XDG_CONFIG_HOME/simhost/rules.toml``, for rules that hold everywhere).
Neither is inside the workspace: an agent that may edit the workspace must not
be able to write itself a rule. Rules that end with their session live in
memory only.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

from permclient.rules import EditorRule, RuleAnswer, RuleEngine, load_rules, save_rules
from simhost.audit import AUDIT_NAME, AuditLog
from simhost.runtime.sessions import default_state_dir

__all__ = ["RULES_NAME", "RuleBook", "open_rules", "user_rules_file"]

RULES_NAME = "rules.toml"


def user_rules_file() -> Path:
    """``$XDG_CONFIG_HOME/simhost/rules.toml`` (``~/.config`` without an absolute one)."""
    base = os.environ.get("XDG_CONFIG_HOME")
    root = Path(base) if base and Path(base).is_absolute() else Path.home() / ".config"
    return root / "simhost" / RULES_NAME


class RuleBook:
    """The rules of ``workspace``: loaded from both files, saved back as they change.

    ``engine`` is the :class:`~permclient.rules.RuleEngine` to register above
    the person's handler; ``on_answer`` is told of every question it answers.
    """

    def __init__(
        self,
        workspace: Path,
        *,
        workspace_file: Path,
        user_file: Path | None = None,
        on_answer: Callable[[RuleAnswer], None] | None = None,
    ) -> None:
        self.workspace = workspace
        self.workspace_file = workspace_file
        self.user_file = user_file if user_file is not None else user_rules_file()
        self.engine = RuleEngine(workspace=workspace, resolve=os.path.realpath, on_answer=on_answer)
        self._files: dict[int, Path] = {}
        # Files with something that could not be read when loaded: never rewritten (what
        # was skipped would be lost; a person's deny rule with a typo, say).
        self._unreadable: dict[Path, str] = {}
        # Each file as it was read (or last written): a file changed since by hand is
        # never overwritten from memory.
        self._stamps: dict[Path, tuple[int, int] | None] = {}

    def load(self) -> list[str]:
        """(Re)read both files; returns a warning per rule (or file) skipped."""
        session_rules = [rule for rule in self.engine.rules if rule.lifetime == "session"]
        rules: list[EditorRule] = []
        warnings: list[str] = []
        self._files = {}
        self._unreadable = {}
        for path in (self.user_file, self.workspace_file):
            self._stamps[path] = _stamp(path)
            loaded, errors = load_rules(path)
            for rule in loaded:
                self._files[id(rule)] = path
            if errors:
                self._unreadable[path] = str(errors[0])
            rules += loaded
            warnings += [str(error) for error in errors]
        self.engine.replace_rules([*rules, *session_rules])
        return warnings

    def file_of(self, rule: EditorRule) -> Path | None:
        """Where ``rule`` is kept (``None``: in memory, until its session ends)."""
        if rule.lifetime == "session":
            return None
        return self._files.get(id(rule)) or (
            self.user_file if rule.scope == "everywhere" else self.workspace_file
        )

    def add(self, rule: EditorRule) -> int:
        """Keep ``rule`` (saved at once); returns its number. Raises :class:`OSError`
        (also for a file that had something unreadable when loaded: it is left as it is)."""
        path = self.file_of(rule)
        if path is not None:
            self._check_writable(path)
            save_rules(path, [*self._kept_in(path), rule])
            self._stamps[path] = _stamp(path)
            self._files[id(rule)] = path
        return self.engine.add(rule)

    def revoke(self, number: int) -> EditorRule:
        """Take out rule ``number`` (from 1), saved at once. Raises :class:`IndexError`
        for no such rule, :class:`OSError` if its file cannot be written."""
        rules = self.engine.rules
        if not 1 <= number <= len(rules):
            raise IndexError(number)
        rule = rules[number - 1]
        path = self.file_of(rule)
        if path is not None:
            self._check_writable(path)
            save_rules(path, [kept for kept in self._kept_in(path) if kept is not rule])
            self._stamps[path] = _stamp(path)
            self._files.pop(id(rule), None)
        self.engine.revoke(rule)
        return rule

    def _check_writable(self, path: Path) -> None:
        why = self._unreadable.get(path)
        if why is not None:
            raise OSError(f"{why}: the file is left as it is; fix it, then load the rules again")
        if path in self._stamps and _stamp(path) != self._stamps[path]:
            raise OSError(f"{path} changed since it was read: load the rules again first")

    def _kept_in(self, path: Path) -> list[EditorRule]:
        return [rule for rule in self.engine.rules if self.file_of(rule) == path]


def open_rules(workspace: Path, state_dir: Path | None) -> tuple[RuleBook, AuditLog, list[str]]:
    """The rule book and audit trail of ``workspace`` (kept in ``state_dir``, or the
    workspace's default state folder), and a warning per rule that cannot be read."""
    state = state_dir or default_state_dir(workspace)
    book = RuleBook(workspace, workspace_file=state / RULES_NAME)
    return book, AuditLog(state / AUDIT_NAME), book.load()


def _stamp(path: Path) -> tuple[int, int] | None:
    """The file's modification time and size (``None``: no file)."""
    try:
        stat = path.stat()
    except OSError:
        return None
    return stat.st_mtime_ns, stat.st_size
