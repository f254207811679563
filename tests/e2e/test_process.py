"""open_process: a real child over its stdio, and nothing left running afterwards."""

from __future__ import annotations

import json
import os
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import IO

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

# A runtime that answers one request with its working directory and environment.
REPORTER = textwrap.dedent(
    """
    import json, os, sys
    request = json.loads(sys.stdin.readline())
    result = {"cwd": os.getcwd(), "env": dict(os.environ)}
    response = {"jsonrpc": "2.0", "id": request["id"], "result": result}
    sys.stdout.write(json.dumps(response) + "\\n"); sys.stdout.flush()
    """
)

# The line ASKER writes to its stderr once it gets the answer ``ok`` (as ``ok`` below sends it).
ASKER_ANSWER = (
    "answer "
    + json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 0,
            "result": {"outcome": {"outcome": "selected", "optionId": "ok"}},
        },
        separators=(",", ":"),
    )
    + "\n"
)


async def ok(req: PermissionRequest) -> Selected:
    return Selected("ok")


async def run_asker(stderr: str | os.PathLike[str] | IO[bytes] | None) -> None:
    """Run ASKER to its end, answering its question with ``ok``."""
    with trio.fail_after(20):
        async with permclient.open_process(
            [sys.executable, "-c", ASKER], dialect="acp", stderr=stderr
        ) as client:
            with client.permission_handler("s", ok):
                assert client.process is not None
                await client.process.wait()


async def test_answers_a_real_child_and_sends_its_stderr_to_a_file(tmp_path: Path) -> None:
    log = tmp_path / "runtime.log"
    await run_asker(log)
    assert log.read_text() == ASKER_ANSWER


async def test_stderr_none_sends_the_childs_stderr_to_ours(
    capfd: pytest.CaptureFixture[str],
) -> None:
    await run_asker(None)
    assert ASKER_ANSWER in capfd.readouterr().err


@pytest.fixture
def log_file(tmp_path: Path) -> Iterator[IO[bytes]]:
    with open(tmp_path / "runtime.log", "w+b") as file:
        yield file


async def test_stderr_an_open_file_gets_the_childs_stderr_and_is_left_open(
    log_file: IO[bytes],
) -> None:
    await run_asker(log_file)
    assert not log_file.closed
    log_file.seek(0)  # still usable: permclient closed neither it nor its descriptor
    assert log_file.read() == ASKER_ANSWER.encode()


async def test_env_is_the_whole_environment_of_the_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PERMCLIENT_TEST_NOT_PASSED", "1")
    # PYTHONCOERCECLOCALE=0: without it the child's CPython adds LC_CTYPE to its own environ.
    env = {"PERMCLIENT_TEST_MARKER": "env-marker-4711", "PYTHONCOERCECLOCALE": "0"}
    with trio.fail_after(20):
        async with permclient.open_process(
            [sys.executable, "-c", REPORTER], dialect="acp", env=env
        ) as client:
            result = await client.request("report")
    assert "PERMCLIENT_TEST_NOT_PASSED" not in result["env"]
    assert result["env"] == env


async def test_cwd_is_the_working_directory_of_the_child(tmp_path: Path) -> None:
    with trio.fail_after(20):
        async with permclient.open_process(
            [sys.executable, "-c", REPORTER], dialect="acp", cwd=tmp_path
        ) as client:
            result = await client.request("report")
    assert Path(result["cwd"]) == tmp_path  # pytest's tmp_path is already resolved


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
