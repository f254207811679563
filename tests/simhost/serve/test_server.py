"""``simhost serve``'s HTTP and WebSocket side, through a real HTTP client and a real
WebSocket client, against hypercorn on a real socket."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
import trio.testing
from trio_websocket import ConnectionClosed, ConnectionRejected

from permclient.relay import Relay
from simhost.serve.protocol import MAX_MESSAGE, Presets
from simhost.serve.server import SECURITY_HEADERS, Gate, serve_relay
from tests.support.peer import CANCELLED, connected, selected
from tests.support.serving import (
    TOKEN,
    WAIT_S,
    freed_quietly,
    next_message,
    opened,
    send,
    sockets_freed_quietly,
    view,
)

sockets_freed_quietly = pytest.fixture(autouse=True)(sockets_freed_quietly)


@asynccontextmanager
async def serving(relay: Relay) -> AsyncIterator[str]:
    """The relay served on 127.0.0.1 (a free port); yields ``host:port``."""
    stop = trio.Event()
    async with trio.open_nursery() as nursery:
        authority = await nursery.start(serve_relay, relay, Gate(TOKEN), "127.0.0.1", 0, stop.wait)
        try:
            yield authority
        finally:
            stop.set()


async def test_http_needs_the_token_and_this_servers_host_and_sends_a_strict_policy() -> None:
    async with serving(Relay()) as authority, httpx.AsyncClient() as http:
        good = await http.get(f"http://{authority}/?token={TOKEN}")
        assert good.status_code == 200
        for name, value in SECURITY_HEADERS.items():
            assert good.headers[name] == value
        assert "access-control-allow-origin" not in good.headers
        assert (await http.get(f"http://{authority}/")).status_code == 403
        assert (await http.get(f"http://{authority}/?token=nope")).status_code == 403
        rebound = await http.get(
            f"http://{authority}/?token={TOKEN}", headers={"Host": "evil.example"}
        )
        assert rebound.status_code == 403  # DNS rebinding: another name for 127.0.0.1


@pytest.mark.parametrize(
    ("token", "origin"),
    [("nope", None), (TOKEN, "http://evil.example"), (TOKEN, "null")],
    ids=["wrong token", "another origin", "null origin"],
)
async def test_a_websocket_needs_the_token_and_this_servers_origin(
    token: str, origin: str | None
) -> None:
    async with serving(Relay()) as authority:
        with pytest.raises(ConnectionRejected) as rejected:
            async with view(authority, token, origin):
                pass
        assert rejected.value.status_code == 403


async def test_two_views_one_answer_resolves_both_and_a_late_view_gets_the_replay() -> None:
    relay = Relay()
    async with connected("acp") as (client, peer), serving(relay) as authority:
        with client.permission_handler("s1", relay.handler):
            async with view(authority) as a, view(authority) as b:
                assert await opened(a, "tab A") == [] and await opened(b, "tab B") == []
                request_id = await peer.ask_permission("s1", "c1")
                requested = await next_message(a)
                assert await next_message(b) == requested
                question_id = requested["question"]["questionId"]
                async with view(authority) as late:
                    assert await opened(late, "late") == [requested]
                    await a.send_message(
                        json.dumps(
                            {
                                "type": "answer",
                                "questionId": question_id,
                                "sessionId": "s1",
                                "decision": {"outcome": "selected", "optionId": "allow"},
                            }
                        )
                    )
                    resolved = {
                        "type": "resolved",
                        "questionId": question_id,
                        "outcome": "selected",
                        "optionId": "allow",
                        "by": "tab A",
                    }
                    for each in (a, b, late):
                        assert await next_message(each) == resolved
                assert (await peer.receive())["id"] == request_id
                await b.send_message(
                    json.dumps(
                        {
                            "type": "answer",
                            "questionId": question_id,
                            "sessionId": "s1",
                            "decision": {"outcome": "cancelled"},
                        }
                    )
                )
                assert await next_message(b) == {
                    "type": "answer_refused",
                    "questionId": question_id,
                    "reason": "already answered by tab A",
                }


async def test_bad_input_gets_an_error_and_the_view_goes_on() -> None:
    relay = Relay()
    async with connected("acp") as (client, peer), serving(relay) as authority:
        with client.permission_handler("s1", relay.handler):
            async with view(authority) as ws:
                await opened(ws, "tab")
                deep = '{"x": ' + "[" * 60_000 + "]" * 60_000 + ', "type": "open"}'
                for junk in ("not json", "[]", '{"type": "launch"}', '{"type": "open"}', deep):
                    await ws.send_message(junk)
                    assert (await next_message(ws))["type"] == "error"
                await ws.send_message(b"\xff\xfe")  # a binary frame
                assert (await next_message(ws))["type"] == "error"
                await peer.ask_permission("s1", "c1")
                requested = await next_message(ws)
                question_id = requested["question"]["questionId"]
                wrong_session = {
                    "type": "answer",
                    "questionId": question_id,
                    "sessionId": "s2",
                    "decision": {"outcome": "selected", "optionId": "allow"},
                }
                await ws.send_message(json.dumps(wrong_session))
                assert (await next_message(ws))["reason"] == "the answer names another session"
                unknown = {**wrong_session, "questionId": "q9-0123456789abcdef"}
                await ws.send_message(json.dumps(unknown))
                assert await next_message(ws) == {
                    "type": "answer_refused",
                    "questionId": "q9-0123456789abcdef",
                    "reason": "no such question",
                }
                await ws.send_message(json.dumps({**wrong_session, "sessionId": "s1"}))
                assert (await next_message(ws))["type"] == "resolved"
            assert (await peer.receive())["result"] == selected("allow")


async def test_every_reply_carries_its_request_s_ref_and_what_every_view_is_told_none() -> None:
    relay = Relay()
    async with connected("acp") as (client, peer), serving(relay) as authority:
        with client.permission_handler("s1", relay.handler):
            async with view(authority) as a, view(authority) as b:
                await send(a, {"type": "open", "view": "A", "ref": "o1"})
                opened_a = {"type": "opened", "view": "A", "version": 1, "ref": "o1"}
                assert await next_message(a) == opened_a
                assert await next_message(a) == {"type": "replayed", "count": 0}
                assert await opened(b, "B") == []
                await peer.ask_permission("s1", "c1")
                requested = await next_message(a)
                assert await next_message(b) == requested and "ref" not in requested
                question_id = requested["question"]["questionId"]
                allow = {
                    "type": "answer",
                    "questionId": question_id,
                    "sessionId": "s1",
                    "decision": {"outcome": "selected", "optionId": "allow"},
                }
                await send(a, {**allow, "sessionId": "s2", "ref": "a1"})
                assert await next_message(a) == {
                    "type": "answer_refused",
                    "questionId": question_id,
                    "reason": "the answer names another session",
                    "ref": "a1",
                }
                # Each error names the message that caused it, if it named itself validly.
                for message, ref, says in [
                    ({"type": "launch", "ref": "x1"}, "x1", "invalid message"),
                    ({"type": "open", "ref": "x2"}, "x2", "already open"),
                    ({"type": "list_rules", "ref": "x3"}, "x3", "not served here: ListRules"),
                    ({"type": "list_rules", "ref": "x" * 65}, None, "invalid message"),
                    ({"type": "list_rules", "ref": "\u2029"}, None, "a ref must be printable"),
                    ({"type": "list_rules", "ref": {"r": 1}}, None, "invalid message"),
                    ({"type": "list_rules"}, None, "not served here: ListRules"),
                ]:
                    await send(a, message)
                    error = await next_message(a)
                    assert error["type"] == "error" and error["reason"].startswith(says)
                    assert error.get("ref") == ref, (message, error)
                await a.send_message('{"ref": "x4", "type": ')  # (not JSON: nothing to read)
                assert await next_message(a) == {"type": "error", "reason": "not a JSON message"}
                # An answer that lands is told to every view, with no ref: no one asked.
                await send(a, {**allow, "ref": "a2"})
                for each in (a, b):
                    resolved = await next_message(each)
                    assert resolved["type"] == "resolved" and "ref" not in resolved
                assert (await peer.receive())["result"] == selected("allow")


async def test_a_message_over_the_limit_closes_that_view_only() -> None:
    relay = Relay()
    async with serving(relay) as authority:
        async with view(authority) as big:
            await opened(big, "big")
            await big.send_message("x" * (MAX_MESSAGE + 1))
            with pytest.raises(ConnectionClosed) as closed:
                await next_message(big)
            assert closed.value.reason.code == 1009  # (message too big)
        with freed_quietly():
            del big, closed
        async with view(authority) as other:
            assert await opened(other, "other") == []


@pytest.mark.parametrize("ref", [None, "first"])
async def test_a_view_must_open_first(ref: str | None) -> None:
    async with serving(Relay()) as authority:
        async with view(authority) as ws:
            first = {"type": "list_sessions", "ref": ref} if ref else {"type": "list_sessions"}
            await send(ws, first)
            error = {"type": "error", "reason": "the first message must be open"}
            assert await next_message(ws) == ({**error, "ref": ref} if ref else error)
            with pytest.raises(ConnectionClosed) as closed:
                await next_message(ws)
            assert closed.value.reason.code == 1008
        with freed_quietly():
            del ws, closed


async def test_closing_the_relay_withdraws_for_every_view_and_the_agent_gets_cancelled() -> None:
    relay = Relay()
    async with connected("acp") as (client, peer), serving(relay) as authority:
        with client.permission_handler("s1", relay.handler):
            async with view(authority) as ws:
                await opened(ws, "tab")
                await peer.ask_permission("s1", "c1")
                question_id = (await next_message(ws))["question"]["questionId"]
                relay.close()
                assert await next_message(ws) == {
                    "type": "withdrawn",
                    "questionId": question_id,
                    "reason": "shutdown",
                }
                with pytest.raises(ConnectionClosed) as closed:
                    await next_message(ws)
                assert closed.value.reason.code == 1000  # a close frame: a normal end
            with freed_quietly():
                del ws, closed
            assert (await peer.receive())["result"] == CANCELLED


async def test_every_path_and_method_is_behind_the_gate_with_the_headers() -> None:
    async with serving(Relay()) as authority, httpx.AsyncClient() as http:
        for method, path in (("GET", "/nowhere"), ("POST", "/"), ("GET", "/ws")):
            refused = await http.request(method, f"http://{authority}{path}")
            assert refused.status_code == 403
            allowed = await http.request(method, f"http://{authority}{path}?token={TOKEN}")
            assert allowed.status_code in (404, 405)
            for response in (refused, allowed):
                for name, value in SECURITY_HEADERS.items():
                    assert response.headers[name] == value


def test_a_token_under_128_bits_is_refused() -> None:
    with pytest.raises(ValueError, match="128 bits"):
        Gate("short")
    with pytest.raises(ValueError):
        Gate("")


async def test_a_websocket_gets_no_compression_extension() -> None:
    """A client's ``permessage-deflate`` offer is declined: inflating has no limit."""
    async with serving(Relay()) as authority:
        host, port = authority.split(":")
        stream = await trio.open_tcp_stream(host, int(port))
        async with stream:
            request = (
                f"GET /ws?token={TOKEN} HTTP/1.1\r\nHost: {authority}\r\n"
                f"Origin: http://{authority}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n"
                "Sec-WebSocket-Extensions: permessage-deflate; client_max_window_bits\r\n\r\n"
            )
            await stream.send_all(request.encode())
            head = b""
            with trio.fail_after(WAIT_S):
                while b"\r\n\r\n" not in head:
                    head += await stream.receive_some()
        assert head.startswith(b"HTTP/1.1 101")
        assert b"sec-websocket-extensions" not in head.lower()


def test_a_message_over_the_limit_keeps_none_of_its_bytes_nor_what_follows() -> None:
    from hypercorn.protocol import ws_stream
    from wsproto.events import TextMessage

    buffer = ws_stream.WebsocketBuffer(10)
    buffer.extend(TextMessage("12345", message_finished=False))
    for _ in range(3):  # the first overflow, then frames the peer sends after the close
        with pytest.raises(ws_stream.FrameTooLargeError):
            buffer.extend(TextMessage("x" * 100, message_finished=False))
        assert buffer.value is None


async def test_an_elicitation_is_answered_cancel_without_a_view_seeing_it() -> None:
    """Not advertised by simhost serve: one that comes anyway is cancelled."""
    from simhost.chat.backends import AcpBackend
    from simhost.serve.host import ServeHost

    async with connected("acp") as (client, peer), trio.open_nursery() as nursery:
        host = ServeHost(client, AcpBackend(client, Path(".")), Relay())
        await nursery.start(host.run)
        params = {"sessionId": "s1", "mode": "form", "message": "Your password?"}
        request_id = await peer.request("elicitation/create", params)
        reply = await peer.receive()
        assert reply == {"jsonrpc": "2.0", "id": request_id, "result": {"action": "cancel"}}
        nursery.cancel_scope.cancel()


def _masked_text_frame(text: str) -> bytes:
    """A client's WebSocket text frame (RFC 6455: masked), for a payload under 126 bytes."""
    payload, mask = text.encode(), b"\x01\x02\x03\x04"
    masked = bytes(byte ^ mask[index % 4] for index, byte in enumerate(payload))
    return bytes([0x81, 0x80 | len(payload)]) + mask + masked


async def _upgrade_with_a_message_behind(authority: str, token: str) -> bytes:
    """An upgrade request and an ``open`` frame in one write; what comes back."""
    host, port = authority.split(":")
    request = (
        f"GET /ws?token={token} HTTP/1.1\r\nHost: {authority}\r\n"
        f"Origin: http://{authority}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
        "Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n\r\n"
    )
    received = b""
    async with await trio.open_tcp_stream(host, int(port)) as stream:
        await stream.send_all(request.encode() + _masked_text_frame('{"type":"open"}'))
        with trio.move_on_after(1):  # (what arrives by then: the test says what it needs)
            while chunk := await stream.receive_some():
                received += chunk
                if _CLOSE_1008 in received or received.startswith(b"HTTP/1.1 403"):
                    break
    return received


_CLOSE_1008 = b"\x88\x02\x03\xf0"  # a server's close frame, code 1008 (policy violation)


async def test_a_message_right_behind_the_upgrade_closes_that_view_not_the_server() -> None:
    """A client must wait for the 101 before it sends: one that does not is refused
    (403) or, with the token, closed (1008), and nothing it sent is read. The server
    goes on (such bytes once ended the whole server)."""
    async with serving(Relay()) as authority:
        refused = await _upgrade_with_a_message_behind(authority, "nope")
        assert refused.startswith(b"HTTP/1.1 403")
        accepted = await _upgrade_with_a_message_behind(authority, TOKEN)
        assert accepted.startswith(b"HTTP/1.1 101") and _CLOSE_1008 in accepted
        assert b'"type":"opened"' not in accepted
        async with view(authority) as ws:
            assert await opened(ws, "after") == []


async def _request_of(peer: Any, method: str) -> dict[str, Any]:
    """The client's next request, which must be ``method``."""
    with trio.fail_after(WAIT_S):
        message: dict[str, Any] = await peer.receive()
    assert message.get("method") == method, message
    return message


async def _reply(peer: Any, request: dict[str, Any], result: Any) -> None:
    await peer.send({"jsonrpc": "2.0", "id": request["id"], "result": result})


@asynccontextmanager
async def hosting(dialect: str) -> AsyncIterator[tuple[Any, Any, Any]]:
    """A ServeHost on a fake agent with one session ``s1``; yields (host, peer,
    listener): the listener gets what every view is told."""
    from simhost.chat.backends import AcpBackend, BridgeBackend
    from simhost.serve.host import ServeHost

    async with connected(dialect) as (client, peer), trio.open_nursery() as nursery:
        backend = AcpBackend(client, Path("/")) if dialect == "acp" else BridgeBackend(client)
        host = ServeHost(client, backend, Relay())
        await nursery.start(host.run)
        with host.listen() as listener:
            nursery.start_soon(host.new_session)
            method = "session/new" if dialect == "acp" else "sessionNew"
            await _reply(peer, await _request_of(peer, method), {"sessionId": "s1"})
            if dialect == "bridge":
                read = await _request_of(peer, "sessionRead")
                await _reply(peer, read, {"sessionId": "s1", "title": "one", "messages": []})
            assert (await listener.receive()).event == "created"
            yield host, peer, listener
        nursery.cancel_scope.cancel()


async def test_an_agent_reply_the_host_cannot_read_ends_the_turn_not_the_host() -> None:
    async with hosting("acp") as (host, peer, listener):
        assert host.prompt("s1", "hi") is None
        assert (await listener.receive()).event == "turn_started"
        await _reply(peer, await _request_of(peer, "session/prompt"), {"stopReason": 42})
        ended = await listener.receive()
        assert ended.event == "turn_ended" and ended.text.startswith("error: the agent answered")
        assert host.prompt("s1", "again") is None  # (the host goes on)


async def test_a_switch_made_while_another_is_applied_is_held_for_the_next_turn() -> None:
    presets = {"presetId": "ask", "presets": [{"presetId": "ask"}, {"presetId": "auto-edit"}]}
    async with hosting("bridge") as (host, peer, listener):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(host.set_preset, "s1", "auto-edit")
            await _reply(peer, await _request_of(peer, "sessionPermissions"), presets)
        assert (await listener.receive()).pending == "auto-edit"
        assert host.prompt("s1", "one") is None
        applying = await _request_of(peer, "sessionSetPermission")
        assert applying["params"]["presetId"] == "auto-edit"
        await host.set_preset("s1", "ask")  # back, while auto-edit is on its way
        while not isinstance(told := await listener.receive(), Presets):
            pass
        assert told.pending == "ask"
        await _reply(peer, applying, {"presetId": "auto-edit"})
        await _reply(peer, await _request_of(peer, "chatSend"), {"stopReason": "end_turn"})
        while getattr(await listener.receive(), "event", None) != "turn_ended":
            pass
        assert host.prompt("s1", "two") is None
        again = await _request_of(peer, "sessionSetPermission")
        assert again["params"]["presetId"] == "ask"  # (it was lost before)


async def test_a_burst_of_agent_text_is_merged_for_a_view_and_drops_no_one() -> None:
    from simhost.serve.host import LISTENER_BUFFER, MERGED_TEXT, Listener
    from simhost.serve.protocol import SessionEvent

    listener = Listener()
    chunks = [f"chunk {number}; " for number in range(5000)]
    for number, chunk in enumerate(chunks):
        listener.deliver(SessionEvent("s1" if number % 2 else "s2", "message", chunk))
    listener.deliver(SessionEvent("s1", "turn_ended", "end_turn"))
    listener.close()
    told = [message async for message in listener]
    assert not listener.dropped and told[-1].event == "turn_ended"
    assert len(told) < 20 and all(len(message.text) <= MERGED_TEXT for message in told)
    for session_id, first in (("s1", 1), ("s2", 0)):
        text = "".join(m.text for m in told if m.session_id == session_id and m.event == "message")
        assert text == "".join(chunks[first::2])

    behind = Listener()
    for _ in range(LISTENER_BUFFER + 1):  # (nothing to merge: a turn starts, again and again)
        behind.deliver(SessionEvent("s1", "turn_started"))
    assert behind.dropped and [message async for message in behind] == []


async def test_a_view_has_a_bounded_number_of_requests_in_flight() -> None:
    from simhost.serve.host import REQUESTS_PER_VIEW
    from simhost.serve.protocol import Error

    async with hosting("acp") as (host, _peer, listener):
        release = trio.Event()

        async def slow() -> None:
            await release.wait()

        for number in range(REQUESTS_PER_VIEW + 1):
            host.start_request(listener, slow, f"r{number}")
        refused = await listener.receive()
        assert isinstance(refused, Error) and "in flight" in refused.reason
        assert refused.ref == f"r{REQUESTS_PER_VIEW}"  # (the one refused, not one in flight)
        release.set()
        await trio.testing.wait_all_tasks_blocked()
        assert listener.requests == 0


async def test_views_past_the_limit_are_told_to_come_back_later(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import simhost.serve.server

    monkeypatch.setattr(simhost.serve.server, "MAX_VIEWS", 2)
    async with serving(Relay()) as authority, view(authority) as a, view(authority) as b:
        await opened(a, "a")
        await opened(b, "b")
        async with view(authority) as third:
            with pytest.raises(ConnectionClosed) as closed:
                await next_message(third)
            assert closed.value.reason.code == 1013
        with freed_quietly():
            del third, closed


async def test_an_upgrade_to_http_2_is_not_made() -> None:
    """hypercorn would switch to HTTP/2 before the gate sees a request: the request is
    answered in HTTP/1.1 instead, through the gate."""
    async with serving(Relay()) as authority:
        host, port = authority.split(":")
        request = (
            f"GET /nowhere?token={TOKEN} HTTP/1.1\r\nHost: {authority}\r\n"
            "Connection: Upgrade, HTTP2-Settings\r\nUpgrade: h2c\r\n"
            "HTTP2-Settings: AAMAAABkAARAAAAAAAIAAAAA\r\n\r\n"
        )
        head = b""
        async with await trio.open_tcp_stream(host, int(port)) as stream:
            await stream.send_all(request.encode())
            with trio.fail_after(WAIT_S):
                while b"\r\n\r\n" not in head:
                    head += await stream.receive_some()
        assert head.startswith(b"HTTP/1.1 404")  # (not 101 Switching Protocols)


async def test_a_session_with_no_id_is_an_error_for_the_view_not_the_end_of_the_host() -> None:
    from simhost.serve.protocol import Error

    async with hosting("acp") as (host, peer, listener):

        async def created() -> None:
            await host.new_session()

        host.start_request(listener, created, "n1")
        await _reply(peer, await _request_of(peer, "session/new"), {"sessionId": ""})
        told = await listener.receive()
        assert isinstance(told, Error) and "with no id" in told.reason
        assert told.ref == "n1"  # (the request's, though the reply came later)
        assert list(host.sessions) == ["s1"] and host.prompt("s1", "still here") is None


class _OneSenderStream:
    """A stream that, like trio's SocketStream, refuses a send while another is under
    way (``send_eof`` included); its ``send_eof`` waits for ``release``."""

    def __init__(self) -> None:
        self.busy = False
        self.closed = False
        self.eof_started = trio.Event()
        self.release = trio.Event()

    async def send_eof(self) -> None:
        if self.busy:
            raise trio.BusyResourceError
        self.busy = True
        self.eof_started.set()
        await self.release.wait()
        self.busy = False

    async def send_all(self, data: bytes) -> None:
        if self.busy:
            raise trio.BusyResourceError
        if self.closed:
            raise trio.ClosedResourceError

    async def aclose(self) -> None:
        self.closed = True


async def test_a_send_while_hypercorn_closes_the_connection_waits_and_never_raises() -> None:
    """hypercorn ends a connection's stream without its send lock: a view's close frame
    sent then failed with BusyResourceError (seen when the agent was killed)."""
    from hypercorn.events import Closed, RawData

    from simhost.serve.server import _ContainedServer

    class Protocol:
        def __init__(self) -> None:
            self.events: list[object] = []

        async def handle(self, event: object) -> None:
            self.events.append(event)

    stream = _OneSenderStream()
    server = _ContainedServer(None, None, None, None, stream)  # type: ignore[arg-type]
    server.protocol = Protocol()  # type: ignore[assignment]
    with trio.fail_after(5):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(server._close)
            await stream.eof_started.wait()
            nursery.start_soon(server.protocol_send, RawData(b"a close frame"))
            await trio.testing.wait_all_tasks_blocked()
            stream.release.set()
    assert stream.closed
    assert [type(event) for event in server.protocol.events] == [Closed]  # type: ignore[attr-defined]
