"""Spawn an agent runtime and talk to it over its stdio."""

from __future__ import annotations

import logging
import os
import signal
import subprocess
from collections.abc import AsyncIterator, Mapping, Sequence
from contextlib import ExitStack, asynccontextmanager, suppress
from typing import IO, Final

import trio

from ._client import Client, open_client
from ._connection import DEFAULT_MAX_PENDING, DEFAULT_MAX_PENDING_BYTES, DialectName
from ._telemetry import Telemetry
from .framing import DEFAULT_MAX_FRAME_SIZE

log = logging.getLogger("permclient")

# How long a runtime gets to exit after its stdin closes, then after SIGTERM.
_EXIT_GRACE_S: Final = 2.0
_TERM_GRACE_S: Final = 2.0


@asynccontextmanager
async def open_process(
    argv: Sequence[str],
    *,
    dialect: DialectName = "bridge",
    env: Mapping[str, str] | None = None,
    cwd: str | os.PathLike[str] | None = None,
    stderr: str | os.PathLike[str] | IO[bytes] | IO[str] | None = None,
    telemetry: Telemetry | None = None,
    max_frame_size: int = DEFAULT_MAX_FRAME_SIZE,
    max_pending: int = DEFAULT_MAX_PENDING,
    max_pending_bytes: int = DEFAULT_MAX_PENDING_BYTES,
) -> AsyncIterator[Client]:
    """Start ``argv`` as a runtime and yield a :class:`Client` over its stdin/stdout.

    The runtime's stderr goes to ours (``stderr=None``), to a file path (appended
    to), or to an open file. ``env`` replaces the environment when given. The
    runtime runs in a process group of its own; leaving the context closes its
    stdin, waits 2 s for it to exit, then sends SIGTERM to the whole group,
    waits 2 s more, then SIGKILL: nothing it started is left running. The
    process is available as ``client.process``. ``telemetry``, ``max_frame_size``,
    ``max_pending`` and ``max_pending_bytes`` are passed to :func:`open_client`.

    Raises :class:`OSError` (e.g. ``FileNotFoundError``) if it cannot be started.
    """
    with ExitStack() as files:
        err_target: IO[bytes] | IO[str] | None
        if isinstance(stderr, str | os.PathLike):
            err_target = files.enter_context(open(stderr, "ab"))  # noqa: ASYNC230
        else:
            err_target = stderr
        process = await trio.lowlevel.open_process(
            list(argv),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=err_target,
            env=dict(env) if env is not None else None,
            cwd=cwd,
            start_new_session=True,
        )
        assert process.stdin is not None and process.stdout is not None
        try:
            stream = trio.StapledStream(process.stdin, process.stdout)
            async with open_client(
                stream,
                dialect=dialect,
                telemetry=telemetry,
                max_frame_size=max_frame_size,
                max_pending=max_pending,
                max_pending_bytes=max_pending_bytes,
            ) as client:
                client.process = process
                yield client
        finally:
            with trio.CancelScope(shield=True):
                await _stop(process)


async def _stop(process: trio.Process) -> None:
    if process.stdin is not None:
        await process.stdin.aclose()
    with trio.move_on_after(_EXIT_GRACE_S):
        await process.wait()
    if process.returncode is None:
        log.info("runtime %d did not exit after stdin closed; sending SIGTERM", process.pid)
        _signal_group(process, signal.SIGTERM)
        with trio.move_on_after(_TERM_GRACE_S):
            await process.wait()
    if process.returncode is None:
        log.warning("runtime %d ignored SIGTERM; killing it", process.pid)
        _signal_group(process, signal.SIGKILL)
        await process.wait()
    else:
        # The leader is gone; anything it started that lingers in its group is an orphan.
        _signal_group(process, signal.SIGKILL)


def _signal_group(process: trio.Process, sig: signal.Signals) -> None:
    with suppress(ProcessLookupError, PermissionError):
        os.killpg(process.pid, sig)
