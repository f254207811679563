"""The blocking facade (trio in a background thread): the core's routing, cancel and
teardown cases, plus threads: 8 at once, answers from anywhere, dispatch honoured."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest

from permclient import ConnectionClosed, Selected
from permclient.embed import open_blocking
from tests.support.embed import ThreadCards
from tests.support.peer import TIMEOUT_S, runtime_argv


def test_end_to_end_a_write_allowed_from_a_card_lands_in_the_workspace(tmp_path: Path) -> None:
    workspace = tmp_path / "w"
    workspace.mkdir()
    with open_blocking(runtime_argv(workspace, tmp_path / "state")) as client:
        session_id = client.request("sessionNew", {"title": "embed"})["sessionId"]
        cards = ThreadCards()
        with client.permission_handler(session_id, cards):
            caller = ThreadPoolExecutor(1)
            turn = caller.submit(
                client.request,
                "chatSend",
                {"sessionId": session_id, "text": "create notes.txt with hello"},
            )
            handle = cards.next()
            assert handle.request.tool_call.kind == "edit"
            handle.answer(Selected("allow"))
            assert turn.result(TIMEOUT_S) == {"stopReason": "end_turn"}
            caller.shutdown()
    assert (workspace / "notes.txt").read_text() == "hello\n"


def test_end_to_end_closing_with_a_question_open_answers_it_and_stops_the_runtime(
    tmp_path: Path,
) -> None:
    workspace = tmp_path / "w"
    workspace.mkdir()
    client = open_blocking(runtime_argv(workspace, tmp_path / "state"))
    session_id = client.request("sessionNew", {"title": "embed"})["sessionId"]
    cards = ThreadCards()
    client.permission_handler(session_id, cards)
    caller = ThreadPoolExecutor(1)
    turn = caller.submit(
        client.request, "chatSend", {"sessionId": session_id, "text": "create notes.txt with hello"}
    )
    handle = cards.next()
    process = client.client.process
    assert process is not None and process.returncode is None
    client.close()
    assert cards.withdrawn.get(timeout=TIMEOUT_S) is handle
    with pytest.raises(ConnectionClosed):
        turn.result(TIMEOUT_S)
    caller.shutdown()
    assert process.returncode is not None  # stopped: nothing left running
    assert not (workspace / "notes.txt").exists()
    assert handle.answer(Selected("allow")) is False


def test_an_argv_that_cannot_start_raises_at_once(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        open_blocking([str(tmp_path / "no-such-runtime")])

