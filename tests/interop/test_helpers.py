"""The interop gate: a missing peer skips locally, but fails when CI requires interop."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests import interop


@pytest.fixture
def fake_node_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    (tmp_path / "package.json").write_text(
        json.dumps({"private": True, "dependencies": {"vscode-jsonrpc": "10.0.0"}})
    )
    monkeypatch.setattr(interop, "NODE_DIR", tmp_path)
    monkeypatch.setattr(interop, "NODE_MODULES", tmp_path / "node_modules")
    monkeypatch.setattr("shutil.which", lambda _name: "/usr/bin/node")
    return tmp_path


def install(node_dir: Path, package: str, version: str) -> None:
    package_dir = node_dir / "node_modules" / package
    package_dir.mkdir(parents=True)
    (package_dir / "package.json").write_text(json.dumps({"name": package, "version": version}))


def test_missing_node_modules_skips(fake_node_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(interop.REQUIRE_ENV, raising=False)
    with pytest.raises(pytest.skip.Exception, match="npm ci --prefix tests/interop/node"):
        interop.require_node_packages("vscode-jsonrpc")


def test_missing_node_modules_fails_when_interop_is_required(
    fake_node_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(interop.REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="node_modules is missing"):
        interop.require_node_packages("vscode-jsonrpc")


def test_missing_node_fails_when_interop_is_required(
    fake_node_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(interop.REQUIRE_ENV, "1")
    monkeypatch.setattr("shutil.which", lambda _name: None)
    with pytest.raises(pytest.fail.Exception, match="`node` executable"):
        interop.require_node_packages("vscode-jsonrpc")


def test_package_missing_from_node_modules(
    fake_node_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (fake_node_dir / "node_modules").mkdir()
    monkeypatch.setenv(interop.REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match="vscode-jsonrpc is not installed"):
        interop.require_node_packages("vscode-jsonrpc")


def test_installed_version_must_match_the_pin(
    fake_node_dir: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    install(fake_node_dir, "vscode-jsonrpc", "9.0.0")
    monkeypatch.setenv(interop.REQUIRE_ENV, "1")
    with pytest.raises(pytest.fail.Exception, match=r"is 9\.0\.0 .* pins 10\.0\.0"):
        interop.require_node_packages("vscode-jsonrpc")
    monkeypatch.delenv(interop.REQUIRE_ENV)
    with pytest.raises(pytest.skip.Exception):
        interop.require_node_packages("vscode-jsonrpc")


def test_pinned_install_returns_node(fake_node_dir: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    install(fake_node_dir, "vscode-jsonrpc", "10.0.0")
    monkeypatch.setenv(interop.REQUIRE_ENV, "1")
    assert interop.require_node_packages("vscode-jsonrpc") == "/usr/bin/node"


@pytest.mark.parametrize(
    ("value", "required"),
    [("1", True), ("true", True), ("yes", True), ("", False), ("0", False), ("false", False)],
)
def test_require_switch_fails_closed(
    monkeypatch: pytest.MonkeyPatch, value: str, required: bool
) -> None:
    monkeypatch.setenv(interop.REQUIRE_ENV, value)
    assert interop.interop_required() is required


def test_require_switch_unset(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(interop.REQUIRE_ENV, raising=False)
    assert not interop.interop_required()


def test_the_real_pins_are_exact() -> None:
    manifest = json.loads((interop.NODE_DIR / "package.json").read_text(encoding="utf-8"))
    assert manifest["private"] is True
    assert manifest["dependencies"] == {
        "@agentclientprotocol/sdk": "2.4.0",
        "vscode-jsonrpc": "10.0.0",
        "zod": "4.6.7",  # the ACP TS SDK imports it at run time
    }
    lock = json.loads((interop.NODE_DIR / "package-lock.json").read_text(encoding="utf-8"))
    packages = lock["packages"]
    assert packages["node_modules/vscode-jsonrpc"]["version"] == "10.0.0"
    assert packages["node_modules/@agentclientprotocol/sdk"]["version"] == "2.4.0"
    assert packages["node_modules/zod"]["version"] == "4.6.7"
