"""The chat controller against a scripted bridge runtime: no process, no terminal."""

from __future__ import annotations

import os
import re

import pytest
import trio
import trio.testing

from simhost.chat.app import ChatOptions
from simhost.chat.keys import Key
from simhost.chat.screen import LiveScreen
from simhost.chat.terminal import EndOfInput, InputEvent, Interrupt, Line, Terminate, read_lines
from tests.support import fake_runtime as test_chat_fakes
from tests.support.fake_runtime import answers_of, running_chat, settle

ENTER = Key("enter")
ESC = Key("esc")
CTRL_C = Key("ctrl_c")


async def test_starts_with_initialize_and_a_new_session() -> None:
    async with running_chat() as chat:
        assert chat.runtime.methods()[:2] == ["initialize", "sessionNew"]
        assert chat.app.current == "s-1"
        assert chat.app.mode == "prompt"
        assert "runtime fake-runtime 1" in chat.text
        assert "new session Session 1 (s-1)" in chat.text


async def test_a_prompt_streams_the_agent_text() -> None:
    async with running_chat() as chat:
        await chat.type_line("say Hello, ;say world\\n;say bye")
        assert "Session 1 (s-1) > say Hello, ;say world\\n;say bye" in chat.text
        assert "\nHello, world\n" in chat.text
        # A partial line is flushed when the turn ends, before the end marker.
        assert chat.text.index("bye") < chat.text.index("turn ended: end_turn")


def _transcript_line_at(text: str, line: str) -> int:
    """Where ``line`` was printed as a finished line (not as the live ``▍`` partial)."""
    match = re.search(re.escape(line) + r"[ \t]*\n", text)
    assert match is not None, line
    return match.start()


async def test_text_streamed_before_a_tool_call_is_printed_above_its_card() -> None:
    async with running_chat(screen=LiveScreen) as chat:
        chat.app.screen.start()
        await chat.type_line("say Let me write;ask a.txt;say done")
        await chat.press("1")
        assert _transcript_line_at(chat.text, "Let me write") < chat.text.index("→ Allow")
        # The text after the tool call is a line of its own, not glued to the one before.
        assert "Let me writewrote" not in chat.text and "a.txtdone" not in chat.text
        after_wrote = chat.text[_transcript_line_at(chat.text, "wrote a.txt") :]
        assert re.search(r"(?:\n|\x1b\[2K)done[ \t]*\n", after_wrote)  # a line of its own
        chat.app.screen.stop()


async def test_text_streamed_before_an_unannounced_question_is_printed_above_its_card() -> None:
    async with running_chat() as chat:
        await chat.type_line("say Before the question;unannounced b.txt")
        assert _transcript_line_at(chat.text, "Before the question") < chat.text.index(
            "Permission request"
        )
        await chat.press("3", ENTER)
        assert answers_of(chat.runtime) == [("s-1", "selected", "deny")]
        assert chat.text.count("\nBefore the question\n") == 1  # printed once, not again


async def test_deny_with_a_number_key_and_enter_does_nothing() -> None:
    async with running_chat() as chat:
        await chat.type_line("ask a.txt")
        assert chat.app.mode == "card"
        assert "Permission request" in chat.text
        assert "Session  Session 1 (s-1)" in chat.text
        await chat.press(ENTER, ENTER, "x", Key("backspace"))
        assert chat.runtime.answers == []  # no default option
        assert chat.app.mode == "card"
        await chat.press("3")  # a deny option: it waits for a reason (optional)
        assert chat.runtime.answers == []
        assert chat.app.mode == "card"
        await chat.press(ENTER)  # sends the denial, without a reason
        assert answers_of(chat.runtime) == [("s-1", "selected", "deny")]
        assert chat.runtime.answers[0].meta is None
        assert "→ Deny  reject_once · fs.write: a.txt" in chat.text
        assert "✗ fs.write: a.txt  [edit]  failed — denied by you" in chat.text
        assert chat.app.mode == "prompt"


async def test_allow_with_a_number_key() -> None:
    async with running_chat() as chat:
        await chat.type_line("ask a.txt")
        await chat.press("1")
        assert answers_of(chat.runtime) == [("s-1", "selected", "allow")]
        assert "✓ fs.write: a.txt  [edit]  completed — allowed by you" in chat.text


async def test_esc_answers_cancelled_and_a_missing_option_number_does_nothing() -> None:
    async with running_chat() as chat:
        await chat.type_line("ask a.txt")
        await chat.press("7", "0")
        assert chat.runtime.answers == []
        assert "there is no option 7: choose 1-4" in chat.text
        await chat.press(ESC)
        assert answers_of(chat.runtime) == [("s-1", "cancelled", None)]
        assert "cancelled (Esc)" in chat.text


async def test_a_two_file_request_shows_both_files() -> None:
    async with running_chat() as chat:
        await chat.type_line("ask2")
        assert "Changes (2 files)" in chat.text
        assert "+++ /w/one.py" in chat.text and "+++ /w/two.py" in chat.text


async def test_a_withdrawn_card_is_replaced_by_a_notice_and_the_next_key_goes_to_the_prompt() -> (
    None
):
    async with running_chat() as chat:
        await chat.type_line("withdraw w.txt; gate")
        assert chat.app.mode == "card"
        chat.runtime.withdraw.set()
        await settle()
        assert chat.app.shown is None
        assert "⊘ withdrawn by the runtime · fs.write: w.txt · Session 1 (s-1)" in chat.text
        assert "denied: the question timed out and was withdrawn" in chat.text
        # The turn still runs (gate): the key is typed ahead for the prompt, not eaten.
        await chat.press("3")
        assert chat.app.editor.text == "3"
        chat.runtime.gate.set()
        await settle()
        assert chat.app.mode == "prompt"
        assert chat.app.editor.text == "3"
        assert answers_of(chat.runtime) == [("s-1", None, None)]
        assert chat.events("approval.cancelled")[0]["by"] == "peer"


async def test_ctrl_c_during_a_card_cancels_the_turn_and_answers_the_card_cancelled() -> None:
    async with running_chat() as chat:
        await chat.type_line("ask a.txt")
        assert chat.app.mode == "card"
        await chat.press(CTRL_C)
        assert chat.app.mode == "prompt"
        assert chat.app.exit_code is None  # Ctrl-C cancelled the turn, not the chat
        assert chat.runtime.turns_cancelled == ["s-1"]
        [cancelled] = chat.events("approval.cancelled")
        assert cancelled["by"] == "turn" and cancelled["session_id"] == "s-1"
        assert chat.events("approval.responded") == []
        assert "⊘ answered cancelled: you cancelled the turn" in chat.text
        assert "⏹ turn cancelled · Session 1 (s-1)" in chat.text
        # The prompt works again.
        await chat.type_line("ask b.txt")
        await chat.press("1")
        assert answers_of(chat.runtime)[-1] == ("s-1", "selected", "allow")


async def test_ctrl_c_during_a_turn_without_a_card_cancels_it() -> None:
    async with running_chat() as chat:
        await chat.type_line("hang")
        assert chat.app.mode == "busy"
        await chat.press(CTRL_C)
        assert chat.app.mode == "prompt"
        assert chat.runtime.turns_cancelled == ["s-1"]


@pytest.mark.parametrize(
    "leave",
    [
        [CTRL_C],
        [Key("ctrl_d")],
        ["/quit", ENTER],
        [Interrupt()],
        [EndOfInput()],
        [Terminate("SIGTERM")],
    ],
)
async def test_leaving_at_the_prompt_exits_0(leave: list[InputEvent | str]) -> None:
    async with running_chat() as chat:
        for event in leave:
            if isinstance(event, str):
                await chat.press(event)
            else:
                await chat.event(event)
        with trio.fail_after(5):
            await chat.done.wait()
        assert chat.exit_code == 0


async def test_ctrl_d_with_text_on_the_line_does_not_quit() -> None:
    async with running_chat() as chat:
        await chat.press("abc", Key("ctrl_d"))
        assert not chat.done.is_set()


async def test_quitting_with_an_open_card_answers_it_cancelled() -> None:
    async with running_chat() as chat:
        await chat.type_line("/bg ask a.txt")
        assert chat.app.mode == "card"
        chat.app.quit(0)
        with trio.fail_after(5):
            await chat.done.wait()
        await settle()
        assert [e["by"] for e in chat.events("approval.cancelled")] == ["turn"]


async def test_cards_of_several_sessions_queue_and_each_names_its_session() -> None:
    async with running_chat() as chat:
        await chat.type_line("/bg gate; ask one.txt")
        await chat.type_line("/new Second")
        assert chat.app.current == "s-2"
        await chat.type_line("/bg gate; ask two.txt")
        chat.runtime.gate.set()
        await settle()
        assert chat.app.queue.count() == 2
        shown = chat.app.shown
        assert shown is not None
        assert "⧗ 1 approval waiting: " in chat.text
        # Each card names its session; answers go to that session only.
        first = shown.session_id
        second = "s-2" if first == "s-1" else "s-1"
        await chat.press("1")
        assert chat.app.shown is not None and chat.app.shown.session_id == second
        await chat.press("3", ENTER)
        assert sorted(answers_of(chat.runtime)) == sorted(
            [(first, "selected", "allow"), (second, "selected", "deny")]
        )
        assert "Session  Session 1 (s-1)" in chat.text
        assert "Session  Second (s-2)" in chat.text


async def test_burst_routes_every_answer_to_its_own_session() -> None:
    async with running_chat() as chat:
        await chat.type_line("/bg gate; burst 3")
        await chat.type_line("/new B")
        await chat.type_line("/bg gate; burst 3")
        chat.runtime.gate.set()
        await settle()
        assert chat.app.queue.count() == 6
        for _ in range(6):
            shown = chat.app.shown
            assert shown is not None
            if shown.session_id == "s-1":
                await chat.press("1")
            else:
                await chat.press("3", ENTER)
        answers = answers_of(chat.runtime)
        assert sorted(answers) == sorted(
            [("s-1", "selected", "allow")] * 3 + [("s-2", "selected", "deny")] * 3
        )


async def test_a_card_waits_while_you_type_at_the_prompt() -> None:
    async with running_chat() as chat:
        await chat.type_line("/bg gate; ask a.txt")
        await chat.press("/sess")
        chat.runtime.gate.set()
        await settle()
        assert chat.app.shown is None  # typing: the card does not take the keyboard
        assert "(send or clear (Ctrl-U) your line to answer)" in chat.text
        await chat.press("ions")
        assert chat.app.editor.text == "/sessions"
        assert chat.runtime.answers == []
        await chat.press(ENTER)
        # The command ran (the card waited), with the pending approval in the table.
        assert "⧗ 1" in chat.text.split("Sessions")[-1]
        assert chat.app.mode == "card"
        await chat.press("3", ENTER)
        assert answers_of(chat.runtime) == [("s-1", "selected", "deny")]


async def test_ctrl_u_clearing_the_line_brings_up_the_waiting_card() -> None:
    async with running_chat() as chat:
        await chat.type_line("/bg gate; ask a.txt")
        await chat.press("abc")
        chat.runtime.gate.set()
        await settle()
        assert chat.app.shown is None
        await chat.press(Key("ctrl_u"))
        assert chat.app.mode == "card"


async def test_ctrl_c_on_a_background_card_cancels_that_turn() -> None:
    async with running_chat() as chat:
        await chat.type_line("/bg ask a.txt")
        assert chat.app.mode == "card"
        await chat.press(CTRL_C)
        assert chat.runtime.turns_cancelled == ["s-1"]
        assert chat.app.exit_code is None
        assert chat.app.mode == "prompt"


async def test_keys_before_a_card_was_up_half_a_second_go_to_the_line(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with running_chat(options=ChatOptions(), screen=LiveScreen) as chat:
        chat.app.screen.start()
        await chat.type_line("ask a.txt")
        assert chat.app.mode == "card"
        await chat.press(ESC)  # Esc too: nothing is answered before the card could be read
        await trio.sleep(0.49)
        await chat.press("3")
        assert chat.runtime.answers == []
        assert chat.app.editor.text == "3"  # on the line, where it shows
        assert "read the card: keys go to the prompt line for now" in chat.text
        await trio.sleep(1)
        await chat.press("3")  # the line has text: the card waits for it to be cleared
        assert chat.runtime.answers == [] and chat.app.editor.text == "33"
        assert "Your prompt line has text: clear it (Ctrl-U) to answer this card." in chat.text
        await chat.press(Key("ctrl_u"))
        await trio.sleep(0.6)  # the emptied line gives the card a fresh half second
        await chat.press("3")
        assert chat.runtime.answers == []  # the deny waits for its reason
        assert "reason > " in chat.text
        await chat.press(ENTER)
        assert answers_of(chat.runtime) == [("s-1", "selected", "deny")]
        assert chat.app.editor.text == ""
        chat.app.screen.stop()


async def test_a_key_read_before_the_card_was_armed_never_answers_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with running_chat(options=ChatOptions()) as chat:
        await chat.type_line("ask a.txt")
        typed_early = trio.current_time()  # e.g. read while a big card was being drawn
        await trio.sleep(0.6)
        await chat.press(Key("char", "1", at=typed_early))
        assert chat.runtime.answers == [] and chat.app.editor.text == "1"
        await chat.press(Key("ctrl_u"))
        await trio.sleep(0.6)
        await chat.press(Key("char", "3", at=trio.current_time()), ENTER)
        assert answers_of(chat.runtime) == [("s-1", "selected", "deny")]


@pytest.mark.parametrize("card_up_for", [0.0, 0.3, 5.0])
@pytest.mark.parametrize("background", [False, True])
async def test_typing_see_file_2_while_a_card_opens_answers_nothing(
    autojump_clock: trio.abc.Clock, card_up_for: float, background: bool
) -> None:
    """The issue's case: the digit of a line being typed is text, whenever the card came up."""
    async with running_chat(options=ChatOptions()) as chat:
        await chat.type_line(("/bg " if background else "") + "gate; ask t1.txt")
        await chat.press("see")  # typing began before the card
        chat.runtime.gate.set()
        await settle()
        await trio.sleep(card_up_for)
        for char in " file 2":
            await chat.press(char)
            await trio.sleep(0.2)  # slow typing: each key long after the card came up
        assert chat.runtime.answers == []
        assert chat.app.editor.text == "see file 2"
        assert chat.app.queue.count() == 1
        await chat.press(Key("ctrl_u"))
        await trio.sleep(0.6)  # a card that comes back is armed anew
        await chat.press("2")
        await trio.sleep(1)
        await chat.press("y")  # the standing grant, confirmed
        assert answers_of(chat.runtime) == [("s-1", "selected", "allow-always")]


async def test_letters_typed_on_an_armed_card_go_to_the_line_with_their_digits(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with running_chat(options=ChatOptions()) as chat:
        await chat.type_line("ask t1.txt")
        await trio.sleep(5)
        await chat.press("see file 2")
        assert chat.runtime.answers == []
        assert chat.app.editor.text == "see file 2"
        assert chat.app.mode == "card"  # the foreground turn still waits for the card


async def test_after_an_answer_the_next_card_needs_its_own_half_second(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with running_chat(options=ChatOptions()) as chat:
        await chat.type_line("/bg burst 2")
        await trio.sleep(0.6)
        await chat.press("1", "3")  # a quick double press
        assert answers_of(chat.runtime) == [("s-1", "selected", "allow")]
        assert chat.app.editor.text == "3"
        # At the prompt, a line with text hides the card; cleared, it is up (and armed) anew.
        await chat.press(Key("ctrl_u"))
        await trio.sleep(0.4)
        await chat.press("3")
        assert len(chat.runtime.answers) == 1
        await chat.press(Key("ctrl_u"))
        await trio.sleep(0.6)
        await chat.press("3", ENTER)
        assert answers_of(chat.runtime)[-1] == ("s-1", "selected", "deny")


@pytest.mark.parametrize("clear", [Key("backspace"), Key("ctrl_u")], ids=["backspace", "ctrl_u"])
async def test_emptying_the_line_during_a_foreground_turn_gives_the_card_a_fresh_half_second(
    autojump_clock: trio.abc.Clock, clear: Key
) -> None:
    async with running_chat(options=ChatOptions()) as chat:
        await chat.type_line("ask a.txt")
        await trio.sleep(5)  # the card has long been armed
        await chat.press("x", clear)
        await trio.sleep(0.15)
        await chat.press("3")  # meant to start "3 more": the line was empty for 0.15 s only
        assert chat.runtime.answers == []
        assert chat.app.editor.text == "3"
        await chat.press(Key("ctrl_u"))
        await trio.sleep(0.6)
        await chat.press("3", ENTER)
        assert answers_of(chat.runtime) == [("s-1", "selected", "deny")]


async def test_characters_read_together_never_answer_a_card(
    autojump_clock: trio.abc.Clock,
) -> None:
    # A paste without bracketed paste mode (or a burst of typing) arrives in one read.
    async with running_chat(options=ChatOptions()) as chat:
        await chat.type_line("ask a.txt")
        await trio.sleep(5)
        await chat.press("2 files")
        assert chat.runtime.answers == []
        assert chat.app.editor.text == "2 files"
        await chat.press(Key("ctrl_u"))
        await trio.sleep(0.6)
        await chat.press("21")
        assert chat.runtime.answers == [] and chat.app.editor.text == "21"


@pytest.mark.parametrize("repeat_delay", [0.25, 0.5, 0.66, 0.9])
async def test_a_held_key_answers_one_card_only(
    autojump_clock: trio.abc.Clock, repeat_delay: float
) -> None:
    async with running_chat(options=ChatOptions()) as chat:
        await chat.type_line("/bg burst 3")
        await trio.sleep(0.6)
        await chat.press("1")
        # The keyboard's delay before repeating, then repeats at 30 per second.
        await trio.sleep(repeat_delay)
        for _ in range(60):
            await chat.press("1")
            await trio.sleep(1 / 30)
        assert answers_of(chat.runtime) == [("s-1", "selected", "allow")]
        # Released, the line cleared, and pressed again after a while: that is an answer.
        await chat.press(Key("ctrl_u"))
        await trio.sleep(1)
        await chat.press("1")
        assert len(chat.runtime.answers) == 2


async def test_a_held_esc_cancels_one_card_only(autojump_clock: trio.abc.Clock) -> None:
    # Esc never lands on the line, so only the repeat guard can tell a held Esc: each
    # repeat renews it, however long the key is held.
    async with running_chat(options=ChatOptions()) as chat:
        await chat.type_line("/bg burst 3")
        await trio.sleep(0.6)
        for _ in range(90):  # three seconds at 30 repeats a second
            await chat.press(ESC)
            await trio.sleep(1 / 30)
        assert [outcome for _, outcome, _ in answers_of(chat.runtime)] == ["cancelled"]
        await trio.sleep(1.1)  # released
        await chat.press(ESC)
        assert len(chat.runtime.answers) == 2


async def test_ctrl_c_at_the_prompt_with_text_clears_the_line_and_does_nothing_else() -> None:
    async with running_chat() as chat:
        await chat.type_line("/bg hang")
        await chat.press("half a thought", CTRL_C)
        assert chat.app.editor.text == ""
        assert not chat.done.is_set() and chat.runtime.turns_cancelled == []
        await chat.press(CTRL_C)  # on an empty line: leaves, as before
        with trio.fail_after(5):
            await chat.done.wait()
        assert chat.exit_code == 0


@pytest.mark.parametrize("leave", [["/quit", ENTER], [Key("ctrl_d")]])
async def test_leaving_while_turns_run_asks_and_the_default_is_no(
    leave: list[Key | str],
) -> None:
    async with running_chat(screen=LiveScreen) as chat:
        chat.app.screen.start()
        await chat.type_line("/bg hang")
        await chat.type_line("/new Two")
        await chat.type_line("/bg ask a.txt")
        await chat.press(*leave)
        assert "2 turns still running: quit? y/N" in chat.text
        assert chat.app.mode == "card"
        await chat.press("1")  # not a yes, and not an answer to the card either
        assert "not quitting: the turns go on" in chat.text
        assert chat.runtime.answers == [] and not chat.done.is_set()
        await chat.press(*leave)
        await chat.press(ENTER)
        assert not chat.done.is_set()
        await chat.press(*leave)
        await chat.press("y")
        with trio.fail_after(5):
            await chat.done.wait()
        assert chat.exit_code == 0
        await settle()
        assert sorted(chat.runtime.turns_cancelled) == ["s-1", "s-2"]
        assert [e["by"] for e in chat.events("approval.cancelled")] == ["turn"]  # fail closed
        assert chat.events("approval.responded") == []


@pytest.mark.parametrize("leave", [Line("/quit"), EndOfInput(), Terminate("SIGHUP")])
async def test_leaving_without_a_keyboard_never_asks(leave: InputEvent) -> None:
    async with running_chat(options=ChatOptions(input_mode="lines", arm_delay=0)) as chat:
        await chat.event(Line("/bg hang"))
        await chat.event(Line("/new Two"))
        await chat.event(Line("/bg ask a.txt"))
        await chat.event(leave)
        with trio.fail_after(5):
            await chat.done.wait()
        assert chat.exit_code == 0
        assert "still running" not in chat.text
        await settle()
        assert [e["by"] for e in chat.events("approval.cancelled")] == ["turn"]
        assert chat.events("approval.responded") == []


async def test_a_multi_line_paste_is_one_prompt_and_answers_no_card() -> None:
    async with running_chat() as chat:
        await chat.type_line("ask a.txt")
        assert chat.app.mode == "card"
        await chat.press("done\r1\r3\r")  # pasted without bracketed paste: one read
        assert chat.runtime.answers == []
        assert chat.app.editor.text == "done\n1\n3\n"
        await chat.press(Key("ctrl_u"), "3", ENTER)
        assert answers_of(chat.runtime) == [("s-1", "selected", "deny")]
        await chat.press(Key("paste", "first line\nsecond line"))
        assert "Session 1 (s-1) > first line⏎second line" not in chat.text  # not sent yet
        await chat.press(ENTER)
        sent = [p["text"] for m, p in chat.runtime.requests if m == "chatSend"]
        assert sent[-1] == "first line\nsecond line"


async def test_a_paste_too_long_for_a_prompt_is_refused_whole() -> None:
    async with running_chat() as chat:
        await chat.press("abc", Key("paste", "x" * 8190))
        assert "the paste was not taken: a prompt holds at most 8,192 characters" in chat.text
        assert chat.app.editor.text == "abc"
        await chat.press(Key("paste_too_long"))
        assert chat.text.count("the paste was not taken") == 2
        await chat.press(Key("paste", "x" * 8189))
        assert len(chat.app.editor.text) == 8192


async def test_switch_and_peek_take_a_title_or_a_unique_id_prefix() -> None:
    async with running_chat() as chat:
        chat.runtime.next_ids = ["s-abc123", "s-abd456", "s-ffe789"]
        await chat.type_line("/new Docs")
        await chat.type_line("/new Tests")
        await chat.type_line("/new docs")
        await chat.type_line("/switch s-abc")
        assert chat.app.current == "s-abc123"
        await chat.type_line("/switch tests")  # a title, in any case
        assert chat.app.current == "s-abd456"
        await chat.type_line("/peek s-ff")
        assert "peek (not activated): docs (s-ffe789)" in chat.text
        await chat.type_line("/switch s-1")  # an exact id, though it is also a prefix
        assert chat.app.current == "s-1"
        loads = [p["sessionId"] for m, p in chat.runtime.requests if m == "sessionLoad"]
        assert loads == ["s-abc123", "s-abd456", "s-1"]


@pytest.mark.parametrize(
    ("wanted", "named"),
    [("s-ab", "s-abc123 'Docs', s-abd456 'Tests'"), ("DOCS", "s-abc123 'Docs', s-ffe789 'docs'")],
)
async def test_switch_to_an_ambiguous_prefix_or_title_lists_the_candidates(
    wanted: str, named: str
) -> None:
    async with running_chat() as chat:
        chat.runtime.next_ids = ["s-abc123", "s-abd456", "s-ffe789"]
        for title in ("Docs", "Tests", "docs"):
            await chat.type_line(f"/new {title}")
        await chat.type_line(f"/switch {wanted}")
        assert f"{wanted!r} names 2 sessions: {named}; give more of the id" in chat.text
        assert chat.app.current == "s-ffe789"
        assert "sessionLoad" not in chat.runtime.methods()


async def test_standing_grant_is_shown() -> None:
    async with running_chat() as chat:
        await chat.type_line("grant a.txt")
        line = "✓ fs.write: a.txt  [edit]  completed — standing grant applied (allowed)"
        assert line in chat.text


async def test_tool_status_never_moves_back() -> None:
    async with running_chat() as chat:
        await chat.type_line("late a.txt")
        lines = [line for line in chat.text.splitlines() if "fs.write: a.txt" in line]
        assert [line.split()[0] for line in lines] == ["○", "◐", "✓"]


async def test_sessions_switch_and_peek() -> None:
    async with running_chat() as chat:
        await chat.type_line("/new Second")
        assert chat.runtime.active == "s-2"
        await chat.type_line("say in two")
        await chat.type_line("/peek s-1")
        assert chat.runtime.active == "s-2" and chat.app.current == "s-2"
        assert "peek (not activated): Session 1 (s-1)" in chat.text
        await chat.type_line("/peek s-2")
        assert "you   say in two" in chat.text
        await chat.type_line("/switch s-1")
        assert chat.runtime.active == "s-1" and chat.app.current == "s-1"
        assert "switched to: Session 1 (s-1)" in chat.text
        await chat.type_line("/sessions")
        table = chat.text.split("Sessions")[-1]
        assert "▶ s-1" in table and "Second" in table


async def test_unknown_session_is_an_error_not_a_crash() -> None:
    async with running_chat() as chat:
        await chat.type_line("/switch nope")
        assert "[-32602] unknown session 'nope'" in chat.text
        assert chat.app.current == "s-1" and chat.app.mode == "prompt"


async def test_policy_shows_and_sets_the_preset() -> None:
    async with running_chat() as chat:
        await chat.type_line("/policy")
        assert "▶ ask" in chat.text and "grant: fs.write" in chat.text
        await chat.type_line("/policy read-only")
        assert chat.runtime.sessions["s-1"].preset == "read-only"
        assert "permission preset of Session 1 (s-1) is now read-only" in chat.text


async def test_help_and_unknown_commands() -> None:
    async with running_chat() as chat:
        await chat.type_line("/help")
        assert "/bg TEXT" in chat.text and "Esc" in chat.text
        await chat.type_line("/frobnicate")
        assert "unknown command '/frobnicate'" in chat.text


async def test_one_turn_per_session() -> None:
    async with running_chat() as chat:
        await chat.type_line("/bg hang")
        await chat.type_line("say hi")
        assert "already has a turn running" in chat.text
        await chat.type_line("/cancel")
        assert chat.runtime.turns_cancelled == ["s-1"]


async def test_the_runtime_going_away_ends_the_chat_with_1() -> None:
    async with running_chat() as chat:
        await chat.type_line("hang")
        chat.runtime.close()
        with trio.fail_after(5):
            await chat.done.wait()
        assert chat.exit_code == 1
        assert "the runtime connection is gone" in chat.text


async def test_lines_mode_answers_with_lines() -> None:
    async with running_chat(options=ChatOptions(input_mode="lines", arm_delay=0)) as chat:
        await chat.event(Line("ask a.txt"))
        assert (
            "Answer with a line: 1-4 (a deny option may be followed by a reason), "
            "or esc (cancelled)." in chat.text
        )
        assert "Editor rules" not in chat.text  # no rule book: the card offers no rules
        await chat.event(Line(""))
        await chat.event(Line("hello"))
        assert "a permission card waits: answer 1-4 or esc" in chat.text
        await chat.event(Line("\N{SUPERSCRIPT TWO}"))  # a digit to str.isdigit, not to int()
        assert "a permission card waits: answer 1-4 or esc (got '²')" in chat.text
        await chat.event(Line("1" * 4301))  # more digits than int() takes
        assert chat.runtime.answers == []
        await chat.event(Line("esc"))
        await chat.event(Line("ask b.txt"))
        await chat.event(Line(" 1 "))
        assert answers_of(chat.runtime) == [
            ("s-1", "cancelled", None),
            ("s-1", "selected", "allow"),
        ]


async def test_a_line_read_before_a_card_came_up_never_answers_it(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with running_chat(options=ChatOptions(input_mode="lines", arm_delay=0)) as chat:
        read_for_the_prompt = trio.current_time()
        await trio.sleep(1)
        await chat.event(Line("ask a.txt"))
        await chat.event(Line("1", at=read_for_the_prompt))  # the card came up after it
        assert chat.runtime.answers == []
        assert "ignored, not an answer" in chat.text
        await chat.event(Line("3", at=trio.current_time()))
        assert answers_of(chat.runtime) == [("s-1", "selected", "deny")]


async def test_a_script_on_a_pipe_is_read_only_when_the_chat_is_ready() -> None:
    """The line reader gates on the chat: an answer line never becomes a prompt."""
    script = b"ask a.txt\n3\n\nask b.txt\n1\n/bg gate; ask c.txt\n/wait\nesc\n/quit\n"
    read_fd, write_fd = os.pipe()
    os.write(write_fd, script)
    os.close(write_fd)
    try:
        async with running_chat(options=ChatOptions(input_mode="lines", arm_delay=0)) as chat:
            chat.runtime.gate.set()
            async with trio.open_nursery() as nursery:
                nursery.start_soon(read_lines, read_fd, chat.send, chat.app.wait_ready)
                with trio.fail_after(10):
                    await chat.done.wait()
                nursery.cancel_scope.cancel()
            assert chat.exit_code == 0
            assert answers_of(chat.runtime) == [
                ("s-1", "selected", "deny"),
                ("s-1", "selected", "allow"),
                ("s-1", "cancelled", None),
            ]
    finally:
        os.close(read_fd)


async def test_live_screen_shows_running_tool_lines_and_the_prompt() -> None:
    async with running_chat(screen=LiveScreen) as chat:
        chat.app.screen.start()
        await chat.press("typed")
        assert "Session 1 (s-1) > typed" in chat.text
        await chat.press(Key("ctrl_u"))
        await chat.type_line("withdraw w.txt")
        assert "Permission request" in chat.text
        chat.runtime.withdraw.set()
        await settle()
        assert "withdrawn by the runtime" in chat.text
        chat.app.screen.stop()


async def test_slash_on_a_card_at_the_prompt_starts_a_command_and_the_card_waits() -> None:
    async with running_chat() as chat:
        await chat.type_line("/bg ask one.txt")
        assert chat.app.mode == "card"
        await chat.press("/new B")
        assert chat.app.shown is None and chat.app.editor.text == "/new B"
        await chat.press(ENTER)
        assert chat.app.current == "s-2"
        assert chat.app.mode == "card"  # back, once the command is done
        await chat.type_line("/bg ask two.txt")
        assert chat.app.queue.count() == 2
        assert chat.app.shown is not None and chat.app.shown.session_id == "s-1"
        await chat.press("1", "3", ENTER)
        assert sorted(answers_of(chat.runtime)) == [
            ("s-1", "selected", "allow"),
            ("s-2", "selected", "deny"),
        ]


async def test_slash_during_a_foreground_turn_types_ahead_and_the_card_stays() -> None:
    async with running_chat() as chat:
        await chat.type_line("ask a.txt")
        await chat.press("/")
        assert chat.app.mode == "card" and chat.app.editor.text == "/"
        await chat.press("1")
        assert chat.runtime.answers == []


# ------------------------------------------- a standing grant picked by key is confirmed

TWO_OPTIONS = [
    {"optionId": "allow", "name": "Allow", "kind": "allow_once"},
    {"optionId": "deny", "name": "Deny", "kind": "reject_once"},
]


@pytest.mark.parametrize("then", ["", "2", "3", "x", "esc", "v"])
async def test_a_habitual_2_on_a_card_whose_2_always_allows_never_grants(
    autojump_clock: trio.abc.Clock, monkeypatch: pytest.MonkeyPatch, then: str
) -> None:
    """The review's attack: [Allow, Deny] then [Allow, Allow always, …]; 2 on both by habit."""
    async with running_chat(options=ChatOptions()) as chat:
        monkeypatch.setattr(test_chat_fakes, "OPTIONS", TWO_OPTIONS)
        await chat.type_line("ask a.txt; ask b.txt")
        monkeypatch.undo()  # the next card has the four options again
        await trio.sleep(0.6)
        await chat.press("2")  # Deny: it waits for a reason
        await trio.sleep(0.3)
        await chat.press(ENTER)  # denied, without a reason
        assert answers_of(chat.runtime) == [("s-1", "selected", "deny")]
        await trio.sleep(0.9)  # past the repeat guard: a deliberate press
        await chat.press("2")  # by habit: here it is "Allow always"
        assert "Confirm: Allow always" in chat.text
        await trio.sleep(0.3)
        if then:
            await chat.press(Key("esc") if then == "esc" else Key.of(then))
        await trio.sleep(5)
        assert answers_of(chat.runtime) == [("s-1", "selected", "deny")]
        assert chat.app.shown is not None  # the second card still asks
        if then:
            assert "not confirmed: nothing answered, the card still asks" in chat.text


async def test_2_then_y_grants_always(autojump_clock: trio.abc.Clock) -> None:
    async with running_chat(options=ChatOptions()) as chat:
        await chat.type_line("ask a.txt")
        await trio.sleep(0.6)
        await chat.press("2")
        assert chat.runtime.answers == []
        assert (
            "Confirm: Allow always (a standing grant)? y confirms · any other key goes back"
            in chat.text
        )
        await trio.sleep(0.2)
        await chat.press("y")
        assert answers_of(chat.runtime) == [("s-1", "selected", "allow-always")]


async def test_2_then_enter_the_habit_of_a_denial_grants_nothing(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with running_chat(options=ChatOptions()) as chat:
        await chat.type_line("ask a.txt")
        await trio.sleep(0.6)
        await chat.press("2")
        await trio.sleep(0.2)
        await chat.press(Key("enter"))  # a denial's second key: here it goes back
        assert chat.runtime.answers == []
        assert "not confirmed: nothing answered, the card still asks (enter)" in chat.text
        assert chat.app.shown is not None


async def test_2_then_another_key_then_enter_does_not_grant(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with running_chat(options=ChatOptions()) as chat:
        await chat.type_line("ask a.txt")
        await trio.sleep(0.6)
        await chat.press("2")
        await trio.sleep(0.2)
        await chat.press("x")  # goes back, answers nothing, and is not typed
        await trio.sleep(0.2)
        await chat.press(Key("enter"))  # Enter on a card does nothing
        assert chat.runtime.answers == [] and chat.app.editor.text == ""
        await trio.sleep(2)
        await chat.press("3", ENTER)
        assert answers_of(chat.runtime) == [("s-1", "selected", "deny")]


async def test_a_y_read_with_the_digit_does_not_confirm(autojump_clock: trio.abc.Clock) -> None:
    async with running_chat(options=ChatOptions()) as chat:
        await chat.type_line("ask a.txt")
        await trio.sleep(0.6)
        read_at = trio.current_time() - 0.1  # handled late, read together
        await chat.press(Key("char", "2", at=read_at), Key("char", "y", at=read_at))
        assert chat.runtime.answers == []
        assert "read the confirmation first" in chat.text
        await trio.sleep(0.2)
        await chat.press("y")  # a later y is a second look
        assert answers_of(chat.runtime) == [("s-1", "selected", "allow-always")]


async def test_2y_typed_in_one_read_is_text_and_answers_nothing(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with running_chat(options=ChatOptions()) as chat:
        await chat.type_line("ask a.txt")
        await trio.sleep(0.6)
        await chat.press("2y")  # one read of the terminal: typing, not a card's keys
        assert chat.runtime.answers == []
        assert chat.app.editor.text == "2y"


async def test_esc_during_the_confirmation_goes_back_and_a_second_esc_cancels(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with running_chat(options=ChatOptions()) as chat:
        await chat.type_line("ask a.txt")
        await trio.sleep(0.6)
        await chat.press("2")
        await trio.sleep(0.2)
        await chat.press(Key("esc"))
        assert chat.runtime.answers == []
        await trio.sleep(0.2)
        await chat.press(Key("esc"))
        assert answers_of(chat.runtime) == [("s-1", "cancelled", None)]


async def test_the_confirmation_goes_with_a_withdrawn_card(autojump_clock: trio.abc.Clock) -> None:
    async with running_chat(options=ChatOptions()) as chat:
        await chat.type_line("withdraw w.txt; ask b.txt")
        await trio.sleep(0.6)
        await chat.press("2")
        chat.runtime.withdraw.set()
        await settle()
        assert "withdrawn by the runtime" in chat.text
        await trio.sleep(0.6)  # the next card is armed
        await chat.press("y")  # confirms nothing: the question went with its card
        assert answers_of(chat.runtime) == [("s-1", None, None)]
        await chat.press("2")  # the next card asks for its own confirmation
        assert answers_of(chat.runtime) == [("s-1", None, None)]


async def test_ctrl_c_during_the_confirmation_cancels_the_turn(
    autojump_clock: trio.abc.Clock,
) -> None:
    async with running_chat(options=ChatOptions()) as chat:
        await chat.type_line("ask a.txt")
        await trio.sleep(0.6)
        await chat.press("2")
        await chat.press(Key("ctrl_c"))
        assert chat.app.shown is None  # the turn and its card are gone
        await trio.sleep(0.2)
        await chat.press(Key("enter"))
        assert all(a.option_id is None for a in chat.runtime.answers)


async def test_a_piped_line_picks_always_allow_at_once(autojump_clock: trio.abc.Clock) -> None:
    async with running_chat(options=ChatOptions(input_mode="lines", arm_delay=0)) as chat:
        await chat.event(Line("ask a.txt"))
        await chat.event(Line("2"))
        assert answers_of(chat.runtime) == [("s-1", "selected", "allow-always")]


# ------------------------------------------------------------- a denial's reason

REASON_KEY = "permclient/reason"


async def test_a_deny_key_takes_a_reason_and_enter_sends_it_to_the_runtime() -> None:
    async with running_chat(screen=LiveScreen) as chat:
        chat.app.screen.start()
        await chat.type_line("ask a.txt")
        await chat.press("3")
        assert chat.runtime.answers == []  # not answered yet: the prompt takes a reason
        assert chat.app.mode == "card"
        assert (
            "Reason for denying (optional, sent to the agent): type it · "
            "Enter sends the denial · Esc goes back" in chat.text
        )
        assert "reason > " in chat.text
        for char in "use 2 workers":  # typed key by key: its digit is text, not an option
            await chat.press(char)
        assert chat.runtime.answers == []
        assert chat.app.editor.text == "use 2 workers"
        await chat.press(ENTER)
        assert answers_of(chat.runtime) == [("s-1", "selected", "deny")]
        assert chat.runtime.answers[0].meta == {REASON_KEY: "use 2 workers"}
        receipt = "→ Deny  reject_once · fs.write: a.txt · Session 1 (s-1) · reason: use 2 workers"
        assert receipt in chat.text
        assert chat.app.mode == "prompt" and chat.app.editor.text == ""
        chat.app.screen.stop()


async def test_a_deny_always_key_takes_a_reason_too() -> None:
    async with running_chat() as chat:
        await chat.type_line("ask a.txt")
        await chat.press("4", "not in this repo", ENTER)
        assert answers_of(chat.runtime) == [("s-1", "selected", "deny-always")]
        assert chat.runtime.answers[0].meta == {REASON_KEY: "not in this repo"}


async def test_esc_while_typing_a_reason_goes_back_to_the_card_and_answers_nothing() -> None:
    async with running_chat() as chat:
        await chat.type_line("ask a.txt")
        shown = chat.app.shown
        await chat.press("3", "oops", ESC)
        assert chat.runtime.answers == []
        assert chat.app.mode == "card" and chat.app.shown is shown  # the card still asks
        assert chat.app.editor.text == ""  # the reason is dropped
        assert "not denied: the card still asks" in chat.text
        await chat.press(ENTER)  # Enter on the card does nothing, as always
        assert chat.runtime.answers == []
        await chat.press("1")  # the card takes its keys again
        assert answers_of(chat.runtime) == [("s-1", "selected", "allow")]
        assert chat.runtime.answers[0].meta is None  # the dropped reason went nowhere


async def test_a_line_of_a_deny_number_and_words_denies_with_that_reason() -> None:
    async with running_chat(options=ChatOptions(input_mode="lines", arm_delay=0)) as chat:
        await chat.event(Line("ask a.txt"))
        await chat.event(Line("3 because the tests are still running"))
        assert answers_of(chat.runtime) == [("s-1", "selected", "deny")]
        assert chat.runtime.answers[0].meta == {REASON_KEY: "because the tests are still running"}
        assert "reason: because the tests are still running" in chat.text
        await chat.event(Line("ask b.txt"))
        await chat.event(Line("3"))  # a bare number: at once, without a reason
        assert answers_of(chat.runtime)[-1] == ("s-1", "selected", "deny")
        assert chat.runtime.answers[-1].meta is None


@pytest.mark.parametrize("number", ["1", "2"])
async def test_a_line_with_a_reason_after_an_allow_option_is_refused(number: str) -> None:
    async with running_chat(options=ChatOptions(input_mode="lines", arm_delay=0)) as chat:
        await chat.event(Line("ask a.txt"))
        await chat.event(Line(f"{number} because I said so"))
        assert chat.runtime.answers == []
        assert "a reason goes only with a deny option: nothing answered" in chat.text
        assert chat.app.mode == "card"  # the card still asks
        await chat.event(Line("3"))
        assert answers_of(chat.runtime) == [("s-1", "selected", "deny")]
