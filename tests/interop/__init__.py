"""Interop tests against the reference implementations of both wires.

Peers live here: ``acp_python_agent.py`` and ``acp_python_write_agent.py`` (official
ACP Python SDK) and, under ``node/``, runtimes built on ``vscode-jsonrpc`` and
``@agentclientprotocol/sdk`` (``ts_agent.mjs``, the TS twin of the write agent).
``acp_scenarios.py`` drives both write agents with the same scenarios.
The node peers need ``node/node_modules``; install it with::

    npm ci --prefix tests/interop/node

Without it those tests are skipped, unless ``PERMCLIENT_REQUIRE_INTEROP=1`` is set
(CI sets it after ``npm ci``), in which case they fail: a missing peer must never
turn a red build green.
"""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import sys
from pathlib import Path
from typing import NoReturn

import pytest

INTEROP_DIR = Path(__file__).resolve().parent
NODE_DIR = INTEROP_DIR / "node"
NODE_MODULES = NODE_DIR / "node_modules"
REQUIRE_ENV = "PERMCLIENT_REQUIRE_INTEROP"
INSTALL_HINT = "run `npm ci --prefix tests/interop/node`"

# A whole interop test (spawn, handshake, scenario, teardown) must finish within this.
# It is a safety bound for trio.fail_after, not a wait.
TEST_BOUND_S = 30.0


def interop_required() -> bool:
    """True when a missing interop dependency must fail the test instead of skipping it.

    ``PERMCLIENT_REQUIRE_INTEROP=1`` is the documented switch; any other value except
    empty, ``0``, ``false`` or ``no`` also counts, so a typo fails closed.
    """
    value = os.environ.get(REQUIRE_ENV, "").strip().lower()
    return value not in {"", "0", "false", "no"}


def unavailable(reason: str) -> NoReturn:
    """Skip the test with ``reason``, or fail it when ``PERMCLIENT_REQUIRE_INTEROP=1``."""
    if interop_required():
        pytest.fail(f"{reason} ({REQUIRE_ENV}=1 makes this a failure)", pytrace=False)
    pytest.skip(reason)


def _pinned_version(package: str) -> str | None:
    manifest = json.loads((NODE_DIR / "package.json").read_text(encoding="utf-8"))
    version = manifest.get("dependencies", {}).get(package)
    return version if isinstance(version, str) else None


def require_node_packages(*packages: str) -> str:
    """The ``node`` executable, once every npm ``package`` is installed at its pinned version.

    Skips (or fails, see :func:`unavailable`) when node is not on PATH, when
    ``tests/interop/node/node_modules`` is missing, or when an installed package is
    not the version pinned in ``tests/interop/node/package.json``.
    """
    node = shutil.which("node")
    if node is None:
        unavailable("the `node` executable is not on PATH; interop peers need Node 20+")
    if not NODE_MODULES.is_dir():
        unavailable(f"{NODE_MODULES} is missing; {INSTALL_HINT}")
    for package in packages:
        manifest = NODE_MODULES / package / "package.json"
        if not manifest.is_file():
            unavailable(f"npm package {package} is not installed in {NODE_MODULES}; {INSTALL_HINT}")
        installed = json.loads(manifest.read_text(encoding="utf-8")).get("version")
        pinned = _pinned_version(package)
        if pinned is not None and installed != pinned:
            unavailable(
                f"npm package {package} is {installed} in {NODE_MODULES}, "
                f"but package.json pins {pinned}; {INSTALL_HINT}"
            )
    return node


def require_python_module(module: str) -> str:
    """The Python executable to run a peer with, once ``module`` is importable by it."""
    if importlib.util.find_spec(module) is None:
        unavailable(
            f"Python module {module!r} is not installed; "
            "install the test extras (`pip install -e '.[test]'`)"
        )
    return sys.executable
