"""Wiring of ``simhost serve``: the agent, the relay, the sessions and the web server,
in one trio run.

:func:`run_serve` starts the agent (the reference runtime, or ``--agent``) as a
child, opens a first session, serves the page and the relay protocol, prints
``serving at http://HOST:PORT/?token=TOKEN`` on stdout, and runs until Ctrl-C
(or SIGTERM) or until the agent goes away. On the way out every question still
pending is withdrawn (the agent gets ``cancelled``, every view is told), the
server stops, and leaving :func:`permclient.open_process` stops the agent.
"""

from __future__ import annotations

import functools
import signal
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import Final, TypeVar

import trio
from rich.console import Console
from rich.text import Text

import permclient
from permclient import PermclientError
from permclient.relay import Relay
from simhost._usage import one_line, plain_console
from simhost.chat.backends import AcpBackend, Backend, BridgeBackend
from simhost.chat.launch import ChatConfig, RuntimeLog
from simhost.chat.protocol import InitializeResult
from simhost.chat.text import visible
from simhost.rulebook import open_rules

from .host import ServeHost
from .server import Gate, serve_relay

__all__ = ["ServeConfig", "run_serve"]

LOG_NAME: Final = "serve-agent.log"
# How long views have to take their close frames before the server stops anyway.
SHUTDOWN_GRACE_S: Final = 3.0

T = TypeVar("T")


@dataclass(frozen=True)
class ServeConfig:
    """What ``simhost serve`` was asked to do: the agent (as ``simhost chat`` starts
    it) and where to listen."""

    agent: ChatConfig
    host: str
    port: int
    token: str


async def run_serve(
    config: ServeConfig, *, console: Console | None = None, err_console: Console | None = None
) -> int:
    """Run ``simhost serve``; the exit code: 0 when stopped by Ctrl-C or SIGTERM, 1
    when the agent could not start or went away, 2 when the state folder or the
    address cannot be used."""
    console = console or plain_console()
    err_console = err_console or plain_console(stderr=True)
    agent = config.agent
    argv = agent.runtime_argv()
    cwd = agent.workspace if agent.runtime_cmd is not None else None
    role = "agent" if agent.dialect == "acp" else "runtime"
    try:
        log = RuntimeLog(agent.state_dir, LOG_NAME)
    except OSError as exc:
        _error(err_console, f"cannot use the state folder {agent.state_dir}: {exc.strerror}")
        return 2
    code = 1
    with trio.open_signal_receiver(signal.SIGINT, signal.SIGTERM) as signals:
        try:
            async with permclient.open_process(
                argv, dialect=agent.dialect, stderr=log.file, cwd=cwd
            ) as client:
                backend: Backend = (
                    AcpBackend(client, agent.workspace)
                    if agent.dialect == "acp"
                    else BridgeBackend(client)
                )
                code = await _serve(config, client, backend, signals, console, err_console)
        except OSError as exc:
            _error(err_console, f"could not start the {role} {argv[0]!r}: {exc.strerror or exc}")
            code = 1
        finally:
            if code == 1:
                _show_tail(err_console, role, log.tail())
            log.close()
    return code


async def _serve(
    config: ServeConfig,
    client: permclient.Client,
    backend: Backend,
    signals: AsyncIterator[int],
    console: Console,
    err_console: Console,
) -> int:
    role = backend.role
    relay = Relay()
    rulebook, audit, warnings = open_rules(config.agent.workspace, config.agent.state_dir)
    for warning in warnings:  # a rule that cannot be read is skipped, and said
        err_console.print(Text(f"rules: {one_line(warning)}", style="yellow"), soft_wrap=True)
    host = ServeHost(client, backend, relay, rulebook=rulebook, audit=audit)
    ended = trio.Event()  # Ctrl-C or SIGTERM, or the agent went away
    agent_gone = False
    serving = False  # (before, a start that fails says why itself)

    async def until_signal() -> None:
        async for _ in signals:
            err_console.print(Text("simhost serve: stopping", style="dim"))
            ended.set()

    async def until_agent_gone() -> None:
        nonlocal agent_gone
        reason = await client.wait_closed()
        if not ended.is_set():
            if serving:  # (before, the start says why it failed)
                _error(err_console, f"the {role} went away ({one_line(reason)})")
            agent_gone = True
            ended.set()

    async def start() -> InitializeResult:
        with trio.fail_after(config.agent.start_timeout):
            info = await backend.start()
            await host.new_session()
        return info

    try:
        async with trio.open_nursery() as nursery:
            await nursery.start(host.run)
            nursery.start_soon(until_signal)
            nursery.start_soon(until_agent_gone)
            try:
                info = await _unless(ended, start)
            except trio.TooSlowError:
                _error(err_console, f"the {role} did not start in {config.agent.start_timeout:g} s")
                return _stopped(nursery, 1)
            except PermclientError as exc:
                _error(err_console, f"the {role} could not start: {one_line(str(exc))}")
                return _stopped(nursery, 1)
            if info is None:
                if agent_gone:
                    _error(err_console, f"the {role} went away as it started")
                return _stopped(nursery, 1 if agent_gone else 130)
            stop_server = trio.Event()
            async with trio.open_nursery() as web:
                unusable: OSError | None = None
                try:
                    authority = await web.start(
                        functools.partial(serve_relay, sessions=host),
                        relay,
                        Gate(config.token),
                        config.host,
                        config.port,
                        stop_server.wait,
                    )
                except* OSError as group:  # (hypercorn binds in a nursery of its own)
                    unusable = _first_os_error(group)
                if unusable is not None:
                    why = unusable.strerror or str(unusable)
                    _error(err_console, f"cannot listen on {config.host}:{config.port}: {why}")
                    return _stopped(nursery, 2)
                serving = True
                name = info.runtime_info.name if info.runtime_info is not None else role
                err_console.print(
                    Text(f"simhost serve: {visible(name, keep='')} in {config.agent.workspace}"),
                    soft_wrap=True,
                )
                console.print(
                    f"serving at http://{authority}/?token={config.token}", soft_wrap=True
                )
                console.file.flush()
                await ended.wait()
                relay.close()  # every question still pending: cancelled, and every view told
                stop_server.set()
                web.cancel_scope.deadline = trio.current_time() + SHUTDOWN_GRACE_S
            return _stopped(nursery, 1 if agent_gone else 0)
    finally:
        relay.close()  # (whatever ended it: every view is told, the agent gets cancelled)


async def _unless(event: trio.Event, fn: Callable[[], Awaitable[T]]) -> T | None:
    """``fn()``'s result, or None if ``event`` is set first (``fn`` is cancelled).
    What ``fn`` raises is raised as it is, not in an exception group."""
    result: T | None = None
    failure: Exception | None = None
    async with trio.open_nursery() as race:

        async def run() -> None:
            nonlocal result, failure
            try:
                result = await fn()
            except Exception as exc:
                failure = exc
            race.cancel_scope.cancel()

        async def wait() -> None:
            await event.wait()
            race.cancel_scope.cancel()

        race.start_soon(run)
        race.start_soon(wait)
    if failure is not None:
        raise failure
    return result


def _first_os_error(group: BaseExceptionGroup[OSError]) -> OSError:
    error = group.exceptions[0]
    return _first_os_error(error) if isinstance(error, BaseExceptionGroup) else error


def _stopped(nursery: trio.Nursery, code: int) -> int:
    nursery.cancel_scope.cancel()
    return code


def _show_tail(err_console: Console, role: str, tail: str) -> None:
    tail = tail.strip()
    if tail:
        err_console.print(Text(f"{role} stderr (last lines):", style="bold"))
        err_console.print(Text(visible(tail), style="dim"), soft_wrap=True)


def _error(err_console: Console, message: str) -> None:
    err_console.print(Text(f"simhost serve: {one_line(message)}"), soft_wrap=True)
