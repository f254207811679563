"""The state folder: odd files there are skipped with a warning (never a crash, never a hang),
a ``sessions`` that is not a folder is a one-line error with exit code 2, saved sessions stay
small enough to load again, and each workspace has its own state folder by default."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from simhost.runtime import sessions as sessions_module
from simhost.runtime.policy import load_policy
from simhost.runtime.server import RuntimeConfig, serve_stdio
from simhost.runtime.sessions import (
    HISTORY_TEXT_LIMIT,
    MAX_SESSION_BYTES,
    TITLE_LIMIT,
    SessionStore,
    StateFolderError,
    default_state_dir,
)
from simhost.runtime.wire import HistoryEntry
from tests.support.runtime_editor import odd_state_folder, valid_session


def test_unusable_session_files_are_skipped_with_a_warning_each(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    # (Would raise RecursionError, or hang on a FIFO.)
    store = SessionStore(odd_state_folder(tmp_path))
    assert [s.session_id for s in store.sessions()] == ["s-000000000001"]
    assert store.active_id is None
    warnings = "\n".join(r.getMessage() for r in caplog.records)
    assert "s-000000000002.json: the JSON is nested too deeply" in warnings
    assert "s-000000000004.json: it is not a regular file" in warnings
    assert "s-000000000005.json: it is a symbolic link" in warnings
    assert "s-000000000006.json: it is not a regular file" in warnings
    assert "active.json: it is not a regular file" in warnings


def test_a_session_file_over_the_size_limit_is_skipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    folder = tmp_path / "sessions"
    folder.mkdir()
    big = valid_session("s-000000000001", title="x" * 500)
    (folder / "s-000000000001.json").write_bytes(big)
    (folder / "s-000000000002.json").write_bytes(valid_session("s-000000000002"))
    monkeypatch.setattr(sessions_module, "MAX_SESSION_BYTES", 400)
    store = SessionStore(tmp_path)
    assert [s.session_id for s in store.sessions()] == ["s-000000000002"]
    assert "it is larger than 400 bytes" in caplog.text


def test_a_saved_session_stays_well_under_the_size_limit(tmp_path: Path) -> None:
    store = SessionStore(tmp_path)
    session = store.create("t" * 10_000)
    for _ in range(sessions_module.HISTORY_LIMIT + 10):
        session.add_history(HistoryEntry("agent", "\x00" * 100_000))
    store.save(session)
    path = tmp_path / "sessions" / f"{session.session_id}.json"
    assert path.stat().st_size < MAX_SESSION_BYTES
    again = SessionStore(tmp_path).get(session.session_id)
    assert len(again.title) == TITLE_LIMIT
    assert {len(entry.text) for entry in again.history} == {HISTORY_TEXT_LIMIT}


# ------------------------------------------------------ sessions is not a folder


def test_sessions_as_a_symlink_is_refused(tmp_path: Path) -> None:
    (tmp_path / "elsewhere").mkdir()
    (tmp_path / "sessions").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(StateFolderError, match="is not a folder"):
        SessionStore(tmp_path)


async def test_serve_stdio_raises_a_plain_error_not_a_group(tmp_path: Path) -> None:
    (tmp_path / "sessions").write_text("")
    policy, label = load_policy("default")
    config = RuntimeConfig(tmp_path, policy, label, tmp_path)
    read_end, write_end = os.pipe()
    try:
        with pytest.raises(StateFolderError):
            await serve_stdio(config, (read_end, write_end))
    finally:
        os.close(read_end)
        os.close(write_end)


# -------------------------------------------------- one state folder per workspace


def test_the_default_state_folder_is_one_per_workspace(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path))
    first = default_state_dir(Path("/home/ann/project"))
    assert first.parent == tmp_path / "simhost" / "workspaces"
    assert first.name.endswith("-project") and len(first.name) == len("0123456789abcdef-project")
    assert default_state_dir(Path("/home/ann/project")) == first
    assert default_state_dir(Path("/home/bob/project")) != first
    assert default_state_dir(Path("/")).name.endswith("-root")
    assert default_state_dir(Path("/tmp/a b\n;x")).name.endswith("-a_b_x")
    assert default_state_dir(Path("/tmp/..")).name.endswith("-root")
    monkeypatch.setenv("XDG_STATE_HOME", "relative/ignored")
    assert default_state_dir(Path("/p")).parent == (
        Path.home() / ".local" / "state" / "simhost" / "workspaces"
    )


