"""The console script's entry point: Ctrl-C while it is still loading."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Iterator, Sequence
from types import ModuleType

import pytest

from simhost import _entry


class _CtrlCWhileImporting(importlib.abc.MetaPathFinder):
    """Raises KeyboardInterrupt when ``simhost.cli`` is imported, as Ctrl-C would."""

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == "simhost.cli":
            raise KeyboardInterrupt
        return None


def test_ctrl_c_while_the_cli_is_loading_exits_130_without_a_traceback(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.delitem(sys.modules, "simhost.cli", raising=False)
    monkeypatch.setattr(sys, "meta_path", [_CtrlCWhileImporting(), *sys.meta_path])
    with pytest.raises(SystemExit) as exited:
        _entry.main()
    assert exited.value.code == 130


def test_the_console_script_runs_the_cli(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "argv", ["simhost", "--help"])
    with pytest.raises(SystemExit) as exited:
        _entry.main()
    assert exited.value.code == 0


class _Missing(importlib.abc.MetaPathFinder):
    """Makes one module (and its submodules) unimportable, as if it were not installed."""

    def __init__(self, missing: str) -> None:
        self.missing = missing

    def find_spec(
        self,
        fullname: str,
        path: Sequence[str] | None,
        target: ModuleType | None = None,
    ) -> importlib.machinery.ModuleSpec | None:
        if fullname == self.missing or fullname.startswith(self.missing + "."):
            raise ModuleNotFoundError(f"No module named {fullname!r}", name=fullname)
        return None


@pytest.fixture
def cli_not_loaded() -> Iterator[None]:
    """``simhost.cli``, Rich and Typer not imported yet; every module as it was afterwards."""
    saved = dict(sys.modules)
    for name in saved:
        if name == "simhost.cli" or name.partition(".")[0] in ("rich", "typer"):
            del sys.modules[name]
    yield
    for name in set(sys.modules) - set(saved):
        del sys.modules[name]
    sys.modules.update(saved)


@pytest.mark.parametrize("missing", ["rich", "typer"])
def test_without_the_host_extra_the_console_script_says_which_extra_in_one_line(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    cli_not_loaded: None,
    missing: str,
) -> None:
    monkeypatch.setattr(sys, "meta_path", [_Missing(missing), *sys.meta_path])
    with pytest.raises(SystemExit) as exited:
        _entry.main()
    assert exited.value.code == 2
    assert capsys.readouterr() == ("", _entry.HOST_EXTRA_MISSING + "\n")


def test_any_other_missing_module_is_a_bug_and_shown_in_full(
    monkeypatch: pytest.MonkeyPatch, cli_not_loaded: None
) -> None:
    monkeypatch.setattr(sys, "meta_path", [_Missing("simhost.cli"), *sys.meta_path])
    with pytest.raises(ModuleNotFoundError, match=r"simhost\.cli"):
        _entry.main()
