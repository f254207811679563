"""Typed wire shapes of the permission exchange (ACP v1 schema, shared by both dialects).

One :class:`msgspec.Struct` per wire shape: ``rename="camel"`` maps ``snake_case``
attributes to the protocol's ``camelCase`` keys, ``omit_defaults=True`` keeps encoded
messages minimal, ``_meta`` is kept as :attr:`meta`, and unknown keys are ignored so a
newer peer can add fields. Unions that the schema discriminates by a key are msgspec
tagged unions (``type`` for content, ``outcome`` for the decision).

Decoding is the first line of invariant 2 (*fail closed*): a
``session/request_permission`` whose params are missing or malformed never decodes into
a :class:`PermissionRequest` -- :data:`permission_request_decoder` raises
:class:`msgspec.ValidationError` and the caller answers ``cancelled``.

The codec instances at the bottom of the module are meant to be reused; never build
a ``Decoder``/``Encoder`` per message.
"""

from __future__ import annotations

import re
from typing import Annotated, Any, Final, Literal, TypeAlias

import msgspec

__all__ = [
    "AgentMessageChunk",
    "AgentThoughtChunk",
    "Annotations",
    "AudioContent",
    "AvailableCommand",
    "AvailableCommandsUpdate",
    "CancelRequestParams",
    "Cancelled",
    "Content",
    "ContentBlock",
    "CurrentModeUpdate",
    "Decision",
    "Diff",
    "EmbeddedResource",
    "ImageContent",
    "PermissionOption",
    "PermissionOptionKind",
    "PermissionRequest",
    "PermissionResponse",
    "Plan",
    "PlanEntry",
    "PlanEntryPriority",
    "PlanEntryStatus",
    "ResourceLink",
    "Role",
    "Selected",
    "SessionUpdate",
    "Terminal",
    "TextContent",
    "ToolCallContent",
    "ToolCallLocation",
    "ToolCallProgress",
    "ToolCallStarted",
    "ToolCallStatus",
    "ToolCallUpdate",
    "ToolKind",
    "UnknownUpdate",
    "UserMessageChunk",
    "cancel_params_decoder",
    "decision_decoder",
    "decode_session_update",
    "encoder",
    "permission_request_decoder",
    "permission_response_decoder",
]

# --------------------------------------------------------------------------- enums

PermissionOptionKind: TypeAlias = Literal[
    "allow_once", "allow_always", "reject_once", "reject_always"
]
"""What choosing a :class:`PermissionOption` means; a hint for icons and UI treatment."""

ToolKind: TypeAlias = Literal[
    "read",
    "edit",
    "delete",
    "move",
    "search",
    "execute",
    "think",
    "fetch",
    "switch_mode",
    "other",
]
"""Category of a tool call (ACP ``ToolKind``; ``switch_mode`` is in the v1 schema)."""

ToolCallStatus: TypeAlias = Literal["pending", "in_progress", "completed", "failed"]
"""Execution status of a tool call: ``pending`` < ``in_progress`` < ``completed`` | ``failed``."""

PlanEntryPriority: TypeAlias = Literal["high", "medium", "low"]
"""How much a step of the agent's :class:`Plan` matters."""

PlanEntryStatus: TypeAlias = Literal["pending", "in_progress", "completed"]
"""Where a step of the agent's :class:`Plan` stands."""

Role: TypeAlias = Literal["assistant", "user"]
"""The sender or recipient of content (used in :class:`Annotations`)."""

_Meta: TypeAlias = dict[str, Any] | None

_ABSENT: Any = msgspec.Raw()


def decode_raw(raw: msgspec.Raw) -> Any:
    """Decode JSON kept undecoded (``None`` for an absent one).

    It was checked when its message was decoded; should it still not decode (a
    nesting depth that only fits a shallower stack), the result is ``None``
    rather than an exception in whatever is showing it.
    """
    if not raw:
        return None
    try:
        return _any_json.decode(raw)
    except (msgspec.DecodeError, RecursionError):
        return None


_any_json: msgspec.json.Decoder[Any] = msgspec.json.Decoder()
_UInt32: TypeAlias = Annotated[int, msgspec.Meta(ge=0, le=2**32 - 1)]


# ------------------------------------------------------------------------- options


class PermissionOption(msgspec.Struct, rename="camel", omit_defaults=True, frozen=True, gc=False):
    """One choice offered to the user: ``{"optionId", "name", "kind"}``.

    ``option_id`` is what a :class:`Selected` decision must name; ``name`` is the
    human label; ``kind`` hints at the meaning (``allow_once`` ...). An unknown
    ``kind`` fails decoding. Immutable: the client checks answers against the very
    options it received, and requests offering the same options share them.
    """

    option_id: str
    name: str
    kind: PermissionOptionKind
    meta: _Meta = msgspec.field(default=None, name="_meta")


# -------------------------------------------------------------------- content blocks


class Annotations(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    """Optional display/routing hints attached to a content block."""

    audience: list[Role] | None = None
    last_modified: str | None = None
    priority: float | None = None
    meta: _Meta = msgspec.field(default=None, name="_meta")


class _ContentBlockBase(
    msgspec.Struct, tag_field="type", rename="camel", omit_defaults=True, gc=False
):
    """Base of the content-block variants (discriminated by ``type``)."""


class TextContent(_ContentBlockBase, tag="text"):
    """A text content block (``{"type": "text", "text": ...}``), to be rendered as Markdown."""

    text: str
    annotations: Annotations | None = None
    meta: _Meta = msgspec.field(default=None, name="_meta")


class ImageContent(_ContentBlockBase, tag="image"):
    """An image content block: base64 ``data`` with its ``mime_type``, optional ``uri``."""

    data: str
    mime_type: str
    uri: str | None = None
    annotations: Annotations | None = None
    meta: _Meta = msgspec.field(default=None, name="_meta")


class AudioContent(_ContentBlockBase, tag="audio"):
    """An audio content block: base64 ``data`` with its ``mime_type``."""

    data: str
    mime_type: str
    annotations: Annotations | None = None
    meta: _Meta = msgspec.field(default=None, name="_meta")


class ResourceLink(_ContentBlockBase, tag="resource_link"):
    """A link to a resource the agent can read (``name`` and ``uri`` are required)."""

    name: str
    uri: str
    title: str | None = None
    description: str | None = None
    mime_type: str | None = None
    size: int | None = None
    annotations: Annotations | None = None
    meta: _Meta = msgspec.field(default=None, name="_meta")


class EmbeddedResource(_ContentBlockBase, tag="resource"):
    """A resource embedded in full (``{"type": "resource", "resource": {...}}``).

    ``resource`` stays a plain dict because the schema's text and blob variants are
    untagged; decoding checks that it has a string ``uri`` and a string ``text`` or
    ``blob`` and raises :class:`msgspec.ValidationError` otherwise.
    """

    resource: dict[str, Any]
    annotations: Annotations | None = None
    meta: _Meta = msgspec.field(default=None, name="_meta")

    def __post_init__(self) -> None:
        if not isinstance(self.resource.get("uri"), str):
            raise ValueError("embedded resource needs a string `uri`")
        if not (
            isinstance(self.resource.get("text"), str) or isinstance(self.resource.get("blob"), str)
        ):
            raise ValueError("embedded resource needs a string `text` or `blob`")


ContentBlock: TypeAlias = (
    TextContent | ImageContent | AudioContent | ResourceLink | EmbeddedResource
)
"""A displayable content block (ACP ``ContentBlock``), tagged by ``type``."""


# ----------------------------------------------------------------- tool-call content


class _ToolCallContentBase(
    msgspec.Struct, tag_field="type", rename="camel", omit_defaults=True, gc=False
):
    """Base of the tool-call content variants (discriminated by ``type``)."""


class Content(_ToolCallContentBase, tag="content"):
    """Tool-call content wrapping a :data:`ContentBlock` (``{"type": "content", "content": …}``)."""

    content: ContentBlock
    meta: _Meta = msgspec.field(default=None, name="_meta")


class Diff(_ToolCallContentBase, tag="diff"):
    """A file modification: ``path`` (absolute), ``new_text``, and ``old_text``.

    ``old_text`` is ``None`` for a new file (the wire sends ``"oldText": null`` or omits
    it; both decode to ``None``, and ``None`` is omitted when encoding). Construct it with
    keywords: the positional order is ``path, new_text, old_text``.
    """

    path: str
    new_text: str
    old_text: str | None = None
    meta: _Meta = msgspec.field(default=None, name="_meta")


class Terminal(_ToolCallContentBase, tag="terminal"):
    """A terminal created with ``terminal/create``, embedded by its ``terminal_id``."""

    terminal_id: str
    meta: _Meta = msgspec.field(default=None, name="_meta")


ToolCallContent: TypeAlias = Content | Diff | Terminal
"""What a tool call shows or produced (ACP ``ToolCallContent``), tagged by ``type``."""


class ToolCallLocation(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    """A file the tool call reads or writes, with an optional ``line`` number (>= 0)."""

    path: str
    line: _UInt32 | None = None
    meta: _Meta = msgspec.field(default=None, name="_meta")


class ToolCallUpdate(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    """A tool call as carried by a permission request (ACP ``ToolCallUpdate``).

    Only ``tool_call_id`` is required; every other field is ``None`` when absent (or
    ``null``). Decoding rejects an unknown ``kind``/``status`` or content ``type``.

    ``rawInput``/``rawOutput`` (the tool's arguments/result, arbitrary JSON the client
    never interprets) are kept undecoded in :attr:`raw_input_json` /
    :attr:`raw_output_json` (syntax and nesting depth are checked on decode) and
    decoded on access by :attr:`raw_input` / :attr:`raw_output`: most requests are
    answered without anyone looking at them, and undecoded they cost a third of
    the memory. To build one, pass ``raw_input_json=msgspec.Raw(msgspec.json.encode(x))``.
    Decoded inside a permission request with msgspec, they are views of the input
    (which they keep alive, and which must not change while they are held): the
    client copies them out of the message for every question it keeps pending, and
    :meth:`PermissionRequest.from_json` copies them; the session update variants
    (:class:`ToolCallStarted`, :class:`ToolCallProgress`) copy them when decoded.
    """

    tool_call_id: str
    title: str | None = None
    kind: ToolKind | None = None
    status: ToolCallStatus | None = None
    content: list[ToolCallContent] | None = None
    locations: list[ToolCallLocation] | None = None
    raw_input_json: msgspec.Raw = msgspec.field(default=_ABSENT, name="rawInput")
    raw_output_json: msgspec.Raw = msgspec.field(default=_ABSENT, name="rawOutput")
    meta: _Meta = msgspec.field(default=None, name="_meta")

    @property
    def raw_input(self) -> Any:
        """The tool's arguments as decoded JSON (``None`` when absent or ``null``)."""
        return decode_raw(self.raw_input_json)

    @property
    def raw_output(self) -> Any:
        """The tool's result as decoded JSON (``None`` when absent or ``null``)."""
        return decode_raw(self.raw_output_json)


def own_raw_json(update: ToolCallUpdate) -> None:
    """Give ``update``'s ``rawInput``/``rawOutput`` bytes of their own: decoded, they
    are views that keep the whole message they came in alive. Called for what is
    kept (a pending question's tool call, a session update, ``from_json``'s
    result, a large message's); not copying on decode spares the copy for the
    requests a rule answers at once."""
    if update.raw_input_json:
        update.raw_input_json = update.raw_input_json.copy()
    if update.raw_output_json:
        update.raw_output_json = update.raw_output_json.copy()


# ------------------------------------------------------------------ the request


class PermissionRequest(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    """Params of ``session/request_permission``: which session, which tool call, which options.

    Fails closed (invariant 2): besides the type checks (``sessionId``, ``toolCall`` and
    ``options`` required; no ``null`` options or items; known option kinds), an empty
    ``session_id``, an empty ``tool_call.tool_call_id``, an empty ``options`` list, an
    empty ``option_id`` or a duplicate ``option_id`` raise :class:`ValueError` when
    constructed directly and :class:`msgspec.ValidationError` when decoded.
    """

    session_id: str
    tool_call: ToolCallUpdate
    options: tuple[PermissionOption, ...]
    meta: _Meta = msgspec.field(default=None, name="_meta")

    def __post_init__(self) -> None:
        if not self.session_id:
            raise ValueError("permission request with an empty `sessionId`")
        if not self.tool_call.tool_call_id:
            raise ValueError("permission request with an empty `toolCall.toolCallId`")
        options = self.options
        if len(options) == 2:  # most requests: allow or reject, checked without a set
            first, second = options[0].option_id, options[1].option_id
            if first and second and first != second:
                return
        if not options:
            raise ValueError("permission request offers no `options`")
        seen: set[str] = set()
        for option in options:
            if not option.option_id:
                raise ValueError("permission option with an empty `optionId`")
            if option.option_id in seen:
                raise ValueError(f"duplicate permission `optionId` {option.option_id!r}")
            seen.add(option.option_id)

    @classmethod
    def from_json(cls, data: bytes | str) -> PermissionRequest:
        """Decode the JSON params of a ``session/request_permission`` (e.g. in a test).

        Raises :class:`msgspec.ValidationError` (or :class:`msgspec.DecodeError`)
        for anything the client would answer ``cancelled`` without asking. The
        request holds nothing of ``data`` (which may be a buffer reused later).
        """
        request = permission_request_decoder.decode(data)
        own_raw_json(request.tool_call)
        return request

    @property
    def option_ids(self) -> frozenset[str]:
        """The ids of the offered options; a :class:`Selected` must name one of them."""
        return frozenset(option.option_id for option in self.options)

    def option(self, option_id: str) -> PermissionOption | None:
        """Return the offered option with id ``option_id``, or ``None`` if it was not offered."""
        for option in self.options:
            if option.option_id == option_id:
                return option
        return None


# ---------------------------------------------------------------- the decision


class _OutcomeBase(
    msgspec.Struct, tag_field="outcome", rename="camel", omit_defaults=True, gc=False
):
    """Base of the permission outcomes (discriminated by ``outcome``)."""


class Selected(_OutcomeBase, tag="selected"):
    """The user picked the offered option ``option_id``.

    Encodes to ``{"outcome": "selected", "optionId": …}``; ``Selected("allow")`` works.
    """

    option_id: str
    meta: _Meta = msgspec.field(default=None, name="_meta")


class Cancelled(_OutcomeBase, tag="cancelled"):
    """No option was picked (turn cancelled, request withdrawn, or failed closed).

    Encodes to ``{"outcome": "cancelled"}``.
    """

    meta: _Meta = msgspec.field(default=None, name="_meta")


Decision: TypeAlias = Selected | Cancelled
"""The outcome of a permission request (ACP ``RequestPermissionOutcome``)."""


class PermissionResponse(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    """Result of ``session/request_permission``: ``{"outcome": {"outcome": …}}``."""

    outcome: Decision
    meta: _Meta = msgspec.field(default=None, name="_meta")


# --------------------------------------------------------------------- cancel


class CancelRequestParams(msgspec.Struct, rename="camel", omit_defaults=True, gc=False):
    """Params of a request-cancel notification, in either dialect.

    The bridge dialect sends ``$/cancelRequest {"id": …}``, ACP sends
    ``$/cancel_request {"requestId": …}``; both keys are accepted. Use :attr:`target`.
    """

    id: int | str | None = None
    request_id: int | str | None = None
    meta: _Meta = msgspec.field(default=None, name="_meta")

    @property
    def target(self) -> int | str | None:
        """The id of the request to cancel (``id`` wins over ``requestId``), or ``None``.

        ``0`` is a real JSON-RPC id and is returned as such.
        """
        return self.id if self.id is not None else self.request_id


# -------------------------------------------------------------- session/update


class _SessionUpdateBase(
    msgspec.Struct, tag_field="sessionUpdate", rename="camel", omit_defaults=True
):
    """Base of the typed ``session/update`` variants (discriminated by ``sessionUpdate``)."""


class UserMessageChunk(_SessionUpdateBase, tag="user_message_chunk"):
    """A piece of the user's message (e.g. replayed by ``session/load``)."""

    content: ContentBlock


class AgentMessageChunk(_SessionUpdateBase, tag="agent_message_chunk"):
    """A piece of the agent's reply; text chunks are Markdown."""

    content: ContentBlock


class AgentThoughtChunk(_SessionUpdateBase, tag="agent_thought_chunk"):
    """A piece of the agent's reasoning."""

    content: ContentBlock


class ToolCallStarted(ToolCallUpdate, tag="tool_call", tag_field="sessionUpdate"):
    """A new tool call (``tool_call``): the fields of :class:`ToolCallUpdate`."""

    def __post_init__(self) -> None:
        own_raw_json(self)  # an update is kept (callbacks, a log): never a view of its message


class ToolCallProgress(ToolCallUpdate, tag="tool_call_update", tag_field="sessionUpdate"):
    """News of a tool call (``tool_call_update``): only the fields that changed."""

    def __post_init__(self) -> None:
        own_raw_json(self)  # (as ToolCallStarted)


class PlanEntry(msgspec.Struct, rename="camel", omit_defaults=True):
    """One step of the agent's plan."""

    content: str
    priority: PlanEntryPriority
    status: PlanEntryStatus


class Plan(_SessionUpdateBase, tag="plan"):
    """The agent's whole current plan (each update replaces the last)."""

    entries: list[PlanEntry]


class AvailableCommand(msgspec.Struct, rename="camel", omit_defaults=True):
    """A slash command the agent offers."""

    name: str
    description: str
    input: Any = None


class AvailableCommandsUpdate(_SessionUpdateBase, tag="available_commands_update"):
    """The commands the agent offers now."""

    available_commands: list[AvailableCommand]


class CurrentModeUpdate(_SessionUpdateBase, tag="current_mode_update"):
    """The session's mode changed."""

    current_mode_id: str


class UnknownUpdate(msgspec.Struct, frozen=True):
    """A ``session/update`` that is not typed here (a newer variant, or a known
    one with a value or shape this version does not know), passed on as decoded
    JSON: never an error. ``data`` is the whole ``update`` object."""

    session_update: str
    data: dict[str, Any]


_KnownUpdate: TypeAlias = (
    UserMessageChunk
    | AgentMessageChunk
    | AgentThoughtChunk
    | ToolCallStarted
    | ToolCallProgress
    | Plan
    | AvailableCommandsUpdate
    | CurrentModeUpdate
)
SessionUpdate: TypeAlias = _KnownUpdate | UnknownUpdate
"""The ``update`` of a ``session/update`` notification, typed leniently: what
:attr:`InboundNotification.update` holds, what the tool-call tracker folds and
what ``permclient.acp``'s ``on_update`` callbacks get."""


class _TypedSessionNotification(msgspec.Struct, rename="camel"):
    session_id: str
    update: _KnownUpdate


class _UntypedSessionNotification(msgspec.Struct, rename="camel"):
    session_id: str
    update: dict[str, Any]


_typed_session_update_decoder = msgspec.json.Decoder(_TypedSessionNotification)
_untyped_session_update_decoder = msgspec.json.Decoder(_UntypedSessionNotification)


def decode_session_update(params: bytes | Any) -> tuple[str, SessionUpdate]:
    """Decode the params of a ``session/update``: ``(session_id, update)``.

    ``params`` is their JSON text (one pass when the update is a typed variant);
    plain JSON values (a dict, as from a log) are accepted too, encoded first.
    An update that is not one of the typed variants, or is one with a value or a
    shape this version does not know, comes back as :class:`UnknownUpdate`;
    unknown fields are ignored. Raises :class:`msgspec.ValidationError` /
    :class:`msgspec.DecodeError` (or :class:`RecursionError` for JSON nested too
    deep) only when the params are not a session update at all (no string
    ``sessionId``, no ``update`` object with a ``sessionUpdate`` string).
    """
    if not isinstance(params, bytes | bytearray | memoryview | msgspec.Raw):
        params = encoder.encode(params)
    try:
        typed = _typed_session_update_decoder.decode(params)
    except msgspec.ValidationError:
        untyped = _untyped_session_update_decoder.decode(params)
        kind = untyped.update.get("sessionUpdate")
        if not isinstance(kind, str):
            why = "session/update without a `sessionUpdate` string"
            raise msgspec.ValidationError(why) from None
        return untyped.session_id, UnknownUpdate(kind, untyped.update)
    return typed.session_id, typed.update


# --------------------------------------------------------------------- codecs

permission_request_decoder = msgspec.json.Decoder(PermissionRequest)
"""Decodes ``session/request_permission`` params; raises :class:`msgspec.ValidationError`."""


class _PartlyKnownToolCall(msgspec.Struct, rename="camel"):
    tool_call_id: str
    title: str | None = None


class _PartlyKnownRequest(msgspec.Struct, rename="camel"):
    session_id: str
    tool_call: _PartlyKnownToolCall
    options: tuple[PermissionOption, ...]


_partly_known_decoder: Final = msgspec.json.Decoder(_PartlyKnownRequest)
# What a newer runtime may send that this version cannot type: a tool call's kind or
# status, or the type of its content (or of a content block inside it).
_UNKNOWN_VALUE: Final = re.compile(
    r"Invalid (enum )?value .* - at `\$\.toolCall\."
    r"(kind|status|content\[\d+\]\.type|content\[\d+\]\.content\.type)`"
)


def partly_known_request(params: msgspec.Raw | bytes, error: Exception) -> PermissionRequest | None:
    """The typed part of params that failed to decode (``error``) only because the
    tool call has a kind, status or content type this version does not know: the
    session, the tool call's id and title, and the options (which must be known:
    an answer is checked against them). ``None`` if anything else is wrong."""
    if not _UNKNOWN_VALUE.fullmatch(str(error)):
        return None
    try:
        loose = _partly_known_decoder.decode(params)
        call = ToolCallUpdate(loose.tool_call.tool_call_id, title=loose.tool_call.title)
        return PermissionRequest(loose.session_id, call, loose.options)
    except (msgspec.ValidationError, msgspec.DecodeError, ValueError, RecursionError):
        return None


permission_response_decoder = msgspec.json.Decoder(PermissionResponse)
"""Decodes a ``session/request_permission`` result."""

decision_decoder: msgspec.json.Decoder[Decision] = msgspec.json.Decoder(Decision)
"""Decodes a bare outcome object (``{"outcome": "selected", …}``)."""

cancel_params_decoder = msgspec.json.Decoder(CancelRequestParams)
"""Decodes ``$/cancelRequest`` / ``$/cancel_request`` params."""

encoder = msgspec.json.Encoder()
"""Encodes any of these Structs (or whole messages containing them) to JSON bytes."""
