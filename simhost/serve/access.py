"""How a view gets in: the token and where it is read from, and a view's name.

Kept apart from :mod:`simhost.serve.protocol` (the wire's messages) so the command
lines of ``simhost serve`` and ``simhost approve``, which every ``simhost`` start
loads, need none of the protocol's types."""

from __future__ import annotations

import re
from typing import Final

# Where ``simhost serve`` and ``simhost approve`` read a token the person chose (a
# URL's token shows in the process list and the shell's history).
TOKEN_ENV: Final = "SIMHOST_TOKEN"
MIN_TOKEN: Final = 22  # characters: 128 bits of secrets.token_urlsafe
# What a token may be: it travels in URLs (a query, a path) and in the page.
TOKEN: Final = re.compile(rf"[A-Za-z0-9_.~-]{{{MIN_TOKEN},256}}")
MAX_NAME: Final = 64  # characters of a view's name
