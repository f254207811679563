"""``simhost runtime --stdio`` for real, driven through permclient as an editor drives it."""

from __future__ import annotations

from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from simhost.runtime.cli import runtime_command


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["--dialect", "lsp"], "unknown dialect 'lsp': expected bridge or acp"),
        (["--no-stdio"], "--stdio is the only transport"),
        (["--workspace", "/nonexistent/folder"], "is not a folder"),
        (["--policy", "lenient"], "unknown policy 'lenient'"),
        (["--policy", "/nonexistent/policy.json"], "cannot read policy file"),
    ],
)
def test_bad_options_exit_2_with_a_clear_error_and_nothing_on_stdout(
    tmp_path: Path, args: list[str], complaint: str
) -> None:
    app = typer.Typer()
    app.command()(runtime_command)
    result = CliRunner().invoke(app, ["--state-dir", str(tmp_path), *args])
    assert result.exit_code == 2
    assert result.stdout == ""
    assert complaint in " ".join(result.stderr.split())

