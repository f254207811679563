"""Trio guest mode on asyncio: the core's routing, cancel and teardown cases, run
through :func:`permclient.embed.asyncio_client` against a scripted peer and the
reference runtime."""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest

from permclient import Cancelled, Decision, PermissionRequest, Selected
from permclient.embed import asyncio_client
from tests.support.embed import LoopCards, run_on_asyncio
from tests.support.peer import runtime_argv


def test_end_to_end_approve_then_cancel_the_host_task_with_a_question_open(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "w"
    workspace.mkdir()
    argv = runtime_argv(workspace, tmp_path / "state")
    process_box: list[Any] = []

    async def plugin(opened: asyncio.Event) -> None:
        async with asyncio_client(argv) as client:
            process_box.append(client.guest.client.process)
            session_id = (await client.request("sessionNew", {"title": "e"}))["sessionId"]

            async def allow(req: PermissionRequest) -> Decision:
                return Selected("allow") if "notes" in (req.tool_call.title or "") else Cancelled()

            with client.permission_handler(session_id, allow):
                text = "create notes.txt with hello"
                result = await client.request("chatSend", {"sessionId": session_id, "text": text})
                assert result == {"stopReason": "end_turn"}
            cards = LoopCards()
            with client.permission_handler(session_id, cards):
                turn = asyncio.ensure_future(
                    client.request("chatSend", {"sessionId": session_id, "text": "run true"})
                )
                await cards.handles.get()
                opened.set()
                await turn  # cancelled from outside while the question is open

    async def scenario() -> None:
        opened = asyncio.Event()
        task = asyncio.ensure_future(plugin(opened))
        await opened.wait()
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        process = process_box[0]
        assert process.returncode is not None  # the runtime was stopped

    run_on_asyncio(scenario)
    assert (workspace / "notes.txt").read_text() == "hello\n"


def test_a_runtime_that_cannot_start_raises_from_the_block(tmp_path: Path) -> None:
    async def scenario() -> None:
        with pytest.raises(FileNotFoundError):
            async with asyncio_client([str(tmp_path / "no-such-runtime")]):
                pass  # pragma: no cover - never entered

    run_on_asyncio(scenario)


# Ctrl-C under asyncio.run while the loop waits: the kernel gives a process's SIGINT
# to any of its threads. Sent here to one that is not the loop's, which must still
# wake the loop so that asyncio's handler runs (the loop has 30 s left to sleep).
CTRL_C_ON_ANOTHER_THREAD = textwrap.dedent(
    """
    import asyncio, signal, sys, threading
    from permclient.embed import asyncio_client

    async def main():
        async with asyncio_client([sys.executable, "-c", "import sys; sys.stdin.read()"]):
            bystander = threading.Thread(target=threading.Event().wait, daemon=True)
            bystander.start()
            threading.Timer(0.2, signal.pthread_kill, (bystander.ident, signal.SIGINT)).start()
            await asyncio.sleep(30)

    try:
        asyncio.run(main())
    except KeyboardInterrupt:
        sys.exit(130)
    """
)


def test_ctrl_c_that_the_kernel_gives_another_thread_still_reaches_asyncio() -> None:
    result = subprocess.run(
        [sys.executable, "-c", CTRL_C_ON_ANOTHER_THREAD],
        capture_output=True,
        text=True,
        timeout=20,
    )
    assert result.returncode == 130, result.stderr

