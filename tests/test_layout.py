"""The suite's own rules: its tests are laid out like the code, what test modules share
is in ``tests/support`` (none imports another), and a test outside
``tests/e2e`` and ``tests/interop`` starts no process (the inner loop,
``pytest -m "not e2e"``, is what those leave)."""

from __future__ import annotations

import ast
import os
import subprocess
import sys

import pytest

from tests.support import paths

# Tests of a package as a whole, not of one of its modules.
WHOLE_PACKAGE = frozenset({"test_no_private_trio.py", "test_packaging.py"})


def _module_names(package: str) -> set[str]:
    folder = paths.ROOT / package
    names = {p.stem.lstrip("_") for p in folder.glob("*.py")}
    return names | {p.name for p in folder.iterdir() if (p / "__init__.py").exists()}


def _tests_of_modules() -> list[tuple[str, str]]:
    """(the test file, relative to tests/; the package it mirrors) for every test module
    under tests/permclient and tests/simhost."""
    found = []
    for top in ("permclient", "simhost"):
        for path in sorted((paths.TESTS / top).rglob("test_*.py")):
            package = path.parent.relative_to(paths.TESTS).as_posix()
            found.append((path.relative_to(paths.TESTS).as_posix(), package))
    return found


@pytest.mark.parametrize(("test_file", "package"), _tests_of_modules())
def test_every_test_module_is_named_after_a_module_of_the_folder_it_mirrors(
    test_file: str, package: str
) -> None:
    name = test_file.rsplit("/", 1)[-1]
    if name in WHOLE_PACKAGE:
        return
    assert (paths.ROOT / package).is_dir(), f"{test_file}: there is no {package}/ to mirror"
    stem = name.removeprefix("test_").removesuffix(".py")
    modules = _module_names(package)
    assert stem in modules or any(stem.startswith(m + "_") for m in modules), (
        f"{test_file}: {package}/ has no module {stem!r} (test_<module>.py, or "
        f"test_<module>_<aspect>.py); modules: {sorted(modules)}"
    )


@pytest.mark.parametrize(
    "test_file",
    sorted(p.relative_to(paths.TESTS).as_posix() for p in paths.TESTS.rglob("test_*.py")),
)
def test_no_test_module_imports_another_what_they_share_is_in_support(test_file: str) -> None:
    tree = ast.parse((paths.TESTS / test_file).read_text(encoding="utf-8"))
    imported = [  # every module named, and every name taken from a tests package
        name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("tests")
        for name in (node.module or "", *(f"{node.module}.{a.name}" for a in node.names))
    ] + [
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.Import)
        for alias in node.names
        if alias.name.startswith("tests")
    ]
    others = [name for name in imported if name.rsplit(".", 1)[-1].startswith("test_")]
    assert others == [], f"{test_file} imports {others}: move what it needs to tests/support"


def test_the_mirrored_folders_hold_tests_of_both_packages() -> None:
    packages = {package.split("/")[0] for _, package in _tests_of_modules()}
    assert packages == {"permclient", "simhost"}


@pytest.mark.parametrize(
    "argv",
    [[sys.executable, "-c", "pass"], ["python3", "-c", "pass"], ["node", "--version"]],
    ids=["this python", "a python", "node"],
)
def test_a_test_outside_e2e_that_starts_a_process_fails_and_says_where_it_belongs(
    argv: list[str],
) -> None:
    with pytest.raises(AssertionError, match="belong in tests/e2e"):
        subprocess.Popen(argv)


def test_a_test_outside_e2e_that_opens_a_pty_child_fails() -> None:
    with pytest.raises(AssertionError, match="a pseudo-terminal"):
        os.forkpty()


def test_a_runtime_tool_s_own_command_may_run_outside_e2e() -> None:
    assert subprocess.run(["true"], check=False).returncode == 0
