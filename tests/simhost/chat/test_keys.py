"""The chat's keyboard without a terminal: bytes to keys, and the prompt's line editor."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from simhost.chat.keys import MAX_PASTE_BYTES, Key, KeyDecoder, LineEditor

ESC = Key("esc")
ENTER = Key("enter")


def decode_whole(data: bytes) -> list[Key]:
    decoder = KeyDecoder()
    return decoder.feed(data) + decoder.flush()


def decode_bytewise(data: bytes) -> list[Key]:
    decoder = KeyDecoder()
    keys: list[Key] = []
    for i in range(len(data)):
        keys += decoder.feed(data[i : i + 1])
    return keys + decoder.flush()


@pytest.mark.parametrize("decode", [decode_whole, decode_bytewise])
@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"ab", [Key.of("a"), Key.of("b")]),
        (b"\r", [ENTER]),
        (b"\n", [ENTER]),
        (b"\r\n", [ENTER]),
        (b"\x7f\x08", [Key("backspace"), Key("backspace")]),
        (b"\x03", [Key("ctrl_c")]),
        (b"\x04", [Key("ctrl_d")]),
        (b"\x15\x17", [Key("ctrl_u"), Key("ctrl_w")]),
        (b"\x1b", [ESC]),
        (b"\x1b\x1b", [ESC, ESC]),
        # Arrows, Home/End, Delete, F1 (SS3): swallowed, never Esc + letters.
        (b"\x1b[A\x1b[B\x1b[C\x1b[D", []),
        (b"\x1b[1;5C\x1b[3~\x1bOP", []),
        (b"x\x1b[Ay", [Key.of("x"), Key.of("y")]),
        # An Alt chord is not "Esc, then 1": it is swallowed.
        (b"\x1b1", []),
        ("é✓".encode(), [Key.of("é"), Key.of("✓")]),
        (b"\t\x01\x07", []),
    ],
)
def test_decodes_keys_whole_and_byte_by_byte(
    decode: object, data: bytes, expected: list[Key]
) -> None:
    assert decode(data) == expected  # type: ignore[operator]


def test_a_lone_esc_waits_for_the_timeout() -> None:
    decoder = KeyDecoder()
    assert decoder.feed(b"\x1b") == []
    assert decoder.pending
    assert decoder.flush() == [ESC]
    assert not decoder.pending


def test_an_escape_sequence_split_across_reads_is_not_an_esc() -> None:
    decoder = KeyDecoder()
    assert decoder.feed(b"\x1b[") == []
    assert decoder.pending
    assert decoder.feed(b"A") == []
    assert not decoder.pending


def test_a_cut_off_sequence_is_dropped_on_flush() -> None:
    decoder = KeyDecoder()
    assert decoder.feed(b"\x1b[12") == []
    assert decoder.flush() == []
    assert decoder.feed(b"a") == [Key.of("a")]


@given(st.binary(max_size=64))
def test_never_raises_and_never_holds_more_than_a_sequence(data: bytes) -> None:
    decoder = KeyDecoder()
    for key in decoder.feed(data) + decoder.flush():
        assert key.name != "char" or (len(key.char) == 1 and key.char.isprintable())
        assert key.name != "paste" or all(c.isprintable() or c in "\n\t" for c in key.char)
    assert not decoder.pending


PASTE = b"\x1b[200~"
PASTE_END = b"\x1b[201~"


@pytest.mark.parametrize("decode", [decode_whole, decode_bytewise])
@pytest.mark.parametrize(
    ("data", "expected"),
    [
        # Its Enters, digits and Esc are text; control characters but tabs are dropped.
        (PASTE + b"create a\r\n2\r\x1b\x03\tz" + PASTE_END, [Key("paste", "create a\n2\n\tz")]),
        (
            b"a" + PASTE + "é\n".encode() + PASTE_END + b"\r",
            [Key.of("a"), Key("paste", "é\n"), ENTER],
        ),
        (PASTE + PASTE_END, []),
    ],
)
def test_a_bracketed_paste_is_one_key(decode: object, data: bytes, expected: list[Key]) -> None:
    assert decode(data) == expected  # type: ignore[operator]


@pytest.mark.parametrize(
    ("data", "expected"),
    [
        (b"one\rtwo\r", [Key("paste", "one\ntwo\n")]),
        (b"\x15one\n2", [Key("ctrl_u"), Key("paste", "one\n2")]),
    ],
)
def test_a_line_break_with_text_after_it_in_one_read_was_pasted(
    data: bytes, expected: list[Key]
) -> None:
    assert decode_whole(data) == expected


def test_a_typed_line_ending_with_enter_in_one_read_stays_typed() -> None:
    assert decode_whole(b"hi\r") == [Key.of("h"), Key.of("i"), ENTER]


def test_a_paste_end_marker_split_across_reads_still_ends_it() -> None:
    decoder = KeyDecoder()
    assert decoder.feed(PASTE + b"12\x1b[20") == []
    assert decoder.in_paste and decoder.pending
    assert decoder.feed(b"1~3") == [Key("paste", "12"), Key.of("3")]
    assert not decoder.pending


def test_a_paste_whose_end_never_comes_ends_at_the_flush() -> None:
    decoder = KeyDecoder()
    assert decoder.feed(PASTE + b"ls\r") == []
    assert decoder.flush() == [Key("paste", "ls\n")]
    assert decoder.feed(b"1") == [Key.of("1")]


@pytest.mark.parametrize("size", [MAX_PASTE_BYTES + 1, 3 * MAX_PASTE_BYTES])
def test_a_paste_too_long_for_a_line_is_one_refusal_not_a_cut(size: int) -> None:
    decoder = KeyDecoder()
    keys = []
    data = PASTE + b"x" * size + PASTE_END + b"1"
    for start in range(0, len(data), 4096):
        keys += decoder.feed(data[start : start + 4096])
    assert keys == [Key("paste_too_long"), Key.of("1")]
    assert decode_whole(b"a\rb" * MAX_PASTE_BYTES) == [Key("paste_too_long")]


def test_a_paste_that_fits_is_taken_whole() -> None:
    text = "é" * (MAX_PASTE_BYTES // 2)
    assert decode_whole(PASTE + text.encode() + PASTE_END) == [Key("paste", text)]
    editor = LineEditor()
    assert not editor.fits("x" * (LineEditor.MAX_LENGTH + 1))
    editor.handle(Key("paste", "a\nb"))
    assert editor.text == "a\nb"
    editor.handle(Key("paste", "x" * LineEditor.MAX_LENGTH))  # does not fit: not taken at all
    assert editor.text == "a\nb"


def test_line_editor() -> None:
    editor = LineEditor()
    for char in "run ls -l":
        assert editor.handle(Key.of(char)) is None
    editor.handle(Key("backspace"))
    assert editor.text == "run ls -"
    editor.handle(Key("ctrl_w"))
    assert editor.text == "run ls "
    assert editor.handle(ENTER) == "run ls "
    assert editor.text == ""


def test_enter_on_an_empty_or_blank_line_submits_nothing() -> None:
    editor = LineEditor()
    assert editor.handle(ENTER) is None
    editor.handle(Key.of(" "))
    assert editor.handle(ENTER) is None
    editor.handle(Key.of("x"))
    editor.handle(Key("ctrl_u"))
    assert editor.text == ""


def test_characters_read_together_are_a_burst_and_one_alone_is_not() -> None:
    decoder = KeyDecoder()
    together = decoder.feed(b"2 files")
    assert "".join(k.char for k in together) == "2 files"
    assert all(k.burst for k in together)
    assert [k.burst for k in decoder.feed(b"2")] == [False]
    typed_then_enter = decoder.feed(b"3\r")
    assert [(k.name, k.burst) for k in typed_then_enter] == [("char", False), ("enter", False)]
    assert Key.of("2") == decoder.feed(b"2x")[0]  # a burst key is still that key
