"""Wire shapes of the permission exchange: golden messages, the ACP schema, fail-closed decoding.

Golden messages live in ``fixtures/golden`` (full JSON-RPC messages; the part under test
is ``params`` or ``result``); the ACP v1 JSON Schema (Apache-2.0) in ``fixtures/acp-schema``;
recorded real traffic in ``fixtures/wire-samples``.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from typing import Any, get_args

import msgspec
import pytest

from permclient._wire import (
    AudioContent,
    Cancelled,
    CancelRequestParams,
    Content,
    Diff,
    EmbeddedResource,
    ImageContent,
    PermissionOption,
    PermissionOptionKind,
    PermissionRequest,
    PermissionResponse,
    PlanEntryPriority,
    PlanEntryStatus,
    ResourceLink,
    Selected,
    Terminal,
    TextContent,
    ToolCallLocation,
    ToolCallStatus,
    ToolCallUpdate,
    ToolKind,
    cancel_params_decoder,
    decision_decoder,
    encoder,
    permission_request_decoder,
    permission_response_decoder,
)
from tests.support import paths
from tests.support.acp_schema import assert_valid, is_valid, schema_defs

FIXTURES = paths.FIXTURES
GOLDEN = FIXTURES / "golden"
WIRE_SAMPLES = FIXTURES / "wire-samples"
SAMPLE_FILES = ("acp-ts-sdk-agent.jsonl", "vscode-jsonrpc-runtime.jsonl")


# ------------------------------------------------------------------------ helpers


def strip_nulls(value: Any) -> Any:
    """Drop ``null``-valued keys recursively: what ``omit_defaults`` leaves out."""
    if isinstance(value, dict):
        return {k: strip_nulls(v) for k, v in value.items() if v is not None}
    if isinstance(value, list):
        return [strip_nulls(v) for v in value]
    return value


def to_json(value: Any) -> Any:
    """Encode a Struct with the module encoder and parse it back to plain JSON data."""
    return json.loads(encoder.encode(value))


def load_golden(name: str) -> dict[str, Any]:
    message: dict[str, Any] = json.loads((GOLDEN / name).read_text(encoding="utf-8"))
    return message


def dumps(value: Any) -> bytes:
    return json.dumps(value).encode()


# ---------------------------------------------------------------- golden table

# file -> (which part of the message, ACP $defs name or None, decoder)
Decode = Callable[[bytes], Any]
GOLDEN_TABLE: dict[str, tuple[str, str | None, Decode]] = {
    # real: acp-ts-sdk-agent.jsonl, id 0
    "request_permission_execute.json": (
        "params",
        "RequestPermissionRequest",
        permission_request_decoder.decode,
    ),
    # real: vscode-jsonrpc-runtime.jsonl, id 0
    "request_permission_bridge.json": (
        "params",
        "RequestPermissionRequest",
        permission_request_decoder.decode,
    ),
    # DESIGN.md example: diff of a new file (oldText null), empty _meta
    "request_permission_design_diff_new_file.json": (
        "params",
        "RequestPermissionRequest",
        permission_request_decoder.decode,
    ),
    "request_permission_diff_edit.json": (
        "params",
        "RequestPermissionRequest",
        permission_request_decoder.decode,
    ),
    "request_permission_terminal.json": (
        "params",
        "RequestPermissionRequest",
        permission_request_decoder.decode,
    ),
    "request_permission_content_text.json": (
        "params",
        "RequestPermissionRequest",
        permission_request_decoder.decode,
    ),
    "request_permission_locations_meta.json": (
        "params",
        "RequestPermissionRequest",
        permission_request_decoder.decode,
    ),
    "request_permission_content_blocks.json": (
        "params",
        "RequestPermissionRequest",
        permission_request_decoder.decode,
    ),
    # real: acp-ts-sdk-agent.jsonl, ids 0 and 3
    "response_selected.json": (
        "result",
        "RequestPermissionResponse",
        permission_response_decoder.decode,
    ),
    "response_cancelled.json": (
        "result",
        "RequestPermissionResponse",
        permission_response_decoder.decode,
    ),
    # real: acp-ts-sdk-agent.jsonl (ACP) and vscode-jsonrpc-runtime.jsonl (bridge)
    "cancel_request_acp.json": (
        "params",
        "CancelRequestNotification",
        cancel_params_decoder.decode,
    ),
    # the bridge's {"id": …} form is not an ACP shape: no schema def to check against
    "cancel_request_bridge.json": ("params", None, cancel_params_decoder.decode),
}


def test_every_golden_file_is_in_the_table() -> None:
    assert sorted(p.name for p in GOLDEN.glob("*.json")) == sorted(GOLDEN_TABLE)


@pytest.mark.parametrize("name", sorted(GOLDEN_TABLE))
def test_golden_validates_decodes_and_round_trips(name: str) -> None:
    part, def_name, decode = GOLDEN_TABLE[name]
    message = load_golden(name)
    assert message["jsonrpc"] == "2.0"
    original = message[part]
    if def_name is not None:
        assert_valid(def_name, original)

    decoded = decode(dumps(original))
    reencoded = to_json(decoded)

    if def_name is not None:
        assert_valid(def_name, reencoded)
    assert reencoded == strip_nulls(original)
    # decoding the re-encoded form is a fixed point
    assert decode(encoder.encode(decoded)) == decoded


def test_golden_method_names() -> None:
    for name, (part, _, _) in GOLDEN_TABLE.items():
        message = load_golden(name)
        if name.startswith("request_permission_"):
            assert message["method"] == "session/request_permission"
            assert isinstance(message["id"], int)
        elif name.startswith("response_"):
            assert part == "result"
            assert "method" not in message
    assert load_golden("cancel_request_acp.json")["method"] == "$/cancel_request"
    assert load_golden("cancel_request_bridge.json")["method"] == "$/cancelRequest"


# --------------------------------------------------------- decoded golden content


def _request(name: str) -> PermissionRequest:
    return permission_request_decoder.decode(dumps(load_golden(name)["params"]))


def test_execute_request_decodes_fields() -> None:
    req = _request("request_permission_execute.json")
    assert req.session_id == "ts-16326-1-7bdf3040"
    tc = req.tool_call
    assert tc == ToolCallUpdate(
        tool_call_id="call-1",
        title="create file allowed.txt",
        kind="execute",
        status="pending",
        raw_input_json=tc.raw_input_json,
    )
    assert tc.raw_input == {"command": "create file allowed.txt"}
    assert tc.raw_output is None
    assert [o.kind for o in req.options] == ["allow_once", "allow_always", "reject_once"]
    assert req.option_ids == frozenset({"allow", "allow-always", "deny"})
    assert req.option("deny") == PermissionOption("deny", "Deny", "reject_once")
    assert req.option("nope") is None
    assert req.option("") is None
    assert req.meta is None


def test_diff_new_file_old_text_null() -> None:
    req = _request("request_permission_design_diff_new_file.json")
    assert req.tool_call.content == [Diff(path="/w/a.txt", old_text=None, new_text="hi\n")]
    assert req.meta == {}
    # oldText missing and oldText null both mean "new file"
    missing = permission_request_decoder.decode(
        dumps(
            _with(
                load_golden("request_permission_design_diff_new_file.json")["params"],
                lambda p: p["toolCall"]["content"][0].pop("oldText"),
            )
        )
    )
    assert missing == req
    # encoding omits the null, which the schema accepts
    diff = to_json(Diff(path="/w/a.txt", new_text="hi\n"))
    assert diff == {"type": "diff", "path": "/w/a.txt", "newText": "hi\n"}
    assert_valid("ToolCallContent", diff)


def test_diff_edit_and_locations() -> None:
    req = _request("request_permission_diff_edit.json")
    (diff,) = req.tool_call.content or []
    assert isinstance(diff, Diff)
    assert diff.old_text == "import sys\n\nprint('hi')\n"
    assert diff.new_text == "import sys\n\nprint('hello')\n"
    assert req.tool_call.locations == [ToolCallLocation("/home/user/project/src/app.py", 3)]
    assert req.tool_call.kind == "edit"
    assert req.option("deny-always") == PermissionOption(
        "deny-always", "Deny always", "reject_always"
    )


def test_terminal_block() -> None:
    req = _request("request_permission_terminal.json")
    assert req.tool_call.content == [Terminal(terminal_id="term-1")]
    assert to_json(Terminal("t")) == {"type": "terminal", "terminalId": "t"}


def test_text_content_block() -> None:
    req = _request("request_permission_content_text.json")
    assert req.tool_call.content == [
        Content(TextContent(text="Remove the `build/` directory (42 files)."))
    ]


def test_all_content_block_variants() -> None:
    req = _request("request_permission_content_blocks.json")
    blocks = [c.content for c in req.tool_call.content or [] if isinstance(c, Content)]
    assert [type(b) for b in blocks] == [
        TextContent,
        ImageContent,
        AudioContent,
        ResourceLink,
        EmbeddedResource,
        EmbeddedResource,
    ]
    text, image, audio, link, res_text, res_blob = blocks
    assert isinstance(text, TextContent)
    assert text.annotations is not None
    assert text.annotations.audience == ["user"]
    assert isinstance(image, ImageContent)
    assert image.mime_type == "image/png"
    assert isinstance(audio, AudioContent)
    assert audio.mime_type == "audio/wav"
    assert isinstance(link, ResourceLink)
    assert link.size == 1024
    assert isinstance(res_text, EmbeddedResource)
    assert res_text.resource["text"] == "# Assets\n"
    assert isinstance(res_blob, EmbeddedResource)
    assert res_blob.resource["blob"] == "iVBORw0KGgo="


def test_meta_is_kept_at_every_level() -> None:
    params = load_golden("request_permission_locations_meta.json")["params"]
    req = permission_request_decoder.decode(dumps(params))
    assert req.meta == {"traceId": "4bf92f3577b34da6a3ce929d0e0e4736", "turn": 2}
    assert req.tool_call.meta == {"toolName": "read_many"}
    assert [o.meta for o in req.options] == [{"shortcut": "y"}, {"shortcut": "n"}]
    assert req.tool_call.locations == [
        ToolCallLocation("/home/user/project/pyproject.toml", line=0),
        ToolCallLocation("/home/user/project/setup.cfg", meta={"exists": False}),
    ]
    out = to_json(req)
    assert out["_meta"] == params["_meta"]
    assert out["toolCall"]["_meta"] == {"toolName": "read_many"}
    assert out["toolCall"]["locations"][0] == {
        "path": "/home/user/project/pyproject.toml",
        "line": 0,
    }
    assert "meta" not in json.dumps(out).replace("_meta", "")


def test_meta_null_decodes_to_none_and_is_omitted() -> None:
    params = _with(
        load_golden("request_permission_execute.json")["params"],
        lambda p: p.__setitem__("_meta", None),
    )
    req = permission_request_decoder.decode(dumps(params))
    assert req.meta is None
    assert "_meta" not in to_json(req)


# -------------------------------------------------------------- unknown fields


def test_unknown_fields_are_ignored_at_every_level() -> None:
    params = load_golden("request_permission_design_diff_new_file.json")["params"]
    plain = permission_request_decoder.decode(dumps(params))

    noisy = copy.deepcopy(params)
    noisy["futureField"] = {"x": 1}
    noisy["toolCall"]["futureField"] = [1, 2]
    noisy["toolCall"]["content"][0]["futureField"] = None
    noisy["toolCall"]["content"].append(
        {"type": "content", "content": {"type": "text", "text": "t", "futureField": 1}, "x": 2}
    )
    noisy["toolCall"]["locations"] = [{"path": "/w/a.txt", "column": 4}]
    noisy["options"][0]["futureField"] = "y"
    req = permission_request_decoder.decode(dumps(noisy))

    assert req.session_id == plain.session_id
    assert req.options == plain.options
    assert req.tool_call.content is not None
    assert req.tool_call.content[0] == Diff(path="/w/a.txt", new_text="hi\n")
    assert req.tool_call.content[1] == Content(TextContent("t"))
    assert req.tool_call.locations == [ToolCallLocation("/w/a.txt")]
    assert "futureField" not in encoder.encode(req).decode()

    outcome = {"outcome": {"outcome": "selected", "optionId": "allow", "why": "user"}, "x": 1}
    assert permission_response_decoder.decode(dumps(outcome)).outcome == Selected("allow")
    assert cancel_params_decoder.decode(b'{"requestId": 3, "reason": "timeout"}').target == 3


# ------------------------------------------------------- fail closed (invariant 2)

Mutation = Callable[[dict[str, Any]], Any]


def _with(params: dict[str, Any], mutate: Mutation) -> dict[str, Any]:
    params = copy.deepcopy(params)
    mutate(params)
    return params


def _base_params() -> dict[str, Any]:
    params: dict[str, Any] = load_golden("request_permission_execute.json")["params"]
    return params


def _set(key: str, value: Any) -> Mutation:
    return lambda p: p.__setitem__(key, value)


def _set_tool(key: str, value: Any) -> Mutation:
    return lambda p: p["toolCall"].__setitem__(key, value)


def _set_option(index: int, key: str, value: Any) -> Mutation:
    return lambda p: p["options"][index].__setitem__(key, value)


def _del_option_key(index: int, key: str) -> Mutation:
    return lambda p: p["options"][index].pop(key)


FAIL_CLOSED: dict[str, Mutation] = {
    "sessionId missing": lambda p: p.pop("sessionId"),
    "sessionId empty": _set("sessionId", ""),
    "sessionId null": _set("sessionId", None),
    "sessionId number": _set("sessionId", 1),
    "toolCall missing": lambda p: p.pop("toolCall"),
    "toolCall null": _set("toolCall", None),
    "toolCall string": _set("toolCall", "call-1"),
    "toolCallId missing": lambda p: p["toolCall"].pop("toolCallId"),
    "toolCallId empty": _set_tool("toolCallId", ""),
    "toolCallId null": _set_tool("toolCallId", None),
    "options missing": lambda p: p.pop("options"),
    "options null": _set("options", None),
    "options empty": _set("options", []),
    "options object": _set("options", {"optionId": "allow", "name": "Allow", "kind": "allow_once"}),
    "options only null item": _set("options", [None]),
    "options with a null item": lambda p: p["options"].append(None),
    "options duplicate ids": lambda p: p["options"].append(
        {"optionId": "allow", "name": "Also allow", "kind": "reject_once"}
    ),
    "option id empty": _set_option(0, "optionId", ""),
    # (two options: the common case, checked on a path of its own)
    "second of two option ids empty": _set(
        "options",
        [
            {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
            {"optionId": "", "name": "Deny", "kind": "reject_once"},
        ],
    ),
    "two options with one id": _set(
        "options",
        [
            {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
            {"optionId": "allow", "name": "Deny", "kind": "reject_once"},
        ],
    ),
    "option id missing": _del_option_key(0, "optionId"),
    "option id null": _set_option(0, "optionId", None),
    "option name missing": _del_option_key(0, "name"),
    "option kind missing": _del_option_key(0, "kind"),
    "option kind unknown": _set_option(0, "kind", "allow_forever"),
    "option kind null": _set_option(0, "kind", None),
    "tool kind unknown": _set_tool("kind", "launch_missiles"),
    "tool status unknown": _set_tool("status", "approved"),
    "content type unknown": _set_tool("content", [{"type": "video", "url": "x"}]),
    "content null item": _set_tool("content", [None]),
    "diff without newText": _set_tool("content", [{"type": "diff", "path": "/w/a"}]),
    "negative line": _set_tool("locations", [{"path": "/w/a", "line": -1}]),
    "embedded resource without text or blob": _set_tool(
        "content",
        [{"type": "content", "content": {"type": "resource", "resource": {"uri": "file:///a"}}}],
    ),
}


@pytest.mark.parametrize("case", sorted(FAIL_CLOSED))
def test_fail_closed_cases_raise_validation_error(case: str) -> None:
    params = _with(_base_params(), FAIL_CLOSED[case])
    with pytest.raises(msgspec.ValidationError):
        permission_request_decoder.decode(dumps(params))
    # the same input through msgspec.convert (e.g. params already parsed to a dict)
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(params, PermissionRequest)


SCHEMA_INVALID_TOO = {
    case
    for case in FAIL_CLOSED
    # the schema itself allows these; refusing them is our fail-closed policy
    if case
    not in {
        "sessionId empty",
        "toolCallId empty",
        "options empty",
        "option id empty",
        "second of two option ids empty",
        "options duplicate ids",
        "two options with one id",
    }
}


@pytest.mark.parametrize("case", sorted(SCHEMA_INVALID_TOO))
def test_fail_closed_cases_are_schema_invalid(case: str) -> None:
    params = _with(_base_params(), FAIL_CLOSED[case])
    assert not is_valid("RequestPermissionRequest", params)


@pytest.mark.parametrize("params", [b"null", b"[]", b'"s-1"', b"{}", b"1"])
def test_non_object_params_fail(params: bytes) -> None:
    with pytest.raises(msgspec.ValidationError):
        permission_request_decoder.decode(params)


def test_direct_construction_fails_closed_with_value_error() -> None:
    tool = ToolCallUpdate(tool_call_id="call-1")
    allow = PermissionOption("allow", "Allow", "allow_once")
    assert PermissionRequest("s-1", tool, [allow]).option_ids == {"allow"}
    with pytest.raises(ValueError, match="sessionId"):
        PermissionRequest("", tool, [allow])
    with pytest.raises(ValueError, match="toolCallId"):
        PermissionRequest("s-1", ToolCallUpdate(tool_call_id=""), [allow])
    with pytest.raises(ValueError, match="options"):
        PermissionRequest("s-1", tool, [])
    with pytest.raises(ValueError, match="duplicate"):
        PermissionRequest("s-1", tool, [allow, PermissionOption("allow", "x", "reject_once")])
    with pytest.raises(ValueError, match="optionId"):
        PermissionRequest("s-1", tool, [PermissionOption("", "x", "allow_once")])


def test_minimal_valid_request() -> None:
    raw = (
        b'{"sessionId":"s","toolCall":{"toolCallId":"c"},'
        b'"options":[{"optionId":"a","name":"A","kind":"allow_once"}]}'
    )
    req = permission_request_decoder.decode(raw)
    assert req.tool_call == ToolCallUpdate("c")
    assert encoder.encode(req) == raw
    assert_valid("RequestPermissionRequest", json.loads(raw))


def test_unicode_ids_survive() -> None:
    params = _with(_base_params(), _set_option(0, "optionId", "erlauben-ü-✓"))
    req = permission_request_decoder.decode(dumps(params))
    assert "erlauben-ü-✓" in req.option_ids


# --------------------------------------------------------------- decisions


def test_selected_and_cancelled_encode_exactly() -> None:
    assert encoder.encode(Selected("x")) == b'{"outcome":"selected","optionId":"x"}'
    assert encoder.encode(Cancelled()) == b'{"outcome":"cancelled"}'
    assert_valid("RequestPermissionOutcome", to_json(Selected("x")))
    assert_valid("RequestPermissionOutcome", to_json(Cancelled()))
    assert_valid("SelectedPermissionOutcome", to_json(Selected("x")))


def test_permission_response_encodes_to_the_golden_results() -> None:
    selected = PermissionResponse(Selected("allow"))
    cancelled = PermissionResponse(Cancelled())
    assert to_json(selected) == load_golden("response_selected.json")["result"]
    assert to_json(cancelled) == load_golden("response_cancelled.json")["result"]
    for response in (selected, cancelled):
        assert_valid("RequestPermissionResponse", to_json(response))


def test_decision_meta_round_trip() -> None:
    sel = Selected("allow", meta={"by": "user"})
    assert to_json(sel) == {"outcome": "selected", "optionId": "allow", "_meta": {"by": "user"}}
    assert decision_decoder.decode(encoder.encode(sel)) == sel
    resp = PermissionResponse(Cancelled(meta={"reason": "turn"}), meta={"t": 1})
    assert permission_response_decoder.decode(encoder.encode(resp)) == resp
    assert_valid("RequestPermissionResponse", to_json(resp))


def test_decision_decoder() -> None:
    assert decision_decoder.decode(b'{"outcome":"cancelled"}') == Cancelled()
    assert decision_decoder.decode(b'{"optionId":"a","outcome":"selected"}') == Selected("a")


@pytest.mark.parametrize(
    "result",
    [
        {"outcome": {"outcome": "approved", "optionId": "allow"}},
        {"outcome": {"outcome": "selected"}},
        {"outcome": {"optionId": "allow"}},
        {"outcome": "selected"},
        {"outcome": None},
        {},
    ],
)
def test_bad_responses_fail(result: dict[str, Any]) -> None:
    assert not is_valid("RequestPermissionResponse", result)
    with pytest.raises(msgspec.ValidationError):
        permission_response_decoder.decode(dumps(result))


# ------------------------------------------------------------------- cancel


@pytest.mark.parametrize(
    ("params", "target"),
    [
        ({"id": 2}, 2),
        ({"requestId": 4}, 4),
        ({"id": 0}, 0),
        ({"requestId": 0}, 0),
        ({"id": "req-0"}, "req-0"),
        ({"requestId": ""}, ""),
        ({"id": 0, "requestId": 5}, 0),
        ({"id": None, "requestId": 0}, 0),
        ({"id": 7, "requestId": None}, 7),
        ({"requestId": None}, None),
        ({}, None),
    ],
)
def test_cancel_params_target(params: dict[str, Any], target: int | str | None) -> None:
    decoded = cancel_params_decoder.decode(dumps(params))
    assert decoded.target == target
    assert type(decoded.target) is type(target)


def test_cancel_params_encode_and_validate() -> None:
    acp = CancelRequestParams(request_id=0)
    assert encoder.encode(acp) == b'{"requestId":0}'
    assert_valid("CancelRequestNotification", to_json(acp))
    assert encoder.encode(CancelRequestParams(id=0)) == b'{"id":0}'


@pytest.mark.parametrize("params", [b'{"id": 1.5}', b'{"requestId": true}', b'{"id": [1]}', b"[]"])
def test_cancel_params_bad_ids_fail(params: bytes) -> None:
    with pytest.raises(msgspec.ValidationError):
        cancel_params_decoder.decode(params)


# --------------------------------------------------------------- wire samples


def _sample_messages() -> Iterator[tuple[str, int, str, dict[str, Any]]]:
    for name in SAMPLE_FILES:
        lines = (WIRE_SAMPLES / name).read_text(encoding="utf-8").splitlines()
        for lineno, line in enumerate(lines, start=1):
            if line.strip():
                record = json.loads(line)
                yield name, lineno, record["dir"], record["msg"]


_SAMPLE_REQUESTS = [
    (f"{name}:{lineno}", msg)
    for name, lineno, _, msg in _sample_messages()
    if msg.get("method") == "session/request_permission"
]
SAMPLE_REQUESTS = [pytest.param(msg, id=where) for where, msg in _SAMPLE_REQUESTS]


def test_wire_samples_have_permission_requests() -> None:
    assert len(_SAMPLE_REQUESTS) >= 60
    files = {where.split(":")[0] for where, _ in _SAMPLE_REQUESTS}
    assert files == set(SAMPLE_FILES)
    assert 0 in {msg["id"] for _, msg in _SAMPLE_REQUESTS}  # ids start at 0


@pytest.mark.parametrize("message", SAMPLE_REQUESTS)
def test_wire_sample_permission_requests_decode(message: dict[str, Any]) -> None:
    params = message["params"]
    assert_valid("RequestPermissionRequest", params)
    req = permission_request_decoder.decode(dumps(params))
    assert req.session_id == params["sessionId"]
    assert req.tool_call.tool_call_id == params["toolCall"]["toolCallId"]
    assert [o.option_id for o in req.options] == [o["optionId"] for o in params["options"]]
    assert to_json(req) == strip_nulls(params)


def _sample_permission_results() -> list[Any]:
    """Results answering a sample's session/request_permission (matched by id and direction)."""
    out = []
    for name in SAMPLE_FILES:
        pending: dict[tuple[str, Any], str] = {}
        for _, lineno, direction, msg in (m for m in _sample_messages() if m[0] == name):
            if msg.get("method") == "session/request_permission":
                sender, receiver = direction.split("->")
                pending[(receiver, msg["id"])] = sender
            elif "result" in msg:
                sender = direction.split("->")[0]
                if (sender, msg["id"]) in pending:
                    out.append(pytest.param(msg["result"], id=f"{name}:{lineno}"))
    return out


SAMPLE_RESULTS = _sample_permission_results()


def test_wire_samples_have_permission_results() -> None:
    assert len(SAMPLE_RESULTS) >= 60


@pytest.mark.parametrize("result", SAMPLE_RESULTS)
def test_wire_sample_permission_results_decode(result: dict[str, Any]) -> None:
    assert_valid("RequestPermissionResponse", result)
    decoded = permission_response_decoder.decode(dumps(result))
    assert isinstance(decoded.outcome, Selected | Cancelled)
    assert to_json(decoded) == result


SAMPLE_CANCELS = [
    pytest.param(msg, id=f"{name}:{lineno}")
    for name, lineno, _, msg in _sample_messages()
    if msg.get("method") in {"$/cancelRequest", "$/cancel_request"}
]


@pytest.mark.parametrize("message", SAMPLE_CANCELS)
def test_wire_sample_cancels_decode(message: dict[str, Any]) -> None:
    params = message["params"]
    decoded = cancel_params_decoder.decode(dumps(params))
    expected = params["requestId"] if message["method"] == "$/cancel_request" else params["id"]
    assert decoded.target == expected
    if message["method"] == "$/cancel_request":
        assert_valid("CancelRequestNotification", params)


def test_raw_input_is_kept_undecoded_and_decoded_on_access() -> None:
    params = _base_params()
    params["toolCall"]["rawInput"] = {"command": ["ls", "-l"], "env": {"A": "1"}}
    params["toolCall"]["rawOutput"] = None
    frame = bytearray(msgspec.json.encode(params))
    req = PermissionRequest.from_json(frame)
    assert req.tool_call.raw_input == {"command": ["ls", "-l"], "env": {"A": "1"}}
    assert req.tool_call.raw_output is None  # null reads as absent
    # from_json copies out just its own bytes: nothing holds on to the frame it came from
    # (a bytearray with a live export could not grow).
    frame.extend(b" ")
    assert bytes(req.tool_call.raw_input_json) == msgspec.json.encode(
        params["toolCall"]["rawInput"]
    )
    assert msgspec.json.decode(msgspec.json.encode(req)) == params


def test_raw_input_that_is_not_json_fails_closed() -> None:
    frame = msgspec.json.encode(_base_params()).replace(
        b'"toolCall":{', b'"toolCall":{"rawInput":[1,,2],', 1
    )
    with pytest.raises(msgspec.DecodeError):
        PermissionRequest.from_json(frame)


# ------------------------------------------------------------------ literal types


@pytest.mark.parametrize(
    ("alias", "def_name"),
    [
        (ToolKind, "ToolKind"),
        (ToolCallStatus, "ToolCallStatus"),
        (PermissionOptionKind, "PermissionOptionKind"),
        (PlanEntryPriority, "PlanEntryPriority"),
        (PlanEntryStatus, "PlanEntryStatus"),
    ],
    ids=lambda value: value if isinstance(value, str) else "",
)
def test_each_exported_literal_type_is_exactly_the_schemas_enum(alias: Any, def_name: str) -> None:
    consts = {variant["const"] for variant in schema_defs()[def_name]["oneOf"]}
    assert set(get_args(alias)) == consts


@pytest.mark.parametrize("kind", ["tool_call", "tool_call_update"])
def test_a_decoded_tool_call_update_holds_nothing_of_the_callers_buffer(kind: str) -> None:
    """Session updates are kept (callbacks, logs): their raw JSON is their own, so a
    caller that reuses its buffer changes nothing in them."""
    from permclient._wire import decode_session_update

    buffer = bytearray(
        b'{"sessionId":"s","update":{"sessionUpdate":"%b","toolCallId":"c",'
        b'"rawInput":{"cmd":"ls"},"rawOutput":["ok"]}}' % kind.encode()
    )
    _, update = decode_session_update(buffer)
    buffer[buffer.index(b"ls") : buffer.index(b"ls") + 2] = b"rm"
    buffer[buffer.index(b"ok") : buffer.index(b"ok") + 2] = b"no"
    buffer.extend(b" ")  # (a live export of the buffer could not grow)
    assert update.raw_input == {"cmd": "ls"}  # type: ignore[union-attr]
    assert update.raw_output == ["ok"]  # type: ignore[union-attr]
