"""``simhost serve`` end to end: the command in a child process with the reference
runtime, its views through a real WebSocket client (and HTTP through httpx)."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import httpx
import pytest
import trio
from trio_websocket import WebSocketConnection

from tests.support.serving import (
    WAIT_S,
    all_of,
    freed_quietly,
    next_message,
    opened,
    send,
    served,
    sockets_freed_quietly,
    until,
    view,
)

sockets_freed_quietly = pytest.fixture(autouse=True)(sockets_freed_quietly)


async def first_session(ws: WebSocketConnection) -> str:
    await send(ws, {"type": "list_sessions"})
    sessions = (await until(ws, {"type": "sessions"}))["sessions"]
    assert len(sessions) == 1 and sessions[0]["waiting"] == 0 and not sessions[0]["running"]
    session_id: str = sessions[0]["sessionId"]
    return session_id


async def asked(ws: WebSocketConnection, session_id: str, text: str) -> dict[str, Any]:
    """Prompt ``text`` in the session; the question it leads to."""
    await send(ws, {"type": "prompt", "sessionId": session_id, "text": text})
    question: dict[str, Any] = (await until(ws, {"type": "requested"}))["question"]
    return question


def answer(question: dict[str, Any], option_id: str | None) -> dict[str, Any]:
    decision = (
        {"outcome": "cancelled"}
        if option_id is None
        else {"outcome": "selected", "optionId": option_id}
    )
    return {
        "type": "answer",
        "questionId": question["questionId"],
        "sessionId": question["sessionId"],
        "decision": decision,
    }


async def turn_text(ws: WebSocketConnection, session_id: str) -> str:
    """The agent's text in the session until its turn ends, and the stop reason."""
    text = ""
    while True:
        message = await until(ws, {"type": "session_event", "sessionId": session_id})
        if message["event"] == "message":
            text += message["text"]
        elif message["event"] == "turn_ended":
            return f"{text}[{message['text']}]"


async def test_a_prompt_asks_every_view_and_the_first_answer_wins(tmp_path: Path) -> None:
    async with (
        served(tmp_path) as server,
        view(server.authority, server.token) as a,
        view(server.authority, server.token) as b,
    ):
        await opened(a, "tab A")
        await opened(b, "tab B")
        session_id = await first_session(a)
        question = await asked(a, session_id, "run echo hello")
        assert question["sessionId"] == session_id
        assert question["title"] == "local_shell: echo hello"
        assert (await until(b, {"type": "requested"}))["question"] == question
        await send(b, answer(question, "allow"))
        resolved = {
            "type": "resolved",
            "questionId": question["questionId"],
            "outcome": "selected",
            "optionId": "allow",
            "by": "tab B",
        }
        assert await until(a, {"type": "resolved"}) == resolved
        assert await until(b, {"type": "resolved"}) == resolved
        assert await turn_text(a, session_id) == "exit code 0\nhello\n[end_turn]"
        await send(a, answer(question, "allow"))  # a duplicate: refused, a no-op
        refused = await until(a, {"type": "answer_refused"})
        assert refused["reason"] == "already answered by tab B"


async def test_a_view_that_connects_late_or_reconnects_gets_what_is_pending(
    tmp_path: Path,
) -> None:
    async with served(tmp_path) as server:
        async with view(server.authority, server.token) as a:
            await opened(a, "tab")
            session_id = await first_session(a)
            question = await asked(a, session_id, "run echo again")
        async with view(server.authority, server.token) as again:  # (a reload)
            replay = await opened(again, "tab")
            assert replay == [{"type": "requested", "question": question}]
            await send(again, answer(question, "deny"))
            assert (await until(again, {"type": "resolved"}))["optionId"] == "deny"
            assert "[end_turn]" in await turn_text(again, session_id)
        async with view(server.authority, server.token) as later:
            assert await opened(later, "tab") == []


async def test_cancelling_a_turn_withdraws_its_question_for_every_view(tmp_path: Path) -> None:
    async with (
        served(tmp_path) as server,
        view(server.authority, server.token) as a,
        view(server.authority, server.token) as b,
    ):
        await opened(a, "A")
        await opened(b, "B")
        session_id = await first_session(a)
        question = await asked(a, session_id, "run echo never")
        await send(b, {"type": "cancel_turn", "sessionId": session_id})
        withdrawn = {"type": "withdrawn", "questionId": question["questionId"]}
        ended = {"type": "session_event", "event": "turn_ended", "sessionId": session_id}
        for each in (a, b):
            told, turn = await all_of(each, withdrawn, ended)
            assert told["reason"] == "turn" and turn["text"] == "cancelled"
        await send(a, answer(question, "allow"))
        refused = await until(a, {"type": "answer_refused"})
        assert refused["reason"] == "withdrawn (turn)"


async def test_a_preset_switch_is_held_for_the_next_turn_and_the_last_one_wins(
    tmp_path: Path,
) -> None:
    async with served(tmp_path) as server, view(server.authority, server.token) as ws:
        await opened(ws, "tab")
        session_id = await first_session(ws)
        await send(ws, {"type": "list_presets", "sessionId": session_id})
        listing = await until(ws, {"type": "presets"})
        assert listing["presets"] == ["ask", "read-only", "auto-edit"]
        assert listing["current"] == "ask" and listing["pending"] is None
        for preset in ("auto-edit", "read-only"):
            await send(ws, {"type": "set_preset", "sessionId": session_id, "preset": preset})
            assert (await until(ws, {"type": "presets"}))["pending"] == preset
        # read-only denies the shell without asking: no question, the turn ends.
        await send(ws, {"type": "prompt", "sessionId": session_id, "text": "run echo no"})
        applied = await until(ws, {"type": "presets"})
        assert applied["current"] == "read-only" and applied["pending"] is None
        text = await turn_text(ws, session_id)
        assert "read-only" in text and text.endswith("[end_turn]")
        await send(ws, {"type": "set_preset", "sessionId": session_id, "preset": "yolo"})
        assert (await until(ws, {"type": "error"}))["reason"].startswith("no such preset")


async def test_session_requests_that_cannot_be_done_get_an_error(tmp_path: Path) -> None:
    async with served(tmp_path) as server, view(server.authority, server.token) as ws:
        await opened(ws, "tab")
        session_id = await first_session(ws)
        for message, reason in (
            ({"type": "prompt", "sessionId": "nope", "text": "hi"}, "no such session"),
            ({"type": "cancel_turn", "sessionId": session_id}, "the session has no turn running"),
            ({"type": "list_presets", "sessionId": "nope"}, "no such session"),
        ):
            await send(ws, message)
            assert await next_message(ws) == {"type": "error", "reason": reason}
        await asked(ws, session_id, "run echo busy")
        await send(ws, {"type": "prompt", "sessionId": session_id, "text": "again"})
        error = await until(ws, {"type": "error"})
        assert error["reason"].startswith("the session already has a turn running")
        await send(ws, {"type": "new_session"})
        created = await until(ws, {"type": "session_event", "event": "created"})
        assert created["sessionId"] != session_id and created["view"] == "tab"
        await send(ws, {"type": "list_sessions"})
        listing = (await until(ws, {"type": "sessions"}))["sessions"]
        assert [(s["sessionId"], s["waiting"], s["running"]) for s in listing] == [
            (session_id, 1, True),
            (created["sessionId"], 0, False),
        ]


async def test_killing_the_agent_mid_question_selects_nothing_and_tells_every_view(
    tmp_path: Path,
) -> None:
    async with served(tmp_path) as server:
        async with (
            view(server.authority, server.token) as a,
            view(server.authority, server.token) as b,
        ):
            await opened(a, "A")
            await opened(b, "B")
            question = await asked(a, await first_session(a), "run echo doomed")
            await until(b, {"type": "requested"})
            os.kill(server.agent_pid(), signal.SIGKILL)
            for each in (a, b):
                withdrawn = await until(each, {"type": "withdrawn"})
                assert withdrawn["questionId"] == question["questionId"]
                assert withdrawn["reason"] in ("teardown", "peer")
        with trio.fail_after(WAIT_S):
            assert await server.process.wait() == 1  # (without Ctrl-C)
        with freed_quietly():  # (the server closed the views' connections)
            del a, b, each


async def test_fifty_sessions_with_questions_pending_each_answer_reaches_its_own_session(
    tmp_path: Path,
) -> None:
    async with served(tmp_path) as server, view(server.authority, server.token) as ws:
        await opened(ws, "tab")
        sessions = [await first_session(ws)]
        for _ in range(49):
            await send(ws, {"type": "new_session"})
            created = await until(ws, {"type": "session_event", "event": "created"})
            sessions.append(created["sessionId"])
        for number, session_id in enumerate(sessions):
            await send(
                ws, {"type": "prompt", "sessionId": session_id, "text": f"run echo n{number}"}
            )
        questions: dict[str, dict[str, Any]] = {}
        while len(questions) < len(sessions):
            question = (await until(ws, {"type": "requested"}))["question"]
            questions[question["sessionId"]] = question
        order = list(questions.values())
        random.Random(13).shuffle(order)
        for question in order:
            await send(ws, answer(question, "allow"))
        outputs: dict[str, str] = {}
        while len(outputs) < len(sessions):
            message = await until(ws, {"type": "session_event", "event": "message"})
            outputs[message["sessionId"]] = message["text"]
        for number, session_id in enumerate(sessions):
            assert questions[session_id]["title"] == f"local_shell: echo n{number}"
            assert outputs[session_id] == f"exit code 0\nn{number}\n"


async def test_the_page_carries_the_token_to_its_files_and_sets_no_cookie(
    tmp_path: Path,
) -> None:
    async with served(tmp_path) as server, httpx.AsyncClient() as http:
        root = f"http://{server.authority}"
        page = await http.get(server.url)
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert "set-cookie" not in page.headers  # (a cookie would go to every port)
        assert f'src="/static/{server.token}/app.js"' in page.text
        script = await http.get(f"{root}/static/{server.token}/app.js")
        assert script.status_code == 200 and "javascript" in script.headers["content-type"]
        assert b"./card.js" in script.content  # (its imports are relative: they carry it)
        for path in (f"/static/{server.token}/card.js", f"/static/{server.token}/style.css"):
            assert (await http.get(f"{root}{path}")).status_code == 200
        for path in ("/static/app.js", "/static/wrong-token-wrong-token-xx/app.js"):
            assert (await http.get(f"{root}{path}")).status_code == 403
        for name in (".hidden.js", "nothere.js", "a%00.js", "server.py"):
            missing = await http.get(f"{root}/static/{server.token}/{name}")
            assert missing.status_code == 404


async def test_only_http_1_1_and_this_servers_names(tmp_path: Path) -> None:
    async with served(tmp_path) as server:
        port = server.authority.rpartition(":")[2]
        async with httpx.AsyncClient() as http:
            local = await http.get(server.url, headers={"Host": f"localhost:{port}"})
            assert local.status_code == 200
            other_port = await http.get(server.url, headers={"Host": "localhost:1"})
            assert other_port.status_code == 403
        async with httpx.AsyncClient(http1=False, http2=True) as h2:  # (prior knowledge)
            with pytest.raises(httpx.RemoteProtocolError):  # (no HTTP/2 connection at all)
                await h2.get(server.url)


def run_serve(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "simhost", "serve", *args],
        capture_output=True,
        text=True,
        timeout=WAIT_S * 3,
        env={**os.environ, **(env or {})},
        check=False,
    )


@pytest.mark.parametrize(
    ("args", "env", "says"),
    [
        (["--host", "192.0.2.1"], {}, "choose the token yourself"),
        (["--host", "0.0.0.0"], {"SIMHOST_TOKEN": "t" * 22}, "is every address"),
        (["--host", "example.com"], {}, "give an IP address"),
        (["--port", "70000"], {}, "expected 0 to 65535"),
        (["--host", "192.0.2.1"], {"SIMHOST_TOKEN": "short"}, "22 to 256 characters"),
        (["--dialect", "grpc"], {}, "unknown dialect"),
    ],
)
def test_a_wrong_command_line_is_one_line_and_exit_2(
    args: list[str], env: dict[str, str], says: str
) -> None:
    result = run_serve(*args, env={"SIMHOST_TOKEN": "", **env})
    assert result.returncode == 2 and result.stdout == ""
    assert result.stderr.count("\n") == 1 and says in result.stderr


def test_an_address_in_use_is_exit_2_and_stops_the_agent(tmp_path: Path) -> None:
    import socket

    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = run_serve("--workspace", str(tmp_path), "--port", str(port))
    assert result.returncode == 2 and "cannot listen on" in result.stderr
    assert "Traceback" not in result.stderr


def test_help_explains_the_url_and_the_exit_codes() -> None:
    result = run_serve("--help")
    assert result.returncode == 0
    for words in ("serving at http://HOST:PORT/?token=TOKEN", "--token-file", "Exit code"):
        assert words in result.stdout


@pytest.mark.parametrize(
    ("agent", "says"),
    [
        ("false", "the agent "),
        ("sh -c 'echo boom >&2; sleep 100'", "did not start in 1 s"),
    ],
    ids=["exits at once", "never answers"],
)
def test_an_agent_that_does_not_start_is_one_line_and_its_stderr(
    agent: str, says: str, tmp_path: Path
) -> None:
    result = run_serve("--workspace", str(tmp_path), "--agent", agent, "--start-timeout", "1")
    assert result.returncode == 1 and result.stdout == ""
    assert "Traceback" not in result.stderr and "ExceptionGroup" not in result.stderr
    first = result.stderr.splitlines()[0]
    assert first.startswith("simhost serve: ") and says in first
    if "boom" in agent:
        assert "boom" in result.stderr  # (the agent's last words)
