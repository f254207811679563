"""The ``simhost`` command line: one Typer app, one sub-command per role."""

from __future__ import annotations

import typer

from simhost.chat.cli import chat_command
from simhost.run.cli import run_command
from simhost.runtime.cli import runtime_command

app = typer.Typer(
    name="simhost",
    help=(
        "Reference host for permclient: a stand-in editor that shows every permission "
        "request a coding agent makes and blocks it until you answer (chat), and a "
        "deterministic stand-in agent runtime (runtime), and a runner of scripted multi-turn "
        "concurrency scenarios against any agent (run)."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.command("chat")(chat_command)
app.command("runtime")(runtime_command)
app.command("run")(run_command)


def main() -> None:
    """Entry point of the ``simhost`` console script."""
    app()
