"""Editor rules in front of a person: ``permclient.rules.RuleEngine``.

Starts the reference runtime (``simhost runtime --dialect acp``) in a fresh
workspace, opens a session and runs four turns: ``run git status``, ``edit
docs/guide.md: Guide => Manual``, ``run rm -f old.txt`` and ``create notes.txt
with hello``. The session's stack holds, at the bottom, a person answering on standard input (the
deferred handler of ``handler_shapes.py``) and, on top, a rule engine with three
rules the editor keeps (not the agent): allow `git status …` and edits under
``docs/`` in this workspace, deny ``rm`` everywhere. Each question a rule answers
prints a receipt naming the rule; the rest ask ``permission asked: TITLE [y/N]``.

A line ``y`` allows it once, any other line denies it, end of input dismisses it
(the runtime gets ``cancelled``). Nothing is approved by default. Ctrl-C answers the
open question ``cancelled``, stops the runtime and exits with status 130.

Usage::

    echo y | python examples/editor_rules.py
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import handler_shapes  # the person on standard input, shared with that example
import trio

import permclient
from permclient.acp import AcpAgent
from permclient.rules import EditorRule, RuleAnswer, RuleEngine

PROMPTS = (
    "run git status",
    "edit docs/guide.md: Guide => Manual",
    "run rm -f old.txt",
    "create notes.txt with hello",
)


def rules_for(workspace: Path) -> list[EditorRule]:
    """What the person decided once, with its scope in full."""
    return [
        EditorRule(
            effect="allow",
            scope="workspace",
            workspace=str(workspace),
            lifetime="revoked",
            command=("git", "status"),
        ),
        EditorRule(
            effect="allow",
            scope="workspace",
            workspace=str(workspace),
            lifetime="revoked",
            kinds=("edit",),
            paths=("docs/**",),
        ),
        EditorRule(effect="deny", scope="everywhere", lifetime="revoked", command=("rm",)),
    ]


def receipt(workspace: Path, answer: RuleAnswer) -> None:
    """One line per question a rule answered: which rule, and what it covers."""
    option = answer.request.option(answer.decision.option_id)
    verb = "allowed" if option is not None and option.kind.startswith("allow") else "denied"
    title = answer.request.tool_call.title or answer.request.tool_call.tool_call_id
    print(f"rule {answer.number} {verb} {title}: {answer.rule.describe(str(workspace))}")


async def main(workspace: Path) -> None:
    argv = [sys.executable, "-m", "simhost", "runtime", "--dialect", "acp"]
    argv += ["--workspace", str(workspace), "--state-dir", str(workspace / ".state")]
    person = handler_shapes.Person()
    engine = RuleEngine(
        rules_for(workspace),
        workspace=workspace,
        resolve=os.path.realpath,  # a symlink out of the workspace is outside
        on_answer=lambda answer: receipt(workspace, answer),
    )
    async with permclient.open_process(argv, dialect="acp") as client:
        agent = AcpAgent(client)
        await agent.initialize()
        session = await agent.new_session(workspace)
        async with trio.open_nursery() as ui:
            ui.start_soon(handler_shapes.read_lines, person.line, person.end)
            human = permclient.deferred(person.ask_deferred)
            with session.permission_handler(human), session.permission_handler(engine):
                for prompt in PROMPTS:
                    result = await session.prompt(prompt)
                    print(f"turn {prompt!r} ended ({result.stop_reason})")
            ui.cancel_scope.cancel()
    print(f"rules answered {sum(engine.hits(rule) for rule in engine.rules)} questions")


def cli() -> int:
    code = 0
    with tempfile.TemporaryDirectory(prefix="editor-rules.") as scratch:
        workspace = Path(scratch).resolve()
        (workspace / "docs").mkdir()
        (workspace / "docs" / "guide.md").write_text("# Guide\n")
        try:
            trio.run(main, workspace)
        except* KeyboardInterrupt:
            print("\ninterrupted: the open question cancelled, runtime stopped")
            code = 130
        except* (permclient.PermclientError, OSError) as errors:
            print(f"error: {handler_shapes.first_leaf(errors)}", file=sys.stderr)
            code = code or 1
        written = (workspace / "notes.txt").exists()
        print(f"notes.txt {'exists' if written else 'was not written'}")
    if handler_shapes._reading:  # its reader thread is in readline(): see there
        sys.stdout.flush()
        os._exit(code)
    return code


if __name__ == "__main__":
    sys.exit(cli())
