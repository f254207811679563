"""JSON-RPC 2.0 messages: classification by shape and encoding (sans-I/O, no trio)."""

from __future__ import annotations

import enum
import re
import sys
from typing import Any, Final

import msgspec
from msgspec import UNSET, UnsetType

from ._errors import LocalProtocolError

RequestId = int | str
"""A JSON-RPC request id. ``0`` is a real id: every official ACP library starts there."""


class ErrorCode(enum.IntEnum):
    """The JSON-RPC error codes permclient sends and understands."""

    PARSE_ERROR = -32700
    INVALID_REQUEST = -32600
    METHOD_NOT_FOUND = -32601
    INVALID_PARAMS = -32602
    INTERNAL_ERROR = -32603
    REQUEST_CANCELLED = -32800
    RESOURCE_NOT_FOUND = -32002
    """ACP's code for a resource that does not exist (a file, a session)."""


class ErrorObject(msgspec.Struct, omit_defaults=True):
    """The ``error`` member of an error response."""

    code: int
    message: str
    data: Any = None


# One struct for every inbound message; ``params``/``result``/``error`` stay raw so
# they are decoded once, straight into the type their method or caller expects.
class _Envelope(msgspec.Struct):
    jsonrpc: str | UnsetType = UNSET
    id: RequestId | UnsetType | None = UNSET
    method: str | UnsetType = UNSET
    params: msgspec.Raw = msgspec.Raw()
    result: msgspec.Raw = msgspec.Raw()
    error: msgspec.Raw = msgspec.Raw()


class Request(msgspec.Struct, gc=False):
    """An inbound request: it must get exactly one response."""

    id: RequestId | None
    method: str
    params: msgspec.Raw
    decoded: Any = None
    """The params already decoded with the envelope (then ``params`` is empty)."""


class Notification(msgspec.Struct, gc=False):
    """An inbound notification: it gets no response."""

    method: str
    params: msgspec.Raw


class Response(msgspec.Struct, gc=False):
    """A successful response to one of our requests."""

    id: RequestId
    result: msgspec.Raw


class ErrorResponse(msgspec.Struct, gc=False):
    """An error response; ``id`` is ``None`` when the peer could not tell which request failed."""

    id: RequestId | None
    error: ErrorObject


class InvalidMessage(msgspec.Struct, gc=False):
    """A frame that is not a valid JSON-RPC message.

    ``reply`` is true when JSON-RPC asks for an error response (``code``, with
    ``id`` when it could be recovered): never for something that looked like a
    response, so two peers cannot bounce errors at each other forever.
    """

    code: ErrorCode
    reason: str
    id: RequestId | None = None
    reply: bool = True
    method: str | None = None
    """The method a request named, when it could be read (a permission request that is
    not valid UTF-8 JSON is still one: it is answered ``cancelled``)."""


Message = Request | Notification | Response | ErrorResponse | InvalidMessage

DECODE_ERRORS: Final = (msgspec.DecodeError, RecursionError)
"""What decoding a peer's bytes can raise: msgspec raises RecursionError, not a
DecodeError, for JSON nested about a thousand levels deep."""

# An escape of a UTF-16 surrogate, to repair (never to read) a frame that does not decode.
_SURROGATE_ESCAPE: Final = re.compile(rb"\\u[dD][89a-fA-F][0-9a-fA-F]{2}")
_envelope_decoder: Final = msgspec.json.Decoder(_Envelope)
_id_decoder: Final = msgspec.json.Decoder(RequestId | None)
_str_decoder: Final = msgspec.json.Decoder(str)
_any_decoder: Final = msgspec.json.Decoder()
_error_decoder: Final = msgspec.json.Decoder(ErrorObject)
_encoder: Final = msgspec.json.Encoder()


# What one JSON value (or key) can cost once decoded, beyond its own bytes: every
# value and key follows one of `[ { , :`. Measured (CPython 3.11, msgspec, with
# tracemalloc) per value, with the pointer that holds it: a short non-ASCII str 80-88,
# `{"a":[]}` 60 a structural byte, a one-item list 72, an empty dict 72, a float 32.
VALUE_COST: Final = 88
_ASTRAL: Final = re.compile(rb"[\xf0-\xf4]|\\u[dD][89abAB]")
# Every byte but `[ { , :`: deleting them counts those in one pass (4x faster than count()).
_NOT_STRUCTURE: Final = bytes(sorted(set(range(256)) - set(b"[{,:")))


def json_cost(raw: bytes) -> int:
    """An upper bound on the memory that JSON ``raw`` takes once decoded.

    ``len(raw) * width + VALUE_COST * (count of [ { , :)``: the text of strings costs
    its bytes, twice for text beyond ASCII (a str is 2 bytes a character as soon as
    one is beyond Latin-1) and four times with a character beyond the BMP; every
    value or key (and the top-level one) costs VALUE_COST more at most. Overcounts
    text full of those characters (code: about 2x); computed at C speed.
    """
    if not raw:
        return 0
    width = 1
    if not raw.isascii() or has_unicode_escape(raw):
        width = 4 if _ASTRAL.search(raw) else 2
    values = 1 + len(raw.translate(None, _NOT_STRUCTURE))
    return len(raw) * width + VALUE_COST * values


def has_unicode_escape(raw: bytes) -> bool:
    """Whether JSON ``raw`` may hold a backslash-u escape: text that decodes wider
    than its ASCII bytes (a str is 2 bytes a character past Latin-1, 4 past the BMP)."""
    return 0x5C in raw and b"\\u" in raw  # (0x5C, a backslash: a memchr first)


def str_cost(text: str) -> int:
    """The memory a str takes: its own size, and room for the UTF-8 copy that
    CPython keeps of non-ASCII text once it is encoded (up to 4 bytes a character)."""
    return sys.getsizeof(text) + (0 if text.isascii() else 4 * len(text))


def parse_message(frame: bytes) -> Message:
    """Classify one frame by shape; never raises.

    Returns a :class:`Request`, :class:`Notification`, :class:`Response`,
    :class:`ErrorResponse` or, for anything else, an :class:`InvalidMessage`
    (invalid JSON: ``PARSE_ERROR``; a non-object, a batch array or a malformed
    object: ``INVALID_REQUEST``). A message that is not UTF-8 JSON anywhere, even in
    a part left undecoded here, is never a ``Request``, ``Notification`` or
    ``Response``: a response becomes an ``ErrorResponse`` (``PARSE_ERROR``) for its
    id, anything else an ``InvalidMessage`` with the id and method when readable.
    """
    try:
        env = _envelope_decoder.decode(frame)
    except msgspec.ValidationError as exc:
        return _invalid_shape(frame, str(exc))
    except DECODE_ERRORS as exc:
        return _unreadable(frame, exc)
    if not frame.isascii():  # (most frames are: then there is nothing more to check)
        problem = _utf8_problem(frame)
        if problem is not None:
            return _not_text(env, f"message is not valid UTF-8 JSON: {problem}")
    if env.jsonrpc != "2.0":
        return InvalidMessage(
            ErrorCode.INVALID_REQUEST,
            'missing or wrong "jsonrpc" member (must be "2.0")',
            None if env.id is UNSET else env.id,
            reply=env.method is not UNSET,
        )
    if env.method is not UNSET:
        if env.result or env.error:
            return InvalidMessage(
                ErrorCode.INVALID_REQUEST,
                "a message cannot carry both a method and a result or error",
                None if env.id is UNSET else env.id,
            )
        if env.id is UNSET:
            return Notification(env.method, env.params)
        return Request(env.id, env.method, env.params)
    if env.id is UNSET:
        return InvalidMessage(ErrorCode.INVALID_REQUEST, "message has no method and no id")
    if env.result and not env.error:
        if env.id is None:
            return InvalidMessage(
                ErrorCode.INVALID_REQUEST, "a result cannot answer id null", reply=False
            )
        return Response(env.id, env.result)
    if env.error and not env.result:
        try:
            error = _error_decoder.decode(env.error)
        except DECODE_ERRORS as exc:
            error = ErrorObject(ErrorCode.INTERNAL_ERROR, f"malformed error object: {exc}")
        return ErrorResponse(env.id, error)
    return InvalidMessage(
        ErrorCode.INVALID_REQUEST,
        "a response must carry exactly one of result and error",
        env.id,
        reply=False,
    )


def _utf8_problem(frame: bytes) -> str | None:
    """Why ``frame`` is not UTF-8 throughout, or ``None`` if it is.

    The envelope decoder checks the UTF-8 of what it decodes only: ``params``,
    ``result`` and ``error`` (and, further down, ``rawInput`` and unknown keys) are
    skipped unread. (Their escapes are checked: a lone surrogate fails the decode.)
    """
    try:
        frame.decode()
    except UnicodeDecodeError as exc:
        return f"invalid UTF-8 at byte {exc.start}"
    return None


def _unreadable(frame: bytes, error: Exception) -> Message:
    """A frame that does not decode: its id and method, when a repaired copy shows them.

    Invalid UTF-8 and lone surrogate escapes are the errors a peer makes inside a
    string, which leave the message around it readable; the repaired copy only
    addresses the error response (a permission request still gets ``cancelled``).
    A frame nested deeper than msgspec goes is read by a scan instead.
    """
    reason = f"invalid JSON: {error}"
    too_deep = isinstance(error, RecursionError)
    repaired = frame
    if not frame.isascii():
        repaired = frame.decode(errors="replace").encode()
    if b"\\u" in repaired:
        repaired = _SURROGATE_ESCAPE.sub(rb"\\ufffd", repaired)
    if repaired != frame:
        try:
            return _not_text(_envelope_decoder.decode(repaired), reason)
        except msgspec.DecodeError:
            pass
        except RecursionError:
            too_deep = True
    if too_deep:
        return _too_deep(frame, repaired, reason)
    return InvalidMessage(ErrorCode.PARSE_ERROR, reason)


def _too_deep(frame: bytes, repaired: bytes, reason: str) -> Message:
    """A frame nested deeper than msgspec goes: its id and method, when a scan finds them
    (in the frame as it is, else in its repaired copy: the repair also replaces the
    escapes of valid surrogate pairs)."""
    head = _scan_head(frame)
    if head is None and repaired != frame:
        head = _scan_head(repaired)
    if head is None:
        return InvalidMessage(ErrorCode.PARSE_ERROR, reason)
    return _not_text(head, reason)


# Budget of tokens (a bracket or a string) for one scan: a frame both deep and
# huge keeps its reply to id null rather than the reader busy for seconds.
_SCAN_TOKENS: Final = 200_000
_WHITESPACE: Final = re.compile(rb"[ \t\r\n]*")


def _skip_space(frame: bytes, pos: int) -> int:
    return _WHITESPACE.match(frame, pos).end()  # type: ignore[union-attr]  # (matches "")


_STRING: Final = re.compile(rb'"(?:[^"\\]|\\.)*+"', re.DOTALL)
_TOKEN: Final = re.compile(rb'"(?:[^"\\]|\\.)*+"|[\[\]{}]', re.DOTALL)
_SCALAR: Final = re.compile(rb"[^,}\]\s]+")
_OPENERS: Final = frozenset(b"[{")


def _scan_head(frame: bytes) -> _Envelope | None:
    """The top-level ``id``, ``method``, ``result`` and ``error`` of a JSON object.

    For a frame msgspec refuses as too deep: nested values are skipped by counting
    brackets outside strings (unchecked beyond that), the members read are decoded
    by msgspec. ``None`` unless the frame is one object whose members all scan, as
    when the ``id`` is no id, or the scan takes more than _SCAN_TOKENS tokens.
    """
    spans: dict[str, tuple[int, int]] = {}  # the last of a repeated key wins, as in msgspec
    budget = _SCAN_TOKENS
    pos = _skip_space(frame, 0)
    if frame[pos : pos + 1] != b"{":
        return None
    pos = _skip_space(frame, pos + 1)
    if frame[pos : pos + 1] == b"}":
        pos += 1
    else:
        while True:
            key = _STRING.match(frame, pos)
            if key is None:
                return None
            pos = _skip_space(frame, key.end())
            if frame[pos : pos + 1] != b":":
                return None
            start = _skip_space(frame, pos + 1)
            end, budget = _skip_value(frame, start, budget)
            if end < 0:
                return None
            try:
                spans[_str_decoder.decode(key.group())] = (start, end)
            except msgspec.DecodeError:
                return None
            pos = _skip_space(frame, end)
            follower = frame[pos : pos + 1]
            pos += 1
            if follower == b"}":
                break
            if follower != b",":
                return None
            pos = _skip_space(frame, pos)
    if _skip_space(frame, pos) != len(frame):
        return None
    head = _Envelope()
    try:
        if "id" in spans:
            head.id = _id_decoder.decode(frame[slice(*spans["id"])])
        if "method" in spans:
            head.method = _str_decoder.decode(frame[slice(*spans["method"])])
    except DECODE_ERRORS:
        return None
    if "result" in spans:
        head.result = msgspec.Raw(b"0")  # there is one: what it holds is not read
    if "error" in spans:
        head.error = msgspec.Raw(b"0")
    return head


def _skip_value(frame: bytes, pos: int, budget: int) -> tuple[int, int]:
    """Where the JSON value at ``pos`` ends (-1: it does not scan), and the budget left."""
    first = frame[pos : pos + 1]
    if first == b'"':
        string = _STRING.match(frame, pos)
        return (-1 if string is None else string.end()), budget
    if first and first[0] in _OPENERS:
        depth = 0
        for token in _TOKEN.finditer(frame, pos):
            budget -= 1
            if budget < 0:
                return -1, budget
            char = frame[token.start()]
            if char in _OPENERS:
                depth += 1
            elif char != 0x22:  # a closing bracket (0x22 is a quote: a string, skipped)
                depth -= 1
                if not depth:
                    return token.end(), budget
        return -1, budget
    scalar = _SCALAR.match(frame, pos)
    return (-1 if scalar is None else scalar.end()), budget


def _not_text(env: _Envelope, reason: str) -> Message:
    """What a readable envelope around text that is not UTF-8 JSON stands for.

    A request gets an error response (a permission request: ``cancelled``) naming its
    id; a response fails the request it answers; a notification is dropped.
    """
    msg_id = None if env.id is UNSET else env.id
    if env.method is not UNSET:
        return InvalidMessage(
            ErrorCode.PARSE_ERROR, reason, msg_id, reply=env.id is not UNSET, method=env.method
        )
    if msg_id is not None and (env.result or env.error):
        return ErrorResponse(msg_id, ErrorObject(ErrorCode.PARSE_ERROR, reason))
    return InvalidMessage(ErrorCode.PARSE_ERROR, reason, msg_id, reply=False)


def _invalid_shape(frame: bytes, reason: str) -> InvalidMessage:
    # Valid JSON but the wrong shape: recover the id, when there is one, so the
    # error response can name the request it answers.
    try:
        value = _any_decoder.decode(frame)
    except DECODE_ERRORS as exc:  # the shape failed first, but the JSON is bad too
        return InvalidMessage(ErrorCode.PARSE_ERROR, f"invalid JSON: {exc}")
    if isinstance(value, list):
        return InvalidMessage(ErrorCode.INVALID_REQUEST, "batch requests are not supported")
    if not isinstance(value, dict):
        return InvalidMessage(
            ErrorCode.INVALID_REQUEST, f"a message must be an object, got {type(value).__name__}"
        )
    raw_id = value.get("id")
    msg_id = raw_id if isinstance(raw_id, int | str) and not isinstance(raw_id, bool) else None
    return InvalidMessage(
        ErrorCode.INVALID_REQUEST, f"malformed message: {reason}", msg_id, reply="method" in value
    )


class _OutRequest(msgspec.Struct, kw_only=True):
    jsonrpc: str = "2.0"
    id: RequestId
    method: str
    params: Any


class _OutNotification(msgspec.Struct, kw_only=True):
    jsonrpc: str = "2.0"
    method: str
    params: Any


class _OutResult(msgspec.Struct, kw_only=True):
    jsonrpc: str = "2.0"
    id: RequestId | None
    result: Any


class _OutError(msgspec.Struct, kw_only=True):
    jsonrpc: str = "2.0"
    id: RequestId | None
    error: ErrorObject


def _encode(message: msgspec.Struct) -> bytes:
    try:
        return _encoder.encode(message)
    except (TypeError, ValueError, OverflowError, RecursionError) as exc:
        raise LocalProtocolError(f"cannot encode message as JSON: {exc}") from exc


def encode_request(request_id: RequestId, method: str, params: Any) -> bytes:
    """Encode a request; raises :class:`LocalProtocolError` if ``params`` is not JSON-encodable."""
    return _encode(
        _OutRequest(id=request_id, method=method, params={} if params is None else params)
    )


def encode_notification(method: str, params: Any) -> bytes:
    """Encode a notification; raises :class:`LocalProtocolError` if ``params`` is not encodable."""
    return _encode(_OutNotification(method=method, params={} if params is None else params))


def encode_result(request_id: RequestId | None, result: Any) -> bytes:
    """Encode a success response; raises :class:`LocalProtocolError` if ``result`` can't be."""
    return _encode(_OutResult(id=request_id, result=result))


def encode_error(request_id: RequestId | None, code: int, message: str, data: Any = None) -> bytes:
    """Encode an error response; raises :class:`LocalProtocolError` if ``data`` is not encodable."""
    return _encode(_OutError(id=request_id, error=ErrorObject(code, message, data)))
