"""Permission cards the chat's tests draw: a request of the four usual options, a
command card of many lines, a card of many options."""

from __future__ import annotations

from typing import Any

import msgspec

from permclient import PermissionRequest
from simhost.chat.card import PermissionCard

FOUR_OPTIONS = [
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "allow-always", "name": "Allow always", "kind": "allow_always"},
    {"optionId": "deny", "name": "Deny", "kind": "reject_once"},
    {"optionId": "deny-always", "name": "Deny always", "kind": "reject_always"},
]


def request(tool_call: dict[str, Any], **params: Any) -> PermissionRequest:
    body = {"sessionId": "s-7", "toolCall": tool_call, "options": FOUR_OPTIONS, **params}
    return PermissionRequest.from_json(msgspec.json.encode(body))


def command_card(lines: int, *, hint: str = "Press 1-4 to choose") -> PermissionCard:
    command = "\n".join(f"echo {i}" for i in range(1, lines + 1))
    return PermissionCard(
        request({"toolCallId": "c", "title": "run", "rawInput": {"command": command}}),
        session_title="Notes",
        hint=hint,
    )


LONG_HINT = (
    "Press 1-9 to choose (options after 9 have no key) · Esc answers cancelled · Enter does "
    "nothing · Ctrl-C cancels the turn · other keys type on the prompt line"
)


def many_options_card(
    options: int, *, name: str = "Allow variant", **tool_call: Any
) -> PermissionCard:
    chosen = [
        {"optionId": f"o{i}", "name": f"{name} {i}", "kind": "allow_once"}
        for i in range(1, options + 1)
    ]
    call = {"toolCallId": "c", "title": "run", **tool_call}
    return PermissionCard(request(call, options=chosen), session_title="Notes", hint=LONG_HINT)
