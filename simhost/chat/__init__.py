"""``simhost chat``: a terminal stand-in for the editor.

It starts a bridge runtime, opens a session, streams the agent's text and tool
calls, and shows each permission request as a card that blocks the agent until
a person answers it. Layout: :mod:`.cli` (the Typer command), :mod:`.launch`
(process, terminal and screen wiring), :mod:`.app` (the controller),
:mod:`.approvals` (the queue of cards), :mod:`.card` (the permission card),
:mod:`.render` (everything else on screen), :mod:`.screen` (live region or
plain lines), :mod:`.keys` and :mod:`.terminal` (the keyboard),
:mod:`.protocol` (typed runtime results), :mod:`.text` (terminal-safe strings).
"""
