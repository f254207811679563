"""The wire between ``simhost serve`` and its views: shapes, limits, the schema file."""

from __future__ import annotations

import json

import msgspec
import pytest
from hypothesis import given
from hypothesis import strategies as st

from permclient import PermissionOption
from permclient.relay import PendingRegistry, Requested, Resolved, Withdrawn
from simhost.serve.protocol import (
    MAX_MESSAGE,
    MAX_NAME,
    MAX_PROMPT,
    MAX_REF,
    Answer,
    AnswerRefused,
    BatchAnswered,
    BatchPreview,
    CancelledDecision,
    CancelTurn,
    Error,
    ListPresets,
    ListRules,
    ListSessions,
    NewSession,
    Open,
    Opened,
    Presets,
    Prompt,
    Replayed,
    RevokeRule,
    RuleOffers,
    RuleReceipt,
    RuleRevoked,
    Rules,
    RuleSaved,
    SaveRule,
    SelectedDecision,
    SessionEvent,
    Sessions,
    SetPreset,
    decode_view_message,
    encode,
    json_schema,
    with_ref,
)
from tests.support import paths

SCHEMA_FILE = paths.DOCS / "relay-protocol.schema.json"


@pytest.mark.parametrize(
    ("wire", "message"),
    [
        ({"type": "open", "view": "tab 1"}, Open("tab 1")),
        ({"type": "open"}, Open()),
        (
            {
                "type": "answer",
                "questionId": "q1",
                "sessionId": "s1",
                "decision": {"outcome": "selected", "optionId": "allow"},
            },
            Answer("q1", "s1", SelectedDecision("allow")),
        ),
        (
            {
                "type": "answer",
                "questionId": "q1",
                "sessionId": "s1",
                "decision": {"outcome": "cancelled"},
            },
            Answer("q1", "s1", CancelledDecision()),
        ),
        ({"type": "prompt", "sessionId": "s1", "text": "burst 3"}, Prompt("s1", "burst 3")),
        ({"type": "cancel_turn", "sessionId": "s1"}, CancelTurn("s1")),
        ({"type": "new_session"}, NewSession()),
        ({"type": "list_sessions"}, ListSessions()),
        ({"type": "list_presets", "sessionId": "s1"}, ListPresets("s1")),
        (
            {"type": "set_preset", "sessionId": "s1", "preset": "read-only"},
            SetPreset("s1", "read-only"),
        ),
        ({"type": "open", "view": "tab 1", "ref": "o"}, Open("tab 1", ref="o")),
        (
            {"type": "save_rule", "questionId": "q1", "sessionId": "s1", "index": 0, "ref": "7"},
            SaveRule("q1", "s1", 0, ref="7"),
        ),
        ({"type": "list_rules", "ref": "r é 😀"}, ListRules(ref="r é 😀")),
        ({"type": "list_rules", "ref": None}, ListRules()),
    ],
    ids=lambda value: value["type"] if isinstance(value, dict) else "",
)
def test_each_view_message_decodes_to_its_shape(wire: dict[str, object], message: object) -> None:
    assert decode_view_message(json.dumps(wire)) == message


@pytest.mark.parametrize(
    ("wire", "reason"),
    [
        (b"\xff", "not a JSON message"),
        (b"[]", "invalid message: Expected `object`, got `array`"),
        (b'{"type": "launch_missiles"}', "invalid message: Invalid value 'launch_missiles'"),
        (b'{"type": "prompt", "sessionId": "s"}', "invalid message: Object missing required"),
        (b'{"type": "new_session", "extra": 1}', "invalid message: Object contains unknown"),
        (
            b'{"type": "answer", "questionId": "q", "sessionId": "s", '
            b'"decision": {"outcome": "allow"}}',
            "invalid message: Invalid value 'allow' - at `$.decision.outcome`",
        ),
        (
            b'{"type": "answer", "questionId": "q", "sessionId": "s", '
            b'"decision": {"outcome": "selected", "optionId": null}}',
            "invalid message: Expected `str`, got `null`",
        ),
        (b'{"type": "set_preset", "sessionId": "s", "preset": ""}', "invalid message"),
        (b'{"type": "open", "view": ""}', "invalid message: Expected `str` of length >= 1"),
        (b'{"type": "open", "view": "tab\\u001b[2J"}', "a view's name must be printable"),
        (b'{"type": "prompt", "sessionId": "s", "text": ""}', "invalid message"),
        (
            b'{"type": "answer", "questionId": "q", "sessionId": "s", '
            b'"decision": {"outcome": "cancelled", "optionId": "allow"}}',
            "invalid message: Object contains unknown field `optionId`",
        ),
        (b'{"type": "open", "version": 2}', "invalid message"),
        (b'{"type": "list_rules", "ref": ""}', "invalid message: Expected `str` of length >= 1"),
        (b'{"type": "list_rules", "ref": 7}', "invalid message: Expected `str | null`, got `int`"),
        (b'{"type": "list_rules", "ref": "a\\u0000b"}', "a ref must be printable"),
        (b'{"type": "list_rules", "ref": "line\\nbreak"}', "a ref must be printable"),
        (b'{"type": "list_rules", "ref": "\\u202eevil"}', "a ref must be printable"),
    ],
)
def test_a_bad_message_is_an_error_that_says_why(wire: bytes, reason: str) -> None:
    error = decode_view_message(wire)
    assert isinstance(error, Error) and error.reason.startswith(reason)
    assert "ref" not in json.loads(encode(error))  # (no request, or no valid ref, to name)


@pytest.mark.parametrize(
    ("wire", "reason"),
    [
        ({"type": "launch_missiles"}, "invalid message: Invalid value 'launch_missiles'"),
        ({"ref": "r1", "type": "prompt", "sessionId": "s"}, "invalid message: Object missing"),
        ({"type": "list_rules", "all": True}, "invalid message: Object contains unknown field"),
        ({"type": "open", "view": "tab\x1b[2J"}, "a view's name must be printable"),
        ({"type": "answer", "questionId": 1, "sessionId": "s", "decision": {}}, "invalid"),
    ],
)
def test_the_error_for_a_message_names_its_ref_if_it_had_a_valid_one(
    wire: dict[str, object], reason: str
) -> None:
    error = decode_view_message(json.dumps({"ref": "r1", **wire}))
    assert isinstance(error, Error) and error.reason.startswith(reason)
    assert json.loads(encode(error)) == {"type": "error", "reason": error.reason, "ref": "r1"}


@pytest.mark.parametrize(
    "ref",
    ["", "x" * (MAX_REF + 1), "bell\x07", "\u2028", 7, 1.5, True, ["r1"], {"ref": "r1"}],
    ids=repr,
)
def test_a_hostile_ref_is_never_echoed(ref: object) -> None:
    for wire in ({"type": "list_rules", "ref": ref}, {"type": "nope", "ref": ref}):
        error = decode_view_message(json.dumps(wire))
        assert isinstance(error, Error) and error.ref is msgspec.UNSET, wire
    # A message that is not an object, or not JSON, or nested too deep names no ref.
    for data in (
        b'[{"ref": "r1"}]',
        b'"r1"',
        b'{"ref": "r1", "type": "list_rules"',
        b'{"ref": "r1", "x": ' + b"[" * 60_000 + b"]" * 60_000 + b', "type": "list_rules"}',
    ):
        error = decode_view_message(data)
        assert isinstance(error, Error) and error.ref is msgspec.UNSET, data[:40]
    longest = "x" * MAX_REF
    assert decode_view_message(json.dumps({"type": "list_rules", "ref": longest})) == ListRules(
        ref=longest
    )


def test_every_size_limit_holds_before_or_while_decoding() -> None:
    too_big = b'{"type": "new_session"}' + b" " * MAX_MESSAGE
    assert decode_view_message(too_big) == Error(f"message over {MAX_MESSAGE} bytes")
    long_prompt = json.dumps({"type": "prompt", "sessionId": "s", "text": "x" * (MAX_PROMPT + 1)})
    assert isinstance(decode_view_message(long_prompt), Error)
    long_name = json.dumps({"type": "open", "view": "v" * (MAX_NAME + 1)})
    assert isinstance(decode_view_message(long_name), Error)
    # The longest prompt fits, in any script (up to 4 bytes a character).
    widest = {"type": "prompt", "sessionId": "s", "text": "😀" * MAX_PROMPT}
    assert isinstance(decode_view_message(json.dumps(widest, ensure_ascii=False)), Prompt)
    # A str is measured in UTF-8 bytes, as it travels.
    wide = json.dumps({"type": "cancel_turn", "sessionId": "é" * 70_000}, ensure_ascii=False)
    assert len(wide) < MAX_MESSAGE < len(wide.encode())
    assert decode_view_message(wide) == Error(f"message over {MAX_MESSAGE} bytes")
    assert decode_view_message('{"type": "open", "view": "\ud800"}') == Error("not a JSON message")


def test_a_message_nested_deeper_than_the_decoder_goes_is_an_error() -> None:
    # (the type is looked for past the values before it: msgspec stops at its own depth)
    deep = b'{"x": ' + b"[" * 60_000 + b"]" * 60_000 + b', "type": "new_session"}'
    assert len(deep) < MAX_MESSAGE
    assert decode_view_message(deep) == Error("invalid message: nested too deep")


@given(st.binary(max_size=300) | st.text(max_size=300))
def test_no_input_makes_decoding_raise(data: bytes | str) -> None:
    decode_view_message(data)


@given(
    st.dictionaries(
        st.sampled_from(["type", "questionId", "sessionId", "decision", "text", "view", "ref"]),
        st.none() | st.text(max_size=5) | st.integers() | st.dictionaries(st.text(), st.text()),
    )
)
def test_no_object_makes_decoding_raise_and_errors_are_short(wire: dict[str, object]) -> None:
    result = decode_view_message(json.dumps(wire))
    if isinstance(result, Error):
        assert len(result.reason) <= 220
        # It names the message's ref, when that is one a view may send, and no other.
        ref = wire.get("ref")
        valid = isinstance(ref, str) and 1 <= len(ref) <= MAX_REF and ref.isprintable()
        assert result.ref == (ref if valid else msgspec.UNSET)


def test_a_view_answer_reaches_the_relay_as_the_decision_it_names() -> None:
    registry = PendingRegistry()
    options = (
        PermissionOption("allow", "Allow", "allow_once"),
        PermissionOption("deny", "Deny", "reject_once"),
    )
    requested = registry.add("s1", "c1", "t", "edit", options, msgspec.Raw(b"{}"))
    question_id = requested.question.question_id
    wire = {
        "type": "answer",
        "questionId": question_id,
        "sessionId": "s1",
        "decision": {"outcome": "selected", "optionId": "deny"},
    }
    answer = decode_view_message(json.dumps(wire))
    assert isinstance(answer, Answer)
    result = registry.answer(
        answer.question_id, msgspec.to_builtins(answer.decision), "tab", answer.session_id
    )
    assert isinstance(result, tuple)
    assert result[1] == Resolved(question_id, "selected", "deny", "tab")


def test_server_messages_encode_with_their_type() -> None:
    assert json.loads(encode(Opened("tab 1"))) == {"type": "opened", "view": "tab 1", "version": 1}
    assert json.loads(encode(Replayed(3))) == {"type": "replayed", "count": 3}
    assert json.loads(encode(Error("no"))) == {"type": "error", "reason": "no"}


def test_a_reply_carries_its_request_s_ref_and_a_broadcast_has_none() -> None:
    replies = [
        Opened("tab"),
        AnswerRefused("q1", "no such question"),
        Sessions([]),
        Presets("s1", ["ask"], "ask"),
        Rules([]),
        RuleSaved(1, "allow `ls …` in this workspace, until revoked"),
        RuleRevoked(1, "allow `ls …` in this workspace, until revoked"),
        BatchPreview("s1", "allow", "reads", []),
        BatchAnswered("s1", "reads", 0),
        Error("no"),
    ]
    for reply in replies:
        assert with_ref(reply, None) is reply
        assert "ref" not in json.loads(encode(reply))
        echoed = with_ref(reply, "r1")
        assert json.loads(encode(echoed)) == {**json.loads(encode(reply)), "ref": "r1"}
        assert reply.ref is msgspec.UNSET  # (a copy: the reply itself is unchanged)
    assert json.loads(encode(RuleSaved(2, "w"))) == {"type": "rule_saved", "number": 2, "rule": "w"}
    assert json.loads(encode(RuleRevoked(2, "w"))) == {
        "type": "rule_revoked",
        "number": 2,
        "rule": "w",
    }
    # What every view is told has no ref to carry.
    for broadcast in (Replayed, Requested, Resolved, Withdrawn, SessionEvent, RuleOffers):
        assert "ref" not in broadcast.__struct_fields__
    assert "ref" not in RuleReceipt.__struct_fields__
    # Every message of a view may carry one.
    assert RevokeRule(1, "w", ref="r").ref == "r" and NewSession().ref is None


def test_the_schema_file_is_generated_from_the_shapes() -> None:
    # Regenerate with: python -c "import json; from simhost.serve.protocol import
    # json_schema; print(json.dumps(json_schema(), indent=2, sort_keys=True))"
    # > docs/relay-protocol.schema.json
    assert json.loads(SCHEMA_FILE.read_text(encoding="utf-8")) == json_schema()
