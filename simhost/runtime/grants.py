"""What a standing grant covers: a shell command's words, or one file.

Answering ``allow-always`` or ``deny-always`` keeps a standing grant for the
*scope* of the call, never for the whole tool. For the shell it is one of:

* **the command's head and options** (``ls -la``, ``git stash list``): a later
  command is covered when it has the same head (the program and every
  subcommand-like word after it), every option word it has (a word starting
  with ``-``) is one of the granted command's own option words, and each of its
  other words is a plain name in the workspace: not absolute, not starting with
  ``~ @ +``, no ``..`` or ``.git`` component, no whitespace, none of
  ``* ? [ ] { } = # % :``; and, when checked, it resolves (symlinks followed,
  as does its folder) inside the workspace and outside its ``.git``. The option
  says so: ``Always allow `ls -la …` in this session (no other options)``.
* **exactly this command** (``python3 test.py``): for a program that runs
  other programs or code (wrappers, shells, interpreters, ``sed``, ``find``,
  ``make``, compilers, archive extractors, test runners,
  :data:`EXACT_ONLY_PROGRAMS`; ``npm exec`` and the like,
  :data:`EXACT_ONLY_SUBCOMMANDS`; ``tar`` extracting), for ``git`` with options before its
  subcommand, a subcommand not in :data:`GIT_WORDS_SUBCOMMANDS` or an option
  that runs a program or writes a file (:data:`GIT_RISKY_OPTIONS`), and for a
  command one of whose other words is not plain. Only the same words match, and
  their plain words must still resolve inside the workspace:
  ``Always allow exactly `python3 test.py` in this session``.

A command with anything the shell could turn into another command (operators
``; & |``, ``$``, backticks, parentheses, redirections, a backslash, a newline
or another unprintable character) never matches a grant and is never offered
one; neither is a command whose program is not a plain word (``FOO=1 make``).

A file tool's scope is that tool on that one file (the path relative to the
workspace, symlinks resolved): ``edits to notes.txt``.

A call with no scope (a compound command, one whose scope does not fit one
short line, a shell fallback) is offered no "always" option. The option's
name says the scope (:func:`option_name`); the same words name the grant when
it later answers a call (:func:`receipt`). A stored grant's kind is read back
from its words alone (:func:`_shape`), so a grant saved by an older version
covers at most what these rules give it.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Any, Final

from simhost.runtime.policy import SHELL
from simhost.runtime.wire import GrantDecision

__all__ = [
    "EXACT_ONLY_PROGRAMS",
    "EXACT_ONLY_SUBCOMMANDS",
    "GIT_RISKY_OPTIONS",
    "GIT_WORDS_SUBCOMMANDS",
    "MAX_SCOPE_CHARS",
    "GrantSubject",
    "option_name",
    "receipt",
    "subject_of",
]

MAX_SCOPE_CHARS: Final = 60
"""The longest scope an option names; a longer one is not offered as a grant."""


def _names(text: str) -> frozenset[str]:
    return frozenset(text.split())


EXACT_ONLY_PROGRAMS: Final = _names(
    # wrappers: they run the program named by a later word
    "env timeout nice nohup ionice chrt taskset stdbuf setsid unbuffer xargs parallel flock"
    " sudo doas su runuser pkexec chroot nsenter unshare firejail fakeroot systemd-run"
    " time watch exec command builtin eval source . script strace ltrace gdb valgrind"
    " busybox toybox"
    # shells and interpreters: a later word is code or a file of code
    " sh bash zsh dash fish ksh mksh ash csh tcsh rbash"
    " python pypy node nodejs deno bun bunx npx pnpx uvx pipx perl ruby irb php lua luajit"
    " awk gawk mawk nawk sed gsed ed ex tclsh wish expect R Rscript julia java jshell"
    " groovy scala kotlin ghci runghc elixir erl escript guile racket sbcl ocaml swift"
    " dotnet go osascript pwsh powershell"
    # programs whose words are an expression, a target or a command to run
    " find make gmake cmake socat ssh scp sftp rsync xdg-open open docker podman kubectl"
    " caffeinate hyperfine faketime prlimit numactl torsocks proxychains proxychains4 tmux"
    " screen at batch perf nix nix-shell mise direnv bundle tsx ts-node zig cabal stack dune"
    " bazel bazelisk"
    # compilers: `@file` and options such as `-wrapper`, `-fplugin=` run a program
    " gcc g++ cc c++ clang clang++ tcc rustc"
    # archive extractors: they write any path the archive names (`.git/config` too)
    " unzip 7z 7za 7zr 7zz unrar unar cpio bsdcpio bsdtar ar pax jar cabextract unsquashfs"
    # test runners: each file word is imported and run
    " pytest py.test pytest-3 py.test-3 jest vitest mocha tox nox rspec phpunit ava tap"
    " jasmine karma nosetests nose2 behave cucumber cucumber-js playwright cypress bats"
    # pagers and editors: they can run a shell
    " vi vim nvim view emacs nano less more most man info"
)
"""Programs that run other programs or code named by their words: exact grants only."""

_VERSIONED: Final = re.compile(r"(python|pypy|perl|php|ruby|lua|node)[0-9.]+")
"""``python3.12``, ``perl5.36``, ``php8``: the same interpreters."""

EXACT_ONLY_SUBCOMMANDS: Final = frozenset(
    {
        ("npm", "exec"), ("npm", "x"), ("npm", "explore"), ("npm", "init"), ("npm", "create"),
        ("yarn", "dlx"), ("yarn", "exec"), ("yarn", "node"), ("yarn", "create"),
        ("pnpm", "dlx"), ("pnpm", "exec"), ("pnpm", "create"),
        ("uv", "run"), ("uv", "tool"), ("poetry", "run"), ("pipenv", "run"),
        ("cargo", "run"), ("cargo", "install"),
        ("conda", "run"), ("mamba", "run"), ("micromamba", "run"), ("pixi", "run"),
        ("pixi", "exec"), ("pdm", "run"), ("pdm", "exec"), ("hatch", "run"), ("hatch", "shell"),
        ("rye", "run"), ("pyenv", "exec"), ("rbenv", "exec"), ("asdf", "exec"),
        ("volta", "run"), ("flatpak", "run"), ("snap", "run"), ("gh", "extension"),
    }
)  # fmt: skip
"""Subcommands that run a program or package named by a later word. Matched as any later
word, so options before the subcommand (``npm --prefix x exec evil``) do not hide it."""

GIT_WORDS_SUBCOMMANDS: Final = _names(
    "add blame branch cat-file checkout cherry-pick clean clone commit describe diff fetch"
    " grep init log ls-files ls-remote ls-tree merge mv pull push rebase reflog reset"
    " restore revert rev-list rev-parse rm shortlog show show-ref stash status switch tag"
    " whatchanged"
)
"""git subcommands a grant may cover with other words. Any other (``config``,
``submodule``, ``bisect``, an alias, ...) can run a program, and ``remote`` and ``worktree``
rewrite the config or touch folders outside the workspace: exact grants only."""

GIT_RISKY_OPTIONS: Final = _names(
    "--config --config-env --upload-pack --receive-pack --exec --output --output-directory"
    " --open-files-in-pager --ext-diff --textconv --template --separate-git-dir --git-dir"
    " --work-tree --tool --extcmd --strategy --remote"
)
"""git long options that run a program or write outside the command's own output.
Matched as git does, by any unambiguous prefix (``--out=x`` is ``--output=x``)."""
_GIT_RISKY_SHORT: Final = {
    "clone": "cu",
    "ls-remote": "u",
    "grep": "O",
    "rebase": "xs",
    "merge": "s",
    "pull": "s",
}
"""Their short forms, per subcommand (``clone -u`` is ``--upload-pack``, ``grep -O`` opens a
pager), also inside a cluster (``-nO…``)."""

_TAR_EXTRACT_OR_RUN: Final = ("--extract", "--get", "--use-compress-program", "--to-command",
    "--info-script", "--new-volume-script", "--checkpoint-action", "--rsh-command")  # fmt: skip
"""tar long options that extract (writing any path the archive names) or run a program."""
_TAR_EXTRACT_OR_RUN_SHORT: Final = "xIF"
"""Their short forms, also inside a cluster or tar's old dashless first word (``xzf``)."""

_UNSAFE: Final = frozenset(";&|$`()<>\\\n\r")
"""Characters that let ``sh`` run or redirect something other than the words show."""
_NOT_PLAIN: Final = frozenset("*?[]{}=#%:")
"""In a word other than an option: a glob, a brace, an assignment, a comment, a format, or a
colon (a URL, a remote ``host:path``, a refspec such as ``:main``)."""
_PROGRAM: Final = re.compile(r"[A-Za-z0-9_./+][A-Za-z0-9_./+-]*")
_SUBCOMMAND: Final = re.compile(r"[A-Za-z][A-Za-z0-9_:-]*")
_FILE_ACTIONS: Final = {"fs.write": "edits to", "fs.read": "reading", "fs.delete": "deleting"}


@dataclass(frozen=True, slots=True)
class _Shape:
    """How a shell command's words are matched: by head and options, or exactly."""

    head: tuple[str, ...]
    """The program, and every subcommand-like word that follows it (``git stash list``)."""
    options: tuple[str, ...]
    """Its option words (starting with ``-``), each once, in order."""
    exact: bool
    """Only the same words match (:data:`EXACT_ONLY_PROGRAMS` and the other cases)."""


def _is_option(word: str) -> bool:
    return word.startswith("-")


def _plain(word: str) -> bool:
    """A word that names something in the workspace and expands to nothing else."""
    parts = [part.lower() for part in PurePosixPath(word).parts]  # `.GIT` on macOS too
    return not (
        word.startswith(("/", "~", "@", "+"))  # `@file` adds options, `+ref` forces a push
        or any(c in _NOT_PLAIN or c.isspace() for c in word)  # a space: code, a command
        or ".." in word.split("/")
        or ".git" in parts
    )


def _runs_code(words: tuple[str, ...]) -> bool:
    name = PurePosixPath(words[0]).name
    return (
        name in EXACT_ONLY_PROGRAMS
        or _VERSIONED.fullmatch(name) is not None
        or any((name, word) in EXACT_ONLY_SUBCOMMANDS for word in words[1:])
        or (name == "tar" and _tar_extracts_or_runs(words))
    )


def _tar_extracts_or_runs(words: tuple[str, ...]) -> bool:
    """True for tar extracting (``-x``, ``xzf``, ``--extract``) or with an option that runs a
    program; long options by any prefix GNU tar accepts (``--ext``)."""
    for index, word in enumerate(words[1:], 1):
        if word.startswith("--"):
            name = word.split("=", 1)[0]
            if len(name) > 2 and any(long.startswith(name) for long in _TAR_EXTRACT_OR_RUN):
                return True
        elif (_is_option(word) or index == 1) and any(c in _TAR_EXTRACT_OR_RUN_SHORT for c in word):
            return True
    return False


def _git_risky(words: tuple[str, ...]) -> bool:
    """True for git with options before its subcommand, an unlisted subcommand or a risky option."""
    if len(words) > 1 and (_is_option(words[1]) or words[1] not in GIT_WORDS_SUBCOMMANDS):
        return True
    for word in words[2:]:
        if word.startswith("--"):
            name = word.split("=", 1)[0]
            if len(name) > 2 and any(risky.startswith(name) for risky in GIT_RISKY_OPTIONS):
                return True
        elif _is_option(word) and any(c in _GIT_RISKY_SHORT.get(words[1], "") for c in word[1:]):
            return True
    return False


def _shape(words: tuple[str, ...]) -> _Shape | None:
    """How ``words`` are matched, or ``None`` when their program is not a plain word."""
    program = words[0]
    if not _PROGRAM.fullmatch(program):
        return None  # `FOO=1 cmd`, a glob, `~/bin/x`: name no program to grant
    length = 1
    while length < len(words) and _SUBCOMMAND.fullmatch(words[length]):
        length += 1
    head, rest = words[:length], words[length:]
    exact = (
        _runs_code(words)
        or (PurePosixPath(program).name == "git" and _git_risky(words))
        or not all(_is_option(word) or _plain(word) for word in rest)
    )
    options = tuple(dict.fromkeys(word for word in rest if _is_option(word)))
    return _Shape(head, options, exact)


def _scope_of(words: tuple[str, ...], shape: _Shape) -> tuple[str, ...]:
    return words if shape.exact else shape.head + shape.options


def _grant_shape(scope: tuple[str, ...]) -> _Shape | None:
    """How a stored shell grant matches: by head and options only if its words are exactly those."""
    shape = _shape(scope)
    if shape is None or shape.exact or shape.head + shape.options != scope:
        return None  # an exact grant
    return shape


@dataclass(frozen=True, slots=True)
class GrantSubject:
    """What grants are matched against for one call, and what an "always" answer would grant.

    ``words``: the shell command's words, or the file's workspace-relative path
    (one word). ``scope``: the words an "always" answer keeps, or ``None`` when
    the call is offered no grant. ``matchable``: whether a standing grant may
    decide this call at all.
    """

    tool: str
    words: tuple[str, ...]
    scope: tuple[str, ...] | None
    matchable: bool

    def covered_by(self, tool: str, scope: tuple[str, ...], workspace: Path) -> bool:
        """True if a grant of ``scope`` on ``tool`` covers this call, run in ``workspace``."""
        if not (self.matchable and tool == self.tool and scope):
            return False
        if tool != SHELL:
            return self.words == scope
        granted = _grant_shape(scope)
        if granted is None:
            matches = self.words == scope
        else:
            mine = _shape(self.words)
            matches = (
                mine is not None
                and not mine.exact
                and mine.head == granted.head
                and set(mine.options) <= set(granted.options)
            )
        return matches and _stays_in(workspace, self.words)


def _stays_in(workspace: Path, words: tuple[str, ...]) -> bool:
    """True if every plain word, and its parent folder, resolves inside ``workspace`` (where
    the command runs) and outside its ``.git``: a word spelled plainly may still be a symlink
    that leads out (``rm -rf link/``) or into ``.git``. Resolving reads links only, never
    opens a file, so it cannot wait on one; an error counts as leaving."""
    named = [word for word in words[1:] if not _is_option(word)]
    if "/" in words[0]:
        named.append(words[0])  # `./build.sh`; a bare program name is looked up on PATH
    try:
        root = Path(os.path.realpath(workspace))
        for word in filter(_plain, named):
            path = os.path.join(workspace, word)  # not Path: it drops `.` and a final `/`
            for target in (path, os.path.dirname(path)):
                relative = Path(os.path.realpath(target)).relative_to(root)
                if ".git" in (part.lower() for part in relative.parts):
                    return False
    except (OSError, RuntimeError, ValueError):  # ValueError: not under the workspace
        return False
    return True


def _shell_words(command: str) -> tuple[str, ...] | None:
    """The words of a plain command, or ``None`` if ``sh`` might run something else."""
    if any(c in _UNSAFE or not c.isprintable() for c in command):
        return None
    try:
        words = tuple(shlex.split(command))
    except ValueError:  # an unterminated quote
        return None
    return words or None


def subject_of(
    tool: str, raw_input: dict[str, Any], locations: list[Any], workspace: Path
) -> GrantSubject | None:
    """The grant subject of a call, or ``None`` if grants never apply to it."""
    if tool == SHELL:
        command = raw_input.get("command")
        words = _shell_words(command) if isinstance(command, str) else None
        shape = _shape(words) if words is not None else None
        if words is None or shape is None:
            return GrantSubject(tool, (), None, matchable=False)
        scope = _scope_of(words, shape)
        fits = len(shlex.join(scope)) <= MAX_SCOPE_CHARS
        return GrantSubject(tool, words, scope if fits else None, matchable=True)
    if tool not in _FILE_ACTIONS or len(locations) != 1:
        return None
    try:
        relative = Path(locations[0].path).relative_to(workspace).as_posix()
    except ValueError:
        return None
    plain = relative.isprintable() and len(relative) <= MAX_SCOPE_CHARS
    return GrantSubject(tool, (relative,), (relative,) if plain else None, matchable=True)


def _what(tool: str, scope: tuple[str, ...]) -> str:
    if tool != SHELL:
        return f"{_FILE_ACTIONS.get(tool, tool)} {scope[0] if scope else '?'} in this session"
    shape = _grant_shape(scope)
    if shape is None:
        return f"exactly `{shlex.join(scope)}` in this session"
    limit = "(no other options)" if shape.options else "(no options)"
    return f"`{shlex.join(scope)} …` in this session {limit}"


def option_name(decision: GrantDecision, tool: str, scope: tuple[str, ...]) -> str:
    """The option that keeps this grant: ``Always allow `ls -la …` in this session (no other
    options)``, ``Always allow exactly `python3 test.py` in this session``."""
    verb = "allow" if decision == "allow" else "deny"
    return f"Always {verb} {_what(tool, scope)}"


def receipt(decision: GrantDecision, tool: str, scope: tuple[str, ...]) -> str:
    """The line that says a grant answered a call: ``allowed by your grant "…"``."""
    verb = "allowed" if decision == "allow" else "denied"
    return f'{verb} by your grant "{option_name(decision, tool, scope)}"'
