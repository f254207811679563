"""The console script's entry point: Ctrl-C while it is still loading."""

from __future__ import annotations

import importlib.abc
import importlib.machinery
import sys
from collections.abc import Sequence
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
