"""The runtime's pure parts without processes: grammar, policy, presets, session store, tools."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import trio

from tests.support.runtime_editor import answering, non_utf8_workspace, open_bridge_runtime


def _read_raw(path: bytes) -> str:
    with open(path) as file:
        return file.read()


async def test_the_runtime_answers_tools_on_non_utf8_names_and_the_turn_goes_on(
    tmp_path: Path,
) -> None:
    async with open_bridge_runtime(tmp_path) as editor:
        workspace = editor.workspace
        non_utf8_workspace(tmp_path)
        session = await editor.new_session()
        for prompt in ("create link with hi", "read dir/f.txt", "delete file"):
            with trio.fail_after(20):
                assert await editor.send(session, prompt) == "end_turn"
            assert editor.texts(session)[-1].endswith("a name in it is not UTF-8")
        seen: list[Any] = []
        with trio.fail_after(20):
            assert await editor.send(session, "create out with hi", answering("allow", seen))
        [question] = seen  # the shell fallback asks, naming the link out escaped
        assert "\\xff-out) is outside the workspace" in repr(question.tool_call.content)
        assert _read_raw(os.fsencode(tmp_path) + b"/\xff-out") == "hi\n"
    # open_runtime also checked that the runtime logged nothing (no traceback).
    raw = os.fsencode(workspace)
    for name in (b"/d\xff/f.txt", b"/\xff.txt"):  # refused: not written, not deleted
        assert _read_raw(raw + name) == "mine\n"

