"""The permission card, rendered into a fixed-width console (Rich's own test recipe)."""

from __future__ import annotations

import ctypes
import ctypes.util
import difflib
import io
import json
import locale
import re
import unicodedata
from typing import Any

import msgspec
import pytest
import wcwidth
from hypothesis import given, settings
from hypothesis import strategies as st
from rich.cells import cell_len
from rich.console import Console
from rich.text import Text

import simhost.chat.card as card_module
from permclient import PermissionRequest
from simhost.chat.card import FULL_MAX_ROWS, KEYED_OPTIONS, PermissionCard
from simhost.chat.screen import PlainScreen, View
from simhost.chat.text import MARKS_PER_CHARACTER, has_hidden, is_hidden, is_uneven, visible
from tests.support import paths
from tests.support.cards import command_card, many_options_card, request
from tests.support.profiles import examples

GOLDEN = paths.FIXTURES / "golden"
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
    # An agent's standing option says whose it is: the agent decides what it covers.
    covers = ["(the", "agent", "decides", "what", "this", "covers)"]
    assert rows == [
        ["1", "Allow", "allow_once"],
        ["2", "Allow", "always", *covers, "allow_always"],
        ["3", "Deny", "reject_once"],
        ["4", "Deny", "always", *covers, "reject_always"],
    ]
    assert "Press 1-4 to choose" in lines_of(output)
    assert "default" not in output.lower()
    assert "Editor rules" not in output  # none offered: no such section


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


# ---------------------------------------------------------------- spoofing


def _sampled_hidden_characters() -> list[str]:
    """Every Cc, Cf, Zl, Zp character; Co and Cn sampled across the whole range; the others."""
    chosen = []
    for code in range(0x110000):
        category = unicodedata.category(chr(code))
        if category in ("Cc", "Cf", "Zl", "Zp") or (category in ("Co", "Cn") and code % 997 == 0):
            chosen.append(chr(code))
    named = "\u115f\u1160\u3164\uffa0\u00ad\u034f\u180b\u180e\u200b\u200d\u2060\u2800\ufeff"
    bidi = "\u061c\u200e\u200f\u202a\u202b\u202c\u202d\u202e\u2066\u2067\u2068\u2069"
    variation = "\ufe00\ufe0f\U000e0100\U000e01ef"
    tags = "\U000e0001\U000e0020\U000e0041\U000e007f"
    chosen += named + bidi + variation + tags + "\u00a0\u3000"
    return chosen


HIDDEN = _sampled_hidden_characters()
HIDDEN_SET = frozenset(HIDDEN)


def test_the_sample_covers_the_classes_the_issue_names() -> None:
    categories = {unicodedata.category(char) for char in HIDDEN}
    assert {"Cc", "Cf", "Co", "Cn", "Zl", "Zp"} <= categories
    assert max(map(ord, HIDDEN)) > 0x100000  # sampled up to the last plane
    assert len(HIDDEN) > 1000


def test_no_hidden_character_reaches_the_terminal_raw_from_any_field_of_a_card() -> None:
    bad = "A" + "".join(HIDDEN) + "Z"
    options = [
        {"optionId": "allow", "name": bad, "kind": "allow_once"},
        {"optionId": "deny", "name": "Deny", "kind": "reject_once"},
    ]
    card = PermissionCard(
        request(
            {
                "toolCallId": "call" + bad,
                "title": bad,
                "kind": "execute",
                "rawInput": {"command": bad, bad: bad},
                "locations": [{"path": bad, "_meta": {bad: bad}}],
                "content": [
                    {"type": "diff", "path": bad, "oldText": bad, "newText": bad + bad},
                    {"type": "content", "content": {"type": "text", "text": bad}},
                ],
                "_meta": {bad: bad},
            },
            sessionId="s" + bad,
            options=options,
            _meta={bad: [bad]},
        ),
        session_title=bad,
        hint="Press 1-2 to choose",
    )
    full = render(card, width=120)
    live = render(card.fitted(40), width=120)
    for output in (full, live):
        for line in output.split("\n"):
            leaked = {f"U+{ord(char):04X}" for char in line if char in HIDDEN_SET}
            assert not leaked
        assert "A\\x00\\x01" in output
        assert "line breaks, control or invisible characters" in output
    joined = "".join(line.strip("│ ") for line in full.splitlines())  # no fold in an escape
    for char in "\n\u202e\U000e0041\u115f\u1160\u00ad\ufe0f\u2800\u3164":
        assert visible(char, keep="") in joined


def test_the_transcripts_escape_follows_the_same_rule_but_keeps_line_breaks_and_tabs() -> None:
    shown = visible("".join(HIDDEN))
    assert {char for char in shown if char in HIDDEN_SET} == {"\n", "\t"}
    assert all(is_hidden(char) for char in HIDDEN)
    assert has_hidden("a\nb") and not has_hidden("a\nb", keep="\n")
    assert not any(is_hidden(char) for char in "aZ ~é漢字\u0301🙂")


# ------------------------------------------------- characters of uneven width


def _glibc_wcwidth() -> Any:
    """glibc's wcwidth (what xterm, VTE and a pyte set up like them draw), or None."""
    name = ctypes.util.find_library("c")
    if name is None or "libc.so" not in name:
        return None
    try:
        locale.setlocale(locale.LC_CTYPE, "C.UTF-8")
    except locale.Error:
        return None
    libc = ctypes.CDLL(name)
    libc.wcwidth.restype = ctypes.c_int
    return lambda char: libc.wcwidth(ctypes.c_wchar(char))


def _shown_code_points() -> list[str]:
    """Every character a card shows unescaped where it stands alone."""
    return [
        chr(code)
        for code in range(0x20, 0x110000)
        if not 0xD800 <= code < 0xE000 and not is_hidden(chr(code))
    ]


@pytest.mark.parametrize("terminal", ["wcwidth", "glibc"])
def test_every_character_shown_unescaped_is_as_wide_for_rich_as_for_the_terminal(
    terminal: str,
) -> None:
    width = wcwidth.wcwidth if terminal == "wcwidth" else _glibc_wcwidth()
    if width is None:
        pytest.skip("no glibc with a C.UTF-8 locale")
    try:
        uneven = [
            f"U+{ord(char):04X} rich={cell_len(char)} {terminal}={width(char)}"
            for char in _shown_code_points()
            if width(char) >= 0 and width(char) != cell_len(char)
        ]
    finally:
        locale.setlocale(locale.LC_CTYPE, "")
    assert uneven == []


def test_the_classes_the_review_found_are_escaped() -> None:
    spacing_marks = [chr(c) for c in range(0x300, 0x20000) if unicodedata.category(chr(c)) == "Mc"]
    enclosing = [chr(c) for c in range(0x300, 0x20000) if unicodedata.category(chr(c)) == "Me"]
    assert len(spacing_marks) > 400 and len(enclosing) > 10
    others = "\u302e\u302f\U0001f3fb\U0001f3ff\u3248\u324f\U0001f1e6\u2630\U0001d300"
    for char in [*spacing_marks, *enclosing, *others]:
        assert is_uneven(char) and is_hidden(char), f"U+{ord(char):04X}"
        assert visible(char) == "\\" + ("U" if ord(char) > 0xFFFF else "u") + visible(char)[2:]
        assert has_hidden(f"a{char}b")
    assert not any(is_uneven(char) for char in "aZ ~é漢字\u0301🙂")


def test_combining_marks_past_the_second_on_one_character_are_escaped() -> None:
    zalgo = "e" + "\u0301\u0316\u0300\u0317\u0302"
    assert visible(zalgo) == "e\u0301\u0316\\u0300\\u0317\\u0302"
    assert visible("e\u0301\u0316 é\u0316\u0300") == "e\u0301\u0316 é\u0316\u0300"  # é is one
    assert not has_hidden("e\u0301\u0316") and has_hidden("e\u0301\u0316\u0300")
    assert MARKS_PER_CHARACTER == 2


def _terminal_width(line: str, width: Any) -> int:
    return sum(max(0, width(char)) for char in line)


def test_no_row_of_a_card_is_wider_or_narrower_on_the_terminal_than_rich_drew_it() -> None:
    """An allow option named "Deny  reject_once" + 64 spacing marks (the review's spoof)."""
    glibc = _glibc_wcwidth()
    if glibc is None:
        pytest.skip("no glibc with a C.UTF-8 locale")
    marks = "\u0903\u093e\u302e\U0001f3fb\u20dd\u3248\u2630\U0001f1e6"
    zalgo = "e" + "".join(chr(c) for c in range(0x300, 0x340))
    options = [
        {"optionId": "allow", "name": "Deny  reject_once" + "\u0903" * 64, "kind": "allow_once"},
        {"optionId": "deny", "name": "Cancel" + marks + zalgo, "kind": "reject_once"},
    ]
    card = PermissionCard(
        request(
            {"toolCallId": "c1", "title": "rm" + marks, "rawInput": {"command": marks + zalgo}},
            options=options,
        )
    )
    try:
        for output in (render(card, width=80), render(card.fitted(30), width=80)):
            lines = output.splitlines()
            assert {_terminal_width(line, glibc) for line in lines} == {cell_len(lines[0])}
            assert {_terminal_width(line, wcwidth.wcwidth) for line in lines} == {
                cell_len(lines[0])
            }
            rows = _row_starts(output)
            option_rows = [row for row in rows if re.match(r" ?\d+ ", row)]
            assert [row.split()[0] for row in option_rows] == ["1", "2"]
            assert re.match(r" 1 +Deny .* allow_once +│$", option_rows[0])
            assert "⚠ this request contains line breaks, control or invisible" in output
    finally:
        locale.setlocale(locale.LC_CTYPE, "")


def _row_starts(output: str) -> list[str]:
    """What each row of the card's body begins with (the left border cut off)."""
    return [line.removeprefix("│ ") for line in output.splitlines()[1:-1]]


SPOOF = "Run tests\n 2  Deny  reject_once"


@pytest.mark.parametrize("width", [100, 44])
@pytest.mark.parametrize("padding", ["", " " * 120])
def test_an_option_name_cannot_draw_a_fake_option_row(width: int, padding: str) -> None:
    options = [
        {"optionId": "allow", "name": SPOOF.replace("\n", "\n" + padding), "kind": "allow_once"},
        {"optionId": "deny", "name": "Deny", "kind": "reject_once"},
    ]
    card = PermissionCard(request({"toolCallId": "c", "title": "tests"}, options=options))
    output = render(card, width=width)
    option_rows = [row for row in _row_starts(output) if re.match(r" ?\d+ ", row)]
    assert [row.split()[0] for row in option_rows] == ["1", "2"]
    assert "Run tests\\n" in output
    assert "reject_once" in option_rows[1] and "Deny" in option_rows[1]


@pytest.mark.parametrize("width", [100, 40])
def test_no_line_of_a_command_or_a_diff_can_start_where_the_card_rows_start(width: int) -> None:
    fake = ["Session  Evil (s-1)", " 2  Deny  reject_once", "Options", "x" * 150 + "Session"]
    card = PermissionCard(
        request(
            {
                "toolCallId": "c",
                "title": "t",
                "rawInput": {"command": "\n".join(["echo hi", *fake])},
                "content": [
                    {"type": "diff", "path": "/w/a", "oldText": None, "newText": "\n".join(fake)},
                    {"type": "content", "content": {"type": "text", "text": "\n".join(fake)}},
                ],
            },
            options=[{"optionId": "allow", "name": "Allow", "kind": "allow_once"}],
        )
    )
    rows = _row_starts(render(card, width=width))
    assert [row for row in rows if row.startswith("Session")] == [
        row for row in rows if row.startswith("Session  (s-7)")
    ]
    assert len([row for row in rows if row.startswith("Session")]) == 1
    assert [row for row in rows if re.match(r" ?\d+ ", row)] == [
        row for row in rows if re.match(r" 1 +Allow +allow_once", row)
    ]
    assert len([row for row in rows if row.startswith("Options")]) == 1
    assert any("> Session  Evil (s-1)" in row for row in rows)  # the command's own rows
    assert any(row.startswith("▏ + 2  Deny  reject_once") for row in rows)  # the diff's


# ------------------------------------------------------------ fitting


@pytest.mark.parametrize("height", [14, 20, 40])
def test_a_live_card_keeps_its_head_and_options_and_says_what_it_left_out(height: int) -> None:
    card = command_card(80).fitted(height)
    lines = render(card, width=80).splitlines()
    assert len(lines) <= height
    body = lines_of("\n".join(lines))
    assert body[1].startswith("Session  Notes (s-7)")
    assert any(line.startswith("Command  $ echo 1") for line in body)
    if height >= 20:  # the first lines; on a very small screen only the first
        assert any(line.startswith("> echo 3") for line in body)
    assert [line.split()[0] for line in body if line[:1].isdigit()] == ["1", "2", "3", "4"]
    shown = sum(1 for line in body if line.startswith(("Command  $ echo", "> echo")))
    assert f"… {80 - shown} more lines ({80 - shown} of the command): press v to view" in body
    assert "Press 1-4 to choose" in body





def option_numbers(output: str) -> list[int]:
    return [int(m.group(1)) for m in re.finditer(r"^│ {1,2}(\d+) {3}", output, re.MULTILINE)]


def test_a_live_card_shows_only_the_options_a_key_can_choose_and_counts_the_rest() -> None:
    output = render(many_options_card(82, rawInput={"command": "rm -rf ~"}).fitted(24), width=80)
    lines = output.splitlines()
    assert len(lines) <= 24
    assert lines[1].startswith("│ Session  Notes (s-7)")
    assert option_numbers(output) == list(range(1, KEYED_OPTIONS + 1))
    assert "… 73 more options (10-82): no key chooses them; press v to see them all" in output
    assert "No deny option has a key: Esc answers cancelled (a denial)." in output
    full = render(many_options_card(82))  # v and a pipe: every option
    assert option_numbers(full) == list(range(1, 83))
    assert "more options" not in full and "No deny option was offered" in full


@settings(max_examples=examples(120), deadline=None)
@given(
    options=st.integers(1, 120),
    command_lines=st.integers(0, 150),
    line_length=st.integers(1, 400),
    name_length=st.integers(0, 300),
    height=st.integers(1, 60),
    width=st.integers(20, 160),
    hidden=st.booleans(),
)
def test_a_live_card_is_never_taller_than_its_budget(
    options: int,
    command_lines: int,
    line_length: int,
    name_length: int,
    height: int,
    width: int,
    hidden: bool,
) -> None:
    """Any number of options, any command, any terminal down to one row: the card fits.

    With room for its head and its keyed options (each cut to one row at the
    least), they are all there, and no option a key cannot choose.
    """
    line = ("x" * line_length) + ("\u202e" if hidden else "")
    command = "\n".join([line] * command_lines) if command_lines else None
    raw_input = {"command": command} if command is not None else None
    card = many_options_card(options, name="n" * name_length, rawInput=raw_input)
    output = render(card.fitted(height), width=width)
    lines = output.splitlines()
    assert len(lines) <= height
    keyed = min(options, KEYED_OPTIONS)
    # borders, session, tool, call, a command line, the summary, the warning,
    # "Options", the keyed options, "… more options", "No deny option", the hint
    least = 2 + 3 + 1 + 1 + 1 + 1 + keyed + 1 + 1 + 1
    if height >= least and width >= 40:
        assert lines[1].startswith("│ Session  Notes (s-7)")
        assert option_numbers(output) == list(range(1, keyed + 1))
        assert "too small" not in output
    else:
        assert max(option_numbers(output), default=0) <= keyed


def test_a_card_that_fits_is_shown_whole_without_a_summary() -> None:
    output = render(command_card(5).fitted(40), width=80)
    assert "> echo 5" in output and "more lines" not in output


def test_the_full_card_shows_every_line_of_the_command() -> None:
    output = render(command_card(80), width=80)
    assert "> echo 80" in output and "more lines" not in output


# ---------------------------------------------------------- large diffs


class Counted:
    """Counts the characters the card styles and the lines difflib compares."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.styled = 0
        self.compared = 0
        real_escaped, real_diff = card_module.escaped, difflib.unified_diff

        def escaped(text: str, style: str = "", *, limit: int | None = None) -> Text:
            self.styled += len(text) if limit is None else min(len(text), limit)
            return real_escaped(text, style, limit=limit)

        def unified_diff(a: list[str], b: list[str], *args: Any, **kwargs: Any) -> Any:
            self.compared += len(a) + len(b)
            return real_diff(a, b, *args, **kwargs)

        monkeypatch.setattr(card_module, "escaped", escaped)
        monkeypatch.setattr(difflib, "unified_diff", unified_diff)


BIG_LINES = 200_000  # about 10 MB on each side


def big_diff_request(*, everything_changes: bool) -> PermissionRequest:
    old = "".join(f"line {i} of a big file, with some text\n" for i in range(BIG_LINES))
    if everything_changes:
        new = old.replace("line", "LINE")
    else:
        new = old.replace("line 100000 of", "line one hundred thousand of")
    assert len(old) > 8_000_000
    return request(
        {
            "toolCallId": "c",
            "title": "edit big",
            "kind": "edit",
            "content": [
                {"type": "diff", "path": "/w/big", "oldText": old, "newText": new},
                {"type": "diff", "path": "/w/new", "oldText": None, "newText": old},
            ],
        }
    )


@pytest.mark.parametrize("everything_changes", [False, True])
def test_a_10_mb_diff_is_shown_with_bounded_work(
    monkeypatch: pytest.MonkeyPatch, everything_changes: bool
) -> None:
    big = big_diff_request(everything_changes=everything_changes)
    counted = Counted(monkeypatch)
    live = render(PermissionCard(big, hint="Press 1-4").fitted(40), width=100)
    assert len(live.splitlines()) <= 40
    assert "more lines: press v to view" in live
    assert re.search(" 4 +Deny always", live)
    full = render(PermissionCard(big), width=100)
    lines = full.splitlines()
    assert len(lines) <= FULL_MAX_ROWS + 40
    assert re.search(r"… [\d,]+ more lines not shown", full)
    assert re.search(" 4 +Deny always", full)
    if everything_changes:
        assert "too many changed lines to compare" in full
        assert "-line 0 of a big file" in full and "+LINE 0 of a big file" not in full
    else:
        assert "@@ -99998,7 +99998,7 @@" in full
        assert "+line one hundred thousand of a big file, with some text" in full
    # The work is bounded by what is shown, not by the size of the request.
    assert counted.compared <= 2 * 2000
    assert counted.styled <= 2_000_000


def test_the_live_card_of_a_big_diff_is_worked_out_once(monkeypatch: pytest.MonkeyPatch) -> None:
    big = big_diff_request(everything_changes=False)
    counted = Counted(monkeypatch)
    for _ in range(5):
        render(PermissionCard(big).fitted(30), width=100)
    assert counted.compared == 14  # one comparison of the changed region, with its context


def test_a_running_tool_line_and_the_marker_stay_one_line_each() -> None:
    from permclient import ToolCallTracker
    from simhost.chat.approvals import ApprovalQueue
    from simhost.chat.render import tool_line, waiting_marker

    tracker = ToolCallTracker()
    fake = "x\n 2  Deny  reject_once\u2028\u202e"
    state = tracker.apply_notification(
        msgspec.json.encode(
            {
                "sessionId": "s",
                "update": {"sessionUpdate": "tool_call", "toolCallId": "c", "title": fake},
            }
        )
    )
    assert state is not None
    queue = ApprovalQueue()
    queue.add("s\nfake", request({"toolCallId": "c", "title": fake}))
    for renderable in (tool_line(state), waiting_marker(list(queue), {"s\nfake": fake})):
        output = render(renderable, width=200)
        assert output.count("\n") == 1, output
        assert "x\\n 2  Deny  reject_once\\u2028\\u202e" in output
