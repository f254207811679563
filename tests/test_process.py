"""open_process: a real child over its stdio, and nothing left running afterwards."""

from __future__ import annotations

import json
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
    import json, signal, subprocess, sys, time
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    child = subprocess.Popen([sys.executable, "-c",
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(600)"])
    params = {"sessionId": "boot", "grandchild": child.pid}
    note = {"jsonrpc": "2.0", "method": "started", "params": params}
    sys.stdout.write(json.dumps(note) + "\\n"); sys.stdout.flush()
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
    answer = {
        "jsonrpc": "2.0",
        "id": 0,
        "result": {"outcome": {"outcome": "selected", "optionId": "ok"}},
    }
    assert log.read_text() == f"answer {json.dumps(answer, separators=(',', ':'))}\n"


async def test_leaving_the_context_stops_a_stubborn_child_and_its_children() -> None:
    started = trio.Event()
    pidfds: list[int] = []

    def on_started(note: permclient.InboundNotification) -> None:
        # A pidfd turns readable when the process ends, even one that is not our child.
        pidfds.append(os.pidfd_open(note.params["grandchild"]))
        started.set()

    with trio.fail_after(30):
        async with permclient.open_process(
            [sys.executable, "-c", STUBBORN], dialect="acp"
        ) as client:
            assert client.process is not None
            client.on_session_notification("boot", on_started)  # replays if it came first
            await started.wait()
        assert client.process.returncode is not None
        # The grandchild ignores SIGTERM and is not ours to wait for: the group SIGKILL ends it.
        await trio.lowlevel.wait_readable(pidfds[0])
    os.close(pidfds[0])


async def test_a_missing_executable_raises_a_clear_os_error() -> None:
    with pytest.raises(FileNotFoundError):
        async with permclient.open_process(["/nonexistent/runtime"]):
            pass  # pragma: no cover - never entered
