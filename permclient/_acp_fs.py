"""ACP's file-system service: ``fs/read_text_file`` and ``fs/write_text_file``,
confined to the working directory of the session each request names.

:class:`permclient.acp.AcpAgent` serves these when asked to
(``read_files=True`` / ``write_files=True``); the confinement itself (symbolic
links, hard links, FIFOs, devices) is :mod:`permclient._workspace_fs`'s.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Final

import msgspec
import trio

from . import _workspace_fs
from ._errors import RequestError
from ._messages import ErrorCode

MAX_READ_BYTES: Final = 16 * 1024 * 1024
"""``fs/read_text_file`` refuses files larger than this (an error response)."""

_INVALID_PARAMS: Final = int(ErrorCode.INVALID_PARAMS)
_INTERNAL_ERROR: Final = int(ErrorCode.INTERNAL_ERROR)


class _ReadParams(msgspec.Struct, rename="camel"):
    session_id: str
    path: str
    line: int | None = None
    limit: int | None = None


class _WriteParams(msgspec.Struct, rename="camel"):
    session_id: str
    path: str
    content: str


class FileService:
    """Reads and writes text files for an agent, inside its sessions' directories.

    A request must name a session added with :meth:`add_session` and an
    absolute path that lies inside that session's directory once symbolic links
    are resolved; anything else is an error response, never a read or write.
    """

    def __init__(self) -> None:
        self._roots: dict[str, Path] = {}

    def add_session(self, session_id: str, root: Path) -> None:
        """Serve ``session_id``'s requests inside ``root`` (an absolute path)."""
        self._roots[session_id] = root

    async def read(self, params: Any) -> dict[str, Any]:
        """Answer ``fs/read_text_file``: ``{"content": text}`` (``line`` is 1-based)."""
        request = _convert(params, _ReadParams)
        root, parts = self._confined(request.session_id, request.path)
        try:
            data = await trio.to_thread.run_sync(
                _workspace_fs.read_file, root, parts, MAX_READ_BYTES
            )
        except _workspace_fs.Refused as exc:
            raise _fs_error(exc) from None
        text = data.decode("utf-8", errors="replace")
        if request.line is not None or request.limit is not None:
            lines = text.splitlines(keepends=True)
            start = max((request.line or 1) - 1, 0)
            end = None if request.limit is None else start + max(request.limit, 0)
            text = "".join(lines[start:end])
        return {"content": text}

    async def write(self, params: Any) -> dict[str, Any]:
        """Answer ``fs/write_text_file``: the file is replaced, ``{}``."""
        request = _convert(params, _WriteParams)
        root, parts = self._confined(request.session_id, request.path)
        data = request.content.encode("utf-8")
        try:
            await trio.to_thread.run_sync(_workspace_fs.replace_file, root, parts, data)
        except _workspace_fs.Refused as exc:
            raise _fs_error(exc) from None
        return {}

    def _confined(self, session_id: str, path_text: str) -> tuple[Path, tuple[str, ...]]:
        """The session's resolved directory and the parts of ``path_text`` below it."""
        root = self._roots.get(session_id)
        if root is None:
            raise RequestError(_INVALID_PARAMS, f"unknown session {session_id!r}")
        path = Path(path_text)
        if not path.is_absolute():
            raise RequestError(_INVALID_PARAMS, f"not an absolute path: {path_text!r}")
        try:
            resolved_root = root.resolve()
        except (OSError, RuntimeError) as exc:
            reason = _workspace_fs.escape_non_utf8(f"cannot resolve {root}: {exc}")
            raise RequestError(_INTERNAL_ERROR, reason) from None
        try:
            return resolved_root, _workspace_fs.locate(resolved_root, path)
        except _workspace_fs.Refused as exc:
            raise _fs_error(exc) from None


def _convert(params: Any, kind: type[Any]) -> Any:
    try:
        return msgspec.convert(params, kind)
    except msgspec.ValidationError as exc:
        raise RequestError(_INVALID_PARAMS, f"invalid params: {exc}") from None


def _fs_error(refused: _workspace_fs.Refused) -> RequestError:
    """A refusal as the error response: -32002 for no such file, -32603 when the
    system failed, else -32602 (the request asks for what is not served)."""
    if refused.kind == "missing":
        return RequestError(ErrorCode.RESOURCE_NOT_FOUND, refused.reason)
    if refused.kind == "failed":
        return RequestError(_INTERNAL_ERROR, refused.reason)
    return RequestError(_INVALID_PARAMS, refused.reason)
