"""The three permission handler shapes on one session: a rule in front of a person.

Starts the reference runtime (``simhost runtime --dialect acp``) in a fresh
workspace, opens a session and runs two turns: ``create notes.txt with hello``,
then ``delete notes.txt``. The session's registration stack holds, at the bottom,
a person answering on standard input: a *deferred* handler (the default: each
question waits in a list, no task is held) or, with ``--shape async``, an *async*
handler awaiting a :class:`permclient.Answer`. On top sits a *rule* that denies
every delete and ``rm`` without asking, and passes everything else down.

Each question the person gets prints ``permission asked: TITLE [y/N]``; a line
``y`` allows it once, any other line denies it, end of input dismisses it (the
runtime gets ``cancelled``). Nothing is approved by default. Ctrl-C answers the
open question ``cancelled``, stops the runtime and exits with status 130.

Usage::

    python examples/handler_shapes.py                  # the person is a deferred handler
    echo y | python examples/handler_shapes.py --shape async
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from collections import deque
from collections.abc import Callable
from pathlib import Path

import trio

import permclient
from permclient import Answer, Cancelled, Decision, PermissionRequest, Question, Selected
from permclient.acp import AcpAgent, AcpSession

PROMPTS = ("create notes.txt with hello", "delete notes.txt")


def pick(request: PermissionRequest, kind: str) -> Decision:
    """The offered option of ``kind`` (never a guessed id), else ``Cancelled()``."""
    for option in request.options:
        if option.kind == kind:
            return Selected(option.option_id)
    return Cancelled()


# --------------------------------------------------------------------- the rule


@permclient.rule
def no_deletes(request: PermissionRequest) -> Decision | None:
    """Deny deletes and ``rm`` at once; ``None`` passes the rest to the person."""
    tool = request.tool_call
    command = tool.raw_input.get("command") if isinstance(tool.raw_input, dict) else None
    if tool.kind == "delete" or (isinstance(command, str) and command.split()[:1] == ["rm"]):
        print(f"rule: denied {tool.title or tool.tool_call_id}")
        return pick(request, "reject_once")
    return None


# ------------------------------------------------------------------- the person


class Person:
    """Open questions in arrival order; each line of input answers the oldest (a line
    that comes first waits for its question). End of input dismisses them all."""

    def __init__(self) -> None:
        self.open: deque[tuple[PermissionRequest, Callable[[Decision], object]]] = deque()
        self.lines: deque[str] = deque()
        self.gone = False  # end of input: no one is left to answer

    def show(self, request: PermissionRequest, give: Callable[[Decision], object]) -> None:
        print(f"permission asked: {title(request)} [y/N]", flush=True)
        self.open.append((request, give))
        self.serve()

    def line(self, text: str) -> None:
        self.lines.append(text)
        self.serve()

    def end(self) -> None:
        self.gone = True
        self.serve()

    def serve(self) -> None:
        while self.open and (self.lines or self.gone):
            request, give = self.open.popleft()
            if self.lines:
                give(pick(request, "allow_once" if yes(self.lines.popleft()) else "reject_once"))
            else:
                give(Cancelled())

    # The deferred shape: no task waits; a withdrawal takes the card away.
    def ask_deferred(self, question: Question) -> None:
        card = (question.request, question.answer)
        question.on_withdraw(lambda by: self.withdrawn(card, by))
        self.show(*card)

    def withdrawn(
        self, card: tuple[PermissionRequest, Callable[[Decision], object]], by: str
    ) -> None:
        if card in self.open:
            self.open.remove(card)
        print(f"withdrawn ({by}): {title(card[0])}")

    # The async shape: the handler's task awaits an Answer.
    async def ask_async(self, request: PermissionRequest) -> Decision:
        answer = Answer()
        card = (request, answer.set)
        self.show(*card)
        try:
            return await answer
        finally:
            if card in self.open:  # withdrawn: the card goes
                self.open.remove(card)


# ------------------------------------------------------------------- the program


def title(request: PermissionRequest) -> str:
    return request.tool_call.title or request.tool_call.tool_call_id


def yes(text: str) -> bool:
    return text.strip().lower() in ("y", "yes")


_reading = False  # a worker thread is in (or on its way into) readline(): see cli()


def read_line() -> str:
    global _reading
    try:
        return sys.stdin.readline()
    finally:
        _reading = False


async def read_lines(line: Callable[[str], None], end: Callable[[], None]) -> None:
    global _reading
    while True:
        _reading = True  # before the thread starts: it may be abandoned before it runs
        text = await trio.to_thread.run_sync(read_line, abandon_on_cancel=True)
        if not text:
            print("(end of input: open questions dismissed)", flush=True)
            end()
            return
        line(text)


async def turns(session: AcpSession, person: Person, shape: str) -> None:
    human = permclient.deferred(person.ask_deferred) if shape == "deferred" else person.ask_async
    with session.permission_handler(human), session.permission_handler(no_deletes):
        for prompt in PROMPTS:
            result = await session.prompt(prompt)
            print(f"turn {prompt!r} ended ({result.stop_reason})")


async def main(workspace: Path, shape: str) -> None:
    argv = [sys.executable, "-m", "simhost", "runtime", "--dialect", "acp"]
    argv += ["--workspace", str(workspace), "--state-dir", str(workspace / ".state")]
    person = Person()
    async with permclient.open_process(argv, dialect="acp") as client:
        agent = AcpAgent(client)
        await agent.initialize()
        session = await agent.new_session(workspace)
        async with trio.open_nursery() as ui:
            ui.start_soon(read_lines, person.line, person.end)
            await turns(session, person, shape)
            ui.cancel_scope.cancel()


def first_leaf(error: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def cli() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument(
        "--shape",
        choices=["deferred", "async"],
        default="deferred",
        help="the person's handler shape (default: deferred)",
    )
    args = parser.parse_args()
    code = 0
    with tempfile.TemporaryDirectory(prefix="handler-shapes.") as scratch:
        workspace = Path(scratch).resolve()
        try:
            trio.run(main, workspace, args.shape)
        except* KeyboardInterrupt:
            print("\ninterrupted: the open question cancelled, runtime stopped")
            code = 130
        except* (permclient.PermclientError, OSError) as errors:
            print(f"error: {first_leaf(errors)}", file=sys.stderr)
            code = code or 1
        written = (workspace / "notes.txt").exists()
        print(f"notes.txt {'exists' if written else 'was not written'}")
    if _reading:
        # A worker thread left inside readline() holds stdin's lock, and a normal
        # interpreter shutdown would abort on it: leave without one.
        sys.stdout.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(cli())
