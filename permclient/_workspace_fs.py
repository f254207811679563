"""Files inside a folder and never outside it: the file access of ``permclient.acp``'s
``fs/*`` service and of ``simhost``'s runtime tools.

A path is resolved once, symbolic links followed, and must lie inside the folder
(:func:`locate`). The file is then reached from a descriptor of the folder, one
directory at a time, each opened with ``O_NOFOLLOW``: a part of the path swapped
for a symbolic link after the check makes the walk fail; it never leads out.

Only a regular file with a single link is read or written: a FIFO or a device is
refused (opened with ``O_NONBLOCK`` and checked with ``fstat``, so nothing
blocks), and so is a file with a second hard link, whose other name may be
anywhere. A write goes to a new file in the same directory, renamed over the old
name: the rename replaces the directory entry and never writes through a link
that appeared meanwhile.

Every failure is a :class:`Refused` whose text is one line naming the path, with
any byte of a name that is not UTF-8 escaped (``\\xff``): names come from the
file system (a link's target, a listing), and the text must fit in JSON.
(What no check can catch: a directory *moved* out of the folder while a write
is under way takes that write with it.)
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Final, Literal, TypeAlias

__all__ = [
    "RefusalKind",
    "Refused",
    "delete_file",
    "escape_non_utf8",
    "file_status",
    "is_utf8",
    "locate",
    "read_file",
    "read_head",
    "replace_file",
    "resolve_links",
]

RefusalKind: TypeAlias = Literal["outside", "missing", "changed", "refused", "failed"]
"""Why a file was not touched: ``outside`` the folder (a path that leads out, or a
hard-linked file), ``missing``, ``changed`` (not what the caller expected),
``refused`` (a folder, a FIFO, a symbolic link on the way, too large...), or
``failed`` (the system said no: permissions, disk full...)."""

_ROOT_FLAGS: Final = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC
_DIR_FLAGS: Final = _ROOT_FLAGS | os.O_NOFOLLOW
_READ_FLAGS: Final = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_TEMP_FLAGS: Final = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(Exception):
    """A file that was not read, written or deleted: ``str()`` is the reason, one line,
    valid UTF-8 (see :func:`escape_non_utf8`)."""

    def __init__(self, kind: RefusalKind, reason: str) -> None:
        reason = escape_non_utf8(reason)
        super().__init__(reason)
        self.kind: RefusalKind = kind
        self.reason = reason


def is_utf8(text: str | Path) -> bool:
    """Whether ``text`` (a path as Python spells it) is valid UTF-8: no byte of a
    non-UTF-8 name carried as a lone surrogate (``surrogateescape``)."""
    try:
        str(text).encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def escape_non_utf8(text: str | Path) -> str:
    """``text`` with each byte of a name that is not UTF-8 written ``\\xff``.

    A name read from the file system arrives with such bytes as lone surrogates,
    which no JSON encoder takes; valid text is returned unchanged.
    """
    text = str(text)
    if is_utf8(text):
        return text
    try:
        raw = text.encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate no file name decodes to
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return raw.decode("utf-8", "backslashreplace")


def resolve_links(path: Path, shown: str) -> Path:
    """``path`` with symbolic links followed; ``shown`` names it in a refusal.

    Raises :class:`Refused` (``refused``) for a symbolic link loop or a path no
    system takes (a NUL, a name too long).
    """
    try:
        return path.resolve()
    except RuntimeError:  # Python < 3.13 reports a symbolic link loop so
        raise Refused("refused", f"{shown}: symbolic link loop") from None
    except (OSError, ValueError) as exc:
        raise Refused("refused", f"{shown}: {_strerror(exc)}") from None


def locate(root: Path, path: Path) -> tuple[str, ...]:
    """The parts of ``path`` below ``root`` once symbolic links are followed.

    ``root`` is absolute and resolved; ``path`` absolute. Raises :class:`Refused`:
    ``outside`` when the resolved path is not inside ``root`` (or is ``root``
    itself), ``refused`` for a symbolic link loop or a path no system takes.
    """
    resolved = resolve_links(path, str(path))
    if resolved == root or not resolved.is_relative_to(root):
        shown = str(path) if path == resolved else f"{path} (-> {resolved})"
        raise Refused("outside", f"{shown} is outside {root}")
    return resolved.relative_to(root).parts


def file_status(root: Path, parts: tuple[str, ...]) -> os.stat_result | None:
    """The status of the regular file ``root/parts``, ``None`` if there is none.

    Raises :class:`Refused` for anything that is not a regular file with one
    link, and for a path that cannot be walked.
    """
    path = _shown(root, parts)
    with _parent(root, parts, path) as dir_fd:
        return _existing(dir_fd, parts[-1], path, root)


def read_file(root: Path, parts: tuple[str, ...], limit: int) -> bytes:
    """The content of the regular file ``root/parts``, refused above ``limit`` bytes."""
    path = _shown(root, parts)
    with _parent(root, parts, path) as dir_fd:
        return _read_at(dir_fd, parts[-1], path, root, limit, truncate=False)


def read_head(root: Path, parts: tuple[str, ...], size: int) -> bytes:
    """At most the first ``size`` bytes of the regular file ``root/parts``."""
    path = _shown(root, parts)
    with _parent(root, parts, path) as dir_fd:
        return _read_at(dir_fd, parts[-1], path, root, size, truncate=True)


_ANY: Final = object()


def replace_file(
    root: Path,
    parts: tuple[str, ...],
    data: bytes,
    *,
    expected: object = _ANY,
    make_parents: bool = False,
) -> bool:
    """Write ``data`` as the file ``root/parts``; returns whether it was created.

    ``expected`` (bytes, or ``None`` for no file) is what the file must hold now, else the
    write is refused ``changed``. ``make_parents`` creates missing directories
    (inside ``root``, without following links). An existing file keeps its
    permission bits but not setuid, setgid or sticky (new content is not what was
    trusted with them); a new one gets the usual ``0o666`` less the umask.
    """
    path = _shown(root, parts)
    name = parts[-1]
    with _parent(root, parts, path, make_parents=make_parents) as dir_fd:
        current = _existing(dir_fd, name, path, root)
        if expected is not _ANY:
            # One byte more than expected is enough to tell a longer file apart.
            size = len(expected) + 1 if isinstance(expected, bytes) else 1
            now = None if current is None else _read_at(dir_fd, name, path, root, size, True)
            if now != expected:
                raise Refused("changed", f"{path} changed since it was read; not written")
        if current is not None and not os.access(
            name, os.W_OK, dir_fd=dir_fd, follow_symlinks=False
        ):
            raise Refused("failed", f"{path}: Permission denied")
        # A fixed short name: the target's own name may already be 255 bytes long.
        temp = f".permclient-{secrets.token_hex(6)}.tmp"
        mode = 0o666 if current is None else stat.S_IMODE(current.st_mode) & 0o777
        try:
            fd = os.open(temp, _TEMP_FLAGS, 0o666 if current is None else 0o600, dir_fd=dir_fd)
            try:
                if current is not None:
                    os.fchmod(fd, mode)
                with os.fdopen(fd, "wb", closefd=False) as file:
                    file.write(data)
            finally:
                os.close(fd)
            os.replace(temp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException as exc:
            with suppress(OSError):
                os.unlink(temp, dir_fd=dir_fd)
            if isinstance(exc, OSError):
                raise _refusal(exc, path) from None
            raise
    return current is None


def delete_file(root: Path, parts: tuple[str, ...]) -> None:
    """Remove the regular file ``root/parts`` (one link only; never a folder or a link)."""
    path = _shown(root, parts)
    with _parent(root, parts, path) as dir_fd:
        if _existing(dir_fd, parts[-1], path, root) is None:
            raise Refused("missing", f"{path} does not exist")
        try:
            os.unlink(parts[-1], dir_fd=dir_fd)
        except OSError as exc:
            raise _refusal(exc, path) from None


# ------------------------------------------------------------------ the walk


def _shown(root: Path, parts: tuple[str, ...]) -> Path:
    if not parts or any(part in ("", ".", "..") or "/" in part for part in parts):
        raise ValueError(f"not parts of a resolved path: {parts!r}")
    return root.joinpath(*parts)


@contextmanager
def _parent(
    root: Path, parts: tuple[str, ...], path: Path, *, make_parents: bool = False
) -> Iterator[int]:
    """A descriptor of the directory holding ``root/parts``, reached without following links."""
    try:
        fd = os.open(root, _ROOT_FLAGS)
    except OSError as exc:
        raise Refused("failed", f"{path}: cannot open {root}: {_strerror(exc)}") from None
    try:
        for index, name in enumerate(parts[:-1]):
            try:
                if make_parents:
                    with suppress(FileExistsError):
                        os.mkdir(name, dir_fd=fd)
                next_fd = os.open(name, _DIR_FLAGS, dir_fd=fd)
            except OSError as exc:
                step = root.joinpath(*parts[: index + 1])
                raise _walk_refusal(exc, fd, name, step, path) from None
            os.close(fd)
            fd = next_fd
        yield fd
    finally:
        os.close(fd)


def _walk_refusal(exc: OSError, dir_fd: int, name: str, step: Path, path: Path) -> Refused:
    if exc.errno == errno.ENOTDIR:  # O_DIRECTORY | O_NOFOLLOW says so for a link too
        try:
            is_link = stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
        except OSError:
            is_link = False
        if is_link:
            return Refused("refused", f"{path}: {step} is now a symbolic link; not followed")
        return Refused("refused", f"{path}: {step} is not a folder")
    return _refusal(exc, path)


def _existing(dir_fd: int, name: str, path: Path, root: Path) -> os.stat_result | None:
    """``lstat`` of ``name``: ``None`` if absent; a regular file with one link, else refused."""
    try:
        status = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return None
    except OSError as exc:
        raise _refusal(exc, path) from None
    _check_regular(status, path, root)
    return status


def _check_regular(status: os.stat_result, path: Path, root: Path) -> None:
    mode = status.st_mode
    if stat.S_ISDIR(mode):
        raise Refused("refused", f"{path} is a folder")
    if stat.S_ISLNK(mode):
        raise Refused("refused", f"{path} is now a symbolic link; not followed")
    if not stat.S_ISREG(mode):
        raise Refused("refused", f"{path} is not a regular file ({_file_type(mode)})")
    if status.st_nlink > 1:
        raise Refused(
            "outside",
            f"{path} has {status.st_nlink} hard links: its content may also be outside {root}",
        )


def _file_type(mode: int) -> str:
    if stat.S_ISFIFO(mode):
        return "a FIFO"
    if stat.S_ISSOCK(mode):
        return "a socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "a device"
    return "not a file"


def _read_at(dir_fd: int, name: str, path: Path, root: Path, limit: int, truncate: bool) -> bytes:
    # lstat first, so a FIFO or a device is never even opened; then fstat what was
    # opened, in case it was swapped in between.
    if _existing(dir_fd, name, path, root) is None:
        raise Refused("missing", f"{path} does not exist")
    try:
        fd = os.open(name, _READ_FLAGS, dir_fd=dir_fd)
    except OSError as exc:
        raise _refusal(exc, path) from None
    with os.fdopen(fd, "rb") as file:
        try:
            status = os.fstat(fd)
            _check_regular(status, path, root)
            if status.st_size > limit and not truncate:
                raise Refused("refused", f"{path} is larger than {limit} bytes")
            data = file.read(limit + 1)  # the file may have grown since
        except OSError as exc:
            raise _refusal(exc, path) from None
    if len(data) > limit:
        if truncate:
            return data[:limit]
        raise Refused("refused", f"{path} is larger than {limit} bytes")
    return data


def _refusal(exc: OSError, path: Path) -> Refused:
    code = exc.errno
    if code == errno.ENOENT:
        return Refused("missing", f"{path} does not exist")
    if code == errno.ENOTDIR:
        return Refused("refused", f"{path}: a part of it is not a folder")
    if code == errno.ELOOP:
        return Refused("refused", f"{path} is now a symbolic link; not followed")
    if code == errno.EISDIR:
        return Refused("refused", f"{path} is a folder")
    return Refused("failed", f"{path}: {_strerror(exc)}")


def _strerror(exc: Exception) -> str:
    if isinstance(exc, OSError) and exc.strerror:
        return exc.strerror
    return str(exc)
