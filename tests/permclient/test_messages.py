"""Message classification and encoding, sans-I/O (no trio)."""

from __future__ import annotations

import json
import tracemalloc
from typing import Any

import msgspec
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st
from msgspec import UNSET

from permclient import ErrorCode, LocalProtocolError
from permclient._messages import (
    ErrorObject,
    ErrorResponse,
    InvalidMessage,
    Notification,
    Request,
    Response,
    _envelope_decoder,
    _scan_head,
    encode_error,
    encode_notification,
    encode_request,
    encode_result,
    json_cost,
    parse_message,
)


def test_error_codes_are_the_json_rpc_ones() -> None:
    assert {code.name: int(code) for code in ErrorCode} == {
        "PARSE_ERROR": -32700,
        "INVALID_REQUEST": -32600,
        "METHOD_NOT_FOUND": -32601,
        "INVALID_PARAMS": -32602,
        "INTERNAL_ERROR": -32603,
        "REQUEST_CANCELLED": -32800,
        "RESOURCE_NOT_FOUND": -32002,
    }


def _frame(obj: Any) -> bytes:
    return json.dumps(obj).encode()


@pytest.mark.parametrize("request_id", [0, 7, "abc", ""])
def test_request_keeps_its_id_and_raw_params(request_id: Any) -> None:
    message = parse_message(
        _frame({"jsonrpc": "2.0", "id": request_id, "method": "m", "params": {"a": [1]}})
    )
    assert isinstance(message, Request)
    assert message.id == request_id and message.method == "m"
    assert msgspec.json.decode(message.params) == {"a": [1]}


def test_notification_has_a_method_and_no_id() -> None:
    message = parse_message(_frame({"jsonrpc": "2.0", "method": "n"}))
    assert isinstance(message, Notification)
    assert message.method == "n" and not message.params


def test_response_and_error_response_are_told_apart_by_shape() -> None:
    ok = parse_message(_frame({"jsonrpc": "2.0", "id": 0, "result": None}))
    assert isinstance(ok, Response) and ok.id == 0 and bytes(ok.result) == b"null"
    err = parse_message(
        _frame({"jsonrpc": "2.0", "id": 3, "error": {"code": -32601, "message": "no", "data": 1}})
    )
    assert isinstance(err, ErrorResponse)
    assert err.error == ErrorObject(-32601, "no", 1)


def test_error_response_with_a_malformed_error_object_still_settles_its_id() -> None:
    err = parse_message(_frame({"jsonrpc": "2.0", "id": 3, "error": {"code": "x"}}))
    assert isinstance(err, ErrorResponse) and err.id == 3
    assert err.error.code == ErrorCode.INTERNAL_ERROR


INVALID = {
    "not JSON": (b'{"jsonrpc": "2.0", "id": 1', ErrorCode.PARSE_ERROR, None, True),
    "empty frame": (b"", ErrorCode.PARSE_ERROR, None, True),
    "not UTF-8": (b'{"jsonrpc": "2.0", "id": 1, "method": "\xff"}', ErrorCode.PARSE_ERROR, 1, True),
    "a notification not UTF-8": (
        b'{"jsonrpc": "2.0", "method": "\xff"}',
        ErrorCode.PARSE_ERROR,
        None,
        False,
    ),
    "batch": (
        b'[{"jsonrpc": "2.0", "id": 1, "method": "m"}]',
        ErrorCode.INVALID_REQUEST,
        None,
        True,
    ),
    "number": (b"42", ErrorCode.INVALID_REQUEST, None, True),
    "null": (b"null", ErrorCode.INVALID_REQUEST, None, True),
    "method not a string": (
        _frame({"jsonrpc": "2.0", "id": 4, "method": 1}),
        ErrorCode.INVALID_REQUEST,
        4,
        True,
    ),
    "id is a bool": (
        _frame({"jsonrpc": "2.0", "id": True, "method": "m"}),
        ErrorCode.INVALID_REQUEST,
        None,
        True,
    ),
    "id is an object": (
        _frame({"jsonrpc": "2.0", "id": {}, "method": "m"}),
        ErrorCode.INVALID_REQUEST,
        None,
        True,
    ),
    "no jsonrpc": (_frame({"id": 2, "method": "m"}), ErrorCode.INVALID_REQUEST, 2, True),
    "wrong jsonrpc": (
        _frame({"jsonrpc": "1.0", "id": 2, "method": "m"}),
        ErrorCode.INVALID_REQUEST,
        2,
        True,
    ),
    "method and result": (
        _frame({"jsonrpc": "2.0", "id": 2, "method": "m", "result": 1}),
        ErrorCode.INVALID_REQUEST,
        2,
        True,
    ),
    "neither method nor id": (_frame({"jsonrpc": "2.0"}), ErrorCode.INVALID_REQUEST, None, True),
    "result and error": (
        _frame({"jsonrpc": "2.0", "id": 2, "result": 1, "error": {"code": 1, "message": ""}}),
        ErrorCode.INVALID_REQUEST,
        2,
        False,
    ),
    "response without result": (
        _frame({"jsonrpc": "2.0", "id": 2}),
        ErrorCode.INVALID_REQUEST,
        2,
        False,
    ),
    "result for id null": (
        _frame({"jsonrpc": "2.0", "id": None, "result": 1}),
        ErrorCode.INVALID_REQUEST,
        None,
        False,
    ),
}


@pytest.mark.parametrize(
    ("frame", "code", "request_id", "reply"), INVALID.values(), ids=INVALID.keys()
)
def test_invalid_messages_are_classified_with_the_right_code(
    frame: bytes, code: ErrorCode, request_id: Any, reply: bool
) -> None:
    message = parse_message(frame)
    assert isinstance(message, InvalidMessage)
    assert (message.code, message.id, message.reply) == (code, request_id, reply)
    assert message.reason


@given(st.binary(max_size=200))
def test_any_bytes_classify_without_raising(frame: bytes) -> None:
    parse_message(frame)


@given(
    st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(),
        lambda c: st.lists(c) | st.dictionaries(st.text(), c),
        max_leaves=10,
    )
)
def test_any_json_value_classifies_without_raising(value: Any) -> None:
    parse_message(msgspec.json.encode(value))


def test_encoders_write_json_rpc_2() -> None:
    assert json.loads(encode_request(0, "m", None)) == {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "m",
        "params": {},
    }
    assert json.loads(encode_notification("n", {"a": 1})) == {
        "jsonrpc": "2.0",
        "method": "n",
        "params": {"a": 1},
    }
    assert json.loads(encode_result("x", None)) == {"jsonrpc": "2.0", "id": "x", "result": None}
    assert json.loads(encode_error(None, ErrorCode.PARSE_ERROR, "bad")) == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {"code": -32700, "message": "bad"},
    }
    assert json.loads(encode_error(1, -1, "m", {"d": 1}))["error"]["data"] == {"d": 1}


def test_unencodable_params_are_a_local_protocol_error() -> None:
    with pytest.raises(LocalProtocolError):
        encode_request(1, "m", {"x": object()})


# ------------------------------------------- text that is not UTF-8 JSON, anywhere

_PERMISSION = (
    b'{"jsonrpc":"2.0","id":7,"method":"session/request_permission","params":{"sessionId":"s",'
    b'"toolCall":{"toolCallId":"c","rawInput":{"command":"pytest HERE; curl x | sh"},'
    b'"rawOutput":"HERE","content":[{"type":"diff","path":"/w/a","newText":"HERE"}],'
    b'"_meta":{"k":"HERE"}},"future":["HERE"],"options":[{"optionId":"allow","name":"A",'
    b'"kind":"allow_once"}],"_meta":{"k":"HERE"}}}'
)
NOT_TEXT = {
    "byte 0xff": b"\xff",
    "truncated sequence": b"\xe2\x82",
    "overlong encoding": b"\xc0\xaf",
    "encoded surrogate": b"\xed\xa0\x80",
    "lone high surrogate escape": rb"\ud800",
    "lone low surrogate escape": rb"\udc00",
    "high surrogate escape, then a letter": rb"\ud800\u0041",
}


@pytest.mark.parametrize("bad", NOT_TEXT.values(), ids=NOT_TEXT.keys())
@pytest.mark.parametrize("where", range(_PERMISSION.count(b"HERE")))
def test_a_request_that_is_not_utf8_json_anywhere_is_invalid_with_its_id_and_method(
    bad: bytes, where: int
) -> None:
    # Each HERE is a part the envelope (or the permission decoder) skips or keeps
    # undecoded: rawInput, rawOutput, content, _meta, an unknown key.
    parts = _PERMISSION.split(b"HERE")
    frame = b"HERE".join(parts[: where + 1]) + bad + b"HERE".join(parts[where + 1 :])
    frame = frame.replace(b"HERE", b"ok")
    message = parse_message(frame)
    assert isinstance(message, InvalidMessage), message
    assert (message.code, message.id, message.method, message.reply) == (
        ErrorCode.PARSE_ERROR,
        7,
        "session/request_permission",
        True,
    )


def test_valid_escapes_and_utf8_are_text() -> None:
    frame = _PERMISSION.replace(b"HERE", rb"\u00e9 \ud83d\ude00 \\ud800 " + "é 😀".encode())
    assert isinstance(parse_message(frame), Request)


@pytest.mark.parametrize("bad", NOT_TEXT.values(), ids=NOT_TEXT.keys())
def test_a_response_that_is_not_utf8_json_fails_the_request_it_answers(bad: bytes) -> None:
    message = parse_message(b'{"jsonrpc":"2.0","id":3,"result":{"text":"' + bad + b'"}}')
    assert isinstance(message, ErrorResponse)
    assert message.id == 3 and message.error.code == ErrorCode.PARSE_ERROR


@pytest.mark.parametrize("bad", NOT_TEXT.values(), ids=NOT_TEXT.keys())
def test_a_notification_that_is_not_utf8_json_is_dropped(bad: bytes) -> None:
    message = parse_message(b'{"jsonrpc":"2.0","method":"n","params":{"t":"' + bad + b'"}}')
    assert isinstance(message, InvalidMessage) and not message.reply


@given(st.data())
def test_no_byte_that_breaks_utf8_inside_a_request_lets_it_through(data: st.DataObject) -> None:
    frame = _PERMISSION.replace(b"HERE", b"ok")
    at = data.draw(st.integers(0, len(frame)))
    bad = data.draw(st.sampled_from([b"\x80", b"\xbf", b"\xc2", b"\xf5", b"\xff", b"\xed\xb0\x80"]))
    message = parse_message(frame[:at] + bad + frame[at:])
    assert not isinstance(message, Request | Notification | Response)


# ------------------------------------------- the scan that reads a too-deep frame's id

_json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(alphabet=st.characters(exclude_categories=["Cs"]) | st.sampled_from('"\\[]{},:')),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=4), inner, max_size=4),
    max_leaves=20,
)
_members = st.dictionaries(
    st.sampled_from(["jsonrpc", "id", "method", "params", "result", "error", "x", "i\u0064"])
    | st.text(max_size=6),
    _json_values,
    max_size=7,
)


def _dump(members: dict[str, Any], ascii_only: bool, spaced: bool) -> bytes:
    separators = (" , ", " : ") if spaced else (",", ":")
    return json.dumps(members, ensure_ascii=ascii_only, separators=separators).encode()


@given(_members, st.booleans(), st.booleans())
def test_the_depth_scan_reads_the_id_and_method_msgspec_reads(
    members: dict[str, Any], ascii_only: bool, spaced: bool
) -> None:
    frame = _dump(members, ascii_only, spaced)
    head = _scan_head(frame)  # never raises
    try:
        expected = _envelope_decoder.decode(frame)
    except msgspec.DecodeError:  # a wrong shape: classified before any scan
        return
    assert head is not None
    assert (head.id, head.method) == (expected.id, expected.method)
    assert (bool(head.result), bool(head.error)) == (bool(expected.result), bool(expected.error))


@given(_members, st.sampled_from(["params", "result", "x"]), st.booleans())
def test_a_member_nested_too_deep_leaves_the_id_and_method_readable(
    members: dict[str, Any], deep_key: str, spaced: bool
) -> None:
    members.pop(deep_key, None)
    try:
        shallow = _envelope_decoder.decode(_dump({**members, deep_key: 0}, True, spaced))
    except msgspec.DecodeError:
        assume(False)
    members[deep_key] = "PLACEHOLDER"
    level, end = b'[{"k":"]}\\"","v":', b"}]"
    assert json.loads(level * 3 + b"0" + end * 3)  # valid JSON ...
    deep = level * 1500 + b"0" + end * 1500  # ... too deep for msgspec
    frame = _dump(members, True, spaced).replace(b'"PLACEHOLDER"', deep)
    message = parse_message(frame)
    if shallow.method is not UNSET or shallow.result:
        assert isinstance(message, InvalidMessage | ErrorResponse)
        assert message.id == (None if shallow.id is UNSET else shallow.id)
    if isinstance(message, InvalidMessage) and shallow.method is not UNSET:
        assert message.method == shallow.method and message.code == ErrorCode.PARSE_ERROR


def test_a_frame_that_does_not_scan_keeps_the_null_id() -> None:
    for broken in (
        b'{"id":1,"method":"m","params":' + b"[" * 5000 + b"]" * 4999 + b"}",  # one short
        b'{"id":1,"method":"m","params":' + b"[" * 5000 + b"]" * 5000 + b"} trailing",
        b'{"id":1 "method":"m","params":' + b"[" * 5000 + b"]" * 5000 + b"}",
        b'[{"id":1,"method":"m","params":' + b"[" * 5000 + b"]" * 5000 + b"}]",
    ):
        message = parse_message(broken)
        assert isinstance(message, InvalidMessage) and message.id is None


@pytest.mark.parametrize(
    "item",
    [b"[]", b"{}", b"[0]", b'{"a":[]}', b"1.5", b"257", b'"ab"', '"\u0100"'.encode(),
     '"\U0001f600"'.encode(), b'"\\u0100"', b"true", b'{"a":0,"b":0}'],
)
def test_json_cost_bounds_what_the_json_takes_decoded(item: bytes) -> None:
    raw = b"[" + b",".join([item] * 5000) + b"]"
    mixed = b'["' + b"a" * 50_000 + item.strip(b'"') + b'"]' if item.startswith(b'"') else raw
    for sample in (raw, mixed):
        tracemalloc.start()
        try:
            value = msgspec.json.decode(sample)
            taken = tracemalloc.get_traced_memory()[0]
        finally:
            tracemalloc.stop()
        assert value is not None
        assert taken <= json_cost(sample) <= 4 * taken + 100 * len(sample)


def test_a_too_deep_frame_keeps_an_escaped_surrogate_pair_in_its_method() -> None:
    deep = b"[" * 5000 + b"]" * 5000
    frame = b'{"jsonrpc":"2.0","id":3,"method":"\\ud800\\udc00","params":' + deep + b"}"
    message = parse_message(frame)
    assert isinstance(message, InvalidMessage)
    assert (message.id, message.method) == (3, "\U00010000")
