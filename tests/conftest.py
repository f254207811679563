"""Test-wide set-up: the ``e2e`` marker by folder, Hypothesis profiles, the home folder
kept out of every host the tests start, and a guard that keeps processes out of the
inner loop (``pytest -m "not e2e"``)."""

from __future__ import annotations

import compileall
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.support.serving import Places

TESTS = Path(__file__).resolve().parent
ROOT = TESTS.parent
# Tests in these folders start a browser, a pty or an agent process: marked e2e.
E2E_FOLDERS = frozenset({"e2e", "interop"})

# A suite started in the background by a non-interactive shell (nohup, `cmd &`, some CI
# runners) inherits SIGINT ignored, and so would every program it starts: the tests
# that press Ctrl-C in an example or in this process would see nothing happen. Give
# Ctrl-C its usual meaning back; children started after this get the default action.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)

# Hypothesis's profiles ("ci" under CI, "dev" otherwise) are registered and loaded here.
import tests.support.profiles  # noqa: E402, F401


def pytest_configure(config: pytest.Config) -> None:
    """Compile permclient and simhost once, before any test starts a process: the
    suite starts hundreds of Pythons that import them, and where bytecode is not
    written (PYTHONDONTWRITEBYTECODE, as on some CI machines) each would compile
    them again (a third of a ``python -m simhost`` start)."""
    if hasattr(config, "workerinput"):
        return  # an xdist worker: the controller did it
    for package in ("permclient", "simhost"):
        compileall.compile_dir(ROOT / package, quiet=2)


def pytest_xdist_auto_num_workers(config: pytest.Config) -> int:
    """``-n auto`` (the default): one worker per core the process may use, and two
    more, because most end-to-end tests wait on the programs they start."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (cores or 1) + 2


def pytest_ignore_collect(collection_path: Path, config: pytest.Config) -> bool | None:
    """``-m "not e2e"`` (the inner loop) does not even import the e2e modules: a browser
    driver and the interop peers' helpers are seconds of every run's start."""
    if config.option.markexpr.strip() != "not e2e" or collection_path == TESTS:
        return None
    if collection_path.is_relative_to(TESTS):
        return collection_path.relative_to(TESTS).parts[0] in E2E_FOLDERS or None
    return None


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    for item in items:
        if item.path.relative_to(TESTS).parts[0] in E2E_FOLDERS:
            item.add_marker(pytest.mark.e2e)


# What a test outside tests/e2e must not start: a Python (the runtime, an example, an
# agent), Node, a browser, or a pseudo-terminal. A runtime tool's own shell command
# (git, head, ldconfig) is the code under test and may run.
_PROCESS_PROGRAMS = ("python", "node", "npm", "npx", "chromium", "simhost", "Xvfb")


def _refuse_process(what: str) -> None:
    raise AssertionError(
        f"this test starts {what}: tests that start a browser, a pty or an agent "
        "process belong in tests/e2e (marked e2e), out of the inner loop"
    )


@pytest.fixture(autouse=True)
def _no_processes_outside_e2e(
    request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch
) -> None:
    if request.node.get_closest_marker("e2e") is not None:
        return
    popen_init = subprocess.Popen.__init__

    def guarded_init(self: subprocess.Popen[Any], args: Any, *rest: Any, **kwargs: Any) -> None:
        argv = [args] if isinstance(args, (str, bytes, os.PathLike)) else list(args)
        first = os.fsdecode(argv[0]) if argv else ""
        if first == sys.executable or os.path.basename(first).startswith(_PROCESS_PROGRAMS):
            _refuse_process(" ".join(map(os.fsdecode, argv))[:200])
        popen_init(self, args, *rest, **kwargs)

    def no_pty(*args: Any, **kwargs: Any) -> Any:
        _refuse_process("a pseudo-terminal")

    monkeypatch.setattr(subprocess.Popen, "__init__", guarded_init)
    monkeypatch.setattr(os, "forkpty", no_pty)


@pytest.fixture(autouse=True, scope="session")
def _own_config_and_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every host the tests start reads and writes editor rules, audit trails and
    sessions under a folder of the suite's own, never the home folder's (a person's
    own rules would change what a test sees)."""
    home = tmp_path_factory.mktemp("xdg")
    saved = {key: os.environ.get(key) for key in ("XDG_CONFIG_HOME", "XDG_STATE_HOME")}
    os.environ["XDG_CONFIG_HOME"] = str(home / "config")
    os.environ["XDG_STATE_HOME"] = str(home / "state")
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture
def places(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Places:
    """Folders of the test's own; a host it starts reads and writes rules only there
    (its XDG folders too: a person's own rules would change what a test sees)."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    config = tmp_path / "config"
    monkeypatch.setenv("XDG_CONFIG_HOME", str(config))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))
    return Places(workspace, tmp_path / "state", config)

