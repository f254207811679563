"""The wire between ``simhost serve`` and its views (a browser tab, ``simhost approve``).

One JSON object per WebSocket text message, with a ``type``; camelCase fields.
Every shape is a msgspec Struct here, and ``docs/relay-protocol.schema.json`` is
generated from them (:func:`json_schema`). A view's message is decoded by
:func:`decode_view_message`, which never raises: anything that is not one
well-formed message of a known type, within MAX_MESSAGE bytes, is an
:class:`Error` to send back, and changes nothing.

A view's message may carry a ``ref`` of its choosing; every :class:`Reply` it
causes carries it back (:func:`with_ref`), so a view matches replies to its
requests by ref rather than by timing. Broadcasts carry none.

The question events (``requested``, ``resolved``, ``withdrawn``) are
:mod:`permclient.relay`'s, unchanged; ``answer_refused`` is its
:class:`~permclient.relay.AnswerRefused` with the ``ref``.
"""

from __future__ import annotations

from typing import Annotated, Any, Final, Literal, TypeAlias, TypeVar

import msgspec
from msgspec import UNSET, UnsetType

from permclient.relay import Requested, Resolved, Withdrawn
from permclient.rules import MAX_REASON
from simhost.serve.access import MAX_NAME

PROTOCOL_VERSION: Final = 1
MAX_PROMPT: Final = 32 * 1024  # characters
# The largest message a view may send, in bytes of UTF-8 (a prompt is the longest,
# and its characters may take 4 bytes each): bigger ones are refused undecoded.
MAX_MESSAGE: Final = 4 * MAX_PROMPT + 4096
MAX_BATCH: Final = 1000  # questions one batch answer names
MAX_REF: Final = 64

# A preset's id: the agent's (the reference runtime has ask, read-only, auto-edit).
Preset: TypeAlias = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME)]
ViewName: TypeAlias = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_NAME)]
PromptText: TypeAlias = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_PROMPT)]
ReasonText: TypeAlias = Annotated[str, msgspec.Meta(max_length=MAX_REASON)]
BatchWhat: TypeAlias = Annotated[str, msgspec.Meta(min_length=1, max_length=256)]
# A view's name for one of its requests (printable: checked after decoding, as a
# view's name is).
Ref: TypeAlias = Annotated[str, msgspec.Meta(min_length=1, max_length=MAX_REF)]


class _ViewMessage(
    msgspec.Struct, tag_field="type", rename="camel", forbid_unknown_fields=True, kw_only=True
):
    """``ref``, in any message: echoed in every reply to it."""

    ref: Ref | None = None


class Open(_ViewMessage, tag="open"):
    """The first message of a view: who it is (shown to the others when it answers).
    The token travels in the URL; this names the view."""

    view: ViewName = "view"
    version: Literal[1] = PROTOCOL_VERSION


class SelectedDecision(
    msgspec.Struct,
    rename="camel",
    tag_field="outcome",
    tag="selected",
    forbid_unknown_fields=True,
):
    option_id: str


class CancelledDecision(
    msgspec.Struct,
    rename="camel",
    tag_field="outcome",
    tag="cancelled",
    forbid_unknown_fields=True,
):
    pass


ViewDecision: TypeAlias = SelectedDecision | CancelledDecision


class Answer(_ViewMessage, tag="answer"):
    """Answer the question ``questionId`` of ``sessionId`` (cross-checked). ``reason``
    goes to the agent with a denial (a ``reject_*`` option) and is ignored otherwise."""

    question_id: str
    session_id: str
    decision: ViewDecision
    reason: ReasonText | None = None


class SaveRule(_ViewMessage, tag="save_rule"):
    """Save the editor rule ``index`` of those offered for the question (``rule_offers``);
    it then answers that question and every pending one it covers."""

    question_id: str
    session_id: str
    index: Annotated[int, msgspec.Meta(ge=0, lt=16)]


class ListRules(_ViewMessage, tag="list_rules"):
    """Ask for every editor rule (the server answers ``rules``)."""


class RevokeRule(_ViewMessage, tag="revoke_rule"):
    """Revoke rule ``number``, which must still read ``rule`` (numbers move when a
    rule is revoked: the words make sure it is the one the person saw)."""

    number: Annotated[int, msgspec.Meta(ge=1)]
    rule: Annotated[str, msgspec.Meta(max_length=4096)]


class PreviewBatch(_ViewMessage, tag="preview_batch"):
    """What a batch answer would answer now: the session's pending questions of a
    tool kind (``read``, or ``reads``) or whose paths match a glob (``src/**``)."""

    session_id: str
    effect: Literal["allow", "deny"]
    what: BatchWhat


class AnswerBatch(_ViewMessage, tag="answer_batch"):
    """Answer exactly the listed questions (those of a ``batch_preview``) that are
    still pending and still covered."""

    session_id: str
    effect: Literal["allow", "deny"]
    what: BatchWhat
    question_ids: Annotated[list[str], msgspec.Meta(max_length=MAX_BATCH)]


class Prompt(_ViewMessage, tag="prompt"):
    session_id: str
    text: PromptText


class CancelTurn(_ViewMessage, tag="cancel_turn"):
    session_id: str


class NewSession(_ViewMessage, tag="new_session"):
    pass


class ListSessions(_ViewMessage, tag="list_sessions"):
    pass


class ListPresets(_ViewMessage, tag="list_presets"):
    session_id: str


class SetPreset(_ViewMessage, tag="set_preset"):
    """Switch the session's permission preset. It takes effect when the session's
    next turn starts; switches made meanwhile are held, and the last one wins."""

    session_id: str
    preset: Preset


ViewMessage: TypeAlias = (
    Open
    | Answer
    | Prompt
    | CancelTurn
    | NewSession
    | ListSessions
    | ListPresets
    | SetPreset
    | SaveRule
    | ListRules
    | RevokeRule
    | PreviewBatch
    | AnswerBatch
)


class _ServerMessage(msgspec.Struct, tag_field="type", rename="camel"):
    pass


class _Reply(_ServerMessage, kw_only=True):
    """A message a view's request may cause: it carries that request's ``ref``, if it
    had one (absent otherwise, and in what every view is told)."""

    ref: Ref | UnsetType = UNSET


class Opened(_Reply, tag="opened"):
    """The view is in; the replay (a ``requested`` per pending question) follows,
    then ``replayed``."""

    view: str
    version: int = PROTOCOL_VERSION


class Replayed(_ServerMessage, tag="replayed"):
    """The replay is over: ``count`` questions were pending when the view opened."""

    count: int


class SessionInfo(msgspec.Struct, rename="camel"):
    session_id: str
    title: str
    waiting: int  # questions pending
    running: bool  # a turn is under way


class Sessions(_Reply, tag="sessions"):
    sessions: list[SessionInfo]


class SessionEvent(_ServerMessage, tag="session_event"):
    """Something happened in a session: ``created`` (``text``: its title; ``view``:
    the view that asked for it, if one did), ``turn_started``, ``turn_ended``
    (``text``: the stop reason) or ``message`` (``text``: agent text)."""

    session_id: str
    event: Literal["created", "turn_started", "turn_ended", "message"]
    text: str = ""
    view: str = ""


class Presets(_Reply, tag="presets"):
    """A session's presets: the one in force, and one held for the next turn."""

    session_id: str
    presets: list[Preset]
    current: Preset
    pending: Preset | None = None


class RuleOffer(msgspec.Struct, rename="camel"):
    """An editor rule a card offers: ``label`` says its whole scope and lifetime."""

    index: int
    effect: Literal["allow", "deny"]
    label: str


class RuleOffers(_ServerMessage, tag="rule_offers"):
    """The editor rules offered for a question (sent after its ``requested``)."""

    question_id: str
    offers: list[RuleOffer]


class RuleReceipt(_ServerMessage, tag="rule_receipt"):
    """An editor rule answered a question (``questionId`` is empty for one that was
    never shown: the rule answered it as it arrived). ``hits``: how many questions
    rule ``number`` (which reads ``rule``) has answered now, this one included; a
    view sets that row's hits from it (no ``rules`` list is sent per answer)."""

    session_id: str
    tool_call_id: str
    title: str
    number: int
    rule: str
    outcome: Literal["allowed", "denied"]
    hits: int
    question_id: str = ""


class RuleRow(msgspec.Struct, rename="camel"):
    number: int
    effect: Literal["allow", "deny"]
    rule: str
    hits: int
    kept_in: str  # a file, or "memory"


class Rules(_Reply, tag="rules"):
    """Every editor rule, numbered (sent on ``list_rules``, after a refused
    ``revoke_rule``, and to every view when they change; a rule's hits change
    with each ``rule_receipt`` meanwhile)."""

    rules: list[RuleRow]


class RuleSaved(_Reply, tag="rule_saved"):
    """A ``save_rule`` kept its rule, now rule ``number``, and it answered the question."""

    number: int
    rule: str


class RuleRevoked(_Reply, tag="rule_revoked"):
    """A ``revoke_rule`` revoked rule ``number`` (the numbers after it moved up)."""

    number: int
    rule: str


class BatchItem(msgspec.Struct, rename="camel"):
    question_id: str
    title: str
    option_name: str


class BatchPreview(_Reply, tag="batch_preview"):
    """What a ``preview_batch`` would answer now, oldest first, with the option each
    would get: an ``answer_batch`` names these ``questionId``s."""

    session_id: str
    effect: Literal["allow", "deny"]
    what: str
    questions: list[BatchItem]


class BatchAnswered(_Reply, tag="batch_answered"):
    """How many of the questions an ``answer_batch`` named it answered (every view
    gets their ``resolved``)."""

    session_id: str
    what: str
    answered: int


class AnswerRefused(_Reply, tag="answer_refused"):
    """An ``answer`` that changed nothing, and why (the relay's
    :class:`~permclient.relay.AnswerRefused`)."""

    question_id: str
    reason: str


class Error(_Reply, tag="error"):
    """The view's message changed nothing, and why."""

    reason: str


Reply: TypeAlias = (
    Opened
    | AnswerRefused
    | Sessions
    | Presets
    | Rules
    | RuleSaved
    | RuleRevoked
    | BatchPreview
    | BatchAnswered
    | Error
)
"""What may carry a ``ref``: the replies to a view's message."""
ReplyT = TypeVar("ReplyT", bound=Reply)


def with_ref(reply: ReplyT, ref: str | None) -> ReplyT:
    """``reply``, carrying the ``ref`` of the request it answers (a copy, if it had one)."""
    return reply if ref is None else msgspec.structs.replace(reply, ref=ref)


ServerMessage: TypeAlias = (
    Opened
    | Replayed
    | Requested
    | Resolved
    | Withdrawn
    | AnswerRefused
    | Sessions
    | SessionEvent
    | Presets
    | RuleOffers
    | RuleReceipt
    | Rules
    | RuleSaved
    | RuleRevoked
    | BatchPreview
    | BatchAnswered
    | Error
)


class _RefOnly(msgspec.Struct):
    """What a message that does not decode may still say: its ref."""

    ref: Ref | None = None


_view_decoder: Final = msgspec.json.Decoder(ViewMessage)
_ref_decoder: Final = msgspec.json.Decoder(_RefOnly)
_encoder: Final = msgspec.json.Encoder()


def decode_view_message(data: str | bytes) -> ViewMessage | Error:
    """A view's message, or the :class:`Error` to send back, with the message's ref
    if it had a valid one (never raises)."""
    if len(data) > MAX_MESSAGE:  # (a str: at least as many bytes as characters)
        return Error(f"message over {MAX_MESSAGE} bytes")
    if isinstance(data, str):
        try:
            data = data.encode()
        except UnicodeEncodeError:  # a lone surrogate: no JSON text has one
            return Error("not a JSON message")
        if len(data) > MAX_MESSAGE:
            return Error(f"message over {MAX_MESSAGE} bytes")
    try:
        message = _view_decoder.decode(data)
    except msgspec.ValidationError as exc:
        return with_ref(Error(f"invalid message: {_cut(str(exc))}"), _ref_of(data))
    except msgspec.DecodeError:
        return Error("not a JSON message")
    except RecursionError:  # (msgspec's own limit: the type is looked for past deep values)
        return Error("invalid message: nested too deep")  # (its ref, too, is past them)
    if message.ref is not None and not message.ref.isprintable():
        return Error("a ref must be printable")
    if isinstance(message, Open) and not message.view.isprintable():
        return with_ref(Error("a view's name must be printable"), message.ref)
    return message


def _ref_of(data: bytes) -> str | None:
    """The ref of a JSON object that is no message, if it has a valid one (best effort:
    a ref past values nested too deep is not found)."""
    try:
        ref = _ref_decoder.decode(data).ref
    except (msgspec.DecodeError, RecursionError):
        return None
    return ref if ref is not None and ref.isprintable() else None


def encode(message: ServerMessage) -> bytes:
    return _encoder.encode(message)


def json_schema() -> dict[str, Any]:
    """The JSON Schema of both directions (``docs/relay-protocol.schema.json``)."""
    (view, server), components = msgspec.json.schema_components(
        [ViewMessage, ServerMessage], ref_template="#/$defs/{name}"
    )
    return {
        "$schema": "https://json-schema.org/draft/2020-12/schema",
        "title": f"simhost serve relay protocol, version {PROTOCOL_VERSION}",
        "oneOf": [
            {"title": "view to server", **view},
            {"title": "server to view", **server},
        ],
        "$defs": components,
    }


def _cut(text: str, limit: int = 200) -> str:
    return text if len(text) <= limit else text[: limit - 1] + "…"
