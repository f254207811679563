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
yet waits for it (so answers can be piped in). End of input dismisses every card
still open, and any that opens later. Nothing is approved by default.

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
        self._card_opened = trio.Event()

    async def ask(self, request: PermissionRequest) -> Decision:
        self.opened += 1
        number = self.opened
        answer = Answer()
        if self.closed:
            answer.cancel()
        self.cards[number] = (request, answer)
        self._card_opened.set()
        self._card_opened = trio.Event()
        show(number, request)
        try:
            return await answer
        finally:
            # Answered, or withdrawn (turn cancelled, runtime gone): the card goes.
            del self.cards[number]
            if answer.decision is None:
                print(f"card {number}: withdrawn")

    async def command(self, line: str) -> None:
        words = line.split()
        if words == ["ls"]:
            for number, (request, _) in self.cards.items():
                show(number, request)
            if not self.cards:
                print("no open cards")
            return
        if len(words) != 2 or not words[0].isdigit() or int(words[0]) < 1:
            print(f"not a command: {line.strip()!r} (N K, N x or ls)")
            return
        while int(words[0]) > self.opened:
            await self._card_opened.wait()
        card = self.cards.get(int(words[0]))
        if card is None:
            print(f"card {words[0]} is closed")
            return
        request, answer = card
        if words[1] == "x":
            answer.cancel()
            print(f"card {words[0]}: dismissed")
        elif words[1].isdigit() and 1 <= int(words[1]) <= len(request.options):
            option = request.options[int(words[1]) - 1]
            answer.select(option.option_id)
            print(f"card {words[0]}: {option.name}")
        else:
            print(f"card {words[0]} has options 1-{len(request.options)}")

    def close(self) -> None:
        self.closed = True
        for _, answer in self.cards.values():
            answer.cancel()


def show(number: int, request: PermissionRequest) -> None:
    tool = request.tool_call
    options = "  ".join(f"{k}) {option.name}" for k, option in enumerate(request.options, 1))
    print(f"[card {number}] {request.session_id}: {tool.title or tool.tool_call_id}  |  {options}")


_reading = False  # a worker thread is inside readline(): see cli()


def read_line() -> str:
    global _reading
    _reading = True
    try:
        return sys.stdin.readline()
    finally:
        _reading = False


async def read_commands(inbox: Inbox) -> None:
    """The UI: one command per line, until end of input."""
    while True:
        line = await trio.to_thread.run_sync(read_line, abandon_on_cancel=True)
        if not line:
            print("(end of input: open cards dismissed)")
            inbox.close()
            return
        if line.strip():
            await inbox.command(line)


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


def cli() -> int:
    argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None).parse_args()
    code = 0
    with tempfile.TemporaryDirectory(prefix="card-inbox.") as scratch:
        workspace = Path(scratch).resolve()
        try:
            trio.run(main, workspace)
        except KeyboardInterrupt:
            code = 130
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
