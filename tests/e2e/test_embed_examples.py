"""The embedding examples run, non-interactively, against ``simhost runtime``.

The tkinter example needs a display: an existing ``$DISPLAY``, else an ``Xvfb``
we start for the test (Debian package ``xvfb``); with neither, it skips and says why
(the ``display`` fixture lives in test_examples.py).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import paths

EXAMPLES = paths.EXAMPLES


def run_example(name: str, *args: str, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        [sys.executable, str(EXAMPLES / name), *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout


@pytest.mark.parametrize(("auto", "written"), [("allow", True), ("deny", False)])
def test_asyncio_host_approves_through_its_callback(
    tmp_path: Path, auto: str, written: bool
) -> None:
    out = run_example("asyncio_host.py", "--workspace", str(tmp_path), "--auto", auto)
    assert "permission asked: fs.write: notes.txt (edit)" in out
    assert f"answered: {auto}" in out
    assert "turn ended: end_turn" in out and out.rstrip().endswith("runtime stopped")
    assert (tmp_path / "notes.txt").exists() is written


@pytest.mark.parametrize(("auto", "written"), [("allow", True), ("deny", False)])
def test_threaded_plugin_shows_cards_on_its_ui_thread(
    tmp_path: Path, auto: str, written: bool
) -> None:
    out = run_example("threaded_plugin.py", "--workspace", str(tmp_path), "--auto", auto)
    assert "[ui-main] card: fs.write: notes.txt" in out
    assert f"[click] clicked: {auto}" in out
    assert "turn ended: end_turn" in out and out.rstrip().endswith("runtime stopped")
    assert (tmp_path / "notes.txt").exists() is written


@pytest.mark.parametrize(("auto", "written"), [("allow", True), ("deny", False)])
def test_tk_approver_card_buttons_answer_under_a_virtual_display(
    display: str,  # noqa: F811 - the fixture imported above
    tmp_path: Path,
    auto: str,
    written: bool,
) -> None:
    env = {**os.environ, "DISPLAY": display}
    out = run_example("tk_approver.py", "--workspace", str(tmp_path), "--auto", auto, env=env)
    assert "permission asked: fs.write: notes.txt" in out
    assert f"clicked: {auto}" in out
    assert "turn ended: end_turn" in out
    assert out.rstrip().endswith("runtime stopped")
    assert (tmp_path / "notes.txt").exists() is written
