"""Approvals from another program: permclient.relay behind a plain TCP socket.

Starts the reference runtime (``simhost runtime --dialect acp``) in a fresh
workspace, opens one session whose permission handler is a
:class:`permclient.relay.Relay`, and listens on 127.0.0.1 for approvers. Each line
on standard input is a prompt for the session (``burst 3``, ``run ls``, ...); the
questions it raises wait in the relay until an approver answers them.

An approver is anything that speaks lines over TCP (``nc 127.0.0.1 PORT``). Its
first line must be the token this program prints (anything else, or nothing within
10 s, and it gets ``{"type": "error", "reason": "wrong token"}`` and is
disconnected); a line of over 4 KiB disconnects it too. It then gets one JSON event
per line: every question still pending (``{"type": "requested", ...}``), then every
new question and how each one ends (``resolved``, naming the approver that answered,
or ``withdrawn``).
It answers with lines ``QUESTION_ID OPTION_ID`` (pick an option) or just
``QUESTION_ID`` (dismiss); a refused answer gets ``{"type": "answer_refused", ...}``.
Up to 16 approvers may be connected at once; they may leave and come back: a
question stays pending until one answers it, and the first answer wins. One that
stops reading for 10 s is disconnected.

End of input lets the turns under way finish (a question no approver answers
within ``--timeout`` seconds is cancelled); Ctrl-C cancels every open question,
stops the runtime and exits with status 130. Nothing is approved by default.

Usage::

    python examples/relay_to_anything.py          # then type prompts, e.g. burst 3
    nc 127.0.0.1 PORT                             # in another terminal: the token, then answers
"""

from __future__ import annotations

import argparse
import os
import secrets
import sys
import tempfile
from pathlib import Path

import msgspec
import trio

import permclient
from permclient.acp import AcpAgent, AcpSession
from permclient.relay import AnswerRefused, Relay, Requested, Resolved, Subscription

TOKEN_WAIT_S = 10
SEND_WAIT_S = 10  # an approver that takes no events for this long is disconnected
MAX_LINE = 4096  # an approver's line longer than this disconnects it
MAX_APPROVERS = 16  # connections at once, logged in or not


class Approver:
    """One TCP connection: the token, then events out and answers in."""

    def __init__(self, relay: Relay, token: str, stream: trio.SocketStream, name: str) -> None:
        self.relay, self.token, self.stream, self.name = relay, token, stream, name
        self.buffer = b""
        self.sending = trio.Lock()  # events and refusals go out one whole line at a time

    async def line(self) -> bytes | None:
        """The next line (without its end), or ``None`` at end of input or past MAX_LINE."""
        while b"\n" not in self.buffer:
            if len(self.buffer) > MAX_LINE:
                return None
            data = await self.stream.receive_some(MAX_LINE)
            if not data:
                return None
            self.buffer += data
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.rstrip(b"\r")

    async def send(self, event: object) -> None:
        async with self.sending:
            with trio.fail_after(SEND_WAIT_S):
                await self.stream.send_all(msgspec.json.encode(event) + b"\n")

    async def serve(self) -> None:
        with trio.move_on_after(TOKEN_WAIT_S):
            given = await self.line()
        if not secrets.compare_digest((given or b"").strip(), self.token.encode()):
            await self.send({"type": "error", "reason": "wrong token"})
            return
        print(f"{self.name} connected")
        with self.relay.subscribe(self.name) as events:
            async with trio.open_nursery() as nursery:
                nursery.start_soon(self.forward, events, nursery.cancel_scope)
                while (line := await self.line()) is not None:
                    await self.answer(line)
                nursery.cancel_scope.cancel()
        print(f"{self.name} left")

    async def forward(self, events: Subscription, scope: trio.CancelScope) -> None:
        async for event in events:
            await self.send(event)
        scope.cancel()  # the relay closed, or this approver fell too far behind

    async def answer(self, line: bytes) -> None:
        words = line.decode("utf-8", "replace").split()
        if len(words) not in (1, 2):
            await self.send(AnswerRefused("", "expected: QUESTION_ID OPTION_ID, or QUESTION_ID"))
            return
        question_id = words[0]
        decision = (
            {"outcome": "selected", "optionId": words[1]}
            if len(words) == 2
            else {"outcome": "cancelled"}
        )
        result = self.relay.answer(question_id, decision, view=self.name)
        if isinstance(result, AnswerRefused):
            await self.send(result)  # (a resolution reaches every approver as an event)


async def serve_approvers(relay: Relay, token: str, task_status: trio.TaskStatus[int]) -> None:
    count = connected = 0

    async def handle(stream: trio.SocketStream) -> None:
        nonlocal count, connected
        if connected >= MAX_APPROVERS:
            return  # (closed at once)
        count += 1
        connected += 1
        name = f"approver-{count}"
        try:
            await Approver(relay, token, stream, name).serve()
        except* (trio.BrokenResourceError, trio.ClosedResourceError, trio.TooSlowError):
            print(f"{name} disconnected")  # its questions stay pending for the others
        finally:
            connected -= 1

    listeners = await trio.open_tcp_listeners(0, host="127.0.0.1")
    task_status.started(listeners[0].socket.getsockname()[1])
    await trio.serve_listeners(handle, listeners)


async def show(events: Subscription) -> None:
    """This program's own view: a line for every question and how it ended."""
    async for event in events:
        if isinstance(event, Requested):
            question = event.question
            options = " ".join(option.option_id for option in question.options)
            print(f"{question.question_id}: {question.title} [{options}] (waiting for an approver)")
        elif isinstance(event, Resolved):
            print(f"{event.question_id}: {event.option_id or 'cancelled'} (by {event.by})")
        else:
            print(f"{event.question_id}: withdrawn ({event.reason})")


async def read_prompts(session: AcpSession, turns: trio.Nursery) -> None:
    async def turn(prompt: str) -> None:
        result = await session.prompt(prompt)
        print(f"turn {prompt!r} ended: {result.stop_reason}")

    while line := await trio.to_thread.run_sync(sys.stdin.readline, abandon_on_cancel=True):
        if line.strip():
            turns.start_soon(turn, line.strip())


async def main(workspace: Path, question_timeout: float) -> None:
    argv = [sys.executable, "-m", "simhost", "runtime", "--dialect", "acp"]
    argv += ["--workspace", str(workspace), "--state-dir", str(workspace / ".state")]
    token = secrets.token_urlsafe(16)
    async with permclient.open_process(argv, dialect="acp") as client:
        agent = AcpAgent(client)
        await agent.initialize()
        session = await agent.new_session(workspace)
        with Relay() as relay, session.permission_handler(relay.handler, timeout=question_timeout):
            async with trio.open_nursery() as server:
                server.start_soon(show, relay.subscribe("console"))
                port = await server.start(serve_approvers, relay, token)
                print(f"approvers: nc 127.0.0.1 {port}, then the token {token}", flush=True)
                async with trio.open_nursery() as turns:
                    await read_prompts(session, turns)
                server.cancel_scope.cancel()  # input ended and every turn is over


def first_leaf(error: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def cli() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--timeout", type=float, default=300.0, help="seconds a question waits (default 300)"
    )
    args = parser.parse_args()
    code = 0
    with tempfile.TemporaryDirectory(prefix="relay.") as scratch:
        workspace = Path(scratch).resolve()
        try:
            trio.run(main, workspace, args.timeout)
        except* KeyboardInterrupt:
            print("\ninterrupted: open questions cancelled, runtime stopped")
            code = 130
        except* (permclient.PermclientError, OSError) as errors:
            print(f"error: {first_leaf(errors)}", file=sys.stderr)
            code = 1
        written = sorted(path.name for path in workspace.iterdir() if path.name != ".state")
        print(f"files written: {', '.join(written) or 'none'}")
    sys.stdout.flush()
    if code == 130:
        os._exit(code)  # a thread may be left in readline(), holding stdin's lock
    return code


if __name__ == "__main__":
    sys.exit(cli())
