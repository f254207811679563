"""Editor-side approval rules: kept and shown by the editor, never by the agent.

A rule says *allow* or *deny* for the requests it matches, and answers with an
offered option it picks by kind (``allow_once`` / ``reject_once``; the
``_always`` kinds only when the rule says so). Option ids are never guessed: a
rule that finds no option of the kind it needs passes the question on.

Sans-I/O: nothing here reads a clock, a file or a socket unless asked to
(:func:`load_rules`, :func:`save_rules`). :class:`RuleEngine` is a
:func:`permclient.rule` handler: register it above the person's handler, and
whatever no rule decides goes to the person.

What a rule matches (every condition it has must hold):

* **kinds**: the tool call's kind is one of them;
* **command**: the shell command's words (split with :mod:`shlex`, never
  searched as a string) start with these words. An *allow* rule matches only a
  plain command: nothing the shell would expand, redirect or chain (``; & | $``
  backticks, globs, ``~``, ...), and nothing that makes another program run
  (``find -exec``, ``tar -I prog``, ``xargs sh``). A *deny* rule matches these
  words anywhere in the command, compound commands included;
* **paths**: globs over the paths the request names (its locations and its
  diffs' paths), relative to the workspace unless absolute. ``*`` and ``?``
  stay within one folder, ``**`` spans folders. Allow: every path matches one
  glob. Deny: some path does;
* **title**: a glob over the tool call's title, the last resort for a request
  that says nothing else.

A deny rule beats an allow rule, and a request that names anything outside the
workspace (a path, a ``..`` or absolute word of the command, a ``~``, its
``cwd``) is never allowed by a rule.
"""

from __future__ import annotations

import fnmatch
import os
import posixpath
import re
import shlex
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias, get_args

import msgspec

from ._handlers import Rule
from ._toml import Key, TomlFileError, locate, read_toml
from ._wire import Decision, Diff, PermissionRequest, Selected, ToolKind

__all__ = [
    "REASON_META_KEY",
    "EditorRule",
    "Effect",
    "Lifetime",
    "RuleAnswer",
    "RuleEngine",
    "RuleFileError",
    "Scope",
    "Subject",
    "load_rules",
    "reason_of",
    "save_rules",
    "subject_of",
    "suggested_rules",
    "with_reason",
]

Effect: TypeAlias = Literal["allow", "deny"]
Scope: TypeAlias = Literal["session", "workspace", "everywhere"]
Lifetime: TypeAlias = Literal["session", "until", "revoked"]
"""Until the session ends, until a time (``EditorRule.until``), or until revoked."""

TOOL_KINDS: Final[frozenset[str]] = frozenset(get_args(ToolKind))
REASON_META_KEY: Final = "permclient/reason"
"""The key of the person's reason in a denying answer's ``_meta``."""
MAX_REASON: Final = 1000
"""The longest reason sent (in characters); a longer one is cut."""

_SHELLS: Final = frozenset(
    {"sh", "bash", "zsh", "dash", "ksh", "fish", "ash", "mksh", "yash", "csh", "tcsh", "rbash"}
)
_MAX_NESTING: Final = 8  # shells within shells read for deny rules
_CACHED_COMMAND: Final = 1024  # characters: longer commands are split anew each time
_MAX_COMMAND: Final = 16 * 1024  # characters: a longer command is not read (a person asks)
_MAX_WORDS: Final = 4096  # of an argv list
_DENY_SPAN: Final = 64  # words after a deny rule's program in which its other words are sought
# Options that hand a later word (or their value) to another program to run, in whatever
# program: as a whole word or before its "=". A program's own are in _EXEC_OPTION_TABLE.
_EXEC_FLAG_NAMES: Final = (
    "-exec -execdir -ok -okdir --pre --exec --command --run -exec-command"
    " --to-command --use-compress-program --compress-program --checkpoint-action"
    " --info-script --new-volume-script --rsh --rsh-command --rmt-command --rsync-path"
    " --exec-batch --unzip-command --upload-pack --receive-pack --extcmd"
    " --open-files-in-pager --sendmail-cmd --pager --eval --diff-program --strip-program"
    " -toolexec --toolexec -vettool --vettool --hostname-bin --editor-cmd --diff-cmd"
    " --diff3-cmd --config-option"
)
_EXEC_FLAGS: Final = frozenset(_EXEC_FLAG_NAMES.split())
# Programs that run a later word (or their words as one command line, or code they hold).
# Not the wrappers named by everyday words (time, command, builtin): what they run is
# the next word, itself checked, and `grep -rn command src` stays allowable.
_RUNNER_NAMES: Final = (
    "env sudo doas su xargs eval exec nohup timeout nice setsid parallel busybox toybox"
    " watch strace ltrace gdb lldb valgrind stdbuf chroot flock ionice taskset chrt unshare"
    " nsenter runuser pkexec setpriv prlimit numactl firejail bwrap fakeroot caffeinate"
    " systemd-run systemd-inhibit dbus-launch dbus-run-session xvfb-run ssh-agent sg unbuffer"
    " rlwrap faketime torsocks proxychains entr watchexec nodemon hyperfine"
    # terminals, multiplexers and remote shells: their words are a command line
    " script expect tmux screen xterm gnome-terminal konsole alacritty kitty ssh rsh mosh"
    # interpreters and package runners
    " python python2 python3 perl ruby node nodejs deno bun php lua tclsh osascript npx pnpx"
    " bunx uvx pipx Rscript R julia wish pwsh powershell awk gawk mawk nawk luajit irb pypy"
    " tsx ts-node guile racket sbcl ocaml runghc runhaskell elixir erl escript dc gnuplot"
    " jshell groovy nu xonsh elvish"
)
_RUNNERS: Final = _SHELLS | frozenset(_RUNNER_NAMES.split())
_VERSION: Final = re.compile(r"[0-9.]+$")  # python3.11, perl5
_SHELL_SPECIAL: Final = frozenset(";&|<>()$`\\*?[]{}~#!")
_DOUBLE_QUOTED_SPECIAL: Final = frozenset("$`\\!")
_OPERATOR = re.compile(r"[;&|()<>`]+")


# ---------------------------------------------------------------- the rule


@dataclass(frozen=True, slots=True, kw_only=True)
class EditorRule:
    """One rule. Raises :class:`ValueError` when built with a value it cannot mean.

    ``scope``: ``"session"`` (only requests of ``session_id``), ``"workspace"``
    (only in ``workspace``, an absolute path) or ``"everywhere"``. ``lifetime``:
    ``"session"`` (ends when ``session_id`` ends: never saved), ``"until"`` (the
    aware datetime ``until``) or ``"revoked"``. ``use_always``: if the offered
    options have no ``allow_once`` (``reject_once``), answer with
    ``allow_always`` (``reject_always``) rather than passing.
    """

    effect: Effect
    scope: Scope
    lifetime: Lifetime
    session_id: str | None = None
    workspace: str | None = None
    until: datetime | None = None
    kinds: tuple[str, ...] = ()
    command: tuple[str, ...] = ()
    paths: tuple[str, ...] = ()
    title: str | None = None
    use_always: bool = False
    exact: bool = False
    created: datetime | None = None
    note: str = ""

    def __post_init__(self) -> None:
        _one_of("effect", self.effect, ("allow", "deny"))
        _one_of("scope", self.scope, ("session", "workspace", "everywhere"))
        _one_of("lifetime", self.lifetime, ("session", "until", "revoked"))
        if (self.scope == "session" or self.lifetime == "session") and not self.session_id:
            raise ValueError("a rule for a session, or until it ends, needs its session_id")
        if self.scope == "workspace" and not (self.workspace and self.workspace.startswith("/")):
            raise ValueError("a workspace rule needs the workspace's absolute path")
        if (self.lifetime == "until") != (self.until is not None):
            raise ValueError('"until" is given exactly when the lifetime is "until"')
        for when in (self.until, self.created):
            if when is not None and when.utcoffset() is None:
                raise ValueError("a rule's times need a time zone (e.g. 2026-12-31T18:00:00Z)")
        if not (self.kinds or self.command or self.paths or self.title):
            raise ValueError("a rule must match on something: kinds, command, paths or title")
        if self.exact and not self.command:
            raise ValueError('"exact" is for a rule with a command')
        for kind in self.kinds:
            _one_of("kinds", kind, tuple(sorted(TOOL_KINDS)))
        for text in (*self.command, *self.paths, self.title or "-", self.session_id or "-"):
            if not text or "\x00" in text or not _encodable(text):
                raise ValueError(f"not a usable word, glob or id: {text!r}")
        for text in (self.workspace or "", self.note):
            if not _encodable(text):
                raise ValueError(f"not text that can be saved: {text!r}")
        for glob in self.paths:
            _glob_pattern(glob)  # raises for a glob that cannot be read

    def describe(self, workspace: str | None = None) -> str:
        """What the rule does, in full: effect, what it matches, scope and lifetime."""
        what: list[str] = []
        if self.command:
            words = shlex.join(self.command)
            what.append(f"exactly `{words}`" if self.exact else f"`{words} …`")
        if self.kinds:
            what.append("/".join(self.kinds))
        if self.paths:
            what.append("paths " + ", ".join(self.paths))
        if self.title:
            what.append(f"titled {self.title!r}")
        where = {
            "session": f"in session {self.session_id}",
            "workspace": (
                "in this workspace" if self.workspace == workspace else f"in {self.workspace}"
            ),
            "everywhere": "in every workspace",
        }[self.scope]
        return f"{self.effect} {' '.join(what)} {where}, {self.lasts()}"

    def lasts(self) -> str:
        """The lifetime in words."""
        if self.lifetime == "until" and self.until is not None:
            return f"until {self.until.isoformat(timespec='minutes')}"
        return "until the session ends" if self.lifetime == "session" else "until revoked"


def _one_of(name: str, value: object, allowed: Sequence[str]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


# ---------------------------------------------------------------- what a request touches


@dataclass(frozen=True, slots=True)
class Subject:
    """What a request asks to touch, as the rules read it.

    ``words``: a plain command's words (``None`` when it has none, or one the
    shell would expand or chain); ``all_words``: every word of the command,
    operators taken out (for deny rules); ``paths``: absolute, normalised;
    ``outside``: it names something outside the workspace (or it cannot tell).
    """

    kind: str | None
    title: str | None
    words: tuple[str, ...] | None
    all_words: tuple[str, ...]
    paths: tuple[str, ...]
    outside: bool


def subject_of(
    request: PermissionRequest, workspace: str, resolve: Callable[[str], str] | None = None
) -> Subject:
    """Read what ``request`` touches, relative to ``workspace`` (an absolute path).

    ``resolve`` maps an absolute path to the one it really names (e.g.
    :func:`os.path.realpath`, to follow symlinks); without it paths are compared
    as written, normalised.
    """
    return _subject(request, _raw_input(request.tool_call.raw_input_json), workspace, resolve)


def _subject(
    request: PermissionRequest,
    raw: Any,
    workspace: str,
    resolve: Callable[[str], str] | None,
) -> Subject:
    call = request.tool_call
    if raw is _UNREADABLE:
        return Subject(call.kind, call.title, None, (), (), True)
    outside = False
    cwd = workspace
    given = _given(raw, _CWD_KEYS)
    if len(given) > 1:
        outside = True  # two folders to run in: which one, no one can tell
    elif given:
        folder = given[0]
        if isinstance(folder, str) and not folder.startswith("~"):
            cwd = _absolute(folder, workspace, resolve) if folder else workspace
            outside = not _inside(cwd, workspace)
        else:
            outside = True
    has_command = bool(_commands_of(raw))
    words, all_words = _request_words(raw)
    if words is None:  # a command the shell would expand or chain: where it goes, no one can tell
        outside = outside or has_command
    elif any(_escapes(word, cwd, workspace, resolve) for word in words):
        outside = True
    if not has_command and call.kind == "execute" and raw is not None:
        outside = True  # it runs something its input does not say in a way rules read
    named = [location.path for location in call.locations or ()]
    named += [item.path for item in call.content or () if isinstance(item, Diff)]
    named += _raw_paths(raw)
    paths = tuple(dict.fromkeys(_absolute(path, cwd, resolve) for path in named))
    outside = outside or any(path.startswith("~") or path[:5].lower() == "file:" for path in named)
    outside = outside or not all(_inside(path, workspace) for path in paths)
    outside = outside or _raw_escapes(raw, cwd, workspace, resolve)
    return Subject(call.kind, call.title, words, all_words, paths, outside)


_PATH_KEY_NAMES: Final = (
    "path paths file files filepath filepaths filename abspath absolutepath relativepath"
    " dir dirs directory dirpath folder root rootpath dest destination destpath"
    " source sourcepath src srcpath target targetpath targetfile targetdir notebookpath"
    " oldpath newpath frompath topath output outputpath outfile"
)
_PATH_KEYS: Final = frozenset(_PATH_KEY_NAMES.split())  # (compared without _ and -, any case)
_CWD_KEYS: Final = ("cwd", "cd", "workdir", "workingdirectory", "currentdir", "currentdirectory")
_COMMAND_KEYS: Final = ("command", "cmd", "script", "argv")
# Text a tool writes or searches for, not a place: never read as a path.
_TEXT_KEY_NAMES: Final = (
    "content contents text newtext oldtext newstring oldstring newstr oldstr filetext"
    " body message description pattern query prompt title"
)
_TEXT_KEYS: Final = frozenset(_TEXT_KEY_NAMES.split())
_MAX_RAW_DEPTH: Final = 32


def _key(name: str) -> str:
    return name.replace("_", "").replace("-", "").lower()


def _given(raw: Any, keys: Sequence[str]) -> list[object]:
    """The values a tool's input gives under ``keys`` (not null; keys compared without
    ``_`` and ``-``, in any case), each once."""
    if not isinstance(raw, dict):
        return []
    found: list[object] = []
    for key, value in raw.items():
        named = isinstance(key, str) and _key(key) in keys
        if named and value is not None and value not in found:
            found.append(value)
    return found


def _raw_paths(raw: Any, depth: int = 0) -> list[str]:
    """The paths a tool's input names under a key that says so (``path``,
    ``file_path``, ``targetDir``, ``destination``, ...): strings or lists of them,
    also in objects nested a few levels down (``{"edits": [{"file_path": …}]}``)."""
    found: list[str] = []
    if isinstance(raw, list):
        for item in raw:
            if isinstance(item, dict | list) and depth < 3:
                found += _raw_paths(item, depth + 1)
        return found
    if not isinstance(raw, dict):
        return []
    for key, value in raw.items():
        if not isinstance(key, str):
            continue
        if _key(key) in _PATH_KEYS:
            for item in value if isinstance(value, list) else [value]:
                if isinstance(item, str) and item:
                    found.append(item)
        elif isinstance(value, dict | list) and depth < 3:
            found += _raw_paths(value, depth + 1)
    return found


def _raw_escapes(
    raw: Any, cwd: str, workspace: str, resolve: Callable[[str], str] | None, depth: int = 0
) -> bool:
    """Whether any string anywhere in a tool's input (but text it writes or searches
    for) may name something outside the workspace: fail closed, whatever the key."""
    if depth > _MAX_RAW_DEPTH:
        return True  # too deep to read: it may hold anything
    if isinstance(raw, str):
        return _escapes(raw, cwd, workspace, resolve)
    if isinstance(raw, list):
        return any(_raw_escapes(item, cwd, workspace, resolve, depth + 1) for item in raw)
    if isinstance(raw, dict):
        return any(
            _raw_escapes(value, cwd, workspace, resolve, depth + 1)
            for key, value in raw.items()
            if not (isinstance(key, str) and _key(key) in _TEXT_KEYS)
            and not (depth == 0 and isinstance(key, str) and _key(key) in _CWD_KEYS)
        )
    return False


def _raw_input(raw: msgspec.Raw) -> Any:
    if not raw:
        return None
    try:
        return msgspec.json.decode(raw)
    except (msgspec.DecodeError, RecursionError):  # (decoded once: only a deep one fails)
        return _UNREADABLE


class _Unreadable:
    """A tool's input that could not be decoded again here (nested deep enough that a
    few frames more overflow the stack): it may hold anything."""


_UNREADABLE: Final = _Unreadable()


def _commands_of(raw: Any) -> list[object]:
    """The shell commands a tool's input holds (``command``, ``cmd``, ``script``,
    ``argv``; a string for input that is only a string)."""
    return [raw] if isinstance(raw, str) else _given(raw, _COMMAND_KEYS)


def _request_words(raw: Any) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    """``(plain words or None, every word)`` of the command(s) a tool's input holds:
    with several, none is plain, and deny rules see them all."""
    commands = _commands_of(raw)
    if len(commands) > 1:
        return None, tuple(word for each in commands for word in _command_words(each)[1])
    return _command_words(commands[0] if commands else None)


def _command_words(
    command: object,
) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    """``(plain words or None, every word)`` of a command string or argv list; a
    command too long to read (or not one) has neither."""
    if isinstance(command, list):
        if not (command and all(isinstance(w, str) for w in command)):
            return None, ()
        if len(command) > _MAX_WORDS or sum(map(len, command)) > _MAX_COMMAND:
            return None, ()
        shell = len(command) == 3 and posixpath.basename(command[0]) in _SHELLS
        if shell and command[1] in ("-c", "-lc", "-ic"):
            return _command_words(command[2])  # a shell running one string
        words = tuple(command)
        return (None if _runs_others(words) else words), _deny_words(words)
    if not isinstance(command, str) or not command.strip() or len(command) > _MAX_COMMAND:
        return None, ()
    if len(command) > _CACHED_COMMAND:  # (a peer's long commands never fill the cache)
        return _read_command(command)
    return _shell_words(command)


@lru_cache(maxsize=256)
def _shell_words(command: str) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    """A command's words, kept for the next request (an agent repeats its commands)."""
    return _read_command(command)


def _read_command(command: str) -> tuple[tuple[str, ...] | None, tuple[str, ...]]:
    plain = _plain_words(command)
    return (None if plain is None or _runs_others(plain) else plain), _every_word(command)


def _runs_others(words: Sequence[str]) -> bool:
    """Whether a command hands a word to another program to run (``find -exec``,
    ``rg --pre``, ``xargs sh``, ``git -c core.pager='sh …'``, a shell's ``-c``
    script, ``tar -I prog``, ``sed 1e``): no allow rule may cover that by its first
    words."""
    if any(_shell_script(words, index) is not None for index in range(len(words))):
        return True
    for word in words[1:]:
        flag, _, value = word.partition("=")
        if flag in _EXEC_FLAGS or _program_name(value or word) in _RUNNERS:
            return True
        if value and any(blank in value for blank in " \t"):
            return True  # a value that is a command line (a pager, an editor, a hook)
    at = _program_at(words)
    return at < len(words) and _runs_by_its_own_options(words[at:])


_ASSIGNMENT: Final = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")
_WRAPPERS: Final = frozenset({"time", "command", "builtin"})


def _program_at(words: Sequence[str]) -> int:
    """Where the program that runs is: after the shell's variable assignments and the
    wrappers that run the next word (``GIT_PAGER=cat time -p git …`` runs git)."""
    at = 0
    while at < len(words):
        if _ASSIGNMENT.match(words[at]):
            at += 1
        elif _program_name(words[at]) in _WRAPPERS:
            at += 1
            while at < len(words) and words[at][:1] == "-":
                at += 1  # its options (time -p, command -v)
        else:
            break
    return at


_TARS: Final = ("tar", "gtar", "bsdtar")  # (their first word may be options without a "-")
_VIMS: Final = ("vi", "vim", "nvim", "view", "vimdiff", "gvim", "ex")
_AWKS: Final = ("awk", "gawk", "mawk", "nawk")
_SEDS: Final = ("sed", "gsed")
# One program's own options that make it run another ("git X" are git X's; "git" are
# git's before its subcommand, where -c sets a config). Letters: short options, also
# found among others in one word (`tar -xI prog`, `rsync -ave prog`, `-oProxyCommand=`);
# options: whole words or before their "=", a long one also abbreviated (GNU getopt and
# git take any unambiguous start: `--to-com=x`), or a word that runs the rest (`run`).
_EXEC_OPTION_TABLE: Final[tuple[tuple[tuple[str, ...], str, str], ...]] = (
    (
        _TARS,
        "IF",
        "--to-command --use-compress-program --checkpoint-action --info-script"
        " --new-volume-script --rsh-command --rmt-command",
    ),
    (("fd", "fdfind"), "xX", "--exec --exec-batch"),
    (("rsync",), "e", "--rsh --rsync-path"),
    (("zip",), "T", "--unzip-command"),  # -T tests with unzip, -TT names the program
    (("ssh", "slogin"), "oFI", ""),  # -o ProxyCommand=…, -F a config, -I a PKCS#11 library
    (("scp",), "oFSD", ""),  # -S the ssh program, -D a local sftp server
    (("sftp",), "oFSDb", ""),  # -b a batch file, whose !lines run a shell
    (("man",), "PHC", "--pager --html --config-file"),  # -C a config naming its programs
    (("make", "gmake"), "E", "--eval"),
    (("sort",), "", "--compress-program"),
    (("split",), "", "--filter"),
    (("ugrep", "ug"), "", "--filter"),
    (("less",), "k", "--lesskey-file --lesskey-src --lesskey-content"),  # (may set LESSOPEN)
    (_VIMS, "cSsul", "--cmd --remote-send --remote-expr"),  # nvim -l runs a Lua script
    (
        ("emacs",),
        "lfxLu",
        "-script -directory -init-directory --eval --load --funcall --execute --script"
        " --directory --init-directory --user",
    ),
    (_AWKS, "fEilW", "--file --exec --include --load"),  # a program file, a library
    (("hg",), "e", "--config --ssh --remotecmd"),
    (("pandoc",), "FL", "--filter --lua-filter --pdf-engine"),
    (("wget",), "", "--use-askpass"),
    (("cargo",), "", "--config"),  # (a runner, a rustc wrapper: programs it then runs)
    (("npm", "pnpm", "yarn"), "", "--script-shell"),
    (("git",), "", "-c --config-env --exec-path"),
    (("git rebase",), "x", "--exec"),
    (("git difftool",), "x", "--extcmd"),
    (("git grep",), "O", "--open-files-in-pager"),
    (("git clone",), "uc", "--upload-pack --config --template"),
    (("git fetch", "git pull"), "", "--upload-pack"),
    (("git push",), "", "--receive-pack --exec"),
    (("git ls-remote",), "u", "--upload-pack --exec"),
    (("git archive",), "", "--exec"),
    (("git send-email",), "", "--sendmail-cmd --smtp-server --to-cmd --cc-cmd --header-cmd"),
    (
        ("git filter-branch",),
        "",
        "--setup --env-filter --tree-filter --index-filter --parent-filter --msg-filter"
        " --commit-filter --tag-name-filter",
    ),
    (("git instaweb",), "dbm", "--httpd --browser --module-path"),
    (("git bisect",), "", "run"),
    (("git submodule",), "", "foreach"),
)


def _spellings(options: str) -> frozenset[str]:
    """The words before an ``=`` that give one of ``options``: each, and every start
    of a long one (``--to-com`` for ``--to-command``)."""
    return frozenset(
        option[:end]
        for option in options.split()
        for end in range(3 if option.startswith("--") else len(option), len(option) + 1)
    )


_EXEC_LETTERS: Final = {
    name: frozenset(letters) for names, letters, _ in _EXEC_OPTION_TABLE for name in names
}
_EXEC_OPTIONS: Final = {
    name: _spellings(options) for names, _, options in _EXEC_OPTION_TABLE for name in names
}
_PLUS_COMMANDS: Final = frozenset({*_VIMS, "less"})
_GIT_OPTIONS_WITH_A_VALUE: Final = frozenset(
    {
        "-C",
        "-c",
        "--git-dir",
        "--work-tree",
        "--namespace",
        "--super-prefix",
        "--config-env",
        "--attr-source",
    }
)
# What lets an awk program run a command, write or read a file it names, or load code:
# system(), pipes, redirection (also a comparison: refused all the same), getline, ARGV
# (files to read), gawk's SYMTAB (any variable) and @load, @include, @indirect().
_AWK_REACHES_OUT: Final = ("system", "getline", "ARGV", "SYMTAB", "|", ">", "@")


def _runs_by_its_own_options(words: Sequence[str]) -> bool:
    """Whether a program's own options or words make it run another (``tar -I prog``,
    ``fd -x``, ``git rebase -x``, ``vim +'!x'``, a sed or awk script that runs or
    writes), by :data:`_EXEC_OPTION_TABLE`."""
    program = _program_name(words[0])
    if program == "git":
        at = _git_subcommand_at(words)
        return _gives_an_exec_option("git", words[1:at]) or (
            at < len(words) and _gives_an_exec_option(f"git {words[at]}", words[at + 1 :])
        )
    if program in _SEDS:
        scripts = _sed_scripts(words)
        return scripts is None or not all(map(_SED_HARMLESS_SCRIPT.fullmatch, scripts))
    if program in _AWKS and _awk_reaches_out(words):
        return True
    if program in _PLUS_COMMANDS and any(
        word[:1] == "+" and not word[1:].isdecimal() for word in words[1:]
    ):
        return True  # +cmd runs an editor's or a pager's command (+12 goes to a line)
    old_style = program in _TARS and len(words) > 1 and words[1][:1] != "-"  # tar xIf prog
    if old_style and not _EXEC_LETTERS[program].isdisjoint(words[1]):
        return True
    return _gives_an_exec_option(program, words[1:])


def _gives_an_exec_option(program: str, words: Sequence[str]) -> bool:
    """Whether ``words`` give one of ``program``'s exec options (in any spelling)."""
    options = _EXEC_OPTIONS.get(program)
    if options is None:
        return False
    letters = _EXEC_LETTERS[program]
    return any(
        word.partition("=")[0] in options
        or (word[:1] == "-" and word[1:2] != "-" and not letters.isdisjoint(word[1:]))
        for word in words
    )


def _git_subcommand_at(words: Sequence[str]) -> int:
    """Where git's subcommand is: after its own options (``git -C dir -p log``)."""
    at = 1
    while at < len(words) and words[at][:1] == "-":
        at += 2 if words[at] in _GIT_OPTIONS_WITH_A_VALUE else 1
    return at


def _sed_scripts(words: Sequence[str]) -> list[str] | None:
    """The scripts a sed command runs: its ``-e``/``--expression`` ones, else its first
    other word; ``None`` for one it reads from a file (``-f``, ``--file``)."""
    expressions: list[str] = []
    operands: list[str] = []
    rest = iter(words[1:])
    for word in rest:
        if word == "--":
            operands.extend(rest)
        elif word.startswith("--"):  # (GNU getopt: also abbreviated)
            name, given, value = word.partition("=")
            if len(name) > 2 and "--file".startswith(name):
                return None
            if len(name) > 2 and "--expression".startswith(name):
                expressions.append(value if given else next(rest, ""))
            elif len(name) > 2 and "--line-length".startswith(name) and not given:
                next(rest, "")  # (its value, whatever it looks like)
        elif word.startswith("-") and len(word) > 1:
            for at, letter in enumerate(word[1:], 2):
                if letter == "f":
                    return None
                if letter in "el":  # its value: the rest of the word, or the next word
                    value = word[at:] or next(rest, "")
                    if letter == "e":
                        expressions.append(value)
                    break
                if letter == "i":  # (-i[SUFFIX]: the rest of the word)
                    break
        else:
            operands.append(word)
    return expressions or operands[:1]


_SED_TEXT = r"(?:[^/\\\n]|\\.)*+"  # up to an unescaped /
_SED_ADDRESS = rf"(?:\d++~\d++|\d++|\$|/{_SED_TEXT}/[IM]*+)"
_SED_PART = r"(?:(?!(?P=d))[^\\\n]|\\.)*+"  # up to the s or y command's delimiter d
_SED_COMMAND = (
    r"[{pPdDqQ=nNgGhHxlLzF](?:[ \t]*+\d++)?+"
    rf"|[sy](?P<d>[^\\\n]){_SED_PART}(?P=d){_SED_PART}(?P=d)(?:[ \t]*+[gpiImM0-9])*+"
    r"(?=[ \t]*+(?:[\n;}]|\Z))"
    r"|[aic][^\n]*+"  # text, to the end of the line
    r"|[:btT][ \t]*+[A-Za-z0-9_.-]*+(?=[ \t\n;}]|\Z)"  # a label, or a branch to one
)
# A sed script that only prints, deletes, substitutes (no e or w flag), inserts text and
# branches. Nothing else matches: not e (runs a shell), r R w W (read or write a file the
# script names), a \cREc address, an escaped newline, a # comment. Labels end where GNU
# sed's do (at a blank, ; or a newline; a \r is in one). Possessive: linear time.
_SED_HARMLESS_SCRIPT: Final = re.compile(
    rf"(?:[\s;{{}}]*+(?:{_SED_ADDRESS}(?:,(?:{_SED_ADDRESS}|[+~]\d++))?+)?+\s*+!?+\s*+"
    rf"(?:{_SED_COMMAND}))*+[\s;{{}}]*+",
    re.ASCII,
)


def _awk_reaches_out(words: Sequence[str]) -> bool:
    """Whether an awk command's words (but a field separator: ``-F'|'``) hold what lets
    its program reach outside itself (:data:`_AWK_REACHES_OUT`)."""
    separator = False
    for word in words[1:]:
        if not (separator or word.startswith("-F")) and any(
            marker in word for marker in _AWK_REACHES_OUT
        ):
            return True
        separator = word == "-F"
    return False


def _runs_its_words(words: Sequence[str]) -> bool:
    """Whether the program runs its other words (``watch``, ``ssh host``, ``eval``,
    ``sudo``), some joined into one shell line: a rule of its first words covers only
    exactly those (``watch date …`` would cover ``watch date '&&' rm -rf x``). Also
    true when the program comes after assignments or a wrapper (``time git``): a rule
    of the first words would name those, not the program."""
    return _program_at(words) > 0 or _program_name(words[0]) in _RUNNERS


def _program_name(word: str) -> str:
    """``/usr/bin/python3.11`` → ``python``: a program's name without its folder and version."""
    return _VERSION.sub("", posixpath.basename(word.split(maxsplit=1)[0] if word.strip() else word))


def _plain_words(command: str) -> tuple[str, ...] | None:
    """The words of a command the shell runs as written, else ``None``."""
    quote = ""
    for char in command:
        if char < " " or char == "\x7f":
            if char != "\t" or quote:
                return None
        elif quote == "'":
            quote = "" if char == "'" else quote
        elif quote == '"':
            if char in _DOUBLE_QUOTED_SPECIAL:
                return None
            quote = "" if char == '"' else quote
        elif char in "'\"":
            quote = char
        elif char in _SHELL_SPECIAL:
            return None
    if quote:
        return None
    words = tuple(shlex.split(command))
    return words or None


def _split_shell(command: str) -> list[str]:
    """A shell string's words, operators split off as ``;``."""
    spaced = _OPERATOR.sub(" ; ", command)
    try:
        return shlex.split(spaced)
    except ValueError:  # unbalanced quotes: the shell would refuse it too
        return spaced.split()


def _every_word(command: str) -> tuple[str, ...]:
    """Every word of a shell string, operators split off (for deny rules)."""
    return _deny_words(_split_shell(command))


def _deny_words(words: Sequence[str]) -> tuple[str, ...]:
    """The words deny rules look in: every word as written, operators taken out, the
    words of a script a shell runs (``bash -e -c '…'``) after its shell's; then, if
    they differ, the same with each path-named word (``/bin/rm``) by its name."""
    written = _written_words(words, 0)
    named = [posixpath.basename(word) if "/" in word.rstrip("/") else word for word in written]
    return tuple(written) if named == written else (*written, *named)


def _written_words(words: Sequence[str], depth: int) -> list[str]:
    found: list[str] = []
    for index, word in enumerate(words):
        if word == ";":
            continue
        found.append(word)
        script = _shell_script(words, index)
        if script is not None and depth < _MAX_NESTING:
            found += _written_words(_split_shell(script), depth + 1)
    return found


def _shell_script(words: Sequence[str], index: int) -> str | None:
    """The script ``words[index]`` runs, if it is a shell given ``-c`` (its flags
    may come apart, as in ``bash -e -c``; ``-o NAME`` takes a word; ``--`` ends them)."""
    if posixpath.basename(words[index]) not in _SHELLS:
        return None
    runs_script = False
    at = index + 1
    while at < len(words) and words[at][:1] in ("-", "+") and words[at] != "--":
        flag = words[at]
        runs_script = runs_script or (not flag.startswith("--") and "c" in flag[1:])
        at += 2 if flag in ("-o", "+o", "-O", "+O") else 1
    if at < len(words) and words[at] == "--":
        at += 1
    return words[at] if runs_script and at < len(words) else None


def _absolute(path: str, base: str, resolve: Callable[[str], str] | None) -> str:
    joined = posixpath.normpath(posixpath.join(base, path))
    if resolve is not None:
        try:
            joined = resolve(joined)
        except (OSError, ValueError):
            return "\x00"  # unresolvable: counted as outside
    return joined


def _inside(path: str, workspace: str) -> bool:
    return "\x00" not in path and (
        path == workspace or path.startswith(workspace.rstrip("/") + "/")
    )


def _escapes(word: str, cwd: str, workspace: str, resolve: Callable[[str], str] | None) -> bool:
    """Whether a word (of a command, or a string of a tool's input) may name something
    outside the workspace: a ``..`` anywhere; a ``~`` or ``file:`` start, or an
    absolute path outside, also as an option's value (``--out=/x``, ``-o/x``,
    ``@/x``); with ``resolve``, a relative path that a symlink takes out."""
    if ".." in word:
        return True
    for value in _values(word):
        if value[:5].lower() == "file:" or value.startswith("~"):
            return True
        checked = value.startswith("/") or (resolve is not None and bool(value))
        if checked and not _inside(_absolute(value, cwd, resolve), workspace):
            return True
    return False


_PARTS: Final = re.compile(r"[=,]|(?<!:):(?!//)")  # (not the colon of a URL's ://)
_SHORT_VALUE_SPAN: Final = 64


def _values(word: str) -> Iterator[str]:
    """What a word may give a program as a path: the word (unless it is an option),
    what follows its ``=`` or ``@``, and an option's attached value (``-o/x``, also
    after other letters: ``-uo/x``, ``-f./x``)."""
    if not word.startswith("-"):
        yield word
    if "=" in word:
        yield word.partition("=")[2]
    yield from _PARTS.split(word)[1:]  # --mount=type=bind,source=/etc, host:/etc
    if "@" in word:
        yield word.partition("@")[2]
    if word.startswith("-") and not word.startswith("--"):
        for index in range(2, min(len(word), _SHORT_VALUE_SPAN)):  # (where a value may start)
            yield word[index:]


# ---------------------------------------------------------------- globs


@lru_cache(maxsize=1024)
def _glob_pattern(glob: str) -> re.Pattern[str]:
    """``*`` and ``?`` within a folder, ``**`` across folders, ``[...]`` a class."""
    while "**/**" in glob:  # (repeated ** match nothing more, and backtrack badly)
        glob = glob.replace("**/**", "**")
    out: list[str] = []
    index = 0
    while index < len(glob):
        char = glob[index]
        if glob.startswith("**/", index):
            out.append("(?:[^/]*/)*")
            index += 3
            continue
        if glob.startswith("**", index):
            out.append(".*")
            index += 2
            continue
        if char == "*":
            out.append("[^/]*")
        elif char == "?":
            out.append("[^/]")
        elif char == "[":
            end = glob.find("]", index + 2)
            if end < 0:
                raise ValueError(f"unclosed [ in the glob {glob!r}")
            body = glob[index + 1 : end]
            negate = body.startswith("!")
            body = re.escape(body[1:] if negate else body).replace("\\-", "-")
            out.append(f"(?!/)[{'^' if negate else ''}{body}]")
            index = end + 1
            continue
        else:
            out.append(re.escape(char))
        index += 1
    try:
        return re.compile("".join(out), re.S)
    except re.error as exc:  # e.g. a range backwards, [z-a]
        raise ValueError(f"not a glob: {glob!r} ({exc})") from None


def glob_escape(path: str) -> str:
    """``path`` as a glob that matches only itself."""
    return re.sub(r"([*?\[])", r"[\1]", path)


# ---------------------------------------------------------------- matching


def _relative_paths(subject: Subject, workspace: str) -> tuple[tuple[str, str | None], ...]:
    """Each path, with its workspace-relative form (``None`` outside it): computed
    once per request, matched against every rule's globs."""
    prefix = workspace.rstrip("/") + "/"
    return tuple(
        (path, path[len(prefix) :] if path.startswith(prefix) and "\x00" not in path else None)
        for path in subject.paths
    )


def _names_in(command: tuple[str, ...], words: tuple[str, ...]) -> bool:
    """Whether a deny rule's words are in a command: its program, then its other words
    in order within the next words (``git -C . push`` has ``git push``)."""
    program, rest = command[0], command[1:]
    for index, word in enumerate(words):
        if word == program:
            following = iter(words[index + 1 : index + 1 + _DENY_SPAN])
            if all(any(w == wanted for w in following) for wanted in rest):
                return True
    return False


def _covers(
    entry: _Entry,
    subject: Subject,
    relative: tuple[tuple[str, str | None], ...],
) -> bool:
    """Whether every condition of the entry's rule holds for ``subject``."""
    rule = entry.rule
    if rule.kinds and subject.kind not in rule.kinds:
        return False
    if not rule.command:
        if rule.effect == "allow" and subject.all_words:
            return False  # a command is allowed only by a rule that names it
    elif rule.effect == "allow":
        words = subject.words
        if words is None or words[: len(rule.command)] != rule.command:
            return False
        if len(words) != len(rule.command) and (rule.exact or _runs_its_words(words)):
            return False
    elif not _names_in(rule.command, subject.all_words):
        return False
    if rule.paths:
        if not relative:
            return False
        matches = entry.path_matches
        if rule.effect == "allow":
            if not all(matches(path, rel) for path, rel in relative):
                return False
        elif not any(matches(path, rel) for path, rel in relative):
            return False
    return entry.title is None or entry.title.match(subject.title or "") is not None


@dataclass(frozen=True, slots=True)
class RuleAnswer:
    """A question a rule answered: which rule (and its number, from 1), the
    request, and the decision sent."""

    rule: EditorRule
    number: int
    request: PermissionRequest
    decision: Selected


@dataclass(slots=True)
class _Entry:
    rule: EditorRule
    number: int
    hits: int = 0
    relative: re.Pattern[str] | None = None  # the rule's relative globs, as one pattern
    absolute: re.Pattern[str] | None = None  # its absolute ones
    title: re.Pattern[str] | None = None  # its title glob (fnmatch's)

    def __post_init__(self) -> None:
        if self.rule.title is not None:
            self.title = re.compile(fnmatch.translate(self.rule.title))
        globs = self.rule.paths
        rel = [_glob_pattern(g).pattern for g in globs if not g.startswith("/")]
        absolute = [_glob_pattern(g).pattern for g in globs if g.startswith("/")]
        self.relative = re.compile("|".join(f"(?:{x})" for x in rel), re.S) if rel else None
        self.absolute = (
            re.compile("|".join(f"(?:{x})" for x in absolute), re.S) if absolute else None
        )

    def path_matches(self, path: str, relative: str | None) -> bool:
        if self.absolute is not None and self.absolute.fullmatch(path) is not None:
            return True
        return (
            relative is not None
            and self.relative is not None
            and self.relative.fullmatch(relative) is not None
        )


_NO_ENTRIES: Final[tuple[_Entry, ...]] = ()


class RuleEngine(Rule):
    """Editor rules as one :func:`permclient.rule` handler.

    ``workspace`` is the absolute path of the workspace the requests act in.
    ``clock`` gives the aware time now (for rules with an ``until``; default the
    system's UTC clock). ``resolve`` maps a path to the one it really names
    (:func:`os.path.realpath` follows symlinks; default: compared as written).
    ``on_answer`` is called with a :class:`RuleAnswer` for every question a rule
    answers, in the reader: it must not block (print a receipt, queue an audit
    line).

    Requests no rule decides pass to the next registration down (the person).
    """

    __slots__ = (
        "_by_kind",
        "_by_word",
        "_clock",
        "_entries",
        "_general",
        "_kind_lists",
        "_resolve",
        "on_answer",
        "workspace",
    )

    def __init__(
        self,
        rules: Iterable[EditorRule] = (),
        *,
        workspace: str | os.PathLike[str],
        clock: Callable[[], datetime] | None = None,
        resolve: Callable[[str], str] | None = None,
        on_answer: Callable[[RuleAnswer], None] | None = None,
    ) -> None:
        super().__init__(self.decide)
        root = os.fspath(workspace)
        if not root.startswith("/"):
            raise ValueError(f"the workspace must be an absolute path, not {root!r}")
        self.workspace = posixpath.normpath(root)
        self._clock = clock or (lambda: datetime.now(UTC))
        self._resolve = resolve
        self.on_answer = on_answer
        self._entries: list[_Entry] = []
        self._by_word: dict[str, list[_Entry]] = {}
        self._by_kind: dict[str, list[_Entry]] = {}
        self._general: list[_Entry] = []
        self._kind_lists: dict[str | None, list[_Entry]] = {}
        self.replace_rules(rules)

    def __repr__(self) -> str:  # (Rule's would show decide(), whose repr shows this)
        return f"RuleEngine({len(self._entries)} rules, workspace={self.workspace!r})"

    # -- the rules

    @property
    def rules(self) -> tuple[EditorRule, ...]:
        """The rules, in the order they are numbered (from 1)."""
        return tuple(entry.rule for entry in self._entries)

    def hits(self, rule: EditorRule) -> int:
        """How many questions ``rule`` answered."""
        return next((e.hits for e in self._entries if e.rule is rule), 0)

    def add(self, rule: EditorRule) -> int:
        """Add ``rule`` after the others; returns its number."""
        self.replace_rules((*self.rules, rule))
        return len(self._entries)

    def revoke(self, rule: EditorRule) -> bool:
        """Take ``rule`` out (the very object); False if it was not in."""
        if not any(entry.rule is rule for entry in self._entries):
            return False
        self.replace_rules(entry.rule for entry in self._entries if entry.rule is not rule)
        return True

    def end_session(self, session_id: str) -> list[EditorRule]:
        """Take out the rules that last until ``session_id`` ends; returns them."""
        ended = [
            e.rule
            for e in self._entries
            if e.rule.lifetime == "session" and e.rule.session_id == session_id
        ]
        for rule in ended:
            self.revoke(rule)
        return ended

    def replace_rules(self, rules: Iterable[EditorRule]) -> None:
        """Use ``rules`` (hit counts of rules kept are kept)."""
        hits = {id(entry.rule): entry.hits for entry in self._entries}
        self._entries = [
            _Entry(rule, number, hits.get(id(rule), 0)) for number, rule in enumerate(rules, 1)
        ]
        self._by_word, self._by_kind, self._general = {}, {}, []
        for entry in self._entries:
            rule = entry.rule
            mine = posixpath.normpath(rule.workspace or "/") == self.workspace
            if rule.scope == "workspace" and not mine:
                continue  # another workspace's: never matches here
            if rule.command:
                self._by_word.setdefault(rule.command[0], []).append(entry)
            elif rule.kinds:
                for kind in rule.kinds:
                    self._by_kind.setdefault(kind, []).append(entry)
            else:
                self._general.append(entry)
        self._kind_lists = {None: self._general}
        for kind, entries in self._by_kind.items():
            self._kind_lists[kind] = sorted([*self._general, *entries], key=_number)

    # -- deciding

    def decide(self, request: PermissionRequest) -> Decision | None:
        """The rule handler: an answer, or ``None`` to pass the question on."""
        found = self._match(request)
        if found is None:
            return None
        entry, decision = found
        entry.hits += 1
        if self.on_answer is not None:
            self.on_answer(RuleAnswer(entry.rule, entry.number, request, decision))
        return decision

    def record(self, answer: RuleAnswer) -> None:
        """Count ``answer`` (one :meth:`match` gave) as given, and tell ``on_answer``:
        for a host that answers a question already pending with it."""
        for entry in self._entries:
            if entry.rule is answer.rule:
                entry.hits += 1
                break
        if self.on_answer is not None:
            self.on_answer(answer)

    def denies(self, request: PermissionRequest) -> bool:
        """Whether a deny rule covers ``request``, whether or not it could answer it (a
        batch answer never allows what a deny rule covers)."""
        raw = _raw_input(request.tool_call.raw_input_json)
        denying = [e for e in self._candidates(request, raw) if e.rule.effect == "deny"]
        if not denying:
            return False
        subject = _subject(request, raw, self.workspace, self._resolve)
        relative = _relative_paths(subject, self.workspace)
        now = self._clock()
        return any(
            self._live(entry, request, now) and _covers(entry, subject, relative)
            for entry in denying
        )

    def match(self, request: PermissionRequest) -> RuleAnswer | None:
        """The rule that would answer ``request`` and how, without counting it."""
        found = self._match(request)
        return (
            None if found is None else RuleAnswer(found[0].rule, found[0].number, request, found[1])
        )

    def _candidates(self, request: PermissionRequest, raw: Any) -> list[_Entry]:
        """The rules that may match, by number: those of the request's kind or of no
        kind, and those whose program is a word of its command."""
        candidates: list[_Entry] = self._kind_lists.get(request.tool_call.kind, self._general)
        if self._by_word:
            found = [
                entry
                for word in set(_request_words(raw)[1])
                for entry in self._by_word.get(word, _NO_ENTRIES)
            ]
            if found:  # in number order (each is found once: by its first word)
                candidates = sorted([*candidates, *found], key=_number)
        return candidates

    @staticmethod
    def _live(entry: _Entry, request: PermissionRequest, now: datetime | None) -> bool:
        """Whether the rule holds for this request's session, at ``now``."""
        rule = entry.rule
        if rule.scope == "session" and rule.session_id != request.session_id:
            return False
        return rule.until is None or (now is not None and now < rule.until)

    def _match(self, request: PermissionRequest) -> tuple[_Entry, Selected] | None:
        raw = _raw_input(request.tool_call.raw_input_json)
        candidates = self._candidates(request, raw)
        if not candidates:
            return None
        subject = _subject(request, raw, self.workspace, self._resolve)
        relative = _relative_paths(subject, self.workspace)
        now = self._clock() if any(e.rule.until is not None for e in candidates) else None
        denies: list[_Entry] = []
        allows: list[_Entry] = []
        for entry in candidates:
            if self._live(entry, request, now) and _covers(entry, subject, relative):
                (denies if entry.rule.effect == "deny" else allows).append(entry)
        if denies:  # a deny beats an allow, even one it cannot answer with
            return _answering(denies, request, "reject")
        if allows and not subject.outside:
            return _answering(allows, request, "allow")
        return None


def _number(entry: _Entry) -> int:
    return entry.number


def _answering(
    entries: list[_Entry], request: PermissionRequest, verb: Literal["allow", "reject"]
) -> tuple[_Entry, Selected] | None:
    """The first rule that finds an offered option of the kind it needs."""
    kinds: dict[str, str] = {o.kind: o.option_id for o in reversed(request.options)}
    for entry in entries:
        option_id = kinds.get(f"{verb}_once")
        if option_id is None and entry.rule.use_always:
            option_id = kinds.get(f"{verb}_always")
        if option_id is not None:
            return entry, Selected(option_id)
    return None


# ---------------------------------------------------------------- reasons


def with_reason(decision: Selected, reason: str) -> Selected:
    """``decision`` carrying the person's ``reason`` in its ``_meta``
    (:data:`REASON_META_KEY`), unprintable characters dropped, cut at
    :data:`MAX_REASON` characters. An empty reason adds nothing."""
    text = "".join(c for c in reason if c.isprintable() or c == "\n").strip()[:MAX_REASON]
    if not text:
        return decision
    meta = dict(decision.meta or {})
    meta[REASON_META_KEY] = text
    return Selected(decision.option_id, meta=meta)


def reason_of(meta: object) -> str | None:
    """The reason in an answer's ``_meta``, if it holds a string one."""
    if isinstance(meta, dict):
        reason = meta.get(REASON_META_KEY)
        if isinstance(reason, str) and reason:
            return reason[:MAX_REASON]
    return None


# ---------------------------------------------------------------- suggestions


def suggested_rules(
    request: PermissionRequest,
    *,
    workspace: str,
    effect: Effect,
    created: datetime | None = None,
) -> list[EditorRule]:
    """The rules a card offers to save for ``request``, narrowest first, scoped
    to ``workspace`` until revoked.

    A plain shell command: its program and subcommand (``git status …``); exactly
    the whole command when its second word is not a subcommand (a prefix of
    ``find . -name x`` could go on with ``-delete``). A request with paths: this
    file (or these files), then this folder. Otherwise its kind and exact title
    (never for ``execute``: a title says nothing of what runs). Nothing for a
    request that names anything outside the workspace (no rule could allow it) or
    a command the shell would expand.
    """
    subject = subject_of(request, workspace)
    if subject.outside and effect == "allow":
        return []

    def scoped(**matches: Any) -> EditorRule:
        return EditorRule(
            effect=effect,
            scope="workspace",
            lifetime="revoked",
            workspace=workspace,
            created=created,
            **matches,
        )

    kinds = (subject.kind,) if subject.kind else ()
    try:
        if subject.words is not None:
            words = subject.words
            if len(words) > 1 and _SUBCOMMAND.fullmatch(words[1]) and not _runs_its_words(words):
                return [scoped(command=words[:2])]
            return [scoped(command=words, exact=True)]  # (a prefix of it could be anything)
        if subject.all_words:
            return []
        if subject.paths:
            relative = [  # outside (or the workspace itself): an absolute glob
                posixpath.relpath(path, workspace)
                if path != workspace and _inside(path, workspace)
                else path
                for path in subject.paths
            ]
            found = [scoped(kinds=kinds, paths=tuple(glob_escape(path) for path in relative))]
            folders = {posixpath.dirname(path) for path in relative}
            if workspace in subject.paths:
                folders = set()  # the workspace itself: no folder of it is narrower
            if len(folders) == 1 and (folder := folders.pop()) and folder != "/":
                found.append(scoped(kinds=kinds, paths=(glob_escape(folder) + "/**",)))
            return found
        if subject.title and kinds and subject.kind != "execute":
            return [scoped(kinds=kinds, title=glob_escape(subject.title))]
    except ValueError:  # a word, path or title no rule can hold (empty, a NUL...)
        return []
    return []


_SUBCOMMAND = re.compile(r"[a-z][a-z0-9-]*")


# ---------------------------------------------------------------- files


class RuleFileError(Exception):
    """One rule (or a whole file) that cannot be used: ``PATH:LINE: message``."""

    def __init__(self, path: Path, message: str, line: int | None = None) -> None:
        where = f"{path}:{line}" if line is not None else str(path)
        super().__init__(f"{where}: {message}")
        self.path = path
        self.line = line


class _RuleFields(msgspec.Struct, forbid_unknown_fields=True):
    effect: str
    scope: str
    lifetime: str
    session_id: str | None = None
    workspace: str | None = None
    until: datetime | None = None
    kinds: list[str] = msgspec.field(default_factory=list)
    command: list[str] = msgspec.field(default_factory=list)
    paths: list[str] = msgspec.field(default_factory=list)
    title: str | None = None
    use_always: bool = False
    exact: bool = False
    created: datetime | None = None
    note: str = ""


FILE_VERSION: Final = 1
_UNLESS_SET: Final = ("use_always", "exact", "note")  # written only when set


def load_rules(path: Path) -> tuple[list[EditorRule], list[RuleFileError]]:
    """The usable rules of a rules file, and what was wrong with the rest.

    A file that does not exist has no rules and no error. A file that cannot be
    read or is not TOML gives no rules at all (one error); a rule that cannot be
    used (an unknown key, a missing one, a wrong value) is skipped, with an error
    naming its line. A broken file never allows more than its good rules say.
    """
    try:
        text, data = read_toml(path)
    except TomlFileError as exc:
        if not path.exists() and not path.is_symlink():
            return [], []
        return [], [RuleFileError(path, exc.message, exc.line)]
    version = data.get("version", FILE_VERSION)
    if version != FILE_VERSION:
        line = locate(text, ("version",))
        return [], [RuleFileError(path, f"version {version!r} is not 1: no rule is read", line)]
    unknown = sorted(set(data) - {"version", "rule"})
    errors = [
        RuleFileError(path, f"unknown key {key!r} (ignored)", locate(text, (key,)))
        for key in unknown
    ]
    entries = data.get("rule", [])
    if not isinstance(entries, list):
        return [], [*errors, RuleFileError(path, "rule must be [[rule]] tables", 1)]
    rules: list[EditorRule] = []
    for index, entry in enumerate(entries):
        key: Key = ("rule", index)
        try:
            fields = msgspec.convert(entry, _RuleFields)
            rules.append(
                EditorRule(
                    effect=fields.effect,  # type: ignore[arg-type]  # checked on build
                    scope=fields.scope,  # type: ignore[arg-type]
                    lifetime=fields.lifetime,  # type: ignore[arg-type]
                    session_id=fields.session_id,
                    workspace=fields.workspace,
                    until=fields.until,
                    kinds=tuple(fields.kinds),
                    command=tuple(fields.command),
                    paths=tuple(fields.paths),
                    title=fields.title,
                    use_always=fields.use_always,
                    exact=fields.exact,
                    created=fields.created,
                    note=fields.note,
                )
            )
        except (msgspec.ValidationError, ValueError) as exc:
            message, at = _where(str(exc))
            line = locate(text, (*key, at) if at else key)
            errors.append(RuleFileError(path, f"rule {index + 1} skipped: {message}", line))
    return rules, errors


_UNKNOWN_FIELD = re.compile(r"Object contains unknown field `(?P<name>[^`]*)`")
_AT_FIELD = re.compile(r"(?P<what>.*) - at `\$\.(?P<name>[A-Za-z_]+)[^`]*`")


def _where(message: str) -> tuple[str, str | None]:
    """A rule's error as ``(message, the key to blame or None)``."""
    if unknown := _UNKNOWN_FIELD.fullmatch(message):
        return f"unknown key {unknown['name']!r}", unknown["name"]
    if at := _AT_FIELD.fullmatch(message):
        return f"{at['name']}: {at['what']}", at["name"]
    return message, None


def save_rules(path: Path, rules: Iterable[EditorRule]) -> None:
    """Write ``rules`` (but those that end with their session) to ``path``,
    atomically, readable by its owner only. Raises :class:`OSError`."""
    lines = [
        "# Editor approval rules (permclient.rules). A rule that cannot be read is",
        "# skipped with a warning; a deny rule beats an allow rule.",
        f"version = {FILE_VERSION}",
    ]
    for rule in rules:
        if rule.lifetime == "session":
            continue
        lines += ["", "[[rule]]"]
        for name in _RuleFields.__struct_fields__:
            value = getattr(rule, name)
            if (
                value is None
                or value == ()
                or (name in ("use_always", "exact", "note") and not value)
            ):
                continue
            lines.append(f"{name} = {_toml_value(value)}")
    path.parent.mkdir(parents=True, exist_ok=True)
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(descriptor, "w", encoding="utf-8") as file:
            file.write("\n".join(lines) + "\n")
        os.replace(temporary, path)
    except BaseException:
        temporary.unlink(missing_ok=True)
        raise


def _toml_value(value: object) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, datetime):
        offset = value.utcoffset()
        if offset is not None and (offset.seconds % 60 or offset.microseconds):
            value = value.astimezone(UTC)  # TOML offsets are whole minutes
        return value.isoformat()
    if isinstance(value, tuple):
        return "[" + ", ".join(_toml_value(item) for item in value) + "]"
    text = str(value)
    escaped = "".join(
        '\\"'
        if c == '"'
        else "\\\\"
        if c == "\\"
        else f"\\u{ord(c):04x}"
        if c < " " or c == "\x7f"
        else c
        for c in text
    )
    return f'"{escaped}"'
