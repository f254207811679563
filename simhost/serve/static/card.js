// The permission card: one pending question, everything a person needs to answer it.
//
// Every string in a question comes from the agent: it is shown as text (never
// markup), and characters a person cannot see are shown as escapes. The card
// ignores a click or a key for GUARD_MS after it appears, so a press meant for
// something else never answers it.
//
// Below the agent's options, the editor rules the server offers for the question
// (each saved only after a confirmation that shows its whole scope). A deny option
// opens a reason box first: the denial is sent from there, with the person's words.

import { clear, el, escapedText, hasHidden, prettyJson, SHORT, splitLines, visible } from "./dom.js";
import { lineDiff, withContext } from "./diff.js";

/** A card ignores clicks and keys for this long after it appears (milliseconds). */
export const GUARD_MS = 500;

// When the key before the latest one went down (any key, anywhere on the page): a
// key that follows another within GUARD_MS is typing, never an answer.
let keyBefore = -Infinity;
let keyAt = -Infinity;
let keyRepeats = false; // the latest key is a held key's repeat
document.addEventListener(
  "keydown",
  (event) => {
    keyRepeats = event.repeat;
    if (event.repeat) return;
    keyBefore = keyAt;
    keyAt = performance.now();
  },
  { capture: true },
);

/** Whether the key just pressed may answer: not a repeat, not right behind another. */
function keyMayAnswer() {
  return !keyRepeats && performance.now() - keyBefore >= GUARD_MS;
}
/** Options a number key chooses (1 to 9). */
export const KEYED_OPTIONS = 9;
/** The longest reason for a denial (characters), as the server takes it. */
export const MAX_REASON = 1000;
/** What the card says of the agent's own "always" options: their scope is the agent's. */
export const AGENT_ALWAYS_NOTE = "(the agent decides what this covers)";
/** Diff rows shown per file at most (the rest are counted). */
const MAX_DIFF_ROWS = 5000;
const DRAWN_DIFF_CHARS = 200_000; // of all the request's diffs, drawn at once
const JSON_SHOWN = 200_000; // characters of a JSON block (then "… N more characters")

const UNKNOWN_TEXT = "the agent asks to run a tool this page cannot show in full";

/** `title (id)`, or `(id)` for an untitled session. */
export function sessionLabel(sessionId, title) {
  const id = escapedText(sessionId);
  return title && title !== sessionId ? `${escapedText(title)} (${id})` : `(${id})`;
}

/** Shell words joined as a POSIX shell reads them back (Python's shlex.join). */
export function shellJoin(words) {
  return words.map(shellQuote).join(" ");
}

function shellQuote(word) {
  if (word === "") return "''";
  if (!/[^\w@%+=:,./-]/u.test(word)) return word;
  return "'" + word.replace(/'/g, `'"'"'`) + "'";
}

function isObject(value) {
  return typeof value === "object" && value !== null && !Array.isArray(value);
}

/** The command of a tool call's rawInput: `command` as a string, or a list of
 * strings joined shell-style; null if there is none. */
export function commandOf(rawInput) {
  if (!isObject(rawInput)) return null;
  const command = rawInput.command;
  if (typeof command === "string") return command;
  if (Array.isArray(command) && command.every((part) => typeof part === "string")) {
    return shellJoin(command);
  }
  return null;
}

/** What a card shows of a `session/request_permission` request. */
export function analyse(request) {
  const out = {
    command: null,
    otherInput: null,
    input: undefined,
    diffs: [],
    contents: [],
    locations: [],
    requestMeta: null,
    callMeta: null,
    unknown: false,
    hidden: false,
  };
  if (!isObject(request) || !isObject(request.toolCall)) {
    out.unknown = true;
    return out;
  }
  const call = request.toolCall;
  const strings = [];
  const multi = [];
  out.command = commandOf(call.rawInput);
  if (out.command !== null) {
    multi.push(out.command);
    const rest = Object.fromEntries(Object.entries(call.rawInput).filter(([key]) => key !== "command"));
    if (Object.keys(rest).length > 0) out.otherInput = rest;
  } else if (call.rawInput !== undefined && call.rawInput !== null) {
    out.input = call.rawInput;
  }
  if (call.content !== undefined && call.content !== null) {
    if (!Array.isArray(call.content)) out.unknown = true;
    for (const item of Array.isArray(call.content) ? call.content : []) {
      if (!isObject(item)) {
        out.unknown = true;
      } else if (item.type === "diff") {
        const oldOk = item.oldText === undefined || item.oldText === null || typeof item.oldText === "string";
        if (typeof item.path !== "string" || typeof item.newText !== "string" || !oldOk) {
          out.unknown = true;
          continue;
        }
        out.diffs.push({ path: item.path, oldText: item.oldText ?? null, newText: item.newText });
        strings.push(item.path);
        multi.push(item.oldText ?? "", item.newText);
      } else if (item.type === "terminal") {
        if (typeof item.terminalId !== "string") {
          out.unknown = true;
          continue;
        }
        out.contents.push(`[terminal] ${item.terminalId}`);
        strings.push(item.terminalId);
      } else if (item.type === "content") {
        const text = blockText(item.content);
        if (text === null) {
          out.unknown = true;
          continue;
        }
        out.contents.push(text);
        multi.push(text);
      } else {
        out.unknown = true;
      }
    }
  }
  if (call.locations !== undefined && call.locations !== null) {
    if (!Array.isArray(call.locations)) out.unknown = true;
    for (const location of Array.isArray(call.locations) ? call.locations : []) {
      if (!isObject(location) || typeof location.path !== "string") {
        out.unknown = true;
        continue;
      }
      const line = Number.isInteger(location.line) ? `:${location.line}` : "";
      out.locations.push(location.path + line);
      strings.push(location.path);
    }
  }
  if (isObject(request._meta) && Object.keys(request._meta).length) out.requestMeta = request._meta;
  if (isObject(call._meta) && Object.keys(call._meta).length) out.callMeta = call._meta;
  strings.push(call.title ?? "", call.toolCallId ?? "", request.sessionId ?? "");
  if (Array.isArray(request.options)) {
    for (const option of request.options) if (isObject(option)) strings.push(String(option.name ?? ""));
  }
  out.hidden =
    strings.some((s) => hasHidden(s)) || multi.some((s) => hasHidden(s, true));
  return out;
}

/** The text of a content block, or null for a block this page does not know. */
function blockText(block) {
  if (!isObject(block)) return null;
  switch (block.type) {
    case "text":
      return typeof block.text === "string" ? block.text : null;
    case "image":
    case "audio":
      return `[${block.type}] ${typeof block.mimeType === "string" ? block.mimeType : ""}`;
    case "resource_link": {
      if (typeof block.uri !== "string") return null;
      const name = typeof block.title === "string" && block.title ? block.title : block.name;
      return `[link] ${typeof name === "string" ? name : ""}: ${block.uri}`;
    }
    case "resource": {
      const resource = block.resource;
      if (!isObject(resource)) return null;
      const uri = typeof resource.uri === "string" ? resource.uri : "";
      return typeof resource.text === "string" ? `[resource] ${uri}\n${resource.text}` : `[resource] ${uri} (binary)`;
    }
    default:
      return null;
  }
}

function section(title, ...body) {
  return el("div", { class: "card-section" }, el("h3", { class: "card-section-title" }, title), ...body);
}

/** Every diff: drawn, the first one always, the others until DRAWN_DIFF_CHARS of
 * text have been (one file draws at most MAX_DIFF_ROWS rows); each one after
 * that is drawn when it is opened (a request of many megabytes would freeze the
 * page, and it is drawn again on every switch of session). */
function diffBlocks(diffs) {
  let drawn = 0;
  return diffs.map((diff, index) => {
    drawn += (diff.oldText ?? "").length + (diff.newText ?? "").length;
    if (index === 0 || drawn <= DRAWN_DIFF_CHARS) return diffBlock(diff);
    const lines = splitLines(diff.newText ?? "").length + splitLines(diff.oldText ?? "").length;
    const summary = el(
      "summary",
      { class: "diff-path" },
      el("span", { class: "path" }, visible(diff.path, false, SHORT)),
      ` · ${lines.toLocaleString("en")} lines, not drawn yet: open to see them`,
    );
    const folded = el("details", { class: "diff-file folded" }, summary);
    folded.addEventListener("toggle", () => {
      if (folded.open && folded.childElementCount === 1) folded.append(diffBlock(diff));
    });
    return folded;
  });
}

function diffBlock(diff) {
  const { path, oldText, newText } = diff;
  let verb = "edit";
  if (oldText === null) verb = "new file";
  else if (newText === "" && oldText !== "") verb = "empties";
  const head = el("div", { class: "diff-path" }, `${verb} `, el("span", { class: "path" }, visible(path, false, SHORT)));
  const box = el("div", { class: "diff-file" }, head);
  if ((oldText ?? "") === newText) {
    box.append(el("p", { class: "diff-note" }, oldText === null && newText === "" ? "(empty file)" : "(no change)"));
    return box;
  }
  const { ops, compared } = lineDiff(oldText, newText);
  if (ops.every((op) => op.op === " ")) {
    box.append(el("p", { class: "diff-note" }, "(only line endings differ)"));
  }
  if (!compared) {
    box.append(el("p", { class: "diff-note" }, "(too many changed lines to compare: old ones removed, new ones added)"));
  }
  const rows = withContext(ops);
  const pre = el("pre", { class: "diff" });
  const shown = rows.slice(0, MAX_DIFF_ROWS);
  for (const row of shown) {
    if (row.op === "…") {
      pre.append(el("span", { class: "line skip" }, `⋯ ${row.count} unchanged line${row.count === 1 ? "" : "s"}`));
      continue;
    }
    const kind = row.op === "-" ? "del" : row.op === "+" ? "add" : "ctx";
    pre.append(el("span", { class: ["line", kind] }, el("span", { class: "mark" }, row.op), visible(row.text, true)));
  }
  if (rows.length > shown.length) {
    pre.append(el("span", { class: "line skip" }, `⋯ ${rows.length - shown.length} more rows not shown`));
  }
  box.append(pre);
  return box;
}

function commandBlock(command) {
  const code = el("code");
  const lines = splitLines(command);
  (lines.length ? lines : [""]).forEach((line, index) => {
    code.append(el("span", { class: "line" }, el("span", { class: "prompt-mark", "aria-hidden": "true" }, index === 0 ? "$ " : "> "), visible(line)));
  });
  return el("pre", { class: "command" }, code);
}

function jsonBlock(value, extra) {
  return el("pre", { class: ["json", extra] }, visible(prettyJson(value), true, JSON_SHOWN));
}

/**
 * One question's card. `element` is the DOM; call `shown()` when it is put on
 * the page (and again when it is shown anew): the guard runs from then.
 *
 * options: `sessionTitle`, `position` ([n, total]), `offers` (the editor rules
 * the card may save: `[{index, effect, label}]`, or `setOffers` later),
 * `onAnswer(decision, reason)` and `onSaveRule(index)` (called only for an armed
 * card with nothing in flight; `reason` only for a denial, and only if typed).
 *
 * Its modes: `choose` (the options, the rules), `confirm` (save this rule?) and
 * `reason` (the reason box of a denial).
 */
export class CardView {
  constructor(question, { sessionTitle = null, position = null, offers = null, onAnswer, onSaveRule = null }) {
    this.question = question;
    this.onAnswer = onAnswer;
    this.onSaveRule = onSaveRule;
    this.shownAt = Infinity;
    this.sending = false;
    this.timer = null;
    this.mode = "choose";
    this.offers = [];
    this.confirming = null; // the offer the confirmation is for
    this.denying = null; // the decision the reason box sends
    const title = typeof question.title === "string" && question.title ? question.title : "(untitled tool call)";
    this.title = title;
    const analysis = analyse(question.request);
    // The client could type it only in part (a newer agent): show it as it arrived.
    if (question.understood === false) analysis.unknown = true;
    const card = el("section", {
      class: "card",
      role: "dialog",
      "aria-label": `Permission request: ${escapedText(title)}`,
      tabindex: "-1",
      "data-question-id": question.questionId,
      "data-state": "arming",
      "data-mode": "choose",
    });
    this.positionSpan = el("span", { class: "card-position" });
    card.append(el("h2", { class: "card-heading" }, "Permission request ", this.positionSpan));
    this.setPosition(position);
    const facts = el(
      "dl",
      { class: "card-facts" },
      el("dt", {}, "Session"),
      el(
        "dd",
        { class: "card-session" },
        sessionTitle && sessionTitle !== question.sessionId ? [el("strong", {}, visible(sessionTitle, false, SHORT)), " "] : null,
        el("span", { class: "id" }, "(", visible(question.sessionId, false, SHORT), ")"),
      ),
      el("dt", {}, "Tool"),
      el(
        "dd",
        { class: "card-tool" },
        el("strong", { class: "tool-title" }, visible(title, false, SHORT)),
        " ",
        el("span", { class: "tool-kind" }, `kind: ${question.kind || "unknown"}`),
      ),
    );
    card.append(facts);
    if (analysis.hidden) {
      card.append(
        el(
          "p",
          { class: "card-warning" },
          "⚠ This request contains line breaks, control or invisible characters where they do not belong; they are shown escaped (\\n, \\x1b, \\u202e …).",
        ),
      );
    }
    if (analysis.unknown) {
      card.append(
        el("p", { class: "card-unknown" }, "“", visible(title, false, SHORT), `”: ${UNKNOWN_TEXT}. Its raw request follows.`),
        section("Raw request", jsonBlock(question.request, "raw-request")),
      );
    }
    if (analysis.command !== null) card.append(section("Command", commandBlock(analysis.command)));
    if (analysis.otherInput) card.append(section("Other input", jsonBlock(analysis.otherInput)));
    if (analysis.input !== undefined) card.append(section("Input", jsonBlock(analysis.input)));
    if (analysis.diffs.length) {
      const count = analysis.diffs.length;
      card.append(section(`Changes (${count} file${count === 1 ? "" : "s"})`, diffBlocks(analysis.diffs)));
    }
    if (analysis.contents.length) {
      card.append(section("Content", analysis.contents.map((text) => el("div", { class: "text-block" }, visible(text, true)))));
    }
    if (analysis.locations.length) {
      card.append(
        section("Locations", el("ul", { class: "locations" }, analysis.locations.map((path) => el("li", { class: "path" }, visible(path, false, SHORT))))),
      );
    }
    if (analysis.requestMeta) {
      card.append(el("details", { class: "meta" }, el("summary", {}, "Request _meta"), jsonBlock(analysis.requestMeta)));
    }
    if (analysis.callMeta) {
      card.append(el("details", { class: "meta" }, el("summary", {}, "Tool call _meta"), jsonBlock(analysis.callMeta)));
    }

    const options = Array.isArray(question.options) ? question.options : [];
    this.buttons = [];
    const group = el("div", { class: "card-options", role: "group", "aria-label": "Options" });
    options.forEach((option, index) => {
      const kind = typeof option.kind === "string" ? option.kind : "";
      const button = el(
        "button",
        {
          type: "button",
          class: ["option", kind.startsWith("allow") && "allow", kind.startsWith("reject") && "reject", kind === "allow_always" || kind === "reject_always" ? "always" : null],
          "data-option-id": option.optionId,
          title: kind || null,
        },
        index < KEYED_OPTIONS ? el("span", { class: "num", "aria-hidden": "true" }, String(index + 1)) : null,
        el("span", { class: "opt-name" }, visible(String(option.name ?? ""), false, SHORT)), // (one line: no drawn rows)
        // What it is, in words (a colour alone can say "allow" of a button named "Deny").
        kind ? el("span", { class: "opt-kind", "aria-hidden": "true" }, visible(kind.replace("_", " "), false, 40)) : null,
        // The agent's "always" is its own: the page cannot say what it covers.
        kind === "allow_always" || kind === "reject_always" ? el("span", { class: "opt-note" }, AGENT_ALWAYS_NOTE) : null,
      );
      this.listen(button, { outcome: "selected", optionId: option.optionId }, kind.startsWith("reject"));
      group.append(button);
      this.buttons.push(button);
    });
    const deny = options.some((option) => typeof option.kind === "string" && option.kind.startsWith("reject"));
    if (!deny) {
      const cancel = el("button", { type: "button", class: ["option", "option-cancel"] }, "Answer cancelled");
      this.listen(cancel, { outcome: "cancelled" });
      group.append(cancel);
      this.buttons.push(cancel);
    }
    card.append(group);
    this.group = group;

    // The editor's rules: each says in full what it covers, and for how long.
    this.rulesList = el("div", { class: "rule-offers", role: "group", "aria-label": "Editor rules" });
    this.rulesBox = el(
      "div",
      { class: ["card-section", "card-rules"], hidden: true },
      el("h3", { class: "card-section-title" }, "Editor rules"),
      el("p", { class: "rules-note" }, "Kept by the editor, not the agent: each says all it covers and for how long."),
      this.rulesList,
    );
    card.append(this.rulesBox);
    this.ruleButtons = [];

    const keyed = Math.min(options.length, KEYED_OPTIONS);
    const hint = el("p", { class: "card-hint" });
    if (keyed > 0) hint.append(`Press ${keyed === 1 ? "1" : `1–${keyed}`} or click to choose; `);
    hint.append(deny ? "a deny option asks for a reason first (optional); Esc answers cancelled." : "no deny option was offered: Esc answers cancelled (a denial).");
    card.append(hint);
    this.hint = hint;

    // Save this rule? (after a click on a rule: the whole label again)
    this.confirmLabel = el("p", { class: "confirm-label" });
    this.confirmSave = el("button", { type: "button", class: "confirm-save" }, "Save");
    const confirmBack = el("button", { type: "button", class: "confirm-back" }, "Back");
    this.confirmBox = el(
      "div",
      { class: "card-confirm", role: "group", "aria-label": "Save this rule?", hidden: true },
      el("p", { class: "confirm-question" }, "Save this rule?"),
      this.confirmLabel,
      el("p", { class: "confirm-note" }, "It is kept until it ends or you revoke it (Rules, on the left), and it answers this question and every pending one it covers now."),
      el("div", { class: "confirm-buttons" }, this.confirmSave, confirmBack),
    );
    this.guarded(this.confirmSave, () => this.saveRule());
    confirmBack.addEventListener("click", () => this.back());
    card.append(this.confirmBox);

    // Deny, with a reason (optional) that the agent is told.
    this.reasonText = el("textarea", {
      class: "reason-text",
      rows: "2",
      maxlength: String(MAX_REASON),
      "aria-label": "Reason for the denial (optional)",
      placeholder: "Why? The agent is told (optional)",
    });
    this.reasonSend = el("button", { type: "button", class: "reason-send" }, "Send denial");
    const reasonBack = el("button", { type: "button", class: "reason-back" }, "Back");
    this.reasonTitle = el("p", { class: "reason-question" });
    this.reasonBox = el(
      "div",
      { class: "card-reason", role: "group", "aria-label": "Deny with a reason", hidden: true },
      this.reasonTitle,
      this.reasonText,
      el("div", { class: "reason-buttons" }, this.reasonSend, reasonBack),
      el("p", { class: "reason-hint" }, "Enter sends the denial (Shift+Enter: a new line), Esc goes back."),
    );
    this.guarded(this.reasonSend, () => this.sendDenial());
    reasonBack.addEventListener("click", () => this.back());
    this.reasonText.addEventListener("keydown", (event) => {
      if (event.isComposing || event.ctrlKey || event.metaKey || event.altKey) return;
      if (event.key === "Escape") {
        event.preventDefault();
        event.stopPropagation();
        this.back();
      } else if (event.key === "Enter" && !event.shiftKey) {
        event.preventDefault();
        event.stopPropagation();
        this.sendDenial();
      }
    });
    card.append(this.reasonBox);

    this.status = el("p", { class: "card-status", "aria-live": "polite" });
    this.error = el("p", { class: "card-error", "aria-live": "assertive", hidden: true });
    card.append(this.status, this.error);
    card.addEventListener("keydown", (event) => {
      if (this.handleKey(event)) {
        event.preventDefault();
        event.stopPropagation();
      }
    });
    this.element = card;
    this.setOffers(offers);
  }

  /** A click on `button` answers `decision` (a deny opens the reason box first).
   * A click made by a key (Space, Enter: `detail` 0) obeys the keys' rules; a
   * press while the card arms takes no focus, so that typing after it cannot
   * click the button. */
  listen(button, decision, deny = false) {
    this.guarded(button, () => this.choose(decision, deny));
  }

  /** `button` runs `act` on a click, under the card's guards (see `listen`). */
  guarded(button, act) {
    button.addEventListener("click", (event) => {
      if (event.detail === 0 && !keyMayAnswer()) return;
      act();
    });
    button.addEventListener("mousedown", (event) => {
      if (!this.armed) event.preventDefault();
    });
  }

  /** The card is on the page now: the guard starts (again). */
  shown() {
    this.shownAt = performance.now();
    clearTimeout(this.timer);
    this.timer = setTimeout(() => this.refresh(), GUARD_MS + 10);
    this.refresh();
  }

  get armed() {
    return performance.now() - this.shownAt >= GUARD_MS;
  }

  /** Whether the card may act now: armed, and nothing in flight. */
  get ready() {
    return this.armed && !this.sending;
  }

  /** Answer, if the card is armed and no answer is in flight; else nothing. */
  answer(decision, reason = null) {
    if (!this.ready) return false;
    this.onAnswer(decision, reason);
    return true;
  }

  /** An option chosen: a denial opens the reason box; anything else answers. */
  choose(decision, deny) {
    if (!this.ready || this.mode !== "choose") return false;
    if (!deny) return this.answer(decision);
    this.denying = decision;
    this.reasonText.value = ""; // (a reason left with Back is not sent with a later denial)
    const option = (this.question.options || []).find((o) => o.optionId === decision.optionId);
    this.reasonTitle.textContent = "";
    this.reasonTitle.append("“", el("strong", {}, visible(String(option ? option.name ?? "" : ""), false, SHORT)), "”, with a reason for the agent (optional):");
    this.setMode("reason");
    this.reasonText.focus({ preventScroll: true });
    return true;
  }

  /** The reason box's answer: the denial, with the reason if one was typed. */
  sendDenial() {
    if (this.mode !== "reason" || this.denying === null) return false;
    const typed = Array.from(this.reasonText.value).slice(0, MAX_REASON).join("");
    return this.answer(this.denying, typed.trim() === "" ? null : typed);
  }

  /** A rule's button: ask to confirm it, showing its whole label. */
  confirmRule(offer) {
    if (!this.ready || this.mode !== "choose") return false;
    this.confirming = offer;
    this.confirmLabel.textContent = "";
    this.confirmLabel.append(visible(offer.label));
    this.confirmBox.dataset.effect = offer.effect;
    this.setMode("confirm");
    this.element.focus({ preventScroll: true });
    return true;
  }

  saveRule() {
    if (this.mode !== "confirm" || this.confirming === null || !this.ready || !this.onSaveRule) return false;
    this.onSaveRule(this.confirming.index);
    return true;
  }

  /** Back to the options (from a confirmation or the reason box). */
  back() {
    if (this.mode === "choose") return;
    this.setMode("choose");
    this.confirming = null;
    this.denying = null;
    this.element.focus({ preventScroll: true });
  }

  setMode(mode) {
    this.mode = mode;
    this.element.dataset.mode = mode;
    const choosing = mode === "choose";
    this.group.hidden = !choosing;
    this.hint.hidden = !choosing;
    this.rulesBox.hidden = !choosing || this.offers.length === 0;
    this.confirmBox.hidden = mode !== "confirm";
    this.reasonBox.hidden = mode !== "reason";
    this.refresh();
  }

  /** The rules the card may save (`[{index, effect, label}]`); the same list again
   * changes nothing. */
  setOffers(offers) {
    const list = Array.isArray(offers) ? offers : [];
    if (list === this.offersGiven || (list.length === 0 && this.offers.length === 0)) return;
    this.offersGiven = list;
    this.offers = list;
    clear(this.rulesList);
    this.ruleButtons = list.map((offer) => {
      const button = el(
        "button",
        { type: "button", class: ["rule-offer", offer.effect === "deny" ? "deny" : "allow"], "data-rule-index": String(offer.index) },
        el("span", { class: "rule-label" }, visible(offer.label)), // (in full: it is the rule's whole scope)
      );
      this.guarded(button, () => this.confirmRule(offer));
      this.rulesList.append(button);
      return button;
    });
    if (this.mode === "confirm") {
      // The same rule offered again (after a reconnection) keeps its confirmation.
      const was = this.confirming;
      const same = list.find((o) => was && o.index === was.index && o.effect === was.effect && o.label === was.label);
      if (same) this.confirming = same;
      else this.back();
    }
    this.setMode(this.mode);
  }

  /** A key for the card: 1..9 choose, Escape cancels. True if it was the card's
   * key (answered, or ignored: a held key's repeats, a key that follows another
   * within half a second, as typing does, and any key while the card arms). In a
   * confirmation or the reason box, Escape goes back and the other keys are theirs. */
  handleKey(event) {
    if (event.ctrlKey || event.metaKey || event.altKey || event.isComposing) return false;
    if (this.mode !== "choose") {
      if (event.key !== "Escape") return false;
      this.back();
      return true;
    }
    let decision = null;
    let deny = false;
    if (event.key === "Escape") {
      decision = { outcome: "cancelled" };
    } else if (/^[1-9]$/.test(event.key)) {
      const index = Number(event.key) - 1;
      const options = this.question.options || [];
      if (index >= options.length || index >= KEYED_OPTIONS) return false;
      decision = { outcome: "selected", optionId: options[index].optionId };
      deny = typeof options[index].kind === "string" && options[index].kind.startsWith("reject");
    } else {
      return false;
    }
    if (keyMayAnswer()) {
      if (deny) this.choose(decision, true);
      else this.answer(decision);
    }
    return true;
  }

  /** `[n, total]`: this is question n of the session's total (shown when total > 1). */
  setPosition(position) {
    const text = position && position[1] > 1 ? `${position[0]} of ${position[1]}` : "";
    if (this.positionSpan.textContent !== text) this.positionSpan.textContent = text;
  }

  /** The answer is in flight (buttons disabled) or not (buttons armed). */
  setSending(sending) {
    this.sending = sending;
    this.refresh();
  }

  /** Why the last answer did not land (null: clear it). */
  setError(text) {
    this.error.textContent = text || "";
    this.error.hidden = !text;
  }

  refresh() {
    const state = this.sending ? "sending" : this.armed ? "armed" : "arming";
    this.element.dataset.state = state;
    for (const button of this.buttons) button.disabled = this.sending;
    for (const button of this.ruleButtons) button.disabled = this.sending;
    this.confirmSave.disabled = this.sending;
    this.reasonSend.disabled = this.sending;
    this.reasonText.readOnly = this.sending;
    const sendingText = this.mode === "confirm" ? "Saving the rule…" : "Sending your answer…";
    this.status.textContent = this.sending ? sendingText : "";
  }

  /** Whether a reason is being typed on this card (its box has the focus). */
  get typing() {
    return this.mode === "reason" && this.reasonText === document.activeElement;
  }

  destroy() {
    clearTimeout(this.timer);
    this.element.remove();
  }
}
