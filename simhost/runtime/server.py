"""Serving the runtime: one editor connection on a stream, or on stdin/stdout.

:func:`serve` answers the editor's requests on any ``trio.abc.Stream`` until
the editor closes it; :func:`serve_stdio` does so on the process's
stdin/stdout. The dialect (``RuntimeConfig.dialect``) picks permclient's
framing and cancel notification (bridge: Content-Length and
``$/cancelRequest {"id"}``; ACP: one JSON object per line and
``$/cancel_request {"requestId"}``) and the method table registered on the
connection (:mod:`simhost.runtime.bridge` or :mod:`simhost.runtime.acp`). The
turns, tools, policies, presets, grants and sessions behind them are the same
(:mod:`simhost.runtime.core`).
"""

from __future__ import annotations

import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from contextlib import ExitStack, suppress
from typing import Final

import trio

from permclient import DialectName, open_client
from simhost.runtime.acp import AcpMethods
from simhost.runtime.bridge import BridgeMethods
from simhost.runtime.core import Runtime, RuntimeConfig
from simhost.runtime.sessions import SessionStore

__all__ = ["DIALECTS", "Runtime", "RuntimeConfig", "serve", "serve_stdio"]

log = logging.getLogger("simhost.runtime")

DIALECTS: Final[dict[DialectName, Callable[[Runtime, ExitStack], None]]] = {
    "bridge": lambda runtime, stack: BridgeMethods(runtime).register(stack),
    "acp": lambda runtime, stack: AcpMethods(runtime).register(stack),
}
"""Each dialect's method table: registers its handlers on the runtime's connection."""


# ------------------------------------------------------------------- serving


class _DrainAtEof(trio.abc.Stream):
    """A stream that, at end of input, first lets every task run until all are blocked.

    So requests already received and answerable without waiting (``initialize``,
    ``sessionList``, ...) are answered before permclient tears the connection
    down: ``printf … | simhost runtime --stdio`` gets its answers. Whatever
    still waits then (a question to the editor, a running command) is cancelled.
    """

    def __init__(self, inner: trio.abc.Stream) -> None:
        self.inner = inner

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        await self.inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self.inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        data = await self.inner.receive_some(max_bytes)
        if not data:
            await _wait_all_tasks_blocked()
        return data

    async def aclose(self) -> None:
        await self.inner.aclose()


async def _wait_all_tasks_blocked() -> None:
    """``trio.testing.wait_all_tasks_blocked``, imported at the end only, and without
    pytest: ``trio.testing`` imports it where it is installed (for ``RaisesGroup``,
    which the runtime never uses), and that took a second or more of every exit."""
    if "trio.testing" not in sys.modules and "pytest" not in sys.modules:
        sys.modules["pytest"] = None  # type: ignore[assignment]  # its import fails: skipped
        try:
            import trio.testing
        finally:
            del sys.modules["pytest"]
    import trio.testing

    await trio.testing.wait_all_tasks_blocked()


async def serve(
    stream: trio.abc.Stream, config: RuntimeConfig, store: SessionStore | None = None
) -> None:
    """Serve one editor over ``stream`` until it closes its side.

    ``store`` defaults to the sessions of ``config.state_dir``. Raises
    :class:`OSError` if the state folder cannot be created or used.
    """
    if store is None:
        store = SessionStore(config.state_dir)
    register = DIALECTS[config.dialect]
    async with open_client(_DrainAtEof(stream), dialect=config.dialect) as client:
        with ExitStack() as stack:
            register(Runtime(client, config, store), stack)
            reason = await client.wait_closed()
    log.info("the editor closed the connection: %s", reason)


async def _stop_on_signal(scope: trio.CancelScope) -> None:
    # SIGTERM or SIGHUP (the editor or its terminal went away): unwind like a
    # cancelled turn, so running commands' process groups are killed, not orphaned.
    with trio.open_signal_receiver(signal.SIGTERM, signal.SIGHUP) as signals:
        async for signum in signals:
            log.info("received %s: stopping", signal.Signals(signum).name)
            scope.cancel()
            return


def _claim_stdio() -> tuple[int, int]:
    """Take stdin/stdout for the protocol; point fds 0 and 1 elsewhere.

    Returns the protocol's (input, output) descriptors. From then on, anything
    that writes to fd 1 (a stray ``print``, a child process) lands on stderr,
    and nothing can read the editor's bytes from fd 0.
    """
    protocol_in = os.dup(0)
    protocol_out = os.dup(1)
    try:
        os.dup2(2, 1)
    except OSError:
        null_out = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null_out, 1)
        os.close(null_out)
    null_in = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null_in, 0)
    os.close(null_in)
    sys.stdout = sys.stderr
    return protocol_in, protocol_out


async def serve_stdio(
    config: RuntimeConfig, fds: Sequence[int] | None = None, store: SessionStore | None = None
) -> None:
    """Serve on stdin/stdout (or on the given ``(input, output)`` descriptors).

    Raises :class:`OSError` if the state folder cannot be created or used
    (before anything is served, so not inside an exception group).
    """
    if store is None:
        store = SessionStore(config.state_dir)
    protocol_in, protocol_out = fds if fds is not None else _claim_stdio()
    # FdStream makes the descriptors non-blocking, and that flag belongs to the
    # open file, which a terminal shares with the shell: put it back afterwards.
    keep = [os.dup(fd) for fd in (protocol_in, protocol_out)]
    try:
        stream = trio.StapledStream(
            trio.lowlevel.FdStream(protocol_out), trio.lowlevel.FdStream(protocol_in)
        )
        async with trio.open_nursery() as nursery:
            nursery.start_soon(_stop_on_signal, nursery.cancel_scope)
            await serve(stream, config, store)
            nursery.cancel_scope.cancel()
    finally:
        for fd in keep:
            with suppress(OSError):
                os.set_blocking(fd, True)
            os.close(fd)
