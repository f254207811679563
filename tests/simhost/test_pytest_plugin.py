"""The simhost pytest plugin: the fixture, scenario files as tests, and the example."""

from __future__ import annotations

import pytest

from simhost.pytest_plugin import SimhostRunner, answer, session, turn


def test_a_bad_answer_in_python_is_refused_like_in_a_file(simhost: SimhostRunner) -> None:
    import msgspec

    with pytest.raises(msgspec.ValidationError, match="answer"):
        simhost.scenario(session("alpha", turn("x", answer("x", "perhaps"))))

