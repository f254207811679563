"""Instructions per approval, counted by valgrind: a figure that noise does not move.

On a shared VM the CPU time of one run can move by a quarter from the next (see
docs/performance.md); the number of instructions the client executes per approval
moves by well under one percent. This script counts them with valgrind's
``cachegrind`` (``--cache-sim=no``: instructions only), so a change to the hot path
can be judged in one run. It complements ``approvals.py``, which measures what the
targets name (CPU time and throughput against the SDKs), and does not replace it:
instructions are not time (cache misses, system calls and the kernel's work on
pipes are not counted).

Each figure is the difference between a run of 3 rounds and one of 1, over the
approvals of 2 rounds, so start-up and imports cancel out; ``PYTHONHASHSEED=0``
keeps dict layouts the same from run to run.

* ``connection-rule``: the sans-I/O ``Connection`` alone (no trio, no I/O) fed the
  cheap agent's requests 64 at a time (8 sessions, a rule per session answering
  ``allow``), taking what it queues after each read;
* ``connection-deferred``: the same with a deferred handler per session, every
  question answered (``question.select("allow")``) after each read;
* ``client-rule``, ``client-deferred``, ``client-async``: the whole client of
  ``approvals.py``'s configuration under valgrind, against the cheap agent (which
  runs natively), N approvals a round. Slowed down fifty times, the client reads
  full windows: the figure is that of a client that cannot keep up.

Usage::

    python bench/instructions.py                      # every mode (~2 minutes)
    python bench/instructions.py connection-rule client-async

Exits 2 if valgrind is not installed (``apt-get install valgrind``).
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

BENCH_DIR = Path(__file__).resolve().parent
sys.path.insert(0, str(BENCH_DIR))

from cheap_agent import request_template, session_name  # noqa: E402

SESSIONS = 8
CHUNK = 64  # requests per read
CONNECTION_REQUESTS = 6400  # per round
CLIENT_REQUESTS = 5000  # per round
MODES = [
    "connection-rule",
    "connection-deferred",
    "client-rule",
    "client-deferred",
    "client-async",
]


def connection_rounds(shape: str, rounds: int) -> None:
    import permclient
    from permclient._connection import Connection

    templates = [request_template(session_name(k)) for k in range(SESSIONS)]
    frames = [templates[i % SESSIONS] % (i, i) + b"\n" for i in range(CONNECTION_REQUESTS)]
    reads = [b"".join(frames[i : i + CHUNK]) for i in range(0, len(frames), CHUNK)]
    allow = permclient.Selected("allow")
    for _ in range(rounds):
        connection = Connection("acp")
        held: list[permclient.Question] = []
        for k in range(SESSIONS):
            handler = (
                permclient.rule(lambda request: allow)
                if shape == "rule"
                else permclient.deferred(held.append)
            )
            connection.add_permission_handler(session_name(k), handler, None)
        for data in reads:
            connection.receive_data(data)
            for question in held:
                question.select("allow")
            held.clear()
            connection.data_to_send()


def client_rounds(key: str, rounds: int) -> None:
    import approvals
    import trio

    config = approvals.CONFIG_OF[key]
    args = argparse.Namespace(
        count=CLIENT_REQUESTS * rounds,
        window=64,
        sessions=SESSIONS,
        warmup=1000,
        repeat=1,
        no_pin=True,
        agent_cpu=None,
        profile=None,
        steps=None,
        gated=False,
    )
    with open(os.devnull, "w") as log:
        runs, _ = trio.run(approvals._permclient_runs, config, args, log.name)
    if any(run["errors"] for run in runs):
        raise SystemExit(f"{key}: the agent saw wrong answers")


def child(mode: str, rounds: int) -> None:
    kind, _, shape = mode.partition("-")
    if kind == "connection":
        connection_rounds(shape, rounds)
    else:
        client_rounds(f"permclient-{shape}", rounds)


def instructions(valgrind: str, mode: str, rounds: int) -> int:
    proc = subprocess.run(
        [
            valgrind,
            "--tool=cachegrind",
            "--cache-sim=no",
            "--cachegrind-out-file=/dev/null",
            sys.executable,
            __file__,
            "--child",
            mode,
            "--rounds",
            str(rounds),
        ],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONHASHSEED": "0"},
        timeout=1200,
    )
    found = re.search(r"I\s+refs:\s+([\d,]+)", proc.stderr)
    if proc.returncode != 0 or found is None:
        sys.stderr.write(proc.stderr[-2000:])
        raise SystemExit(f"{mode}: the run under valgrind failed (status {proc.returncode})")
    return int(found.group(1).replace(",", ""))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "modes", nargs="*", metavar="MODE", help=f"{', '.join(MODES)} (default: all)"
    )
    parser.add_argument("--child", choices=MODES, help=argparse.SUPPRESS)
    parser.add_argument("--rounds", type=int, default=1, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.rounds)
        return 0
    unknown = [mode for mode in args.modes if mode not in MODES]
    if unknown:
        parser.error(f"unknown mode {unknown[0]!r} (choose from {', '.join(MODES)})")
    valgrind = shutil.which("valgrind")
    if valgrind is None:
        print("valgrind is not installed (apt-get install valgrind)", file=sys.stderr)
        return 2
    for mode in args.modes or MODES:
        per_round = CONNECTION_REQUESTS if mode.startswith("connection") else CLIENT_REQUESTS
        one, three = (instructions(valgrind, mode, rounds) for rounds in (1, 3))
        print(f"{mode:22} {(three - one) / (2 * per_round):>10,.0f} instructions per approval")
    return 0


if __name__ == "__main__":
    sys.exit(main())
