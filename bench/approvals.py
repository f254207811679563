"""Approvals per second and client CPU per approval, over a real OS pipe.

Each configuration runs in a fresh interpreter (so one implementation's imports and
heap never slow the other's garbage collector down) that spawns ``cheap_agent.py``
as a separate process and drives it over its stdin/stdout pipes:

* ``permclient`` with ``dialect="bridge"`` (Content-Length framing),
* ``permclient`` with ``dialect="acp"`` (newline-delimited JSON),
* the official ACP Python SDK (``acp.spawn_agent_process``, newline only).

The client registers an ``async`` permission handler that allows everything (one
registration per session for permclient, the ``request_permission`` method of an
``acp.Client`` for the SDK) and sends ``bench/start {"count": N}``; the agent
answers it only after N permission requests, W of them outstanding at a time, have
all been answered ``selected allow``. ``time.perf_counter()`` and
``time.process_time()`` (the client process's own CPU, all threads) are read right
around that one request, so they cover exactly the burst. A warm-up burst runs
first on the same connection. Each round runs every configuration once, in turn,
each in a fresh process, so a slow spell of the machine hits all of them alike; the
medians over the rounds are reported. The client and the agent are pinned to two
separate CPUs (unless ``--no-pin``), the largest source of noise on a small machine
being one preempting or migrating the other. The agent checks every answer (right
id, ``selected``, ``allow``).

Usage::

    python bench/approvals.py            # N=20000, W=64, S=8, 5 rounds
    python bench/approvals.py --quick    # a tiny smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import msgspec

BENCH_DIR = Path(__file__).resolve().parent
AGENT = BENCH_DIR / "cheap_agent.py"
sys.path.insert(0, str(BENCH_DIR))

from cheap_agent import session_name  # noqa: E402

TARGET_RATIO = 2.5  # permclient approvals/s over the official SDK's, at least
TARGET_CPU_US = 12.0  # client CPU per approval, at most

# (key, implementation label, framing, permclient dialect or None for the SDK)
CONFIGS: list[tuple[str, str, str, str | None]] = [
    ("permclient-bridge", "permclient", "content-length", "bridge"),
    ("permclient-acp", "permclient", "newline", "acp"),
    ("official-acp", "official ACP SDK", "newline", None),
    ("bare-msgspec", "bare loop (floor)", "newline", "bare"),
]
# The figures came from a faster machine: the official SDK at ~30 us and a
# bare blocking msgspec loop at ~1.2 us per approval. Against the bare loop measured
# here, the 12 us target reads as "at most 10x the floor" on any machine.
TARGET_FLOOR_MULTIPLE = 12.0 / 1.2


def agent_argv(framing: str, args: argparse.Namespace) -> list[str]:
    return [
        sys.executable,
        str(AGENT),
        "--framing",
        framing,
        "--count",
        str(args.count),
        "--window",
        str(args.window),
        "--sessions",
        str(args.sessions),
        *([] if args.agent_cpu is None else ["--cpu", str(args.agent_cpu)]),
    ]


def pinned_cpus() -> tuple[int, int] | None:
    """Two CPUs for the client and the agent, so neither is migrated or preempted
    by the other mid-burst (the largest source of noise on a small machine)."""
    try:
        cpus = sorted(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return None
    return (cpus[0], cpus[1]) if len(cpus) >= 2 else None


def calibrate() -> float:
    """CPU nanoseconds per iteration of a trivial Python loop (best of 5): machine speed."""
    best = float("inf")
    for _ in range(5):
        t0 = time.process_time()
        total = 0
        for i in range(300_000):
            total += i
        best = min(best, time.process_time() - t0)
    return best / 300_000 * 1e9


def machine_line() -> str:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    return (
        f"machine: {os.cpu_count()} CPUs, load average {load}, "
        f"calibration loop {calibrate():.0f} ns/iteration (lower is faster)"
    )


def _last_json_line(path: str) -> dict[str, Any] | None:
    try:
        lines = Path(path).read_text().strip().splitlines()
    except OSError:
        return None
    for line in reversed(lines):
        try:
            value = json.loads(line)
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


# ------------------------------------------------------------------ the children


def _timed(result: dict[str, Any], cpu: float, elapsed: float) -> dict[str, Any]:
    return {
        "count": result["count"],
        "errors": result["errors"],
        "elapsed": elapsed,
        "cpu": cpu,
        "agent_elapsed": result["elapsed"],
        "agent_cpu": result["cpu"],
    }


async def _measured_bursts(
    start: Callable[[int], Awaitable[Any]], args: argparse.Namespace
) -> list[dict[str, Any]]:
    """A warm-up burst, then ``args.repeat`` bursts timed around ``await start(count)``."""
    if args.warmup:
        await start(args.warmup)
    runs = []
    for _ in range(args.repeat):
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        result = await start(args.count)
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        runs.append(_timed(result, cpu, elapsed))
    return runs


async def _permclient_runs(dialect: str, framing: str, args: argparse.Namespace, log: str) -> Any:
    from contextlib import ExitStack

    import permclient

    async def allow(request: permclient.PermissionRequest) -> permclient.Decision:
        return permclient.Selected("allow")

    name: permclient.DialectName = "bridge" if dialect == "bridge" else "acp"
    async with permclient.open_process(
        agent_argv(framing, args), dialect=name, stderr=log
    ) as client:
        with ExitStack() as stack:
            for k in range(args.sessions):
                stack.enter_context(client.permission_handler(session_name(k), allow))
            runs = await _measured_bursts(
                lambda count: client.request("bench/start", {"count": count}), args
            )
        process = client.process
    assert process is not None
    return runs, process.returncode


async def _official_runs(args: argparse.Namespace, log: Any) -> Any:
    import acp
    from acp.schema import AllowedOutcome, RequestPermissionResponse

    class AllowClient:
        async def request_permission(
            self, options: Any, session_id: str, tool_call: Any, **kwargs: Any
        ) -> RequestPermissionResponse:
            return RequestPermissionResponse(
                outcome=AllowedOutcome(option_id="allow", outcome="selected")
            )

        async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
            return None

    argv = agent_argv("newline", args)
    async with (
        acp.spawn_agent_process(
            AllowClient(),  # type: ignore[arg-type]
            argv[0],
            *argv[1:],
            transport_kwargs={"stderr": log.fileno()},
        ) as (conn, process)
    ):
        runs = await _measured_bursts(
            lambda count: conn.ext_method("bench/start", {"count": count}), args
        )
    return runs, process.returncode


class _BareHead(msgspec.Struct):
    id: int | str | None = None
    method: str | None = None
    result: msgspec.Raw = msgspec.Raw()


def _bare_runs(args: argparse.Namespace, log: Any) -> Any:
    """The floor: a blocking loop, msgspec decode and encode, nothing else."""
    decoder = msgspec.json.Decoder(_BareHead)
    result_decoder = msgspec.json.Decoder()
    answer = b',"result":{"outcome":{"outcome":"selected","optionId":"allow"}}}\n'
    proc = subprocess.Popen(
        agent_argv("newline", args), stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=log
    )
    assert proc.stdin is not None and proc.stdout is not None
    out, inp = proc.stdin, proc.stdout

    def burst(start_id: int, count: int) -> Any:
        out.write(
            msgspec.json.encode(
                {
                    "jsonrpc": "2.0",
                    "id": start_id,
                    "method": "bench/start",
                    "params": {"count": count},
                }
            )
            + b"\n"
        )
        out.flush()
        for line in inp:
            head = decoder.decode(line)
            if head.method == "session/request_permission":
                out.write(b'{"jsonrpc":"2.0","id":' + msgspec.json.encode(head.id) + answer)
                out.flush()
            elif head.id == start_id and head.result:
                return result_decoder.decode(head.result)
        raise SystemExit("bare loop: the agent closed early")

    runs = []
    if args.warmup:
        burst(1_000_000, args.warmup)
    for n in range(args.repeat):
        cpu0 = time.process_time()
        t0 = time.perf_counter()
        result = burst(1_000_001 + n, args.count)
        elapsed = time.perf_counter() - t0
        cpu = time.process_time() - cpu0
        runs.append(_timed(result, cpu, elapsed))
    out.close()
    return runs, proc.wait()


def child_main(args: argparse.Namespace) -> int:
    key, _, framing, dialect = next(c for c in CONFIGS if c[0] == args.child)
    if args.client_cpu is not None:
        os.sched_setaffinity(0, {args.client_cpu})
    with tempfile.NamedTemporaryFile("w", prefix="cheap_agent.", suffix=".log") as log:
        if dialect is None:
            import asyncio

            runs, returncode = asyncio.run(_official_runs(args, log))
        elif dialect == "bare":
            runs, returncode = _bare_runs(args, log)
        else:
            import trio

            runs, returncode = trio.run(_permclient_runs, dialect, framing, args, log.name)
        summary = _last_json_line(log.name)
    print(json.dumps({"key": key, "runs": runs, "agent_exit": returncode, "agent": summary}))
    return 0


# ------------------------------------------------------------------ the driver


def run_config(key: str, args: argparse.Namespace) -> dict[str, Any]:
    argv = [
        sys.executable,
        __file__,
        "--child",
        key,
        "--count",
        str(args.count),
        "--window",
        str(args.window),
        "--sessions",
        str(args.sessions),
        "--warmup",
        str(args.warmup),
        "--repeat",
        "1",
        *([] if args.client_cpu is None else ["--client-cpu", str(args.client_cpu)]),
        *([] if args.agent_cpu is None else ["--agent-cpu", str(args.agent_cpu)]),
    ]
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        sys.stderr.write(proc.stderr)
        raise SystemExit(f"{key}: child failed with status {proc.returncode}")
    if proc.stderr.strip():
        sys.stderr.write(proc.stderr)
    result: dict[str, Any] = json.loads(proc.stdout.strip().splitlines()[-1])
    return result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=20000, help="approvals per burst (N)")
    parser.add_argument("--window", type=int, default=64, help="outstanding requests (W)")
    parser.add_argument("--sessions", type=int, default=8, help="sessions (S)")
    parser.add_argument("--warmup", type=int, default=None, help="warm-up burst (default N/10)")
    parser.add_argument(
        "--repeat",
        type=int,
        default=5,
        help="rounds; each runs every configuration once, in turn, in a fresh process "
        "(so a slow spell of the machine hits all of them); medians shown",
    )
    parser.add_argument(
        "--no-pin",
        action="store_true",
        help="do not pin the client and the agent to two separate CPUs",
    )
    parser.add_argument("--client-cpu", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--agent-cpu", type=int, default=None, help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help="tiny run: N=500, 1 repeat")
    parser.add_argument(
        "--only", choices=[c[0] for c in CONFIGS], action="append", help="run only these"
    )
    parser.add_argument("--child", choices=[c[0] for c in CONFIGS], help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.quick:
        args.count, args.repeat = min(args.count, 500), 1
    if args.warmup is None:
        args.warmup = max(100, args.count // 10)
    if args.child:
        return child_main(args)

    pins = None if args.no_pin else pinned_cpus()
    if pins is not None:
        args.client_cpu, args.agent_cpu = pins
    pinning = (
        f"client on CPU {pins[0]}, agent on CPU {pins[1]}" if pins is not None else "not pinned"
    )
    print(
        f"approvals: N={args.count} W={args.window} S={args.sessions} "
        f"warm-up={args.warmup} rounds={args.repeat} (medians); {pinning}; "
        f"python {sys.version.split()[0]}; agent = bench/cheap_agent.py over OS pipes",
        flush=True,
    )
    print(machine_line(), flush=True)
    configs = [c for c in CONFIGS if not args.only or c[0] in args.only]
    runs_of: dict[str, list[dict[str, Any]]] = {key: [] for key, *_ in configs}
    failures = 0
    for round_number in range(1, args.repeat + 1):
        started = time.perf_counter()
        for key, *_ in configs:
            result = run_config(key, args)
            agent = result["agent"] or {}
            errors = sum(r["errors"] for r in result["runs"])
            if errors or result["agent_exit"] != 0 or agent.get("errors"):
                failures += 1
                print(f"  !! {key}: {errors} wrong answers; agent: {agent}", flush=True)
            runs_of[key].extend(result["runs"])
        rates = ", ".join(
            f"{key} {runs_of[key][-1]['count'] / runs_of[key][-1]['elapsed']:,.0f}/s"
            for key, *_ in configs
        )
        print(f"  round {round_number}: {time.perf_counter() - started:.1f}s ({rates})", flush=True)
    rows = []
    for key, label, framing, _ in configs:
        runs = runs_of[key]
        count = runs[0]["count"]
        elapsed = statistics.median(r["elapsed"] for r in runs)
        cpu = statistics.median(r["cpu"] for r in runs)
        agent_cpu = statistics.median(r["agent_cpu"] for r in runs)
        rows.append(
            {
                "key": key,
                "label": label,
                "framing": framing,
                "count": count,
                "elapsed": elapsed,
                "rate": count / elapsed,
                "cpu_us": cpu / count * 1e6,
                "agent_cpu_us": agent_cpu / count * 1e6,
            }
        )

    official = next((r for r in rows if r["key"] == "official-acp"), None)
    floor = next((r for r in rows if r["key"] == "bare-msgspec"), None)
    header = (
        f"{'implementation':<17} {'framing':<15} {'approvals':>9} {'seconds':>8} "
        f"{'approvals/s':>12} {'client CPU us/appr':>19} {'agent CPU us/appr':>18} "
        f"{'vs official':>11}  targets (>= {TARGET_RATIO}x, <= {TARGET_CPU_US:g} us)"
    )
    print()
    print(header)
    print("-" * len(header))
    for r in rows:
        ratio = f"{r['rate'] / official['rate']:.2f}x" if official else "n/a"
        verdicts = ""
        if r["key"].startswith("permclient"):
            if official is None:
                rate_verdict = "n/a"
            else:
                rate_ok = r["rate"] / official["rate"] >= TARGET_RATIO
                rate_verdict = "met" if rate_ok else "NOT met"
            verdicts = (
                f"  ratio {rate_verdict}, "
                f"CPU {'met' if r['cpu_us'] <= TARGET_CPU_US else 'NOT met'}"
            )
        print(
            f"{r['label']:<17} {r['framing']:<15} {r['count']:>9} {r['elapsed']:>8.3f} "
            f"{r['rate']:>12,.0f} {r['cpu_us']:>19.2f} {r['agent_cpu_us']:>18.2f} {ratio:>11}"
            f"{verdicts}"
        )
    print()
    print(
        f"targets: permclient >= {TARGET_RATIO}x the official SDK's approvals/s, "
        f"<= {TARGET_CPU_US:g} us client CPU per approval"
    )
    for r in rows:
        if not r["key"].startswith("permclient"):
            continue
        parts = []
        if official:
            ratio = r["rate"] / official["rate"]
            verdict = "MET" if ratio >= TARGET_RATIO else "NOT MET"
            parts.append(f"ratio {ratio:.2f}x (>= {TARGET_RATIO}x: {verdict})")
            parts.append(f"CPU-efficiency ratio {official['cpu_us'] / r['cpu_us']:.2f}x")
        verdict = "MET" if r["cpu_us"] <= TARGET_CPU_US else "NOT MET"
        parts.append(f"CPU {r['cpu_us']:.2f} us/approval (<= {TARGET_CPU_US:g}: {verdict})")
        if floor:
            multiple = r["cpu_us"] / floor["cpu_us"]
            verdict = "MET" if multiple <= TARGET_FLOOR_MULTIPLE else "NOT MET"
            parts.append(
                f"{multiple:.1f}x the bare loop's CPU (<= {TARGET_FLOOR_MULTIPLE:g}x: {verdict})"
            )
        print(f"  permclient {r['framing']:<15} " + "; ".join(parts))
    print(machine_line())
    if failures:
        print(f"\n{failures} configuration(s) had wrong answers: figures are not valid")
        return 1
    print("\nall answers checked by the agent: 0 errors")
    return 0


if __name__ == "__main__":
    sys.exit(main())
