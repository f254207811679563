"""Test-wide set-up."""

from __future__ import annotations

import os
import signal
from collections.abc import Iterator

import pytest

# A suite started in the background by a non-interactive shell (nohup, `cmd &`, some CI
# runners) inherits SIGINT ignored, and so would every program it starts: the tests
# that press Ctrl-C in an example or in this process would see nothing happen. Give
# Ctrl-C its usual meaning back; children started after this get the default action.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)


@pytest.fixture(autouse=True, scope="session")
def _own_config_and_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    """Every host the tests start reads and writes editor rules, audit trails and
    sessions under a folder of the suite's own, never the home folder's (a person's
    own rules would change what a test sees)."""
    home = tmp_path_factory.mktemp("xdg")
    saved = {key: os.environ.get(key) for key in ("XDG_CONFIG_HOME", "XDG_STATE_HOME")}
    os.environ["XDG_CONFIG_HOME"] = str(home / "config")
    os.environ["XDG_STATE_HOME"] = str(home / "state")
    yield
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value
