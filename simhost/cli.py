"""The ``simhost`` command line: one Typer app, one sub-command per role.

Help is Click's plain text (no Rich markup: ``[...]`` in a help text stays as
written, and no ``<bool>`` type labels). A usage error (an unknown command or
option, a bad value) is one line on stderr and exit code 2; see
:mod:`simhost._usage` for every command's exit codes.
"""

from __future__ import annotations

import sys
from typing import Final

import typer
from rich.text import Text

from simhost._usage import USAGE, one_line, plain_console
from simhost.approve.cli import approve_command
from simhost.audit_cli import audit_command
from simhost.chat.cli import chat_command
from simhost.run.cli import run_command
from simhost.runtime.cli import runtime_command
from simhost.serve.cli import serve_command

app = typer.Typer(
    name="simhost",
    help=(
        "Reference host for permclient: a stand-in editor that shows every permission "
        "request a coding agent makes and blocks it until you answer (chat), and a "
        "deterministic stand-in agent runtime (runtime), a runner of scripted multi-turn "
        "concurrency scenarios against any agent (run), a web approvals panel (serve), a "
        "terminal approver for it (approve) and the audit trail of every answer (audit)."
    ),
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)
app.command("chat")(chat_command)
app.command("runtime")(runtime_command)
app.command("run")(run_command)
app.command("serve")(serve_command)
app.command("approve")(approve_command)
app.command("audit")(audit_command)


@app.callback(invoke_without_command=True)
def _no_command(ctx: typer.Context) -> None:
    if ctx.invoked_subcommand is None:
        typer.echo(ctx.get_help(), err=True)
        raise typer.Exit(USAGE)


def _click_exception() -> type[Exception]:
    """Click's ``ClickException`` (Typer bundles its own Click from 0.17 on: found by name)."""
    for cls in typer.BadParameter.__mro__:
        if cls.__name__ == "ClickException":
            return cls
    return typer.BadParameter  # pragma: no cover - every Click has it


_CLICK_EXCEPTION: Final = _click_exception()


def main(args: list[str] | None = None) -> None:
    """Entry point of the ``simhost`` console script."""
    try:
        code = app(args=args, prog_name="simhost", standalone_mode=False)
    except _CLICK_EXCEPTION as exc:
        ctx = getattr(exc, "ctx", None)
        where = ctx.command_path if ctx is not None else "simhost"
        message = one_line(exc.format_message())  # type: ignore[attr-defined]
        plain_console(stderr=True).print(Text(f"{where}: {message}"), soft_wrap=True)
        code = exc.exit_code  # type: ignore[attr-defined]
    except typer.Abort:
        plain_console(stderr=True).print(Text("simhost: aborted"))
        code = 1
    sys.exit(code if isinstance(code, int) else 0)
