"""Packaging: the SDK needs only msgspec and trio; Rich and Typer are simhost's ``host`` extra.

Each "without the extra" test runs a fresh interpreter whose ``sitecustomize``
makes ``rich`` and ``typer`` unimportable (as in an environment where only
``pip install permclient`` ran) and records every attempt to import them."""

from __future__ import annotations

import ast
import sys
import tomllib

from simhost._entry import HOST_MODULES
from tests.support import paths

SDK_DEPENDENCIES = {"msgspec", "trio", "outcome"}


def _requirement_name(requirement: str) -> str:
    for stop in "[<>=!~; ":
        requirement = requirement.partition(stop)[0]
    return requirement.lower()


def _pyproject() -> dict[str, object]:
    return tomllib.loads((paths.ROOT / "pyproject.toml").read_text())["project"]  # type: ignore[no-any-return]


def test_the_sdk_depends_only_on_msgspec_and_trio_and_the_host_stack_is_an_extra() -> None:
    project = _pyproject()
    assert {_requirement_name(r) for r in project["dependencies"]} == SDK_DEPENDENCIES  # type: ignore[attr-defined]
    extras = project["optional-dependencies"]
    assert {_requirement_name(r) for r in extras["host"]} >= set(HOST_MODULES)  # type: ignore[index]
    # `pip install -e '.[test]'` still installs everything the whole suite needs.
    assert "permclient[host]" in extras["test"]  # type: ignore[index]


def _third_party_imports(package: str) -> dict[str, set[str]]:
    """Every top-level module a package's files import that is neither stdlib nor ours."""
    found: dict[str, set[str]] = {}
    for path in sorted((paths.ROOT / package).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.partition(".")[0]
                if top not in sys.stdlib_module_names and top not in {"permclient", "simhost"}:
                    found.setdefault(top, set()).add(str(path.relative_to(paths.ROOT)))
    return found


def test_every_module_the_sdk_imports_is_one_of_its_dependencies() -> None:
    imported = _third_party_imports("permclient")
    assert set(imported) <= SDK_DEPENDENCIES, imported


def test_every_module_simhost_imports_comes_with_the_sdk_or_the_host_extra() -> None:
    project = _pyproject()
    extra = project["optional-dependencies"]["host"]  # type: ignore[index]
    host = {_requirement_name(r).replace("-", "_") for r in extra}  # (the module's name)
    imported = _third_party_imports("simhost")
    # pytest: only the pytest plugin imports it, and pytest is what loads that plugin.
    assert imported.pop("pytest", set()) == {"simhost/pytest_plugin.py"}
    assert set(imported) <= SDK_DEPENDENCIES | host, imported

