"""Tests for the sans-I/O framers in permclient.framing.

Most cases run three ways (the ``mode`` fixture): the input fed whole, fed one byte at a
time, and fed whole followed by a partial next frame that must stay buffered.
"""

from __future__ import annotations

import tracemalloc
from dataclasses import dataclass
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from permclient._errors import LocalProtocolError, RemoteProtocolError
from permclient.framing import (
    DEFAULT_MAX_FRAME_SIZE,
    DEFAULT_MAX_HEADER_SIZE,
    ContentLengthFramer,
    Framer,
    NewlineFramer,
)
from tests.support.profiles import examples

MODES = ["whole", "bytewise", "trailing"]
# Partial next frames for the "trailing" mode; each must end up held as `buffered`.
# Kept within the smallest limits the moded tests use.
CL_TRAIL = b'Content-Length: 4\r\n\r\n{"'
NL_TRAIL = b'{"id'


@dataclass(frozen=True)
class Err:
    """A RemoteProtocolError seen while draining, reduced to what callers act on."""

    recoverable: bool


Event = bytes | Err


def pump(framer: Framer) -> list[Event]:
    """Call next_frame until it wants more data or the framer dies; return what it gave."""
    events: list[Event] = []
    while True:
        try:
            frame = framer.next_frame()
        except RemoteProtocolError as exc:
            events.append(Err(exc.recoverable))
            if not exc.recoverable:
                return events
            continue
        if frame is None:
            return events
        events.append(frame)


def is_dead(events: list[Event]) -> bool:
    return bool(events) and events[-1] == Err(False)


def feed_chunks(framer: Framer, chunks: list[bytes]) -> list[Event]:
    """Feed chunks one by one, draining after each, stopping once the framer is dead."""
    events: list[Event] = []
    for chunk in chunks:
        framer.receive_data(chunk)
        events += pump(framer)
        if is_dead(events):
            break
    return events


def feed(framer: Framer, data: bytes, mode: str) -> list[Event]:
    """Feed ``data`` in the given mode and return the events.

    In "trailing" mode a partial next frame is appended and, unless the framer died, is
    checked to be exactly what stays buffered.
    """
    if mode == "whole":
        return feed_chunks(framer, [data])
    if mode == "bytewise":
        return feed_chunks(framer, [data[i : i + 1] for i in range(len(data))])
    assert mode == "trailing"
    trail = CL_TRAIL if isinstance(framer, ContentLengthFramer) else NL_TRAIL
    events = feed_chunks(framer, [data + trail])
    if not is_dead(events):
        assert framer.buffered == len(trail)
    return events


@pytest.fixture(params=MODES)
def mode(request: pytest.FixtureRequest) -> str:
    return str(request.param)


def cl(body: bytes, *headers: bytes) -> bytes:
    """A Content-Length frame with the given header lines (default: just Content-Length)."""
    if not headers:
        headers = (b"Content-Length: %d" % len(body),)
    return b"\r\n".join(headers) + b"\r\n\r\n" + body


BODY = b'{"jsonrpc":"2.0","id":1,"result":null}'
NEXT = b'{"jsonrpc":"2.0","method":"next"}'


def test_defaults() -> None:
    assert DEFAULT_MAX_FRAME_SIZE == 64 * 1024 * 1024
    assert DEFAULT_MAX_HEADER_SIZE == 8 * 1024
    # Both satisfy the Framer protocol (checked statically by mypy).
    framers: list[Framer] = [ContentLengthFramer(), NewlineFramer()]
    for framer in framers:
        assert framer.buffered == 0
        assert framer.next_frame() is None


@pytest.mark.parametrize("cls", [ContentLengthFramer, NewlineFramer])
def test_rejects_nonpositive_limits(cls: type[ContentLengthFramer | NewlineFramer]) -> None:
    with pytest.raises(ValueError):
        cls(max_frame_size=0)


# --- Content-Length: accepted input -----------------------------------------------------


def test_cl_single_and_multiple_frames(mode: str) -> None:
    framer = ContentLengthFramer()
    assert feed(framer, cl(BODY) + cl(NEXT) + cl(b"[]"), mode) == [BODY, NEXT, b"[]"]


def test_cl_zero_length(mode: str) -> None:
    framer = ContentLengthFramer()
    assert feed(framer, cl(b"") + cl(BODY) + cl(b""), mode) == [b"", BODY, b""]


def test_cl_body_may_contain_anything(mode: str) -> None:
    body = b"\r\n\r\nContent-Length: 3\r\n\r\n\x00\xff"
    assert feed(ContentLengthFramer(), cl(body), mode) == [body]


@pytest.mark.parametrize(
    "headers",
    [
        [b"content-length: %d"],
        [b"CONTENT-LENGTH: %d"],
        [b"Content-length:%d"],
        [b"Content-Length: \t %d \t"],
        [b"Content-Length  :  %d"],
        [b"Content-Length: 000%d"],
        [b"X-Unknown: whatever", b"Content-Length: %d"],
        [b"Content-Length: %d", b"X-Unknown:", b"x-other: a:b:c"],
        [b"Content-Type: application/vscode-jsonrpc; charset=utf-8", b"content-length: %d"],
        [b"Content-Length: %d", b"Content-Type: application/vscode-jsonrpc; charset=utf-8"],
    ],
)
def test_cl_header_spellings_and_order(headers: list[bytes], mode: str) -> None:
    raw = b"\r\n".join(h % len(BODY) if b"%d" in h else h for h in headers)
    data = raw + b"\r\n\r\n" + BODY + cl(NEXT)
    assert feed(ContentLengthFramer(), data, mode) == [BODY, NEXT]


@pytest.mark.parametrize(
    "content_type",
    [
        b"application/vscode-jsonrpc; charset=utf-8",
        b"application/vscode-jsonrpc; charset=utf8",
        b"application/json",
        b"application/json; charset=UTF-8",
        b'Application/JSON;charset="utf-8"',
        b"application/json; charset=utf-8; foo=bar",
        b"application/problem+json",
        b"  application/json  ",
    ],
)
def test_cl_content_type_accepted(content_type: bytes, mode: str) -> None:
    data = cl(BODY, b"Content-Length: %d" % len(BODY), b"Content-Type: " + content_type)
    assert feed(ContentLengthFramer(), data + cl(NEXT), mode) == [BODY, NEXT]


@pytest.mark.parametrize(
    "content_type",
    [
        b"application/vscode-jsonrpc; charset=latin1",
        b"application/json; charset=utf-16",
        b"text/plain",
        b"text/plain; charset=utf-8",
        b"application/octet-stream",
        b"",
        b"charset=utf-8",
    ],
)
def test_cl_content_type_rejected_recoverably(content_type: bytes, mode: str) -> None:
    data = cl(BODY, b"Content-Type: " + content_type, b"Content-Length: %d" % len(BODY))
    # The body is skipped by length and the stream stays in sync.
    assert feed(ContentLengthFramer(), data + cl(NEXT), mode) == [Err(True), NEXT]


def test_cl_bad_content_type_body_never_buffered() -> None:
    framer = ContentLengthFramer()
    framer.receive_data(b"Content-Type: text/plain\r\nContent-Length: 1000\r\n\r\n")
    with pytest.raises(RemoteProtocolError) as info:
        framer.next_frame()
    assert info.value.recoverable
    for _ in range(10):
        framer.receive_data(b"x" * 100)
        assert framer.next_frame() is None
        assert framer.buffered == 0
    framer.receive_data(cl(NEXT))
    assert pump(framer) == [NEXT]


# --- Content-Length: fatal errors ---------------------------------------------------------


@pytest.mark.parametrize(
    "header",
    [
        pytest.param(b"Content-Type: application/json", id="missing"),
        pytest.param(b"", id="empty-section"),
        pytest.param(b"Content-Length: 5\r\nContent-Length: 5", id="duplicate-equal"),
        pytest.param(b"Content-Length: 5\r\ncontent-length: 7", id="duplicate-different"),
        pytest.param(b"Content-Length: -5", id="negative"),
        pytest.param(b"Content-Length: +5", id="plus-sign"),
        pytest.param(b"Content-Length: 5a", id="trailing-junk"),
        pytest.param(b"Content-Length: 0x10", id="hex"),
        pytest.param(b"Content-Length: 1_0", id="underscore"),
        pytest.param(b"Content-Length: 1e3", id="exponent"),
        pytest.param(b"Content-Length: 5.0", id="decimal"),
        pytest.param(b"Content-Length: 5 5", id="inner-space"),
        pytest.param(b"Content-Length:", id="empty-value"),
        pytest.param(b"Content-Length:   ", id="blank-value"),
        pytest.param("Content-Length: \uff15".encode(), id="non-ascii-digit"),
        pytest.param(b"Content-Length: " + b"9" * 30, id="absurd"),
        pytest.param(b"Content-Length: " + b"9" * 5000, id="beyond-int-str-limit"),
        pytest.param(b"Content-Length 5", id="no-colon"),
        pytest.param(b"Content-Length: 5\r\nbogus line", id="line-without-colon"),
        pytest.param(b": 5\r\nContent-Length: 5", id="empty-name"),
        pytest.param(b"\r\nContent-Length: 5", id="leading-blank-line"),
        pytest.param(b"Content-Length: 5\r\nX-Name: caf\xc3\xa9", id="non-ascii"),
        pytest.param(b"Content-Length: 5\nX: y", id="bare-lf"),
    ],
)
def test_cl_bad_header_is_fatal(header: bytes, mode: str) -> None:
    framer = ContentLengthFramer()
    data = cl(BODY) + header + b"\r\n\r\n" + b"hello" + cl(NEXT)
    assert feed(framer, data, mode) == [BODY, Err(False)]
    assert framer.buffered == 0


@pytest.mark.parametrize(
    "header",
    [b"Content-Length: -5", b"Content-Length: x", b"Content-Length: 3\r\nContent-Length: 3"],
)
def test_cl_bad_length_raised_before_body(header: bytes) -> None:
    # Fed only the header section: the error must not wait for (or buffer) any body.
    framer = ContentLengthFramer()
    framer.receive_data(header + b"\r\n\r\n")
    with pytest.raises(RemoteProtocolError) as info:
        framer.next_frame()
    assert not info.value.recoverable


def test_cl_missing_length_raised_before_body() -> None:
    framer = ContentLengthFramer()
    framer.receive_data(b"Content-Type: application/json\r\n\r\n")
    with pytest.raises(RemoteProtocolError) as info:
        framer.next_frame()
    assert not info.value.recoverable


def test_cl_dead_after_fatal_error() -> None:
    framer = ContentLengthFramer()
    framer.receive_data(b"Content-Length: nope\r\n\r\n")
    with pytest.raises(RemoteProtocolError) as first:
        framer.next_frame()
    assert not first.value.recoverable
    # Even perfectly good input later is not parsed: the stream is out of sync.
    framer.receive_data(cl(BODY))
    assert framer.buffered == 0
    for _ in range(3):
        with pytest.raises(RemoteProtocolError) as again:
            framer.next_frame()
        assert not again.value.recoverable
        assert str(again.value) == str(first.value)


def test_cl_header_cap_without_terminator(mode: str) -> None:
    framer = ContentLengthFramer(max_header_size=64)
    data = b"X-Padding: " + b"a" * 200
    assert feed(framer, data, mode) == [Err(False)]


def test_cl_header_cap_raised_without_buffering_everything() -> None:
    framer = ContentLengthFramer(max_header_size=64)
    with pytest.raises(RemoteProtocolError) as info:
        for _ in range(1000):
            framer.receive_data(b"X")
            assert framer.next_frame() is None
            assert framer.buffered <= 64 + 3
    assert not info.value.recoverable


def test_cl_header_cap_with_terminator(mode: str) -> None:
    framer = ContentLengthFramer(max_header_size=64)
    data = cl(b"{}", b"Content-Length: 2", b"X-Padding: " + b"a" * 60)
    assert feed(framer, data, mode) == [Err(False)]


def test_cl_header_exactly_at_cap(mode: str) -> None:
    header = b"Content-Length: 2\r\nX: " + b"a" * 20
    framer = ContentLengthFramer(max_header_size=len(header))
    assert feed(framer, header + b"\r\n\r\n{}", mode) == [b"{}"]


# --- Content-Length: oversized frames -----------------------------------------------------


def test_cl_oversized_frame_skipped_then_next_parsed(mode: str) -> None:
    framer = ContentLengthFramer(max_frame_size=16)
    big = b"x" * 17
    data = cl(b"0123456789abcdef") + cl(big) + cl(b"{}")
    assert feed(framer, data, mode) == [b"0123456789abcdef", Err(True), b"{}"]


def test_cl_oversized_error_before_body_and_body_never_buffered() -> None:
    framer = ContentLengthFramer(max_frame_size=100)
    framer.receive_data(b"Content-Length: 100000\r\n\r\n")
    with pytest.raises(RemoteProtocolError) as info:
        framer.next_frame()
    assert info.value.recoverable
    for _ in range(99):
        framer.receive_data(b"y" * 1000)
        assert framer.next_frame() is None
        assert framer.buffered == 0
    # The last chunk ends the skipped body and starts the next frame.
    framer.receive_data(b"y" * 1000 + cl(BODY))
    assert pump(framer) == [BODY]
    assert framer.buffered == 0


def test_cl_oversized_body_partly_in_same_chunk() -> None:
    framer = ContentLengthFramer(max_frame_size=4)
    framer.receive_data(cl(b"0123456789")[:-3])
    assert pump(framer) == [Err(True)]
    assert framer.buffered == 0
    framer.receive_data(b"789" + cl(b"ok"))
    assert pump(framer) == [b"ok"]


def test_cl_frame_exactly_at_cap(mode: str) -> None:
    framer = ContentLengthFramer(max_frame_size=len(BODY))
    assert feed(framer, cl(BODY), mode) == [BODY]


def test_cl_buffered_counts_partial_frame() -> None:
    framer = ContentLengthFramer()
    data = cl(BODY)
    for i in range(len(data) - 1):
        framer.receive_data(data[i : i + 1])
        assert framer.next_frame() is None
        assert framer.buffered == i + 1
    framer.receive_data(data[-1:])
    assert framer.next_frame() == BODY
    assert framer.buffered == 0


def test_cl_accepts_bytearray_and_does_not_alias_it() -> None:
    framer = ContentLengthFramer()
    data = bytearray(cl(BODY)[:-1])
    framer.receive_data(data)
    data[-1:] = b"!"  # the caller reuses its buffer
    framer.receive_data(BODY[-1:])
    assert framer.next_frame() == BODY


def test_cl_encode() -> None:
    assert ContentLengthFramer.encode(b"{}") == b"Content-Length: 2\r\n\r\n{}"
    assert ContentLengthFramer.encode(b"") == b"Content-Length: 0\r\n\r\n"
    framer = ContentLengthFramer()
    framer.receive_data(ContentLengthFramer.encode("é".encode()))
    assert framer.next_frame() == "é".encode()


def test_cl_large_frame_in_small_chunks() -> None:
    body = bytes(range(256)) * 4000
    data = cl(body)
    framer = ContentLengthFramer()
    frames = feed_chunks(framer, [data[i : i + 997] for i in range(0, len(data), 997)])
    assert frames == [body]


def test_cl_long_header_in_small_chunks_is_scanned_once() -> None:
    # A header trickling in must not be rescanned from its start on every call; this
    # is functional coverage of the resume-scan path (the terminator straddles chunks).
    header = b"X-Pad: " + b"p" * 5000 + b"\r\nContent-Length: 2"
    data = header + b"\r\n\r\n{}"
    framer = ContentLengthFramer(max_header_size=len(header))
    assert feed_chunks(framer, [data[i : i + 3] for i in range(0, len(data), 3)]) == [b"{}"]


# --- Frames that span reads (both dialects) ---------------------------------------------

FRAMERS = [ContentLengthFramer, NewlineFramer]


def trail_for(framer: Framer) -> bytes:
    return CL_TRAIL if isinstance(framer, ContentLengthFramer) else NL_TRAIL


@pytest.mark.parametrize("cls", FRAMERS)
@pytest.mark.parametrize("read_size", [1000, 64 * 1024])
def test_a_frame_spanning_reads_is_copied_out_once_and_then_no_longer_held(
    cls: type[ContentLengthFramer | NewlineFramer], read_size: int
) -> None:
    body = b'{"x":"' + b"x" * (4 * 1024 * 1024) + b'"}'
    framer = cls()
    wire = framer.encode(body) + trail_for(framer)
    frames: list[bytes] = []
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        for start in range(0, len(wire), read_size):
            # Each read is a new bytes object, as os.read makes one, so it is traced.
            framer.receive_data(wire[start : start + read_size])
            while (frame := framer.next_frame()) is not None:
                frames.append(frame)
        held, peak = (size - base for size in tracemalloc.get_traced_memory())
    finally:
        tracemalloc.stop()
    assert frames == [body]
    # The pieces of the frame and the one copy that joins them, plus object headers.
    assert peak <= 2 * len(body) + len(body) // 16
    # Once returned, the frame is the caller's alone: the framer keeps at most a read.
    assert held - len(body) <= read_size + 4096
    assert framer.buffered == len(trail_for(framer))


@pytest.mark.parametrize("cls", FRAMERS)
@pytest.mark.parametrize("read_size", [1, 7, 997, 16 * 1024 - 1, 16 * 1024, 64 * 1024])
def test_a_frame_spanning_many_reads_from_one_reused_buffer_arrives_intact(
    cls: type[ContentLengthFramer | NewlineFramer], read_size: int
) -> None:
    # A reader that reuses one bytearray for every read (readinto) must not see the
    # frames it was given change, whichever way the framer held the pieces.
    big = bytes(range(32, 127)) * 450  # ~42 KB: pieces big and small at every read size
    framer = cls()
    trail = trail_for(framer)
    wire = framer.encode(big) + framer.encode(BODY) + framer.encode(big[:5000]) + trail
    reused = bytearray(read_size)
    frames: list[bytes] = []
    for start in range(0, len(wire), read_size):
        piece = wire[start : start + read_size]
        reused[: len(piece)] = piece
        framer.receive_data(reused[: len(piece)] if len(piece) < read_size else reused)
        reused[:] = b"#" * read_size  # the caller overwrites its buffer at once
        while (frame := framer.next_frame()) is not None:
            assert type(frame) is bytes
            frames.append(frame)
    assert frames == [big, BODY, big[:5000]]
    assert framer.buffered == len(trail)


@pytest.mark.parametrize("cls", FRAMERS)
@pytest.mark.parametrize("mode", ["whole", "bytewise"])
def test_a_returned_frame_is_not_changed_by_later_data(
    cls: type[ContentLengthFramer | NewlineFramer], mode: str
) -> None:
    framer = cls()
    big = b"[" + b"1," * 20_000 + b"1]"
    data = framer.encode(big) + framer.encode(BODY)
    events = feed(framer, data, mode)
    assert events == [big, BODY]
    for _ in range(3):  # more data, taken out and held, in every way the framer can
        framer.receive_data(framer.encode(NEXT) + framer.encode(big)[:30_000])
        framer.receive_data(bytearray(framer.encode(big)[30_000:]))
        assert pump(framer) == [NEXT, big]
    assert events == [big, BODY]
    assert all(type(event) is bytes for event in events)


def test_nl_crlf_split_across_large_reads_strips_the_cr() -> None:
    # The \r ends one large piece and the \n starts the next read.
    line = b"y" * 40_000
    framer = NewlineFramer()
    assert feed_chunks(framer, [line[:20_000], line[20_000:] + b"\r", b"\n{}\r", b"\n"]) == [
        line,
        b"{}",
    ]
    assert framer.buffered == 0


def test_nl_line_completed_across_reads_but_over_the_limit_is_skipped() -> None:
    framer = NewlineFramer(max_frame_size=8)
    framer.receive_data(b"abc")
    assert framer.next_frame() is None  # held: the line may still end in time
    framer.receive_data(b"defghijkl\nok\n")  # the line ends, 12 bytes long
    assert pump(framer) == [Err(True), b"ok"]
    assert framer.buffered == 0


def test_nl_blank_line_completed_across_reads_is_skipped() -> None:
    framer = NewlineFramer()
    assert feed_chunks(framer, [b" \t", b"  \r", b"\n", b"{}\n"]) == [b"{}"]


def test_cl_body_completed_in_a_read_that_carries_the_next_frames() -> None:
    framer = ContentLengthFramer()
    big = b"z" * 50_000
    wire = cl(big) + cl(BODY) + cl(NEXT)
    cut = len(cl(big)) - 10
    assert feed_chunks(framer, [wire[:cut], wire[cut:]]) == [big, BODY, NEXT]
    assert framer.buffered == 0


# --- Newline framing --------------------------------------------------------------------


def test_nl_lf_and_crlf(mode: str) -> None:
    data = BODY + b"\n" + NEXT + b"\r\n" + b"[]\n"
    assert feed(NewlineFramer(), data, mode) == [BODY, NEXT, b"[]"]


def test_nl_blank_and_whitespace_lines_skipped(mode: str) -> None:
    data = b"\n\r\n  \n\t\r\n" + BODY + b"\n\n \t \n" + NEXT + b"\r\n\r\n"
    assert feed(NewlineFramer(), data, mode) == [BODY, NEXT]


def test_nl_only_one_trailing_cr_stripped(mode: str) -> None:
    data = b"a\rb\n" + b"c\r\r\n" + b" d \n"
    assert feed(NewlineFramer(), data, mode) == [b"a\rb", b"c\r", b" d "]


def test_nl_long_line_skipped_then_recovery(mode: str) -> None:
    framer = NewlineFramer(max_frame_size=8)
    data = b"12345678\n" + b"x" * 20 + b"\n" + b"abcdefgh\r\n" + b"ok\n"
    assert feed(framer, data, mode) == [b"12345678", Err(True), b"abcdefgh", b"ok"]


def test_nl_long_line_raised_without_buffering_it_whole() -> None:
    framer = NewlineFramer(max_frame_size=10)
    for _ in range(10):
        framer.receive_data(b"x")
        assert framer.next_frame() is None
    framer.receive_data(b"x")  # 11 bytes held without a newline
    with pytest.raises(RemoteProtocolError) as info:
        framer.next_frame()
    assert info.value.recoverable
    assert framer.buffered == 0
    for _ in range(100):  # the rest of the long line is dropped as it arrives
        framer.receive_data(b"y" * 1000)
        assert framer.next_frame() is None
        assert framer.buffered == 0
    framer.receive_data(b"yyy\n" + b"{}\n")
    assert pump(framer) == [b"{}"]


def test_nl_line_at_cap_with_crlf_is_accepted() -> None:
    # max_frame_size bytes then b"\r": the b"\n" may still come, so no error yet.
    framer = NewlineFramer(max_frame_size=4)
    assert feed_chunks(framer, [b"a", b"b", b"c", b"d", b"\r", b"\n"]) == [b"abcd"]
    assert feed_chunks(framer, [b"abcd\r", b"x"]) == [Err(True)]


def test_nl_accepts_bytearray_and_does_not_alias_it() -> None:
    framer = NewlineFramer()
    data = bytearray(b"abc")
    framer.receive_data(data)
    data[:] = b"XYZ"
    framer.receive_data(bytearray(b"d\n"))
    assert framer.next_frame() == b"abcd"


def test_nl_large_line_in_small_chunks() -> None:
    body = b"z" * 1_000_000
    data = body + b"\n"
    framer = NewlineFramer()
    frames = feed_chunks(framer, [data[i : i + 997] for i in range(0, len(data), 997)])
    assert frames == [body]


def test_nl_encode() -> None:
    assert NewlineFramer.encode(b"{}") == b"{}\n"
    framer = NewlineFramer()
    framer.receive_data(NewlineFramer.encode(BODY) + NewlineFramer.encode(NEXT))
    assert pump(framer) == [BODY, NEXT]


@pytest.mark.parametrize("body", [b"a\nb", b"a\rb", b"{}\n", b"\r", b"", b" ", b"\t \x0b"])
def test_nl_encode_rejects_unframeable_bodies(body: bytes) -> None:
    with pytest.raises(LocalProtocolError):
        NewlineFramer.encode(body)


# --- Property tests ---------------------------------------------------------------------

FAST = settings(
    max_examples=examples(50), deadline=None, suppress_health_check=[HealthCheck.too_slow]
)


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    return [data[a:b] for a, b in pairwise(points)]


cl_header_names = st.sampled_from([b"Content-Length", b"content-length", b"CONTENT-LENGTH"])
cl_extra_headers = st.lists(
    st.sampled_from(
        [
            b"Content-Type: application/vscode-jsonrpc; charset=utf-8",
            b"Content-Type: application/json",
            b"X-Whatever: 1",
        ]
    ),
    max_size=2,
)


@st.composite
def cl_frame(draw: st.DrawFn) -> tuple[bytes, bytes]:
    body = draw(st.binary(max_size=40))
    if draw(st.booleans()):
        return body, ContentLengthFramer.encode(body)
    length = draw(cl_header_names) + b": %d" % len(body)
    extras = draw(cl_extra_headers)
    at = draw(st.integers(0, len(extras)))
    return body, cl(body, *extras[:at], length, *extras[at:])


@FAST
@given(frames=st.lists(cl_frame(), max_size=8), cuts=st.lists(st.integers(0, 10_000)))
def test_cl_roundtrip_any_chunking(frames: list[tuple[bytes, bytes]], cuts: list[int]) -> None:
    data = b"".join(raw for _, raw in frames)
    framer = ContentLengthFramer(max_frame_size=64)
    assert feed_chunks(framer, split_at(data, cuts)) == [body for body, _ in frames]
    assert framer.buffered == 0


nl_body = (
    st.binary(min_size=1, max_size=40)
    .map(lambda b: b.replace(b"\n", b"N").replace(b"\r", b"R"))
    .filter(lambda b: not b.isspace())
)
nl_separator = st.sampled_from([b"\n", b"\r\n"])
nl_blank_lines = st.lists(st.sampled_from([b"\n", b"\r\n", b" \n", b"\t \r\n"]), max_size=2)


@FAST
@given(
    frames=st.lists(st.tuples(nl_body, nl_separator, nl_blank_lines), max_size=8),
    cuts=st.lists(st.integers(0, 10_000)),
)
def test_nl_roundtrip_any_chunking(
    frames: list[tuple[bytes, bytes, list[bytes]]], cuts: list[int]
) -> None:
    data = b"".join(body + sep + b"".join(blanks) for body, sep, blanks in frames)
    framer = NewlineFramer(max_frame_size=64)
    assert feed_chunks(framer, split_at(data, cuts)) == [body for body, _, _ in frames]
    assert framer.buffered == 0


@FAST
@given(bodies=st.lists(nl_body, max_size=8), cuts=st.lists(st.integers(0, 10_000)))
def test_nl_encode_roundtrip_any_chunking(bodies: list[bytes], cuts: list[int]) -> None:
    data = b"".join(NewlineFramer.encode(body) for body in bodies)
    framer = NewlineFramer()
    assert feed_chunks(framer, split_at(data, cuts)) == bodies


# Garbage built from fragments that hit the interesting paths far more often than
# uniformly random bytes would.
garbage = st.lists(
    st.one_of(
        st.binary(max_size=12),
        st.sampled_from(
            [
                b"Content-Length: ",
                b"content-length:",
                b"Content-Type: text/plain",
                b"Content-Type: application/json",
                b"\r\n",
                b"\r\n\r\n",
                b"\n",
                b"\r",
                b" ",
                b"0",
                b"5",
                b"12",
                b"-1",
                b"999",
                b"{}",
                b"\xff",
                b":",
            ]
        ),
    ),
    max_size=40,
).map(b"".join)


def check_garbage(
    make: type[ContentLengthFramer] | type[NewlineFramer],
    data: bytes,
    cuts: list[int],
    bound: int,
    **limits: int,
) -> None:
    """Feed garbage whole and chunked: only frames/None/RemoteProtocolError come out,
    the results do not depend on chunking, and memory stays bounded."""
    results = []
    for chunks in ([data], split_at(data, cuts)):
        framer = make(**limits)
        events: list[Event] = []
        for chunk in chunks:
            framer.receive_data(chunk)
            while True:
                try:
                    frame = framer.next_frame()
                except RemoteProtocolError as exc:
                    events.append(Err(exc.recoverable))
                    if not exc.recoverable:
                        break
                    continue
                if frame is None:
                    break
                assert type(frame) is bytes
                events.append(frame)
            assert framer.buffered <= bound
            if is_dead(events):
                # A dead framer keeps raising the fatal error.
                with pytest.raises(RemoteProtocolError) as info:
                    framer.next_frame()
                assert not info.value.recoverable
                break
        results.append((events, framer.buffered))
    assert results[0] == results[1]


@FAST
@given(data=garbage, cuts=st.lists(st.integers(0, 10_000), max_size=20))
def test_cl_garbage_only_raises_remote_protocol_error(data: bytes, cuts: list[int]) -> None:
    # Held data never exceeds a header section plus a body in progress.
    check_garbage(
        ContentLengthFramer, data, cuts, bound=24 + 4 + 16, max_frame_size=16, max_header_size=24
    )


@FAST
@given(data=garbage, cuts=st.lists(st.integers(0, 10_000), max_size=20))
def test_nl_garbage_only_raises_remote_protocol_error(data: bytes, cuts: list[int]) -> None:
    # Held data never exceeds a line at the cap plus the b"\r" that may precede its b"\n".
    check_garbage(NewlineFramer, data, cuts, bound=8 + 1, max_frame_size=8)
