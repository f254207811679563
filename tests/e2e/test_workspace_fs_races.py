"""The workspace is a wall: symbolic links swapped in while a file tool runs never lead out.

Two kinds of test. The races run a swapper process against the runtime's file tools
and ``permclient.acp``'s ``fs/*`` service for a bounded number of calls and count
what reached the outside folder: it must be nothing. The exhaustive ones swap the
path at every single step of the file access in turn (before its 1st system call,
its 2nd, ...), so no window is left to chance."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest

from simhost.runtime.tools import ToolResult, plan_delete, plan_read, plan_write
from tests.support.acp_agent import connected, fs_call, initialized, new_session
from tests.support.workspace import INSIDE, SECRET, Layout

ITERATIONS = 300


SWAPPER = """
import os, random, sys, time
from contextlib import suppress
from pathlib import Path

what, workspace, outside = sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3])
inside_text = sys.argv[4]
sub, real, link = workspace / "sub", workspace / "sub.real", workspace / "sub.link"
random.seed(what)


def pause():
    # Each state lasts a random while (up to 0.2 ms), so the swaps fall anywhere; one
    # in twenty lasts up to 5 ms, long enough for a whole call to go through.
    longest = 5e-3 if random.random() < 0.05 else 2e-4
    until = time.perf_counter() + random.random() * longest
    while time.perf_counter() < until:
        pass


if what == "parent":
    os.rename(sub, real)
    os.symlink(outside, sub)
print("swapping", flush=True)
while True:
    if what == "parent":
        if not (real / "f.txt").exists():
            (real / "f.txt").write_text(inside_text)
        with suppress(OSError):
            os.rename(sub, link)  # the symlink aside
            os.rename(real, sub)  # the real folder in place
        pause()
        with suppress(OSError):
            os.rename(sub, real)  # the real folder aside
            os.rename(link, sub)  # the symlink in place
    else:
        with suppress(OSError):
            (sub / ".regular").write_text(inside_text)
            os.replace(sub / ".regular", sub / "f.txt")
        pause()
        with suppress(OSError):
            os.symlink(outside / "f.txt", sub / ".link")
            os.replace(sub / ".link", sub / "f.txt")
    pause()
"""


@contextmanager
def swapping(layout: Layout, what: str) -> Iterator[None]:
    """Another process that keeps swapping ``sub`` (``parent``) or ``sub/f.txt`` (``file``)
    for a symbolic link to the outside folder, until the block ends."""
    argv = [sys.executable, "-c", SWAPPER, what, str(layout.workspace), str(layout.outside)]
    with subprocess.Popen([*argv, INSIDE], stdout=subprocess.PIPE) as swapper:
        try:
            assert swapper.stdout is not None
            assert swapper.stdout.readline() == b"swapping\n"
            yield
        finally:
            swapper.kill()


def _reached_outside(layout: Layout, result: ToolResult | dict[str, Any]) -> bool:
    return not layout.untouched() or SECRET in repr(result)


@pytest.mark.parametrize("what", ["parent", "file"])
@pytest.mark.parametrize("tool", ["write", "read", "delete"])
async def test_runtime_file_tools_racing_symlink_swaps_never_reach_outside(
    tmp_path: Path, tool: str, what: str
) -> None:
    layout = Layout(tmp_path, SECRET if tool == "read" else INSIDE)
    workspace = layout.workspace
    reached = 0
    done = 0
    with swapping(layout, what):
        # At least ITERATIONS calls, and on until one went through (the race ran both
        # ways); a busy machine can starve either side for a while, so the cap is wide.
        for number in range(ITERATIONS * 20):
            if number >= ITERATIONS and done > 0:
                break
            if tool == "write":
                raw = {"path": "sub/f.txt", "text": f"{number}"}
                call = plan_write(workspace, "sub/f.txt", f"{number}\n", raw)
            elif tool == "read":
                call = plan_read(workspace, "sub/f.txt")
            else:
                call = plan_delete(workspace, "sub/f.txt")
            if call.refusal is not None:
                continue
            result = await call.action()
            done += result.ok
            reached += _reached_outside(layout, result)
    assert reached == 0
    assert layout.untouched()
    assert done > 0  # the race ran both ways: some calls went through, inside the workspace


@pytest.mark.parametrize("what", ["parent", "file"])
@pytest.mark.parametrize("method", ["fs/write_text_file", "fs/read_text_file"])
async def test_acp_fs_racing_symlink_swaps_never_reaches_outside(
    tmp_path: Path, method: str, what: str
) -> None:
    layout = Layout(tmp_path, SECRET if method == "fs/read_text_file" else INSIDE)
    path = str(layout.sub / "f.txt")
    reached = 0
    async with connected(read_files=True, write_files=True) as (agent, peer):
        await initialized(agent, peer)
        await new_session(agent, peer, layout.workspace)
        with swapping(layout, what):
            for number in range(ITERATIONS):
                params = {"sessionId": "s1", "path": path, "content": f"{number}\n"}
                reply = await fs_call(peer, method, params, request_id=number)
                reached += _reached_outside(layout, reply)
    assert reached == 0
    assert layout.untouched()

