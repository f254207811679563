"""A relayed question as the chat's permission card.

The card shows the request the agent sent (the question's ``request``), decoded
as permclient decodes it, so this terminal shows what ``simhost chat`` would. The
answer, though, goes to the relay, which checks it against the question's own
options: the whole request is shown only when it agrees with the question's
summary (session, tool call, title, kind and every option). Otherwise, or when it
does not decode (a newer agent's tool kind or content type), the card shows that
summary and the request as it arrived, as text, and can be answered with exactly the
options the question offers. A question that cannot even be
summed up is not shown (and never answered here).
"""

from __future__ import annotations

from typing import Final, get_args

import msgspec

from permclient import (
    Content,
    PermissionOption,
    PermissionOptionKind,
    PermissionRequest,
    TextContent,
    ToolCallUpdate,
    ToolKind,
)
from permclient.relay import RelayQuestion

__all__ = ["card_request"]

_TOOL_KINDS: Final[dict[str, ToolKind]] = {kind: kind for kind in get_args(ToolKind)}
SHOWN_CHARS: Final = 64 * 1024  # of a request shown as it arrived
_OPTION_KINDS: Final[dict[str, PermissionOptionKind]] = {
    kind: kind for kind in get_args(PermissionOptionKind)
}


def card_request(question: RelayQuestion) -> tuple[PermissionRequest, bool] | None:
    """The request ``question``'s card shows, and whether it is the agent's whole
    request (``False``: the summary); ``None`` if neither can be shown."""
    try:
        request = PermissionRequest.from_json(question.request)
    except (msgspec.DecodeError, ValueError, RecursionError):  # (nested too deep)
        request = None
    if request is not None and _agrees(request, question):
        return request, True
    summary = _summary(question)
    return (summary, False) if summary is not None else None


def _agrees(request: PermissionRequest, question: RelayQuestion) -> bool:
    call = request.tool_call
    return (
        request.session_id == question.session_id
        and call.tool_call_id == question.tool_call_id
        and call.title == question.title
        and call.kind == question.kind
        and [(o.option_id, o.name, o.kind) for o in request.options]
        == [(o.option_id, o.name, o.kind) for o in question.options]
    )


def _summary(question: RelayQuestion) -> PermissionRequest | None:
    """The question's title, kind and options as a request; ``None`` if an option's
    kind is unknown here (its meaning would be a guess) or the request would not be
    one permclient accepts (no options, duplicate or empty ids)."""
    options = []
    for option in question.options:
        kind = _OPTION_KINDS.get(option.kind)
        if kind is None:
            return None
        options.append(PermissionOption(option.option_id, option.name, kind))
    as_it_arrived = _as_it_arrived(bytes(question.request))
    call = ToolCallUpdate(
        tool_call_id=question.tool_call_id,
        title=question.title,
        kind=_TOOL_KINDS.get(question.kind or ""),  # (shown unescaped by the card)
        # The whole request, as text: what could not be read may be what matters.
        content=[Content(TextContent(f"The request as it arrived:\n{as_it_arrived}"))],
    )
    try:
        return PermissionRequest(question.session_id, call, tuple(options))
    except ValueError:
        return None


def _as_it_arrived(request: bytes) -> str:
    """The request as text: indented if that keeps it short (indenting grows with the
    square of the depth), else compact; cut at SHOWN_CHARS."""
    text = request.decode()
    if len(request) <= SHOWN_CHARS // 4:
        try:
            indented = msgspec.json.format(request, indent=2).decode()
        except (msgspec.DecodeError, RecursionError):  # (nested too deep to indent)
            indented = text
        if len(indented) <= SHOWN_CHARS:
            text = indented
    if len(text) > SHOWN_CHARS:
        text = f"{text[:SHOWN_CHARS]}\n… {len(text) - SHOWN_CHARS:,} more characters"
    return text
