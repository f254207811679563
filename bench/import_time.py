"""What ``import permclient`` costs over ``import trio``, in fresh interpreters.

Runs ``python -c 'import trio'`` and ``python -c 'import permclient'`` (and a bare
``python -c pass`` for reference) ``--runs`` times each, interleaved, each in a new
interpreter, and prints min/median/max wall time of each and the difference of the
medians (and of the minimums). Issue 12's target: permclient no more than 60 ms over
trio (judged on the medians). If the target is missed (or with ``--importtime``), it
prints the top entries of ``python -X importtime -c 'import permclient'``: the modules
that permclient imports beyond trio's, by their own time.

The interpreters read compiled bytecode, as an installed package's are: they run with
``PYTHONPYCACHEPREFIX`` set to a fresh temporary folder (and bytecode writing on even if
``PYTHONDONTWRITEBYTECODE`` is set), which two warm-up rounds fill, for the standard
library, trio and permclient alike. Without it, an editable install under
``PYTHONDONTWRITEBYTECODE`` recompiles permclient's sources at every import while trio's
come compiled from its wheel (``--no-bytecode-cache`` measures that case).

Usage::

    python bench/import_time.py              # 30 runs of each
    python bench/import_time.py --runs 10 --importtime

Exits 1 if an import fails.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time

TARGET_MS = 60.0
STATEMENTS = {"python": "pass", "trio": "import trio", "permclient": "import permclient"}


CHILD_ENV = dict(os.environ)


def timed(statement: str) -> float:
    """Wall seconds of one fresh interpreter running ``statement``."""
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", statement], check=True, env=CHILD_ENV)
    return time.perf_counter() - t0


def importtime(statement: str) -> dict[str, tuple[int, int]]:
    """``-X importtime``: module -> (self us, cumulative us)."""
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", "-c", statement],
        capture_output=True,
        text=True,
        check=True,
        env=CHILD_ENV,
    )
    table: dict[str, tuple[int, int]] = {}
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "self [us]" in line:
            continue
        self_us, cumulative, name = line.removeprefix("import time:").split("|")
        table[name.strip()] = (int(self_us), int(cumulative))
    return table


def print_importtime(top: int) -> None:
    trio_modules = set(importtime("import trio"))
    table = importtime("import permclient")
    extra = {name: t for name, t in table.items() if name not in trio_modules}
    print(
        f"\npython -X importtime -c 'import permclient': {len(extra)} modules beyond trio's, "
        f"{sum(t[0] for t in extra.values()) / 1000:.1f} ms of their own (one run); "
        f"top {top} by their own time (cumulative includes what they import first, "
        "trio too for the first permclient module that imports it):"
    )
    print(f"  {'self ms':>7} {'cumulative ms':>13}  module")
    ranked = sorted(extra.items(), key=lambda item: item[1][0], reverse=True)
    for name, (self_us, cumulative) in ranked[:top]:
        print(f"  {self_us / 1000:>7.1f} {cumulative / 1000:>13.1f}  {name}")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=30, help="interpreters per statement")
    parser.add_argument("--top", type=int, default=15, help="importtime entries to show")
    parser.add_argument(
        "--importtime", action="store_true", help="show -X importtime's top entries even if met"
    )
    parser.add_argument(
        "--no-bytecode-cache",
        action="store_true",
        help="run the interpreters in this environment as it is (no temporary pycache prefix)",
    )
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="import_time.pycache.") as prefix:
        if not args.no_bytecode_cache:
            CHILD_ENV.pop("PYTHONDONTWRITEBYTECODE", None)
            CHILD_ENV["PYTHONPYCACHEPREFIX"] = prefix
        return measure(args)


def measure(args: argparse.Namespace) -> int:
    load = ", ".join(f"{x:.2f}" for x in os.getloadavg())
    print(
        f"import_time: {args.runs} fresh interpreters per statement, interleaved; "
        f"python {sys.version.split()[0]} ({sys.executable}); load average {load}; "
        + (
            "bytecode as the environment has it (PYTHONDONTWRITEBYTECODE="
            f"{os.environ.get('PYTHONDONTWRITEBYTECODE', '')!r})"
            if args.no_bytecode_cache
            else "compiled bytecode (a temporary PYTHONPYCACHEPREFIX)"
        ),
        flush=True,
    )
    for _ in range(2):  # compile the bytecode, warm the OS's file cache
        for statement in STATEMENTS.values():
            timed(statement)
    times: dict[str, list[float]] = {name: [] for name in STATEMENTS}
    for _ in range(args.runs):
        for name, statement in STATEMENTS.items():
            times[name].append(timed(statement) * 1000)
    print(f"\n{'python -c':<28} {'min ms':>7} {'median ms':>10} {'max ms':>7}")
    for name, statement in STATEMENTS.items():
        values = times[name]
        print(
            f"{statement!r:<28} {min(values):>7.1f} {statistics.median(values):>10.1f} "
            f"{max(values):>7.1f}"
        )
    median_over = statistics.median(times["permclient"]) - statistics.median(times["trio"])
    min_over = min(times["permclient"]) - min(times["trio"])
    met = median_over <= TARGET_MS
    print(
        f"\nimport permclient over import trio: {median_over:.1f} ms (medians), "
        f"{min_over:.1f} ms (minimums); target <= {TARGET_MS:g} ms (medians): "
        f"{'MET' if met else 'NOT MET'}"
    )
    if args.importtime or not met:
        print_importtime(args.top)
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except subprocess.CalledProcessError as exc:
        print(f"import_time: {exc.cmd!r} failed with status {exc.returncode}", file=sys.stderr)
        sys.exit(1)
