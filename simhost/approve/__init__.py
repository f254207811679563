"""``simhost approve``: answer a ``simhost serve``'s permission questions from a terminal.

It connects to the server's WebSocket as a view of its relay, shows every pending
question as the chat's permission card, and sends the person's answers. Layout:
:mod:`.cli` (the Typer command), :mod:`.target` (the URL and the token),
:mod:`.launch` (terminal and screen wiring), :mod:`.app` (the controller),
:mod:`.cards` (a relayed question as a card), :mod:`.link` (the connection,
reconnected when it drops). Nothing is imported here: ``simhost`` loads the
command's modules only when it runs.
"""
