"""Interop: ``simhost runtime --dialect acp`` driven by the official ACP TypeScript SDK's client.

The client is ``tests/interop/node/ts_client_drives_runtime.mjs``
(``@agentclientprotocol/sdk`` 2.4.0, ``client()`` + ``connectWith`` + ``ndJsonStream``).
It spawns the runtime, initializes, opens a session, approves one turn's tool call,
denies the next one's, cancels a third turn with its card open, checks the workspace
as it goes, and prints a JSON summary with the raw messages of both directions. The
SDK validates every message it reads with its own (zod) schemas, so a turn that
completes is already a shape check; here every message the runtime wrote is also
checked against ACP's JSON Schema.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
import trio

from tests.interop import NODE_DIR, TEST_BOUND_S, require_node_packages
from tests.support.runtime_editor import check_runtime_messages

CLIENT = NODE_DIR / "ts_client_drives_runtime.mjs"
RUNTIME = [sys.executable, "-m", "simhost", "runtime", "--stdio", "--dialect", "acp"]


@pytest.fixture
def node() -> str:
    return require_node_packages("@agentclientprotocol/sdk")


async def run_client(node: str, tmp_path: Path) -> tuple[dict[str, Any], Path]:
    workspace = tmp_path / "w"
    workspace.mkdir()
    runtime = [*RUNTIME, "--workspace", str(workspace), "--state-dir", str(tmp_path / "s")]
    with trio.fail_after(TEST_BOUND_S):
        result = await trio.run_process(
            [node, str(CLIENT), str(workspace), "--", *runtime],
            capture_stdout=True,
            capture_stderr=True,
            check=False,
        )
    stderr = result.stderr.decode(errors="replace")
    assert result.returncode == 0, stderr
    # Neither the SDK nor the runtime (its stderr is inherited) had anything to complain about.
    assert stderr == ""
    summary: dict[str, Any] = json.loads(result.stdout)
    return summary, workspace


async def test_the_ts_sdk_client_approves_denies_and_cancels_turns(
    node: str, tmp_path: Path
) -> None:
    summary, workspace = await run_client(node, tmp_path)
    assert summary["failures"] == []
    assert summary["ok"] is True
    assert (summary["exitCode"], summary["exitSignal"]) == (0, None)

    info = summary["initialize"]
    assert info["protocolVersion"] == 1
    assert info["agentCapabilities"]["loadSession"] is True
    assert info["agentInfo"]["name"] == "simhost-runtime"
    assert info["authMethods"] == []
    assert summary["modes"]["currentModeId"] == "ask"
    session = summary["sessionId"]

    approved, denied, cancelled = summary["turns"]
    # Approved: asked first, written after, completed.
    assert approved["stopReason"] == "end_turn"
    request = approved["permission"]
    assert request["sessionId"] == session
    call = request["toolCall"]
    assert (call["title"], call["kind"], call["status"]) == (
        "fs.write: approved.txt",
        "edit",
        "pending",
    )
    assert call["content"] == [
        {
            "type": "diff",
            "path": str(workspace.resolve() / "approved.txt"),
            "oldText": None,
            "newText": "approved by the TS SDK\n",
        }
    ]
    assert [o["kind"] for o in request["options"]] == [
        "allow_once",
        "allow_always",
        "reject_once",
        "reject_always",
    ]
    assert approved["statuses"] == ["pending", "in_progress", "completed"]
    assert (workspace / "approved.txt").read_text() == "approved by the TS SDK\n"

    # Denied: never written, and the call ends failed, never completed.
    assert denied["stopReason"] == "end_turn"
    assert denied["permission"]["toolCall"]["title"] == "fs.write: denied.txt"
    assert denied["statuses"] == ["pending", "failed"]
    assert not (workspace / "denied.txt").exists()

    # Cancelled: session/cancel withdrew the open card ($/cancel_request, which the SDK
    # turned into an abort of its handler), failed the call, and ended the turn.
    assert cancelled["stopReason"] == "cancelled"
    assert cancelled["withdrawnBySignal"] is True
    assert cancelled["statuses"] == ["pending", "failed"]
    assert not (workspace / "cancelled.txt").exists()
    assert sorted(p.name for p in workspace.iterdir()) == ["approved.txt"]

    from_runtime, to_runtime = summary["fromRuntime"], summary["toRuntime"]
    cards = [m for m in from_runtime if m.get("method") == "session/request_permission"]
    assert len(cards) == 3
    cancels = [m for m in from_runtime if m.get("method") == "$/cancel_request"]
    assert [m["params"] for m in cancels] == [{"requestId": cards[2]["id"]}]
    # The prompt's answer came after the withdrawal and the final update.
    [prompt_3] = [m for m in to_runtime if m.get("method") == "session/prompt"][2:]
    answer = next(
        i for i, m in enumerate(from_runtime) if m.get("id") == prompt_3["id"] and "method" not in m
    )
    withdrawal = from_runtime.index(cancels[0])
    assert withdrawal < answer
    assert from_runtime[answer]["result"] == {"stopReason": "cancelled"}
    # Every message the runtime wrote is ACP v1, by the schema.
    check_runtime_messages(from_runtime, to_runtime)
