"""Memory per pending permission request, and routing under load.

An in-process agent (a trio task speaking raw JSON-RPC, no SDK) sends ``--requests``
``session/request_permission`` requests spread round-robin over ``--sessions``
sessions to a permclient ``Client`` (opened with ``max_pending=--max-pending``) over a
``trio.socket.socketpair()`` (or ``trio.testing.memory_stream_pair()`` with
``--transport memory``). Every session has its own handler, which checks that it only
ever sees its own session's requests and then leaves the question open as an editor
leaves a card open until a click:

* ``--handler deferred`` (the default): a ``permclient.deferred`` handler appends the
  ``Question`` to one list, as a UI keeps its open cards; no task and no cancel scope
  is held per question;
* ``--handler async``: an ``async`` handler that waits in its own task, on its own
  ``permclient.Answer`` (``--wait answer``; the bench keeps them in a list as well) or
  on one shared ``trio.Event`` (``--wait event``, the cheapest wait plain trio offers).

With all of them pending, the client process's memory is measured; then every answer
is given (``question.select``, ``Answer.set``, or the event set) and the agent checks
every answer: one per id, ``selected``, with the option that *that session's* handler
picks (``allow-<session number>``; each request also offers the next session's option,
so an answer from the next session's handler would be accepted by the client and caught
here; any other misrouting fails closed and is caught as "not selected"). A request
past ``--max-pending`` is answered ``cancelled`` at once by the client, so it counts
as a routing error too.

Memory is measured twice, in one process: first as the RSS delta (``/proc/self/statm``)
with tracemalloc off, then, in a second identical pass, as the tracemalloc delta
(Python allocations only, exact). Both are ``(pending - baseline) / requests``: the
baseline is taken with the client open and every handler registered, so the figure
is the cost of one more pending request, not of the sessions. ``retained`` is what is
still allocated after every request has been answered (it should be near zero).

Usage::

    python bench/pending_memory.py                       # 100,000 deferred, 1,000 sessions
    python bench/pending_memory.py --handler async --requests 10000
    python bench/pending_memory.py --requests 2000 --sessions 100 --dialect bridge

Exits 1 on any routing error.
"""

from __future__ import annotations

import argparse
import gc
import os
import sys
import time
import tracemalloc
from collections.abc import Callable
from contextlib import ExitStack
from pathlib import Path
from typing import Any

import msgspec
import trio
import trio.lowlevel
import trio.testing

sys.path.insert(0, str(Path(__file__).resolve().parent))

from cheap_agent import FRAMERS, permission_params, session_name

import permclient
import permclient._connection  # the default of --max-pending-bytes
import permclient.framing

TARGET_BYTES = 2048  # issue 12: < 2 KiB per pending deferred question
PAGE = os.sysconf("SC_PAGE_SIZE")


def rss_bytes() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * PAGE


def traced_bytes() -> int:
    return tracemalloc.get_traced_memory()[0]


def chosen_option(session: int) -> str:
    """The option the handler of session number ``session`` picks."""
    return f"allow-{session}"


def options_for(session: int, sessions: int) -> list[dict[str, Any]]:
    """Three options, like real agents offer: the session's own ``allow-<k>``, the next
    session's ``allow-<k+1>`` (so that an answer from the next session's handler would
    be a valid choice, accepted by the client, and show up here as a wrong option rather
    than fail closed) and ``deny``."""
    return [
        {"optionId": chosen_option(session), "name": "Allow once", "kind": "allow_once"},
        {
            "optionId": chosen_option((session + 1) % sessions),
            "name": "Always allow",
            "kind": "allow_always",
        },
        {"optionId": "deny", "name": "Deny", "kind": "reject_once"},
    ]


class _Outcome(msgspec.Struct):
    outcome: str = ""
    optionId: str | None = None


class _Result(msgspec.Struct):
    outcome: _Outcome = msgspec.field(default_factory=_Outcome)


class _Answer(msgspec.Struct):
    id: Any = None
    method: str | None = None
    result: _Result | None = None
    error: Any = None


_answer_decoder = msgspec.json.Decoder(_Answer)


async def _stream_pair(transport: str) -> tuple[trio.abc.Stream, trio.abc.Stream]:
    if transport == "memory":
        return trio.testing.memory_stream_pair()
    a, b = trio.socket.socketpair()
    return trio.SocketStream(a), trio.SocketStream(b)


class Agent:
    """The agent side: sends the requests, then reads and checks every answer."""

    def __init__(
        self, stream: trio.abc.Stream, dialect: str, requests: int, sessions: int, minimal: bool
    ) -> None:
        self.stream = stream
        self.minimal = minimal
        self.framing = "content-length" if dialect == "bridge" else "newline"
        self.frame: Callable[[bytes], bytes] = FRAMERS[self.framing]
        self.parser = (
            permclient.framing.ContentLengthFramer()
            if self.framing == "content-length"
            else permclient.framing.NewlineFramer()
        )
        self.requests = requests
        self.sessions = sessions
        self.answered = bytearray(requests)  # preallocated: not part of the delta
        self.count = 0
        self.wrong_option = 0
        self.bad_id = 0
        self.duplicate = 0
        self.not_selected = 0
        self.all_answered = trio.Event()
        self.on_answer: Callable[[], None] = lambda: None

    def session_of(self, request_id: int) -> int:
        return request_id % self.sessions

    async def send_all(self, batch: int = 200) -> None:
        encode = msgspec.json.encode
        out: list[bytes] = []
        for i in range(self.requests):
            k = self.session_of(i)
            params = permission_params(
                session_name(k), f"call_{k}_{i}", options_for(k, self.sessions)
            )
            if self.minimal:
                params["toolCall"] = {"toolCallId": f"call_{k}_{i}"}
            message = {
                "jsonrpc": "2.0",
                "id": i,
                "method": "session/request_permission",
                "params": params,
            }
            out.append(self.frame(encode(message)))
            if len(out) >= batch:
                await self.stream.send_all(b"".join(out))
                out.clear()
        if out:
            await self.stream.send_all(b"".join(out))

    async def read_answers(self) -> None:
        while self.count < self.requests:
            data = await self.stream.receive_some(256 * 1024)
            if not data:
                return
            self.parser.receive_data(data)
            while (frame := self.parser.next_frame()) is not None:
                self.check(_answer_decoder.decode(frame))
        self.all_answered.set()

    def check(self, answer: _Answer) -> None:
        i = answer.id
        if answer.method is not None or type(i) is not int or not 0 <= i < self.requests:
            self.bad_id += 1
            return
        if self.answered[i]:
            self.duplicate += 1
            return
        self.answered[i] = 1
        self.count += 1
        self.on_answer()
        outcome = answer.result.outcome if answer.result is not None else None
        if outcome is None or outcome.outcome != "selected":
            self.not_selected += 1
        elif outcome.optionId != chosen_option(self.session_of(i)):
            self.wrong_option += 1


async def scenario(args: argparse.Namespace, measure: Callable[[], int]) -> dict[str, Any]:
    client_stream, agent_stream = await _stream_pair(args.transport)
    agent = Agent(
        agent_stream, args.dialect, args.requests, args.sessions, args.payload == "minimal"
    )
    release = trio.Event()
    cards: list[tuple[permclient.Answer, permclient.Decision]] = []
    questions: list[permclient.Question] = []  # the open cards of --handler deferred
    option_of = {session_name(k): chosen_option(k) for k in range(args.sessions)}
    all_started = trio.Event()
    started = 0
    foreign = 0
    refused = 0

    def settled() -> None:
        """Every request has reached a handler (or was answered at once by the client)."""
        if started + agent.count >= args.requests:
            all_started.set()

    agent.on_answer = settled

    def make_deferred(k: int) -> permclient.PermissionHandler:
        own = session_name(k)
        prefix = f"call_{k}_"

        def ask(question: permclient.Question) -> None:
            nonlocal started, foreign
            request = question.request
            if (
                question.session_id != own
                or request.session_id != own
                or not request.tool_call.tool_call_id.startswith(prefix)
            ):
                foreign += 1
            questions.append(question)
            started += 1
            settled()

        return permclient.deferred(ask)

    def make_handler(k: int) -> permclient.PermissionHandler:
        if args.handler == "deferred":
            return make_deferred(k)
        own = session_name(k)
        prefix = f"call_{k}_"
        choice = permclient.Selected(chosen_option(k))

        async def handler(request: permclient.PermissionRequest) -> permclient.Decision:
            nonlocal started, foreign
            if request.session_id != own or not request.tool_call.tool_call_id.startswith(prefix):
                foreign += 1
            started += 1
            settled()
            if args.wait == "event":
                await release.wait()
                return choice
            answer = permclient.Answer()
            cards.append((answer, choice))
            return await answer

        return handler

    figures: dict[str, Any] = {}
    with trio.fail_after(args.timeout):
        async with permclient.open_client(
            client_stream,
            dialect=args.dialect,
            max_pending=args.max_pending,
            max_pending_bytes=args.max_pending_bytes,
        ) as client:
            with ExitStack() as registrations:
                for k in range(args.sessions):
                    registrations.enter_context(
                        client.permission_handler(session_name(k), make_handler(k))
                    )
                async with trio.open_nursery() as nursery:
                    nursery.start_soon(agent.read_answers)
                    await trio.lowlevel.checkpoint()
                    gc.collect()
                    baseline = measure()
                    t0 = time.perf_counter()
                    await agent.send_all()
                    await all_started.wait()
                    figures["deliver_s"] = time.perf_counter() - t0
                    gc.collect()
                    pending = measure()
                    figures["pending_reported"] = client.pending_permissions()
                    figures["pending_bytes"] = client.statistics().connection.pending_bytes
                    t1 = time.perf_counter()
                    release.set()
                    for answer, choice in cards:
                        answer.set(choice)
                    cards.clear()
                    for question in questions:
                        if not question.select(option_of[question.session_id]):
                            refused += 1
                    questions.clear()
                    await agent.all_answered.wait()
                    figures["answer_s"] = time.perf_counter() - t1
                    gc.collect()
                    after = measure()
    figures.update(
        baseline=baseline,
        pending=pending,
        after=after,
        # Per request actually held: those the client refused at once hold nothing.
        per_pending=(pending - baseline) / max(1, figures["pending_reported"]),
        retained=(after - baseline) / args.requests,
        answers=agent.count,
        missing=args.requests - agent.count,
        wrong_option=agent.wrong_option,
        not_selected=agent.not_selected,
        bad_id=agent.bad_id,
        duplicate=agent.duplicate,
        foreign=foreign,
        refused=refused,
        handlers_started=started,
    )
    figures["routing_errors"] = (
        figures["missing"]
        + agent.wrong_option
        + agent.not_selected
        + agent.bad_id
        + agent.duplicate
        + foreign
        + refused
    )
    return figures


def _short(path: str) -> str:
    for marker in ("site-packages/", f"{Path(__file__).resolve().parent.parent}/"):
        if marker in path:
            return path.split(marker, 1)[1]
    return path


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--requests", type=int, default=100_000, help="pending requests")
    parser.add_argument("--sessions", type=int, default=1000, help="sessions they spread over")
    parser.add_argument("--dialect", choices=["acp", "bridge"], default="acp")
    parser.add_argument("--transport", choices=["socketpair", "memory"], default="socketpair")
    parser.add_argument(
        "--payload",
        choices=["realistic", "minimal"],
        default="realistic",
        help="toolCall as in approvals.py (rawInput, locations, ...) or just its toolCallId",
    )
    parser.add_argument(
        "--handler",
        choices=["deferred", "async"],
        default="deferred",
        help="a permclient.deferred handler that keeps the Question (no task), or an "
        "async handler that waits in its task (see --wait)",
    )
    parser.add_argument(
        "--wait",
        choices=["answer", "event"],
        default="answer",
        help="--handler async: each handler awaits its own permclient.Answer, or all one "
        "trio.Event",
    )
    parser.add_argument(
        "--max-pending",
        type=int,
        default=None,
        help="open_client(max_pending=...); default: --requests (the client's own default "
        "is 16384; requests past it are answered cancelled at once: routing errors)",
    )
    parser.add_argument(
        "--max-pending-bytes",
        type=float,
        default=None,
        metavar="MIB",
        help="open_client(max_pending_bytes=...), in MiB: the cap on what pending requests "
        "take, as the client estimates it (an upper bound: ~4 KB for this bench's realistic "
        "request, which holds ~1.2 KB); default: the client's 128 MiB, or 8 KiB per "
        "--max-pending request if that is more",
    )
    parser.add_argument("--top", type=int, default=8, help="show the top N allocating lines")
    parser.add_argument("--timeout", type=float, default=120.0, help="seconds per pass")
    args = parser.parse_args()
    if args.max_pending is None:
        args.max_pending = args.requests
    if args.max_pending_bytes is None:
        default = permclient._connection.DEFAULT_MAX_PENDING_BYTES
        args.max_pending_bytes = max(default, args.max_pending * 8192)
    else:
        args.max_pending_bytes = int(args.max_pending_bytes * 2**20)
    budget_mib = args.max_pending_bytes / 2**20
    framing = "content-length" if args.dialect == "bridge" else "newline"
    where = (
        "trio.socket.socketpair()"
        if args.transport == "socketpair"
        else "trio.testing.memory_stream_pair()"
    )
    if args.handler == "deferred":
        waits = "deferred handlers keep each Question in a list (no task)"
    elif args.wait == "answer":
        waits = "async handlers each wait on their own permclient.Answer"
    else:
        waits = "async handlers wait on one shared trio.Event"
    print(
        f"pending_memory: {args.requests} pending permission requests over {args.sessions} "
        f"sessions; {args.payload} payload; {waits}; max_pending={args.max_pending}; "
        f"dialect {args.dialect} ({framing}); "
        f"agent side in-process over {where}; "
        f"python {sys.version.split()[0]}",
        flush=True,
    )

    rss = trio.run(scenario, args, rss_bytes)

    tracemalloc.start(1)
    snapshots: dict[str, Any] = {}

    def measure_traced() -> int:
        value = traced_bytes()
        if not args.top or "pending" in snapshots:
            return value
        if "baseline" not in snapshots:
            snapshots["baseline"] = tracemalloc.take_snapshot()
            return traced_bytes()  # the snapshot itself is not the client's memory
        snapshot = tracemalloc.take_snapshot()
        snapshots["pending"] = snapshot.compare_to(snapshots["baseline"], "lineno")[: args.top]
        snapshots["files"] = snapshot.compare_to(snapshots["baseline"], "filename")[: args.top]
        del snapshot
        return value

    traced = trio.run(scenario, args, measure_traced)
    tracemalloc.stop()

    errors = rss["routing_errors"] + traced["routing_errors"]
    print()
    print(f"{'pass':<12} {'per pending':>12} {'retained':>10} {'deliver s':>10} {'answer s':>9}")
    for name, fig in (("tracemalloc", traced), ("RSS", rss)):
        print(
            f"{name:<12} {fig['per_pending']:>10,.0f} B {fig['retained']:>8,.0f} B "
            f"{fig['deliver_s']:>10.2f} {fig['answer_s']:>9.2f}"
        )
    if "pending" in snapshots:
        for title, key in (("allocation sites", "pending"), ("files", "files")):
            print(f"\ntop {args.top} {title} while pending (tracemalloc, bytes per request):")
            for stat in snapshots[key]:
                frame = stat.traceback[0]
                where = _short(frame.filename) + (f":{frame.lineno}" if key == "pending" else "")
                print(f"  {stat.size_diff / args.requests:>8,.0f} B  {where}")
    print()
    for name, fig in (("tracemalloc pass", traced), ("RSS pass", rss)):
        print(
            f"{name}: answers {fig['answers']}/{args.requests}, wrong option "
            f"{fig['wrong_option']}, not selected {fig['not_selected']}, bad/duplicate id "
            f"{fig['bad_id']}/{fig['duplicate']}, foreign requests seen by handlers "
            f"{fig['foreign']}, answers refused {fig['refused']}, pending_permissions() "
            f"while held {fig['pending_reported']} ({fig['pending_bytes']:,} pending bytes "
            "by the client's own count)"
        )
        if fig["pending_reported"] < args.requests:
            print(
                f"  !! only {fig['pending_reported']} of {args.requests} reached a handler: the "
                "client answered the rest cancelled at once (over max_pending, or over its "
                f"{budget_mib:g} MiB budget of pending bytes, estimated ~"
                f"{fig['pending_bytes'] / max(1, fig['pending_reported']):,.0f} B a request)"
            )
    print(f"routing errors: {errors} (must be 0)")
    verdicts = ", ".join(
        f"{name} {per:,.0f} B ({'MET' if per < TARGET_BYTES else 'NOT MET'})"
        for name, per in (("tracemalloc", traced["per_pending"]), ("RSS", rss["per_pending"]))
    )
    print(
        f"memory per pending request, target < {TARGET_BYTES:,} B (2 KiB, for deferred "
        f"questions): {verdicts}"
    )
    return 1 if errors else 0


if __name__ == "__main__":
    sys.exit(main())
