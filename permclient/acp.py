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
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Final, Literal, TypeAlias

import msgspec

from ._acp_fs import MAX_READ_BYTES, FileService
from ._client import Client, Registration
from ._errors import PermclientError, RequestError
from ._handlers import PermissionHandler
from ._messages import ErrorCode
from ._notifications import InboundNotification
from ._wire import (
    AgentMessageChunk,
    AgentThoughtChunk,
    AvailableCommand,
    AvailableCommandsUpdate,
    ContentBlock,
    CurrentModeUpdate,
    Plan,
    PlanEntry,
    SessionUpdate,
    TextContent,
    ToolCallProgress,
    ToolCallStarted,
    UnknownUpdate,
    UserMessageChunk,
    decode_session_update,
)

__all__ = [
    "MAX_READ_BYTES",
    "PROTOCOL_VERSION",
    "AcpAgent",
    "AcpSession",
    "AgentCapabilities",
    "AgentMessageChunk",
    "AgentThoughtChunk",
    "AvailableCommand",
    "AvailableCommandsUpdate",
    "CurrentModeUpdate",
    "ElicitationAction",
    "ElicitationHandler",
    "ElicitationRequest",
    "ElicitationResponse",
    "Implementation",
    "InitializeResult",
    "Plan",
    "PlanEntry",
    "PromptResult",
    "SessionUpdate",
    "StopReason",
    "ToolCallProgress",
    "ToolCallStarted",
    "UnknownUpdate",
    "UserMessageChunk",
    "decode_session_update",
]

log = logging.getLogger("permclient")

PROTOCOL_VERSION: Final = 1
"""The ACP version this module speaks."""


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


# ------------------------------------------------------------------ elicitation


class ElicitationRequest(msgspec.Struct, rename="camel", omit_defaults=True):
    """An ``elicitation/create`` in form mode: fill in ``requested_schema``."""

    message: str
    requested_schema: dict[str, Any]
    session_id: str | None = None
    tool_call_id: str | None = None
    mode: str = "form"


ElicitationAction: TypeAlias = Literal["accept", "decline", "cancel"]
"""How an elicitation is answered."""


class ElicitationResponse(msgspec.Struct, omit_defaults=True):
    """The answer: ``accept`` (with ``content``), ``decline`` or ``cancel``."""

    action: ElicitationAction
    content: dict[str, Any] | None = None


ElicitationHandler: TypeAlias = Callable[[ElicitationRequest], Awaitable[ElicitationResponse]]
_CANCEL_ELICITATION: Final = ElicitationResponse("cancel")


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
        self._files = FileService()
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
            self._registrations.append(
                self.client.on_request("fs/read_text_file", self._files.read)
            )
        if self.write_files:
            self._registrations.append(
                self.client.on_request("fs/write_text_file", self._files.write)
            )
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
        self._files.add_session(session_id, root)
        return AcpSession(self, session_id, root)

    # ---------------------------------------------------------- capabilities

    def _elicitation_handler(self, session_id: str, handler: ElicitationHandler) -> Registration:
        stack = self._elicitation_handlers.setdefault(session_id, [])
        stack.append(handler)

        def undo() -> None:
            stack.remove(handler)
            if not stack and self._elicitation_handlers.get(session_id) is stack:
                del self._elicitation_handlers[session_id]

        return Registration(undo)

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
    ) -> Registration:
        """:meth:`Client.permission_handler` for this session: a rule, a deferred
        handler or an async one; the :class:`~permclient.Registration` undoes it."""
        return self.agent.client.permission_handler(self.id, handler, timeout=timeout)

    def elicitation_handler(self, handler: ElicitationHandler) -> Registration:
        """Route this session's ``elicitation/create`` (form mode) to ``handler``.

        A :class:`~permclient.Registration`, like :meth:`permission_handler`: nesting shadows, and
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
            update = notification.update  # decoded once, shared with the tracker
            if update is None:
                log.warning("unreadable session/update for %s skipped", self.id)
                return
            callback(update)

        return self.agent.client.on_session_notification(self.id, typed)


def _absolute(cwd: str | Path) -> Path:
    path = Path(cwd)
    if not path.is_absolute():
        raise ValueError(f"an ACP session's cwd must be absolute, not {str(cwd)!r}")
    return path
