"""The host behind ``simhost serve``: one agent, its sessions, and the views' requests.

Questions go through a :class:`permclient.relay.Relay` (registered as every
session's permission handler); everything else a view asks for (a session, a
prompt, a turn's cancel, a preset) goes through :class:`ServeHost`, which runs it
against the agent (a :class:`~simhost.chat.backends.Backend`, as ``simhost chat``
does) and tells every view what happened as :class:`SessionEvent` messages.

A preset switch is held, last write wins, and applied when the session's next
turn starts: a switch never changes what a running turn asks.
"""

from __future__ import annotations

import functools
from collections import deque
from collections.abc import Awaitable, Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Final

import trio

from permclient import (
    Client,
    ConnectionClosed,
    InboundNotification,
    PermclientError,
    RemoteProtocolError,
    RequestError,
)
from permclient.relay import Relay
from simhost._updates import message_text
from simhost.audit import AuditLog
from simhost.chat.backends import Backend, Unsupported
from simhost.rulebook import RuleBook

from .editor import EditorDesk
from .protocol import (
    Error,
    Presets,
    Reply,
    ServerMessage,
    SessionEvent,
    SessionInfo,
    Sessions,
    with_ref,
)

__all__ = ["Listener", "ServeHost", "ServedSession"]

# Host messages a view may fall behind by before it is dropped (it reconnects).
LISTENER_BUFFER: Final = 1024
# The longest agent text a view is sent in one message when chunks are merged.
MERGED_TEXT: Final = 16 * 1024
# A request to the agent on a view's behalf that takes longer than this is given up.
AGENT_WAIT_S: Final = 30
# A view's requests to the agent (sessions, presets) in flight at once, at most.
REQUESTS_PER_VIEW: Final = 8


async def _cancel_elicitation(params: object) -> dict[str, str]:
    return {"action": "cancel"}


class ServedSession:
    """A session this host opened, and what its views need to know of it."""

    def __init__(self, session_id: str, title: str | None) -> None:
        self.session_id = session_id
        self.title = title or ""
        self.turn: trio.CancelScope | None = None
        self.presets: list[str] = []
        self.preset: str | None = None  # the one in force, once known
        self.applying: str | None = None  # on its way to the agent as a turn starts
        self.held_preset: str | None = None  # applied when the next turn starts


class Listener:
    """One view's host messages, in order, until :meth:`close`.

    Chunks of an agent's reply that the view has not taken yet are merged (per
    session, up to MERGED_TEXT characters), so a burst of output is a few messages;
    a view that falls more than LISTENER_BUFFER messages behind anyway is dropped
    (:attr:`dropped`: it reconnects)."""

    def __init__(self) -> None:
        self.dropped = False
        self.requests = 0  # its requests to the agent not answered yet
        self._queue: deque[ServerMessage] = deque()
        self._taken = 0  # messages taken from the queue so far
        self._text_at: dict[str, int] = {}  # session -> its latest queued message's number
        self._closed = False
        self._ready = trio.Event()

    def deliver(self, message: ServerMessage) -> None:
        if self._closed:
            return
        queue = self._queue
        session_id = getattr(message, "session_id", None)
        if isinstance(message, SessionEvent) and message.event == "message":
            index = self._text_at.get(message.session_id, -1) - self._taken
            if 0 <= index < len(queue):
                last = queue[index]
                assert isinstance(last, SessionEvent)
                if len(last.text) + len(message.text) <= MERGED_TEXT:
                    # (later than what other sessions queued meanwhile: they are theirs)
                    queue[index] = SessionEvent(
                        last.session_id, "message", last.text + message.text
                    )
                    return
        if len(queue) >= LISTENER_BUFFER:
            self.dropped = True
            queue.clear()
            self.close()
            return
        if isinstance(message, SessionEvent) and message.event == "message":
            self._text_at[message.session_id] = self._taken + len(queue)
        elif session_id is not None:
            self._text_at.pop(session_id, None)  # (what follows comes after it)
        queue.append(message)
        self._ready.set()

    async def receive(self) -> ServerMessage:
        """The next message; raises :class:`trio.EndOfChannel` once closed and taken."""
        while not self._queue:
            if self._closed:
                raise trio.EndOfChannel
            await self._ready.wait()
            self._ready = trio.Event()
        self._taken += 1
        return self._queue.popleft()

    def __aiter__(self) -> Listener:
        return self

    async def __anext__(self) -> ServerMessage:
        try:
            return await self.receive()
        except trio.EndOfChannel:
            raise StopAsyncIteration from None

    def close(self) -> None:
        self._closed = True
        self._ready.set()


class ServeHost:
    """Sessions, prompts, turns and presets for the views of one agent."""

    def __init__(
        self,
        client: Client,
        backend: Backend,
        relay: Relay,
        *,
        rulebook: RuleBook | None = None,
        audit: AuditLog | None = None,
    ) -> None:
        self.client = client
        self.backend = backend
        self.relay = relay
        self.sessions: dict[str, ServedSession] = {}
        self._listeners: set[Listener] = set()
        self.desk = (
            EditorDesk(relay, rulebook, audit, self._broadcast) if rulebook is not None else None
        )
        """Editor rules, batches and the audit trail (``None``: questions go to the views)."""
        self._registrations = ExitStack()
        self._nursery: trio.Nursery | None = None

    async def run(self, *, task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        """Own the turns' tasks until cancelled; the registrations end with it.

        An ``elicitation/create`` is never advertised here (a view has no form to
        fill in); one that comes anyway is answered ``cancel``."""
        with self._registrations:
            self._registrations.enter_context(
                self.client.on_request("elicitation/create", _cancel_elicitation)
            )
            async with trio.open_nursery() as nursery:
                self._nursery = nursery
                task_status.started()
                await trio.sleep_forever()

    # ------------------------------------------------------------------ views

    @contextmanager
    def listen(self) -> Iterator[Listener]:
        listener = Listener()
        self._listeners.add(listener)
        try:
            yield listener
        finally:
            self._listeners.discard(listener)
            listener.close()

    def _broadcast(self, message: ServerMessage) -> None:
        for listener in list(self._listeners):
            listener.deliver(message)

    def session_list(self) -> Sessions:
        waiting: dict[str, int] = {}
        for question in self.relay.pending():
            waiting[question.session_id] = waiting.get(question.session_id, 0) + 1
        return Sessions(
            [
                SessionInfo(s.session_id, s.title, waiting.get(s.session_id, 0), s.turn is not None)
                for s in self.sessions.values()
            ]
        )

    # --------------------------------------------------------------- sessions

    async def new_session(self, view: str = "") -> str:
        """Open a session on the agent; every view is told (``created``, naming the
        ``view`` that asked for it)."""
        session_id, title = await self.backend.new_session(None)
        if not session_id:
            raise RemoteProtocolError(f"the {self.backend.role} opened a session with no id")
        if session_id not in self.sessions:
            self.sessions[session_id] = ServedSession(session_id, title)
            # (with editor rules, the desk's: what no rule decides, the views do)
            handler = self.desk.handler if self.desk is not None else self.relay.handler
            self._registrations.enter_context(self.client.permission_handler(session_id, handler))
            self._registrations.enter_context(
                self.client.on_session_notification(
                    session_id, functools.partial(self._on_notification, session_id)
                )
            )
        title = self.sessions[session_id].title
        self._broadcast(SessionEvent(session_id, "created", title, view))
        return session_id

    def _on_notification(self, session_id: str, notification: InboundNotification) -> None:
        update = notification.update
        text = message_text(update) if update is not None else None
        if text:
            self._broadcast(SessionEvent(session_id, "message", text))

    def _session(self, session_id: str) -> ServedSession | Error:
        session = self.sessions.get(session_id)
        return session if session is not None else Error("no such session")

    # ------------------------------------------------------------------ turns

    def prompt(self, session_id: str, text: str) -> Error | None:
        """Start a turn with ``text``; an :class:`Error` if the session cannot take one."""
        session = self._session(session_id)
        if isinstance(session, Error):
            return session
        if session.turn is not None:
            return Error("the session already has a turn running: wait, or cancel it")
        assert self._nursery is not None
        session.turn = trio.CancelScope()
        self._nursery.start_soon(self._turn, session, session.turn, text)
        return None

    async def _turn(self, session: ServedSession, scope: trio.CancelScope, text: str) -> None:
        self._broadcast(SessionEvent(session.session_id, "turn_started"))
        ended = "cancelled"
        try:
            with scope:
                if session.held_preset is not None:
                    await self._apply_held_preset(session)
                ended = await self.backend.prompt(session.session_id, text)
        except (Unsupported, PermclientError, trio.TooSlowError) as exc:
            ended = f"error: {self._why(exc)}"
        finally:
            session.turn = None
            self._broadcast(SessionEvent(session.session_id, "turn_ended", ended))

    def cancel_turn(self, session_id: str) -> Error | None:
        """Cancel the session's turn: permclient answers its questions ``cancelled``
        (the relay withdraws them for every view) and tells the agent."""
        session = self._session(session_id)
        if isinstance(session, Error):
            return session
        if session.turn is None:
            return Error("the session has no turn running")
        session.turn.cancel()
        return None

    # ---------------------------------------------------------------- presets

    async def presets(self, session_id: str) -> Presets | Error:
        session = self._session(session_id)
        if isinstance(session, Error):
            return session
        if session.preset is None:
            known = await self.backend.permissions(session_id)  # (raises Unsupported)
            session.presets = [preset.preset_id for preset in known.presets]
            session.preset = known.preset_id
        return self._presets_of(session)

    async def set_preset(self, session_id: str, preset: str) -> Error | None:
        """Hold ``preset`` for the session's next turn (the last switch wins); every
        view is told (``presets``)."""
        listing = await self.presets(session_id)
        if isinstance(listing, Error):
            return listing
        if preset not in listing.presets:
            return Error(f"no such preset: the session has {', '.join(listing.presets)}")
        session = self.sessions[session_id]
        in_force = session.applying or session.preset  # (what the next turn starts with)
        session.held_preset = None if preset == in_force else preset
        self._broadcast(self._presets_of(session))
        return None

    async def _apply_held_preset(self, session: ServedSession) -> None:
        """Send the held switch from a task of the host's own: once the agent has the
        request, a cancelled turn must not leave the host believing another preset
        (the turn stops waiting; the switch still completes, or fails, here)."""
        held, session.held_preset = session.held_preset, None
        assert held is not None and self._nursery is not None
        session.applying = held
        failed: list[Exception] = []
        applied = trio.Event()

        async def apply() -> None:
            try:
                with trio.fail_after(AGENT_WAIT_S):
                    session.preset = await self.backend.set_permission(session.session_id, held)
            except (Unsupported, PermclientError, trio.TooSlowError) as exc:
                failed.append(exc)  # (the turn says why)
                if session.held_preset is None:  # held again: the next turn tries again
                    session.held_preset = held
            finally:
                session.applying = None
                self._broadcast(self._presets_of(session))
                applied.set()

        self._nursery.start_soon(apply)
        await applied.wait()
        if failed:
            raise failed[0]

    @staticmethod
    def _presets_of(session: ServedSession) -> Presets:
        pending = session.held_preset or session.applying
        return Presets(session.session_id, list(session.presets), session.preset or "", pending)

    def start_request(
        self,
        listener: Listener,
        request: Callable[[], Awaitable[Reply | None]],
        ref: str | None = None,
    ) -> None:
        """Run a view's request against the agent in the host's own task (a view that
        goes away does not abandon it halfway), within :data:`AGENT_WAIT_S`; its
        reply, or the :class:`Error` that says why there is none, goes to that view
        with the request's ``ref``. A view has at most REQUESTS_PER_VIEW of them in
        flight."""
        assert self._nursery is not None
        if listener.requests >= REQUESTS_PER_VIEW:
            busy = Error(f"{REQUESTS_PER_VIEW} requests are in flight: wait for them")
            listener.deliver(with_ref(busy, ref))
            return
        listener.requests += 1
        self._nursery.start_soon(self._request, listener, request, ref)

    async def _request(
        self,
        listener: Listener,
        request: Callable[[], Awaitable[Reply | None]],
        ref: str | None,
    ) -> None:
        reply: Reply | None
        try:
            with trio.fail_after(AGENT_WAIT_S):
                reply = await request()
        except (Unsupported, PermclientError, trio.TooSlowError) as exc:
            reply = Error(self._why(exc))
        finally:
            listener.requests -= 1
        if reply is not None:
            listener.deliver(with_ref(reply, ref))

    def _why(self, exc: Exception) -> str:
        """What a view is told of a request to the agent that failed."""
        role = self.backend.role
        if isinstance(exc, trio.TooSlowError):
            return f"the {role} did not answer within {AGENT_WAIT_S} s"
        if isinstance(exc, RequestError):
            return f"the {role} answered with an error {exc}"
        if isinstance(exc, ConnectionClosed):
            return f"the {role} connection is gone ({exc})"
        if isinstance(exc, Unsupported):
            return str(exc)
        return f"the {role} answered what this host cannot read ({exc})"
