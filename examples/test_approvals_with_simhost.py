"""An example: approval scenarios as pytest tests, with the ``simhost`` plugin.

The plugin comes with the ``permclient`` package (``simhost`` fixture, and
``simhost_*.toml`` scenario files collected as tests). Run with::

    python -m pytest examples/test_approvals_with_simhost.py
    python -m pytest examples/test_approvals_with_simhost.py --simhost-dialect acp
    python -m pytest examples/ --simhost-agent 'python my_agent.py'   # your own agent

Each run starts the agent (the reference runtime by default) in a fresh workspace,
runs the sessions at once, answers the permission requests as scripted, and checks
the expectations plus the built-in invariants: every question answered exactly
once, by its own session's handler, no card left open after its turn, and no tool
reported completed after its approval was denied or cancelled.
"""

from __future__ import annotations

from simhost.pytest_plugin import SimhostRunner, answer, session, turn


def test_an_allowed_write_happens_and_a_denied_one_does_not(simhost: SimhostRunner) -> None:
    scenario = simhost.scenario(
        session(
            "writer",
            turn(
                "create notes.txt with hello",
                answer("fs.write", "allow"),
                files_exist=["notes.txt"],
                file_contains={"notes.txt": "hello"},
            ),
            turn(
                "create secret.txt with nope",
                answer("fs.write", "reject"),
                files_absent=["secret.txt"],
                tool_status={"fs.write": "failed"},
            ),
        ),
    )
    simhost.check(simhost.run(scenario))


def test_two_sessions_racing_each_get_their_own_answers(simhost: SimhostRunner) -> None:
    scenario = simhost.scenario(
        session("left", turn("create left.txt with L", answer("left.txt", "allow"))),
        session("right", turn("create right.txt with R", answer("right.txt", "reject"))),
        seed=3,
    )
    result = simhost.run(scenario)
    simhost.check(result)
    assert len(result.turns) == 2
