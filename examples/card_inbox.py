"""An editor's inbox of permission cards, answered in any order, with permclient.Answer.

Starts the reference runtime (``simhost runtime --dialect acp``) in a fresh
workspace, opens two sessions and sends each the prompt ``burst 3``: three file
writes at once, so six questions are open together. Every question becomes a card
in one inbox; its handler awaits the card's :class:`permclient.Answer`, and the UI
answers any card, in any order. Here the UI is lines on standard input:

* ``N K``: pick option K of card N (``3 1`` allows card 3 once);
* ``N x``: dismiss card N (the runtime gets ``cancelled``);
* ``ls``: list the open cards.

Cards are numbered in the order they open; a command for a card that has not opened
yet is kept until it does (so answers can be piped in). The three writes of a burst
race each other, so which file a card number stands for varies from run to run: a
piped answer picks a card by its place in the queue, not by its file (each card's
line says which file it is). A second command for a card
says how it ended. End of input dismisses every card still open, and any that opens
later; Ctrl-C answers every open card ``cancelled``, stops the runtime and exits with
status 130. Nothing is approved by default.

Usage::

    python examples/card_inbox.py
    printf '2 1\\n5 3\\n' | python examples/card_inbox.py
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
from pathlib import Path

import trio

import permclient
from permclient import Answer, Decision, PermissionRequest
from permclient.acp import AcpAgent, AcpSession

PROMPT = "burst 3"


class Inbox:
    """The open cards, by number; the permission handler of every session."""

    def __init__(self) -> None:
        self.cards: dict[int, tuple[PermissionRequest, Answer]] = {}
        self.closed = False  # end of input: no one is left to answer
        self.opened = 0  # cards numbered so far
        self.early: dict[int, list[str]] = {}  # what to do with a card once it opens
        # How each closed card ended. Kept, so that a second command for a card says
        # "answered" whether or not its handler has returned yet.
        self.ended: dict[int, str] = {}

    async def ask(self, request: PermissionRequest) -> Decision:
        self.opened += 1
        number = self.opened
        answer = Answer()
        self.cards[number] = (request, answer)
        show(number, request)
        for choice in self.early.pop(number, ()):
            self.decide(number, choice)
        if self.closed:
            answer.cancel()
        try:
            return await answer
        finally:
            # Answered, or withdrawn (turn cancelled, runtime gone): the card goes.
            del self.cards[number]
            if answer.decision is None:
                self.ended[number] = "withdrawn"
                print(f"card {number}: withdrawn")
            else:
                self.ended[number] = "answered"

    def command(self, line: str) -> None:
        words = line.split()
        if words == ["ls"]:
            for open_number, (request, _) in self.cards.items():
                show(open_number, request)
            if not self.cards:
                print("no open cards")
            return
        number = number_in(words[0]) if len(words) == 2 else None
        if number is None or number < 1:
            print(f"not a command: {line.strip()!r} (N K, N x or ls)")
        elif number > self.opened:
            self.early.setdefault(number, []).append(words[1])  # piped input runs ahead
        else:
            self.decide(number, words[1])

    def decide(self, number: int, choice: str) -> None:
        card = self.cards.get(number)
        if card is None:
            print(f"card {number}: {self.ended[number]}")
            return
        request, answer = card
        option = number_in(choice)
        if choice == "x":
            print(f"card {number}: dismissed" if answer.cancel() else f"card {number}: answered")
        elif option is not None and 1 <= option <= len(request.options):
            picked = request.options[option - 1]
            given = answer.select(picked.option_id)  # False: it was answered already
            print(f"card {number}: {picked.name}" if given else f"card {number}: answered")
        else:
            print(f"card {number} has options 1-{len(request.options)}, or x")

    def close(self) -> None:
        """No one is left to answer: dismiss what is open and whatever opens later."""
        self.closed = True
        for _, answer in self.cards.values():
            answer.cancel()

    def report_unused(self) -> None:
        for number in sorted(self.early):
            print(f"card {number} never opened: {len(self.early[number])} command(s) not used")


def number_in(word: str) -> int | None:
    """``word`` as a number if it is a few ASCII digits (``int`` takes "²", and refuses
    more than 4,300 digits)."""
    return int(word) if word.isascii() and word.isdigit() and len(word) < 10 else None


def first_leaf(error: BaseException) -> BaseException:
    """The first exception inside (nested) exception groups."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def show(number: int, request: PermissionRequest) -> None:
    tool = request.tool_call
    options = "  ".join(f"{k}) {option.name}" for k, option in enumerate(request.options, 1))
    print(f"[card {number}] {request.session_id}: {tool.title or tool.tool_call_id}  |  {options}")


_reading = False  # a worker thread is in (or on its way into) readline(): see cli()


def read_line() -> str:
    global _reading
    try:
        return sys.stdin.readline()
    finally:
        _reading = False


async def read_commands(inbox: Inbox) -> None:
    """The UI: one command per line, until end of input."""
    global _reading
    while True:
        _reading = True  # before the thread starts: it may be abandoned before it runs
        line = await trio.to_thread.run_sync(read_line, abandon_on_cancel=True)
        if not line:
            print("(end of input: open cards dismissed)")
            inbox.close()
            return
        if line.strip():
            inbox.command(line)


async def turn(session: AcpSession, inbox: Inbox) -> None:
    with session.permission_handler(inbox.ask):
        result = await session.prompt(PROMPT)
    print(f"{session.id}: turn ended ({result.stop_reason})")


async def main(workspace: Path) -> None:
    argv = [sys.executable, "-m", "simhost", "runtime", "--dialect", "acp"]
    argv += ["--workspace", str(workspace), "--state-dir", str(workspace / ".state")]
    inbox = Inbox()
    async with permclient.open_process(argv, dialect="acp") as client:
        agent = AcpAgent(client)
        await agent.initialize()
        sessions = [await agent.new_session(workspace) for _ in range(2)]
        async with trio.open_nursery() as ui:
            ui.start_soon(read_commands, inbox)
            async with trio.open_nursery() as turns:
                for session in sessions:
                    turns.start_soon(turn, session, inbox)
            ui.cancel_scope.cancel()  # both turns are over
    inbox.report_unused()


def cli() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None).parse_args()
    code = 0
    with tempfile.TemporaryDirectory(prefix="card-inbox.") as scratch:
        workspace = Path(scratch).resolve()
        # except*: trio raises what a task raised inside an exception group.
        try:
            trio.run(main, workspace)
        except* KeyboardInterrupt:
            print("\ninterrupted: open cards cancelled, runtime stopped")
            code = 130
        except* (permclient.PermclientError, OSError) as errors:
            print(f"error: {first_leaf(errors)}", file=sys.stderr)
            code = code or 1
        written = sorted(path.name for path in workspace.glob("burst-*.txt"))
        print(f"files written: {', '.join(written) or 'none'}")
    if _reading:
        # A worker thread left inside readline() holds stdin's lock, and a normal
        # interpreter shutdown would abort on it: leave without one.
        sys.stdout.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(cli())
