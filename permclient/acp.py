"""The client's side of the Agent Client Protocol (ACP v1), on top of a :class:`Client`.

:class:`AcpAgent` wraps a client opened with ``dialect="acp"`` and speaks for it:
``initialize``, ``session/new``, ``session/load``, ``session/prompt``,
``session/cancel``, typed ``session/update`` notifications, and the optional client
capabilities, each off unless turned on: ``fs/read_text_file`` and
``fs/write_text_file`` confined to the session's working directory, and
``elicitation/create`` in form mode, routed per session like permission requests.
A method the client did not advertise is answered -32601 (the client's default).

    async with permclient.open_process(["my-agent", "--acp"], dialect="acp") as client:
        agent = AcpAgent(client, read_files=True)
        info = await agent.initialize()
        session = await agent.new_session("/path/to/project")
        with session.on_update(print), session.permission_handler(ask_the_user):
            result = await session.prompt("Add a test for the parser")
        print(result.stop_reason)
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias

import msgspec
import trio

from . import _workspace_fs
from ._client import Client, Registration
from ._errors import PermclientError, RequestError
from ._handlers import PermissionHandler
from ._messages import DECODE_ERRORS, ErrorCode
from ._notifications import InboundNotification
from ._wire import ContentBlock, TextContent, ToolCallUpdate

__all__ = [
    "PROTOCOL_VERSION",
    "AcpAgent",
    "AcpSession",
    "AgentCapabilities",
    "AgentMessageChunk",
    "AgentThoughtChunk",
    "AvailableCommand",
    "AvailableCommandsUpdate",
    "CurrentModeUpdate",
    "ElicitationHandler",
    "ElicitationRequest",
    "ElicitationResponse",
    "Implementation",
    "InitializeResult",
    "Plan",
    "PlanEntry",
    "PromptResult",
    "SessionUpdate",
    "ToolCallProgress",
    "ToolCallStarted",
    "UnknownUpdate",
    "UserMessageChunk",
    "decode_session_update",
]

log = logging.getLogger("permclient")

PROTOCOL_VERSION: Final = 1
"""The ACP version this module speaks."""

MAX_READ_BYTES: Final = 16 * 1024 * 1024
"""``fs/read_text_file`` refuses files larger than this (an error response)."""

_INVALID_PARAMS: Final = int(ErrorCode.INVALID_PARAMS)
_INTERNAL_ERROR: Final = int(ErrorCode.INTERNAL_ERROR)

# ------------------------------------------------------------------ initialize


class Implementation(msgspec.Struct, rename="camel", omit_defaults=True):
    """Name and version of a client or agent (ACP ``Implementation``)."""

    name: str
    version: str
    title: str | None = None


class AgentCapabilities(msgspec.Struct, rename="camel", omit_defaults=True):
    """What the agent said it supports; anything unknown is ignored."""

    load_session: bool = False
    prompt_capabilities: dict[str, Any] | None = None
    mcp_capabilities: dict[str, Any] | None = None


class InitializeResult(msgspec.Struct, rename="camel", omit_defaults=True):
    """The agent's answer to ``initialize``."""

    protocol_version: int
    agent_capabilities: AgentCapabilities = msgspec.field(default_factory=AgentCapabilities)
    agent_info: Implementation | None = None
    auth_methods: list[Any] = msgspec.field(default_factory=list)


class _NewSessionResult(msgspec.Struct, rename="camel"):
    session_id: str


StopReason: TypeAlias = str
"""``end_turn``, ``max_tokens``, ``max_turn_requests``, ``refusal`` or ``cancelled``
(kept as a string: a newer agent may send another)."""


class PromptResult(msgspec.Struct, rename="camel", omit_defaults=True):
    """How a prompt turn ended. A turn the agent answered -32800 reads ``cancelled``."""

    stop_reason: StopReason


# -------------------------------------------------------------- session/update


class _Update(msgspec.Struct, tag_field="sessionUpdate", rename="camel", omit_defaults=True):
    """Base of the typed ``session/update`` variants (discriminated by ``sessionUpdate``)."""


class UserMessageChunk(_Update, tag="user_message_chunk"):
    """A piece of the user's message (e.g. replayed by ``session/load``)."""

    content: ContentBlock


class AgentMessageChunk(_Update, tag="agent_message_chunk"):
    """A piece of the agent's reply; text chunks are Markdown."""

    content: ContentBlock


class AgentThoughtChunk(_Update, tag="agent_thought_chunk"):
    """A piece of the agent's reasoning."""

    content: ContentBlock


class ToolCallStarted(ToolCallUpdate, tag="tool_call", tag_field="sessionUpdate"):
    """A new tool call (``tool_call``): the fields of :class:`ToolCallUpdate`."""


class ToolCallProgress(ToolCallUpdate, tag="tool_call_update", tag_field="sessionUpdate"):
    """News of a tool call (``tool_call_update``): only the fields that changed."""


class PlanEntry(msgspec.Struct, rename="camel", omit_defaults=True):
    """One step of the agent's plan."""

    content: str
    priority: Literal["high", "medium", "low"]
    status: Literal["pending", "in_progress", "completed"]


class Plan(_Update, tag="plan"):
    """The agent's whole current plan (each update replaces the last)."""

    entries: list[PlanEntry]


class AvailableCommand(msgspec.Struct, rename="camel", omit_defaults=True):
    """A slash command the agent offers."""

    name: str
    description: str
    input: Any = None


class AvailableCommandsUpdate(_Update, tag="available_commands_update"):
    """The commands the agent offers now."""

    available_commands: list[AvailableCommand]


class CurrentModeUpdate(_Update, tag="current_mode_update"):
    """The session's mode changed."""

    current_mode_id: str


class UnknownUpdate(msgspec.Struct, frozen=True):
    """A ``session/update`` this module does not type (a newer variant, or a known
    one with values it does not know), passed on as decoded JSON: never an error."""

    session_update: str
    data: dict[str, Any]


SessionUpdate: TypeAlias = (
    UserMessageChunk
    | AgentMessageChunk
    | AgentThoughtChunk
    | ToolCallStarted
    | ToolCallProgress
    | Plan
    | AvailableCommandsUpdate
    | CurrentModeUpdate
    | UnknownUpdate
)
"""What :meth:`AcpSession.on_update` callbacks get."""


class _TypedNotification(msgspec.Struct, rename="camel"):
    session_id: str
    update: (
        UserMessageChunk
        | AgentMessageChunk
        | AgentThoughtChunk
        | ToolCallStarted
        | ToolCallProgress
        | Plan
        | AvailableCommandsUpdate
        | CurrentModeUpdate
    )


class _UntypedNotification(msgspec.Struct, rename="camel"):
    session_id: str
    update: dict[str, Any]


_typed_decoder: Final = msgspec.json.Decoder(_TypedNotification)
_untyped_decoder: Final = msgspec.json.Decoder(_UntypedNotification)


def decode_session_update(params: bytes | Any) -> tuple[str, SessionUpdate]:
    """Decode the params of a ``session/update``: ``(session_id, update)``.

    ``params`` is their JSON text, or the decoded JSON (as notification callbacks
    get it).
    An update that is not one of the typed variants comes back as
    :class:`UnknownUpdate`. Raises :class:`msgspec.ValidationError` /
    :class:`msgspec.DecodeError` only when the params are not a session update at
    all (no ``sessionId``, no ``update`` object with a ``sessionUpdate`` string).
    """
    if not isinstance(params, bytes | bytearray | memoryview | msgspec.Raw):
        params = msgspec.json.encode(params)  # rawInput is kept as JSON text
    try:
        typed = _typed_decoder.decode(params)
    except msgspec.ValidationError:
        untyped = _untyped_decoder.decode(params)
        kind = untyped.update.get("sessionUpdate")
        if not isinstance(kind, str):
            why = "session/update without a `sessionUpdate` string"
            raise msgspec.ValidationError(why) from None
        return untyped.session_id, UnknownUpdate(kind, untyped.update)
    return typed.session_id, typed.update


# ------------------------------------------------------------------ elicitation


class ElicitationRequest(msgspec.Struct, rename="camel", omit_defaults=True):
    """An ``elicitation/create`` in form mode: fill in ``requested_schema``."""

    message: str
    requested_schema: dict[str, Any]
    session_id: str | None = None
    tool_call_id: str | None = None
    mode: str = "form"


class ElicitationResponse(msgspec.Struct, omit_defaults=True):
    """The answer: ``accept`` (with ``content``), ``decline`` or ``cancel``."""

    action: Literal["accept", "decline", "cancel"]
    content: dict[str, Any] | None = None


ElicitationHandler: TypeAlias = Callable[[ElicitationRequest], Awaitable[ElicitationResponse]]
_CANCEL_ELICITATION: Final = ElicitationResponse("cancel")


# -------------------------------------------------------------- file system


class _ReadParams(msgspec.Struct, rename="camel"):
    session_id: str
    path: str
    line: int | None = None
    limit: int | None = None


class _WriteParams(msgspec.Struct, rename="camel"):
    session_id: str
    path: str
    content: str


# ----------------------------------------------------------------- the agent


class AcpAgent:
    """An ACP agent as seen from the client: one per connection.

    ``read_files`` / ``write_files`` / ``elicitation`` advertise and serve those
    client capabilities (all off by default). File access is confined to the
    working directory of the session the request names (after resolving
    symbolic links, and never through one that appears later, a second hard link,
    a FIFO or a device); anything else is an error response, never a read or write.
    """

    def __init__(
        self,
        client: Client,
        *,
        client_info: Implementation | None = None,
        read_files: bool = False,
        write_files: bool = False,
        elicitation: bool = False,
    ) -> None:
        if client.dialect != "acp":
            raise ValueError("AcpAgent needs a client opened with dialect='acp'")
        from . import __version__

        self.client = client
        self.client_info = client_info or Implementation("permclient", __version__)
        self.read_files = read_files
        self.write_files = write_files
        self.elicitation = elicitation
        self.info: InitializeResult | None = None
        self._roots: dict[str, Path] = {}
        self._elicitation_handlers: dict[str, list[ElicitationHandler]] = {}
        self._registrations: list[Registration] = []

    @property
    def capabilities(self) -> dict[str, Any]:
        """The ``clientCapabilities`` sent with ``initialize``."""
        caps: dict[str, Any] = {
            "fs": {"readTextFile": self.read_files, "writeTextFile": self.write_files},
            "terminal": False,
        }
        if self.elicitation:
            caps["elicitation"] = {"form": {}}
        return caps

    async def initialize(self) -> InitializeResult:
        """Send ``initialize`` (protocol version 1, client info, capabilities).

        The handlers for the advertised capabilities are in place before it is
        sent. Raises :class:`PermclientError` if the agent answers with a protocol
        version other than 1, and what :meth:`Client.request` raises.
        """
        if self.read_files:
            self._registrations.append(self.client.on_request("fs/read_text_file", self._read))
        if self.write_files:
            self._registrations.append(self.client.on_request("fs/write_text_file", self._write))
        if self.elicitation:
            self._registrations.append(
                self.client.on_request(
                    "elicitation/create", self._elicit, cancelled_result=_CANCEL_ELICITATION
                )
            )
        params = {
            "protocolVersion": PROTOCOL_VERSION,
            "clientCapabilities": self.capabilities,
            "clientInfo": self.client_info,
        }
        info = await self.client.request("initialize", params, result_type=InitializeResult)
        if info.protocol_version != PROTOCOL_VERSION:
            raise PermclientError(
                f"the agent speaks ACP version {info.protocol_version}, not {PROTOCOL_VERSION}"
            )
        self.info = info
        return info

    async def new_session(self, cwd: str | Path, mcp_servers: Sequence[Any] = ()) -> AcpSession:
        """``session/new`` in ``cwd`` (an absolute path); returns the session."""
        root = _absolute(cwd)
        result = await self.client.request(
            "session/new",
            {"cwd": str(root), "mcpServers": list(mcp_servers)},
            result_type=_NewSessionResult,
        )
        return self._session(result.session_id, root)

    async def load_session(
        self, session_id: str, cwd: str | Path, mcp_servers: Sequence[Any] = ()
    ) -> AcpSession:
        """``session/load``: the agent replays the session as updates, then answers.

        Register :meth:`AcpSession.on_update` callbacks first to see the replay:
        use :meth:`session` to get the session before loading it. Raises
        :class:`PermclientError` if the agent did not advertise ``loadSession``.
        """
        if self.info is None or not self.info.agent_capabilities.load_session:
            raise PermclientError("the agent does not support session/load")
        root = _absolute(cwd)
        session = self._session(session_id, root)
        await self.client.request(
            "session/load",
            {"sessionId": session_id, "cwd": str(root), "mcpServers": list(mcp_servers)},
        )
        return session

    def session(self, session_id: str, cwd: str | Path) -> AcpSession:
        """A handle on a session by id (e.g. to register callbacks before loading it)."""
        return self._session(session_id, _absolute(cwd))

    def close(self) -> None:
        """Remove the capability handlers (the client answers -32601 again)."""
        for registration in self._registrations:
            registration.close()
        self._registrations.clear()

    def _session(self, session_id: str, root: Path) -> AcpSession:
        self._roots[session_id] = root
        return AcpSession(self, session_id, root)

    # ---------------------------------------------------------- capabilities

    def _confined(self, session_id: str, path_text: str) -> tuple[Path, tuple[str, ...]]:
        """The session's resolved directory and the parts of ``path_text`` below it."""
        root = self._roots.get(session_id)
        if root is None:
            raise RequestError(_INVALID_PARAMS, f"unknown session {session_id!r}")
        path = Path(path_text)
        if not path.is_absolute():
            raise RequestError(_INVALID_PARAMS, f"not an absolute path: {path_text!r}")
        try:
            resolved_root = root.resolve()
        except (OSError, RuntimeError) as exc:
            reason = _workspace_fs.escape_non_utf8(f"cannot resolve {root}: {exc}")
            raise RequestError(_INTERNAL_ERROR, reason) from None
        try:
            return resolved_root, _workspace_fs.locate(resolved_root, path)
        except _workspace_fs.Refused as exc:
            raise _fs_error(exc) from None

    async def _read(self, params: Any) -> dict[str, Any]:
        request = _convert(params, _ReadParams)
        root, parts = self._confined(request.session_id, request.path)
        try:
            data = await trio.to_thread.run_sync(
                _workspace_fs.read_file, root, parts, MAX_READ_BYTES
            )
        except _workspace_fs.Refused as exc:
            raise _fs_error(exc) from None
        text = data.decode("utf-8", errors="replace")
        if request.line is not None or request.limit is not None:
            lines = text.splitlines(keepends=True)
            start = max((request.line or 1) - 1, 0)
            end = None if request.limit is None else start + max(request.limit, 0)
            text = "".join(lines[start:end])
        return {"content": text}

    async def _write(self, params: Any) -> dict[str, Any]:
        request = _convert(params, _WriteParams)
        root, parts = self._confined(request.session_id, request.path)
        data = request.content.encode("utf-8")
        try:
            await trio.to_thread.run_sync(_workspace_fs.replace_file, root, parts, data)
        except _workspace_fs.Refused as exc:
            raise _fs_error(exc) from None
        return {}

    @contextmanager
    def _elicitation_handler(self, session_id: str, handler: ElicitationHandler) -> Iterator[None]:
        stack = self._elicitation_handlers.setdefault(session_id, [])
        stack.append(handler)
        try:
            yield
        finally:
            stack.remove(handler)
            if not stack:
                del self._elicitation_handlers[session_id]

    async def _elicit(self, params: Any) -> ElicitationResponse:
        try:
            request = msgspec.convert(params, ElicitationRequest)
        except msgspec.ValidationError as exc:
            log.warning("malformed elicitation answered cancel: %s", exc)
            return _CANCEL_ELICITATION
        stack = self._elicitation_handlers.get(request.session_id or "")
        if request.mode != "form" or not stack:
            log.warning(
                "elicitation for session %r (mode %s) has no handler: answered cancel",
                request.session_id,
                request.mode,
            )
            return _CANCEL_ELICITATION
        try:
            answer = await stack[-1](request)
        except Exception:
            log.exception("elicitation handler failed; answered cancel")
            return _CANCEL_ELICITATION
        if not isinstance(answer, ElicitationResponse):
            log.warning("elicitation handler returned %r; answered cancel", answer)
            return _CANCEL_ELICITATION
        if answer.action == "accept" and answer.content is None:
            return ElicitationResponse("accept", {})
        return answer


class AcpSession:
    """One ACP session: prompt it, watch its updates, answer its questions."""

    def __init__(self, agent: AcpAgent, session_id: str, cwd: Path) -> None:
        self.agent = agent
        self.id = session_id
        self.cwd = cwd

    def __repr__(self) -> str:
        return f"AcpSession({self.id!r}, cwd={str(self.cwd)!r})"

    async def prompt(self, prompt: str | Sequence[ContentBlock]) -> PromptResult:
        """Send ``session/prompt`` and wait for the turn to end.

        ``prompt`` is text or a list of content blocks. If the agent answers the
        prompt with -32800 (request cancelled), the result reads ``cancelled``. If
        the caller is cancelled, ``session/cancel`` goes out for this session and
        its pending permission requests are answered ``cancelled`` at once.
        """
        blocks = [TextContent(prompt)] if isinstance(prompt, str) else list(prompt)
        try:
            result: PromptResult = await self.agent.client.request(
                "session/prompt",
                {"sessionId": self.id, "prompt": blocks},
                result_type=PromptResult,
            )
        except RequestError as exc:
            if exc.code == ErrorCode.REQUEST_CANCELLED:
                return PromptResult("cancelled")
            raise
        return result

    async def cancel(self) -> None:
        """Send ``session/cancel``: pending permission requests answer ``cancelled`` now."""
        await self.agent.client.notify("session/cancel", {"sessionId": self.id})

    def permission_handler(
        self, handler: PermissionHandler, *, timeout: float | None = None
    ) -> Any:
        """:meth:`Client.permission_handler` for this session (a context manager)."""
        return self.agent.client.permission_handler(self.id, handler, timeout=timeout)

    def elicitation_handler(self, handler: ElicitationHandler) -> Any:
        """Route this session's ``elicitation/create`` (form mode) to ``handler``.

        A context manager, like :meth:`permission_handler`: nesting shadows, and
        with no handler an elicitation is answered ``cancel``. Needs
        ``AcpAgent(elicitation=True)`` (otherwise the agent was never told).
        """
        return self.agent._elicitation_handler(self.id, handler)

    def on_update(self, callback: Callable[[SessionUpdate], None]) -> Registration:
        """Call ``callback(update)`` for each ``session/update`` of this session.

        Runs synchronously in the reader, in arrival order (updates sent before
        the session existed here are held and replayed). An update that does not
        decode at all is logged and skipped; an unknown one is an
        :class:`UnknownUpdate`.
        """

        def typed(notification: InboundNotification) -> None:
            if notification.method != "session/update":
                return
            try:
                _, update = decode_session_update(notification.params)
            except DECODE_ERRORS as exc:
                log.warning("unreadable session/update for %s skipped: %s", self.id, exc)
                return
            callback(update)

        return self.agent.client.on_session_notification(self.id, typed)


def _absolute(cwd: str | Path) -> Path:
    path = Path(cwd)
    if not path.is_absolute():
        raise ValueError(f"an ACP session's cwd must be absolute, not {str(cwd)!r}")
    return path


def _convert(params: Any, kind: type[Any]) -> Any:
    try:
        return msgspec.convert(params, kind)
    except msgspec.ValidationError as exc:
        raise RequestError(_INVALID_PARAMS, f"invalid params: {exc}") from None


def _fs_error(refused: _workspace_fs.Refused) -> RequestError:
    """A refusal as the error response: -32002 for no such file, -32603 when the
    system failed, else -32602 (the request asks for what is not served)."""
    if refused.kind == "missing":
        return RequestError(ErrorCode.RESOURCE_NOT_FOUND, refused.reason)
    if refused.kind == "failed":
        return RequestError(_INTERNAL_ERROR, refused.reason)
    return RequestError(_INVALID_PARAMS, refused.reason)
