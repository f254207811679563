"""Where ``simhost approve`` connects, and as whom: checked before anything starts.

The server is named by the URL ``simhost serve`` prints,
``http://HOST:PORT/?token=TOKEN``. A URL without a token takes it from
``--token-file`` or the environment (:data:`TOKEN_ENV`), which keeps it out of
the process list. The token is never printed: no message here quotes the URL.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass, field
from pathlib import Path
from typing import Final
from urllib.parse import parse_qs, quote, urlsplit

from simhost.serve.access import MAX_NAME, TOKEN_ENV

__all__ = [
    "TOKEN_ENV",
    "Target",
    "TargetError",
    "check_view_name",
    "default_view_name",
    "target_of",
]

_MAX_TOKEN_FILE: Final = 4096  # bytes read of --token-file: a token is a few dozen


class TargetError(ValueError):
    """The URL, the token or the view's name is not usable (the message is one line)."""


@dataclass(frozen=True)
class Target:
    """A ``simhost serve`` and its token."""

    host: str
    port: int
    token: str = field(repr=False)

    @property
    def authority(self) -> str:
        """``host:port``: what the server checks the ``Host`` header against."""
        return f"{self.host}:{self.port}"

    @property
    def origin(self) -> str:
        """The server's own origin, which its WebSocket requires."""
        return f"http://{self.authority}"

    @property
    def websocket_url(self) -> str:
        """The relay protocol's address, token included: never print it."""
        return f"ws://{self.authority}/ws?token={quote(self.token, safe='')}"


def target_of(url: str, *, token_file: Path | None = None, env_token: str | None = None) -> Target:
    """The server ``url`` names, with its token: the URL's ``?token=``, else
    ``token_file``'s first line, else ``env_token``. Raises :class:`TargetError`."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        raise TargetError("the URL is not valid: give the one simhost serve printed") from None
    if parts.scheme != "http":
        raise TargetError("the URL must start with http:// (as simhost serve prints it)")
    if not parts.hostname or port is None:
        raise TargetError(
            "the URL must name the server's host and port, e.g. http://127.0.0.1:8765/"
        )
    if ":" in parts.hostname:
        raise TargetError("an IPv6 address is not supported: use the server's IPv4 address or name")
    tokens = parse_qs(parts.query).get("token", [])
    if len(tokens) > 1:
        raise TargetError("the URL has more than one token")
    if tokens and token_file is not None:
        raise TargetError("the URL has a token already: leave out --token-file")
    if tokens:
        token = tokens[0]
    elif token_file is not None:
        token = _read_token(token_file)
    elif env_token:
        token = env_token.strip()
    else:
        raise TargetError(
            f"no token: the URL has none, and neither --token-file nor {TOKEN_ENV} gives one"
        )
    if not token or not token.isprintable():
        raise TargetError("the token is empty or has characters a token never has")
    return Target(parts.hostname, port, token)


def _read_token(path: Path) -> str:
    try:
        with path.open("rb") as file:
            data = file.read(_MAX_TOKEN_FILE)
    except OSError as exc:
        raise TargetError(f"cannot read --token-file {path}: {exc.strerror or exc}") from None
    lines = data.decode("utf-8", "replace").splitlines()
    return lines[0].strip() if lines else ""


def check_view_name(name: str) -> str:
    """``name``, if it can name a view (1 to 64 printable characters); else raises
    :class:`TargetError`."""
    if not 1 <= len(name) <= MAX_NAME or not name.isprintable():
        raise TargetError(f"--name must be 1 to {MAX_NAME} printable characters")
    return name


def default_view_name() -> str:
    """``terminal-HOSTNAME``, cut to what a view's name may be."""
    name = "".join(char for char in f"terminal-{socket.gethostname()}" if char.isprintable())
    return name[:MAX_NAME]
