"""open_process: a real child over its stdio, and nothing left running afterwards."""

from __future__ import annotations

import os
import sys
import textwrap
from pathlib import Path

import pytest
import trio

import permclient
from permclient import PermissionRequest, Selected

# A runtime that ignores stdin EOF and SIGTERM, and starts a grandchild that does too:
# only the process-group kill can stop them.
STUBBORN = textwrap.dedent(
    """
    import os, signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
    sys.stderr.write(f"grandchild {child.pid}\\n"); sys.stderr.flush()
    time.sleep(600)
    """
)

# A runtime that asks one permission and reports the answer on stderr.
ASKER = textwrap.dedent(
    """
    import json, sys
    request = {"jsonrpc": "2.0", "id": 0, "method": "session/request_permission", "params": {
        "sessionId": "s", "toolCall": {"toolCallId": "c", "title": "ls", "kind": "execute"},
        "options": [{"optionId": "ok", "name": "OK", "kind": "allow_once"}]}}
    sys.stdout.write(json.dumps(request) + "\\n"); sys.stdout.flush()
    sys.stderr.write("answer " + sys.stdin.readline()); sys.stderr.flush()
    """
)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie still answers kill(0); it is not running.
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"
    except FileNotFoundError:
        return False


async def test_answers_a_real_child_and_sends_its_stderr_to_a_file(tmp_path: Path) -> None:
    log = tmp_path / "runtime.log"

    async def ok(req: PermissionRequest) -> Selected:
        return Selected("ok")

    with trio.fail_after(20):
        async with permclient.open_process(
            [sys.executable, "-c", ASKER], dialect="acp", stderr=log
        ) as client:
            with client.permission_handler("s", ok):
                assert client.process is not None
                await client.process.wait()
    assert log.read_text() == (
        'answer {"jsonrpc":"2.0","id":0,"result":{"outcome":{"outcome":"selected","optionId":"ok"}}}\n'
    )


async def test_leaving_the_context_stops_a_stubborn_child_and_its_children(tmp_path: Path) -> None:
    log = tmp_path / "runtime.log"
    with trio.fail_after(30):
        async with permclient.open_process([sys.executable, "-c", STUBBORN], stderr=log) as client:
            assert client.process is not None
            pid = client.process.pid
            while "grandchild" not in log.read_text():
                await trio.sleep(0.05)  # real child process: no fake clock can speed it up
    grandchild = int(log.read_text().split()[1])
    assert client.process.returncode is not None
    assert not _alive(pid)
    # The grandchild is not ours to wait for; SIGKILL to its group lands promptly.
    with trio.fail_after(5):
        while _alive(grandchild):
            await trio.sleep(0.01)


async def test_a_missing_executable_raises_a_clear_os_error() -> None:
    with pytest.raises(FileNotFoundError):
        async with permclient.open_process(["/nonexistent/runtime"]):
            pass  # pragma: no cover - never entered
