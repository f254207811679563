"""What trio itself costs per item, measured alone: the floor under an async handler.

An async permission handler that awaits once needs, whatever the client does around
it, a worker task woken to start it and one more trip through trio's scheduler for
its checkpoint. This script measures those costs with no permclient code at all:

* ``checkpoint``: ``await trio.lowlevel.checkpoint()`` in a loop, one task;
* ``cancel scope``: entering and leaving a ``trio.CancelScope``, one task;
* ``hand-off + checkpoint``: 64 idle worker tasks, each woken
  (``trio.lowlevel.reschedule``) for one item that awaits one checkpoint, as the
  client's workers run async handlers; a batch of 64 per wake-up;
* ``hand-off + scope + checkpoint``: the same with a cancel scope per item.

Prints the minimum over ``--rounds`` of CPU µs per item (``time.process_time()``).

Usage::

    python bench/trio_steps.py
    python bench/trio_steps.py --items 100000 --rounds 7
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Awaitable, Callable

import trio
import trio.testing

WORKERS = 64


async def checkpoint(items: int) -> float:
    start = time.process_time()
    for _ in range(items):
        await trio.lowlevel.checkpoint()
    return time.process_time() - start


async def cancel_scope(items: int) -> float:
    start = time.process_time()
    for _ in range(items):
        with trio.CancelScope():  # noqa: ASYNC100 - its cost alone is what is measured
            pass
    return time.process_time() - start


async def _hand_off(items: int, scoped: bool) -> float:
    idle: list[trio.lowlevel.Task] = []
    done = 0

    def abort(_: object) -> trio.lowlevel.Abort:
        return trio.lowlevel.Abort.SUCCEEDED

    async def worker() -> None:
        nonlocal done
        task = trio.lowlevel.current_task()
        while True:
            idle.append(task)
            await trio.lowlevel.wait_task_rescheduled(abort)
            if scoped:
                with trio.CancelScope():
                    await trio.lowlevel.checkpoint()
            else:
                await trio.lowlevel.checkpoint()
            done += 1

    batches = items // WORKERS
    async with trio.open_nursery() as nursery:
        for _ in range(WORKERS):
            nursery.start_soon(worker)
        await trio.testing.wait_all_tasks_blocked()
        start = time.process_time()
        for _ in range(batches):
            while len(idle) < WORKERS:
                await trio.lowlevel.checkpoint()
            for _ in range(WORKERS):
                trio.lowlevel.reschedule(idle.pop())
        while done < batches * WORKERS:
            await trio.lowlevel.checkpoint()
        elapsed = time.process_time() - start
        nursery.cancel_scope.cancel()
    return elapsed * items / (batches * WORKERS)


async def hand_off(items: int) -> float:
    return await _hand_off(items, scoped=False)


async def hand_off_scoped(items: int) -> float:
    return await _hand_off(items, scoped=True)


MEASURES: list[tuple[str, Callable[[int], Awaitable[float]]]] = [
    ("checkpoint", checkpoint),
    ("cancel scope", cancel_scope),
    ("hand-off + checkpoint", hand_off),
    ("hand-off + scope + checkpoint", hand_off_scoped),
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--items", type=int, default=64_000, help="items per round")
    parser.add_argument("--rounds", type=int, default=5, help="rounds (the minimum is shown)")
    args = parser.parse_args()
    print(f"trio {trio.__version__}: CPU µs per item, minimum of {args.rounds} rounds")
    for name, measure in MEASURES:
        best = min(trio.run(measure, args.items) for _ in range(args.rounds))
        print(f"  {name:32} {best / args.items * 1e6:6.2f}")


if __name__ == "__main__":
    main()
