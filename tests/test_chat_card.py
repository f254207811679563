"""The permission card, rendered into a fixed-width console (Rich's own test recipe)."""

from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

import msgspec
from rich.console import Console
from rich.text import Text

from permclient import PermissionRequest
from simhost.chat.card import PermissionCard
from simhost.chat.screen import PlainScreen, View

GOLDEN = Path(__file__).parent / "fixtures" / "golden"
FOUR_OPTIONS = [
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "allow-always", "name": "Allow always", "kind": "allow_always"},
    {"optionId": "deny", "name": "Deny", "kind": "reject_once"},
    {"optionId": "deny-always", "name": "Deny always", "kind": "reject_always"},
]


def request(tool_call: dict[str, Any], **params: Any) -> PermissionRequest:
    body = {"sessionId": "s-7", "toolCall": tool_call, "options": FOUR_OPTIONS, **params}
    return PermissionRequest.from_json(msgspec.json.encode(body))


def golden(name: str) -> PermissionRequest:
    message = json.loads((GOLDEN / f"{name}.json").read_text())
    return PermissionRequest.from_json(msgspec.json.encode(message["params"]))


def render(renderable: object, width: int = 100) -> str:
    console = Console(file=io.StringIO(), width=width, force_terminal=True, color_system=None)
    console.print(renderable)
    output = console.file.getvalue()  # type: ignore[attr-defined]
    assert isinstance(output, str)
    return output


def lines_of(output: str) -> list[str]:
    """Card lines without the panel's borders and the details' gutter."""
    return [line.strip("│ ").removeprefix("▏").strip() for line in output.splitlines()]


def test_two_file_diff_shows_every_file_and_its_hunks() -> None:
    card = PermissionCard(
        request(
            {
                "toolCallId": "call-3",
                "title": "fs.write: two files",
                "kind": "edit",
                "content": [
                    {
                        "type": "diff",
                        "path": "/w/src/app.py",
                        "oldText": "import sys\n\nprint('hi')\n",
                        "newText": "import sys\n\nprint('hello')\n",
                    },
                    {"type": "diff", "path": "/w/NOTES.md", "oldText": None, "newText": "a\nb\n"},
                ],
            }
        ),
        session_title="Refactor",
    )
    lines = lines_of(render(card))
    assert "Changes (2 files)" in lines
    # First file: an edit, with its hunk.
    assert "edit /w/src/app.py" in lines
    assert "--- /w/src/app.py" in lines and "+++ /w/src/app.py" in lines
    assert "-print('hi')" in lines and "+print('hello')" in lines
    # Second file: new (oldText null), every line added.
    assert "new file /w/NOTES.md" in lines
    assert "--- /dev/null" in lines and "+++ /w/NOTES.md" in lines
    assert "@@ -0,0 +1,2 @@" in lines
    assert "+a" in lines and "+b" in lines
    assert lines.index("edit /w/src/app.py") < lines.index("new file /w/NOTES.md")


def test_diff_lines_are_coloured() -> None:
    card = PermissionCard(
        request(
            {
                "toolCallId": "c",
                "title": "edit",
                "kind": "edit",
                "content": [{"type": "diff", "path": "/w/a", "oldText": "x\n", "newText": "y\n"}],
            }
        )
    )
    console = Console(file=io.StringIO(), width=80, force_terminal=True, color_system="standard")
    console.print(card)
    output = console.file.getvalue()  # type: ignore[attr-defined]
    assert "\x1b[31m-x" in output  # red
    assert "\x1b[32m+y" in output  # green


def test_names_the_session_the_tool_the_kind_and_the_command() -> None:
    card = PermissionCard(
        request(
            {
                "toolCallId": "call-1",
                "title": "local_shell: python3",
                "kind": "execute",
                "rawInput": {"command": "python3 -c 'print(1)'", "cwd": "/w"},
            }
        ),
        session_title="Notes",
    )
    output = render(card)
    lines = lines_of(output)
    assert any(line.startswith("Session  Notes (s-7)") for line in lines)
    assert any("local_shell: python3  kind: execute" in line for line in lines)
    assert any(line.startswith("Command  $ python3 -c 'print(1)'") for line in lines)
    # The rest of the input is shown too (a cwd matters to a reviewer).
    assert "Other input" in lines
    assert '"cwd": "/w"' in output


def test_a_command_given_as_argv_is_shown_shell_quoted() -> None:
    card = PermissionCard(
        request({"toolCallId": "c", "kind": "execute", "rawInput": {"command": ["rm", "a b"]}})
    )
    assert "$ rm 'a b'" in render(card)


def test_raw_input_without_a_command_is_pretty_json() -> None:
    card = PermissionCard(golden("request_permission_diff_edit"))
    lines = lines_of(render(card))
    assert "Input" in lines
    assert '"oldString": "print(\'hi\')\\n",' in lines


def test_locations_and_meta() -> None:
    output = render(PermissionCard(golden("request_permission_locations_meta")))
    lines = lines_of(output)
    assert "Locations" in lines
    assert "/home/user/project/pyproject.toml:0" in lines
    assert '/home/user/project/setup.cfg  {"exists": false}' in lines
    assert "Request _meta" in lines
    assert '"traceId": "4bf92f3577b34da6a3ce929d0e0e4736",' in lines
    assert "Tool call _meta" in lines
    assert '"toolName": "read_many"' in lines


def test_plain_content_blocks_are_the_fallback() -> None:
    output = render(PermissionCard(golden("request_permission_content_blocks")))
    lines = lines_of(output)
    assert "Content" in lines
    assert "Download the logo" in lines
    assert "[image] image/png" in lines
    assert "[link] logo.png: file:///home/user/project/assets/logo.png" in lines
    assert "# Assets" in lines


def test_terminal_content() -> None:
    card = PermissionCard(
        request({"toolCallId": "c", "content": [{"type": "terminal", "terminalId": "term-1"}]})
    )
    assert "[terminal] term-1" in render(card)


def test_options_are_numbered_with_their_kind_and_there_is_no_default() -> None:
    output = render(PermissionCard(request({"toolCallId": "c"}), hint="Press 1-4 to choose"))
    rows = [line.split() for line in lines_of(output) if line[:1].isdigit()]
    assert rows == [
        ["1", "Allow", "allow_once"],
        ["2", "Allow", "always", "allow_always"],
        ["3", "Deny", "reject_once"],
        ["4", "Deny", "always", "reject_always"],
    ]
    assert "Press 1-4 to choose" in lines_of(output)
    assert "default" not in output.lower()


def test_option_numbers_are_drawn_in_reverse_video() -> None:
    console = Console(file=io.StringIO(), width=80, force_terminal=True, color_system="standard")
    console.print(PermissionCard(request({"toolCallId": "c"})))
    output = console.file.getvalue()  # type: ignore[attr-defined]
    assert "\x1b[1;7m 1 \x1b[0m" in output and "\x1b[1;7m 4 \x1b[0m" in output


def test_a_request_without_a_deny_option_says_esc_denies() -> None:
    only_allow = [{"optionId": "ok", "name": "OK", "kind": "allow_once"}]
    card = PermissionCard(request({"toolCallId": "c"}, options=only_allow))
    assert not card.offers_deny
    assert "No deny option was offered: Esc answers cancelled" in render(card)
    assert PermissionCard(request({"toolCallId": "c"})).offers_deny


def test_control_and_invisible_characters_are_escaped_and_flagged() -> None:
    card = PermissionCard(
        request(
            {
                "toolCallId": "c",
                "title": "run\x1b[2K",
                "kind": "execute",
                "rawInput": {"command": "echo safe\r\x1b[2Krm -rf ~ \u202ex"},
            }
        )
    )
    output = render(card)
    assert "\x1b[2K" not in output and "\r" not in output and "\u202e" not in output
    assert "echo safe\\r\\x1b[2Krm -rf ~ \\u202ex" in output
    assert "line breaks, control or invisible characters" in output


def test_markup_in_runtime_strings_is_not_interpreted() -> None:
    card = PermissionCard(
        request({"toolCallId": "c", "title": "[bold red]x[/]", "rawInput": {"command": "[/]"}}),
        session_title="[link=x]t[/link]",
    )
    output = render(card)
    assert "[bold red]x[/]" in output
    assert "$ [/]" in output
    assert "[link=x]t[/link] (s-7)" in output


def test_position_and_subtitle_name_the_session() -> None:
    card = PermissionCard(request({"toolCallId": "c"}), session_title="A", position=(1, 3))
    output = render(card)
    first, *_, last = output.splitlines()
    assert "Permission request  1 of 3" in first
    assert "A (s-7)" in last


def test_plain_screen_prints_each_card_and_marker_once() -> None:
    console = Console(file=io.StringIO(), width=80, color_system=None)
    screen = PlainScreen(console)
    card = PermissionCard(request({"toolCallId": "c", "title": "t"}))
    for _ in range(3):
        screen.refresh(View(card=card, card_id=1, marker=Text("⧗ 1 approval waiting")))
    output = console.file.getvalue()  # type: ignore[attr-defined]
    assert output.count("Permission request") == 1
    assert output.count("⧗ 1 approval waiting") == 1


def test_a_tool_kind_from_the_runtime_cannot_reach_the_terminal_raw() -> None:
    from permclient import ToolCallTracker
    from simhost.chat.render import tool_line

    tracker = ToolCallTracker()
    state = tracker.apply_notification(
        msgspec.json.encode(
            {
                "sessionId": "s",
                "update": {
                    "sessionUpdate": "tool_call",
                    "toolCallId": "c",
                    "title": "harmless",
                    "kind": "\x1b]0;PWNED\x07\x1b[31m",
                },
            }
        )
    )
    assert state is not None
    console = Console(file=io.StringIO(), width=100, force_terminal=True, color_system=None)
    console.print(tool_line(state))
    out = console.file.getvalue()  # type: ignore[attr-defined]
    assert "\x1b]0;" not in out and "\x07" not in out
    assert "\\x1b]0;PWNED" in out
