"""What the embedding facades' tests share: handler functions that keep each handle
(the "card") for the test to answer, on an asyncio loop or on any thread, and a
bounded asyncio run."""

from __future__ import annotations

import asyncio
import queue
import threading
from collections.abc import Awaitable, Callable

from permclient.embed import PermissionHandle
from tests.support.peer import TIMEOUT_S


def run_on_asyncio(scenario: Callable[[], Awaitable[None]]) -> None:
    """Run ``scenario`` on a fresh asyncio loop, bounded by a timeout."""

    async def bounded() -> None:
        await asyncio.wait_for(scenario(), TIMEOUT_S * 3)

    asyncio.run(bounded())


class LoopCards:
    """A handler function (run on the loop) that keeps each handle for the test."""

    def __init__(self) -> None:
        self.handles: asyncio.Queue[PermissionHandle] = asyncio.Queue()
        self.withdrawn: asyncio.Queue[PermissionHandle] = asyncio.Queue()
        self.threads: list[int] = []

    def __call__(self, handle: PermissionHandle) -> None:
        self.threads.append(threading.get_ident())
        handle.on_cancelled(self.withdrawn.put_nowait)
        self.handles.put_nowait(handle)


class ThreadCards:
    """A handler function that keeps each handle (the "card") for the test to answer."""

    def __init__(self) -> None:
        self.handles: queue.Queue[PermissionHandle] = queue.Queue()
        self.threads: list[str] = []
        self.withdrawn: queue.Queue[PermissionHandle] = queue.Queue()

    def __call__(self, handle: PermissionHandle) -> None:
        self.threads.append(threading.current_thread().name)
        handle.on_cancelled(self.withdrawn.put)
        self.handles.put(handle)

    def next(self) -> PermissionHandle:
        return self.handles.get(timeout=TIMEOUT_S)
