"""The state folder: odd files there are skipped with a warning (never a crash, never a hang),
a ``sessions`` that is not a folder is a one-line error with exit code 2, saved sessions stay
small enough to load again, and each workspace has its own state folder by default."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import trio

from tests.support.runtime_editor import odd_state_folder, open_bridge_runtime

BOUND_S = 20


RUNTIME = [sys.executable, "-m", "simhost", "runtime", "--stdio"]


_BODY = b'{"jsonrpc":"2.0","id":1,"method":"sessionList","params":{}}'


LIST = b"Content-Length: %d\r\n\r\n%s" % (len(_BODY), _BODY)


def run_runtime(
    tmp_path: Path, state: Path | None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """The runtime, asked for ``sessionList`` with stdin then closed; bounded in time."""
    workspace = tmp_path / "w"
    workspace.mkdir(exist_ok=True)
    argv = [*RUNTIME, "--workspace", str(workspace)]
    if state is not None:
        argv += ["--state-dir", str(state)]
    return subprocess.run(
        argv,
        input=LIST,
        capture_output=True,
        timeout=BOUND_S,
        check=False,
        env={**os.environ, "COLUMNS": "300", **(env or {})},
    )


def test_the_runtime_starts_and_answers_beside_unusable_session_files(
    tmp_path: Path
) -> None:
    done = run_runtime(tmp_path, odd_state_folder(tmp_path))
    assert done.returncode == 0
    assert b'"sessionId":"s-000000000001"' in done.stdout
    assert b"s-000000000004" not in done.stdout
    stderr = done.stderr.decode()
    assert "Traceback" not in stderr and "Error" not in stderr
    assert stderr.count("skipped session file") == 5


def test_sessions_as_a_plain_file_is_one_line_and_exit_code_2(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir()
    (state / "sessions").write_text("not a folder")
    done = run_runtime(tmp_path, state)
    assert done.returncode == 2
    stderr = done.stderr.decode()
    assert "Traceback" not in stderr and "ExceptionGroup" not in stderr
    assert len(stderr.strip().splitlines()) == 1
    assert "sessions is not a folder" in stderr


async def test_each_workspace_starts_with_its_own_sessions(tmp_path: Path) -> None:
    """Without --state-dir, a first chat in a new folder is "Session 1" and lists only its own."""
    env = {"XDG_STATE_HOME": str(tmp_path / "xdg")}
    with trio.fail_after(BOUND_S):
        for folder in ("one", "two"):
            async with open_bridge_runtime(tmp_path / folder, state=None, env=env) as editor:
                session = await editor.new_session()
                listed = await editor.client.request("sessionList", {})
                assert [(s["sessionId"], s["title"]) for s in listed["sessions"]] == [
                    (session, "Session 1")
                ]
    assert len(list((tmp_path / "xdg" / "simhost" / "workspaces").iterdir())) == 2

