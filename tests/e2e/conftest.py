"""What the end-to-end tests share: ``simhost`` command lines forked from one Python,
an X display for the tkinter examples, started once
per test process (each xdist worker), and Chromium for the page of ``simhost serve``,
once per module that uses it (Playwright's sync API keeps an event loop of its own,
which must not outlive the module's tests)."""

from __future__ import annotations

import os
import select
import shutil
import subprocess
from collections.abc import Iterator

import pytest
from playwright.sync_api import Browser, sync_playwright

from tests.support.cli import ForkedSimhost

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
REQUIRE_BROWSER_ENV = "PERMCLIENT_REQUIRE_BROWSER"


@pytest.fixture(scope="session")
def display() -> Iterator[str]:
    """A usable X display: ``$DISPLAY`` if set, else a private Xvfb, else skip."""
    try:
        import tkinter  # noqa: F401
    except ImportError as exc:  # pragma: no cover - depends on the Python build
        pytest.skip(f"tkinter is not available in this Python: {exc}")
    if os.environ.get("DISPLAY"):
        yield os.environ["DISPLAY"]
        return
    xvfb = shutil.which("Xvfb")
    if xvfb is None:
        pytest.skip("no $DISPLAY and no Xvfb on PATH (install Debian's 'xvfb' package)")
    # -displayfd: Xvfb picks a free display number and writes it to our pipe when ready.
    server = subprocess.Popen(
        [xvfb, "-displayfd", "1", "-nolisten", "tcp", "-screen", "0", "800x600x24"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
    )
    try:
        assert server.stdout is not None
        ready, _, _ = select.select([server.stdout], [], [], 15)
        line = server.stdout.readline().strip() if ready else b""
        if not line:
            pytest.skip("Xvfb did not start within 15 s")
        yield f":{line.decode()}"
    finally:
        server.terminate()
        server.wait(10)
        if server.stdout is not None:
            server.stdout.close()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not os.access(CHROMIUM, os.X_OK):
        reason = "no Chromium here (Debian: apt-get install chromium)"
        if os.environ.get(REQUIRE_BROWSER_ENV, "").strip() not in ("", "0"):
            pytest.fail(f"{reason}; {REQUIRE_BROWSER_ENV}=1 makes this a failure", pytrace=False)
        pytest.skip(reason)
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM)
        try:
            yield launched
        finally:
            launched.close()


@pytest.fixture(scope="module")
def forked() -> Iterator[ForkedSimhost]:
    """``simhost`` command lines as processes forked from one Python (see
    :mod:`tests.support.cli`), for a module that runs many."""
    runner = ForkedSimhost()
    yield runner
    runner.close()
