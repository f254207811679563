"""Test-wide set-up."""

from __future__ import annotations

import signal

# A suite started in the background by a non-interactive shell (nohup, `cmd &`, some CI
# runners) inherits SIGINT ignored, and so would every program it starts: the tests
# that press Ctrl-C in an example or in this process would see nothing happen. Give
# Ctrl-C its usual meaning back; children started after this get the default action.
if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
    signal.signal(signal.SIGINT, signal.default_int_handler)
