"""Interop: permclient's bridge dialect against a runtime built on vscode-jsonrpc 10.0.0.

The peer is ``tests/interop/node/vscode_peer.mjs`` (Content-Length framing, ids from 0,
``$/cancelRequest {"id"}``). It records what vscode-jsonrpc delivered to it *and* the raw
messages our client wrote, so each test checks both the outcome the runtime saw and the
wire.

Facts about vscode-jsonrpc 10.0.0 these tests rely on (read from its source and seen
here): cancelling a ``CancellationTokenSource`` passed to ``sendRequest`` only sends
``$/cancelRequest``; the request's promise is *not* rejected locally, it stays pending
and resolves with whatever the editor answers. So the editor's own ``cancelled`` answer
is what the runtime gets.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import trio

import permclient
from permclient import Cancelled, PermissionRequest, Selected
from tests.interop import NODE_DIR, TEST_BOUND_S, require_node_packages

PEER = NODE_DIR / "vscode_peer.mjs"
CANCELLED = {"outcome": {"outcome": "cancelled"}}


def selected(option_id: str) -> dict[str, Any]:
    return {"outcome": {"outcome": "selected", "optionId": option_id}}


@pytest.fixture
def peer_argv() -> list[str]:
    node = require_node_packages("vscode-jsonrpc")
    return [node, str(PEER)]


def responses_by_id(messages: list[dict[str, Any]]) -> Counter[Any]:
    """How many responses (messages without ``method``) each id got."""
    return Counter(m["id"] for m in messages if "method" not in m and "id" in m)


async def test_concurrent_sessions_are_routed_and_a_withdrawn_request_is_cancelled(
    peer_argv: list[str],
) -> None:
    seen: dict[str, list[tuple[str, str]]] = {"s-A": [], "s-B": []}
    handler_cancelled: list[str] = []

    with trio.fail_after(TEST_BOUND_S):
        async with permclient.open_process(peer_argv, dialect="bridge") as client:

            async def handle_a(req: PermissionRequest) -> Selected | Cancelled:
                seen["s-A"].append((req.session_id, req.tool_call.tool_call_id))
                assert req.option_ids == {"allow", "deny"}
                return Selected("allow")

            async def handle_b(req: PermissionRequest) -> Selected | Cancelled:
                seen["s-B"].append((req.session_id, req.tool_call.tool_call_id))
                if req.tool_call.tool_call_id == "call-B2":
                    # Tell the runtime this card is showing; it withdraws it now.
                    await client.notify("test/waiting", {"toolCallId": "call-B2"})
                    try:
                        await trio.sleep_forever()
                    except trio.Cancelled:
                        handler_cancelled.append(req.tool_call.tool_call_id)
                        raise
                assert req.option_ids == {"allow", "allow-always", "deny"}
                return Selected("allow-always")

            with (
                client.permission_handler("s-A", handle_a),
                client.permission_handler("s-B", handle_b),
            ):
                result = await client.request("runScenario", {})
                assert client.pending_permissions() == 0
            state = await client.request("getState", {})

    # Each handler saw only its own session's requests.
    assert seen["s-A"] == [("s-A", "call-A1")]
    assert sorted(seen["s-B"]) == [("s-B", "call-B1"), ("s-B", "call-B2")]
    assert handler_cancelled == ["call-B2"]

    # vscode-jsonrpc numbers its requests from 0; id 0 is a real id.
    ids = result["requestIds"]
    assert sorted(ids.values()) == [0, 1, 2, 3]

    # What the runtime's sendRequest promises resolved to.
    assert result["answers"] == {
        "A1": {"status": "resolved", "value": selected("allow")},
        "B1": {"status": "resolved", "value": selected("allow-always")},
        # Withdrawn with $/cancelRequest: vscode-jsonrpc kept waiting, and got our answer.
        "B2": {"status": "resolved", "value": CANCELLED},
        # s-C has no handler: fail closed, never another session's handler.
        "C1": {"status": "resolved", "value": CANCELLED},
    }

    # vscode-jsonrpc sent exactly one cancel, for B2, in the bridge shape.
    assert result["cancelsSent"] == [{"id": ids["B2"]}]

    # The raw responses our client wrote, as the runtime read them off the wire.
    expected = {
        "A1": selected("allow"),
        "B1": selected("allow-always"),
        "B2": CANCELLED,
        "C1": CANCELLED,
    }
    for key, outcome in expected.items():
        assert result["responses"][key] == [{"jsonrpc": "2.0", "id": ids[key], "result": outcome}]

    # Exactly one response per permission request, even after the scenario ended.
    counts = responses_by_id(state["received"])
    assert {request_id: counts[request_id] for request_id in ids.values()} == {
        request_id: 1 for request_id in ids.values()
    }


async def test_cancelling_chat_send_answers_its_pending_permission(peer_argv: list[str]) -> None:
    waiting = trio.Event()
    handler_cancelled: list[str] = []

    async def handle(req: PermissionRequest) -> Selected | Cancelled:
        assert (req.session_id, req.tool_call.tool_call_id) == ("s-T", "call-T")
        waiting.set()
        try:
            await trio.sleep_forever()
        except trio.Cancelled:
            handler_cancelled.append(req.tool_call.tool_call_id)
            raise
        return Selected("allow")  # pragma: no cover - never reached

    turn = trio.CancelScope()
    with trio.fail_after(TEST_BOUND_S):
        async with permclient.open_process(peer_argv, dialect="bridge") as client:
            with client.permission_handler("s-T", handle):
                async with trio.open_nursery() as nursery:

                    async def chat_send() -> None:
                        with turn:
                            await client.request(
                                "chatSend",
                                {"sessionId": "s-T", "toolCallId": "call-T", "expectCancel": True},
                            )

                    nursery.start_soon(chat_send)
                    await waiting.wait()
                    turn.cancel()
                assert client.pending_permissions("s-T") == 0
            state = await client.request("getState", {})

    assert turn.cancelled_caught
    assert handler_cancelled == ["call-T"]

    (log,) = state["logs"]
    assert log["kind"] == "chatSend"
    assert log["sessionId"] == "s-T"
    # The turn's permission was answered cancelled by the editor, without the runtime
    # having to withdraw it, and vscode-jsonrpc saw the chatSend token cancelled.
    assert log["answer"] == {"status": "resolved", "value": CANCELLED}
    assert log["tokenCancelled"] is True

    received = state["received"]
    (chat_send_request,) = [m for m in received if m.get("method") == "chatSend"]
    cancels = [m["params"] for m in received if m.get("method") == "$/cancelRequest"]
    assert cancels == [{"id": chat_send_request["id"]}]
    assert responses_by_id(received)[log["permissionId"]] == 1
    permission_responses = [
        m for m in received if m.get("id") == log["permissionId"] and "method" not in m
    ]
    assert permission_responses == [
        {"jsonrpc": "2.0", "id": log["permissionId"], "result": CANCELLED}
    ]


async def test_cancelling_an_outbound_request_cancels_the_runtime_token(
    peer_argv: list[str],
) -> None:
    started = trio.Event()
    scope = trio.CancelScope()

    with trio.fail_after(TEST_BOUND_S):
        async with permclient.open_process(peer_argv, dialect="bridge") as client:
            client.on_notification("test/started", lambda _n: started.set())
            async with trio.open_nursery() as nursery:

                async def wait_for_cancel() -> None:
                    with scope:
                        await client.request("waitForCancel", {})

                nursery.start_soon(wait_for_cancel)
                await started.wait()
                scope.cancel()
            # The runtime answers the cancelled request late; the client drops that
            # answer and the connection keeps working.
            state = await client.request("getState", {})

    assert scope.cancelled_caught
    assert state["logs"] == [{"kind": "waitForCancel", "tokenCancelled": True}]
    received = state["received"]
    (request,) = [m for m in received if m.get("method") == "waitForCancel"]
    cancels = [m["params"] for m in received if m.get("method") == "$/cancelRequest"]
    assert cancels == [{"id": request["id"]}]
