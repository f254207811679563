"""Packaging: the SDK needs only msgspec and trio; Rich and Typer are simhost's ``host`` extra.

Each "without the extra" test runs a fresh interpreter whose ``sitecustomize``
makes ``rich`` and ``typer`` unimportable (as in an environment where only
``pip install permclient`` ran) and records every attempt to import them.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from simhost._entry import HOST_EXTRA_MISSING, HOST_MODULES
from tests.support import paths

ROOT = paths.ROOT


BLOCK_HOST_EXTRA = f"""
import sys
from tests.support import paths

HOST_MODULES = {HOST_MODULES!r}
attempts = []


class _NoHostExtra:
    '''As if the host extra were not installed: its modules cannot be found.'''

    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HOST_MODULES:
            attempts.append(name)
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)
        return None


sys.meta_path.insert(0, _NoHostExtra())
"""


@pytest.fixture
def no_host_extra(tmp_path: Path) -> dict[str, str]:
    """The environment of a subprocess in which ``rich`` and ``typer`` cannot be imported."""
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(BLOCK_HOST_EXTRA)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(site), str(ROOT)])
    env.pop("PYTEST_ADDOPTS", None)
    return env


def _python(code: str, env: dict[str, str], cwd: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        env=env,
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=60,
    )


# ------------------------------------------------------------------ dependencies


def test_permclient_and_all_its_modules_never_import_rich_typer_or_simhost() -> None:
    # With the extra installed, so that nothing is kept out by its absence.
    result = _python(
        """
        import importlib, pkgutil, sys
        import permclient, permclient.acp, permclient.embed
        for module in pkgutil.walk_packages(permclient.__path__, "permclient."):
            importlib.import_module(module.name)
        print(sorted(m for m in sys.modules if m.partition(".")[0] in {"rich", "typer", "simhost"}))
        """,
        dict(os.environ),
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "[]"


# ------------------------------------------------------------- without the extra


def test_the_sdk_answers_a_permission_request_without_the_host_extra(
    no_host_extra: dict[str, str],
) -> None:
    result = _python(
        """
        import json
        import trio, trio.testing
        import permclient, permclient.acp, permclient.embed
        import sitecustomize

        REQUEST = {
            "jsonrpc": "2.0", "id": 1, "method": "session/request_permission",
            "params": {
                "sessionId": "s",
                "toolCall": {"toolCallId": "c", "title": "run ls"},
                "options": [
                    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
                    {"optionId": "deny", "name": "Deny", "kind": "reject_once"},
                ],
            },
        }

        async def allow(request):
            return permclient.Selected("allow")

        async def main():
            ours, theirs = trio.testing.memory_stream_pair()
            async with permclient.open_client(ours, dialect="acp") as client:
                with client.permission_handler("s", allow):
                    await theirs.send_all(json.dumps(REQUEST).encode() + b"\\n")
                    received = b""
                    while not received.endswith(b"\\n"):
                        received += await theirs.receive_some()
                    print(received.decode().strip())
                await theirs.aclose()

        trio.run(main)
        assert sitecustomize.attempts == [], sitecustomize.attempts
        """,
        no_host_extra,
    )
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == {
        "jsonrpc": "2.0",
        "id": 1,
        "result": {"outcome": {"outcome": "selected", "optionId": "allow"}},
    }


def _simhost_script() -> str:
    script = shutil.which("simhost", path=str(Path(sys.executable).parent))
    assert script is not None, "the simhost console script is not installed next to python"
    return script


@pytest.mark.parametrize("how", ["console script", "python -m simhost"])
@pytest.mark.parametrize("args", [["chat"], ["--help"], []])
def test_simhost_without_the_host_extra_says_which_extra_in_one_line_and_exits_2(
    no_host_extra: dict[str, str], how: str, args: list[str]
) -> None:
    command = [_simhost_script()] if how == "console script" else [sys.executable, "-m", "simhost"]
    result = subprocess.run(
        [*command, *args], env=no_host_extra, capture_output=True, text=True, timeout=60
    )
    assert (result.returncode, result.stdout, result.stderr) == (2, "", HOST_EXTRA_MISSING + "\n")


def test_importing_the_pytest_plugin_imports_nothing_heavy(no_host_extra: dict[str, str]) -> None:
    # pytest loads the plugin in every project where permclient is installed.
    result = _python(
        """
        import sys
        import pytest
        import sitecustomize
        before = set(sys.modules)
        import simhost.pytest_plugin
        print(sorted(set(sys.modules) - before))
        assert sitecustomize.attempts == [], sitecustomize.attempts
        """,
        no_host_extra,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == str(["simhost", "simhost._entry", "simhost.pytest_plugin"])


def test_a_pytest_run_without_the_host_extra_passes_with_the_plugin_loaded_and_inert(
    no_host_extra: dict[str, str], tmp_path: Path
) -> None:
    project = tmp_path / "plugin_author"
    project.mkdir()
    (project / "test_theirs.py").write_text(
        textwrap.dedent(
            """
            import sitecustomize

            def test_trivial(request):
                assert request.config.pluginmanager.has_plugin("simhost")
                assert sitecustomize.attempts == []
            """
        )
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(project)],
        env=no_host_extra,
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "1 passed" in result.stdout


def test_the_simhost_fixture_and_scenario_files_fail_in_one_line_without_the_host_extra(
    no_host_extra: dict[str, str], tmp_path: Path
) -> None:
    project = tmp_path / "plugin_author"
    project.mkdir()
    (project / "test_scenarios.py").write_text("def test_uses(simhost):\n    pass\n")
    (project / "simhost_one.toml").write_text('[[sessions]]\nname = "one"\n')
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-rA", str(project)],
        env=no_host_extra,
        cwd=project,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stdout + result.stderr
    assert "1 failed" in result.stdout and "1 error" in result.stdout, result.stdout
    assert f"the simhost fixture: {HOST_EXTRA_MISSING} (missing: rich, typer)" in result.stdout
    assert f"scenario simhost_one.toml: {HOST_EXTRA_MISSING} (missing: rich, typer)" in (
        result.stdout
    )
    assert "Traceback" not in result.stdout
