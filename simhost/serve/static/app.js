// The page of `simhost serve`: sessions, their transcripts, a prompt box, and
// the permission cards of the relay protocol (docs/relay-protocol.md), the
// editor rules (saved from a card, listed and revoked in the Rules view, their
// receipts in the transcript) and batch answers.
//
// What is pending is the server's word: a card leaves on `resolved` or
// `withdrawn`, never on a click, and after every (re)connection the question
// list is exactly the replay. Each request carries a `ref` of its own, which the
// server's replies echo: an error is shown by the request that caused it.

import { clear, el, escapedText, SHORT, visible } from "./dom.js";
import { CardView, GUARD_MS, sessionLabel } from "./card.js";
import { Connection, socketUrl } from "./connection.js";

const PROTOCOL_VERSION = 1;
const MAX_NOTICES = 8;
const MAX_ENTRIES = 2000; // transcript entries kept per session
const MAX_PROMPT_CHARS = 32 * 1024;
const MAX_MESSAGE_BYTES = 4 * MAX_PROMPT_CHARS + 4096; // the server's limit, in bytes of UTF-8
const MAX_BATCH_WHAT = 256; // characters of a batch's kind or glob
const MAX_OFFER_INDEX = 15;
const VIEW_KEY = "simhost.view";
// Requests remembered for their replies: one answered by what every view is told (an
// answer, a prompt) gets no reply of its own, and is forgotten past this many.
const MAX_ASKED = 256;
// When a card's leaving gave the prompt box the focus: keys meant for that card (a
// digit, Esc, Enter pressed as another view answered) do not land in it for GUARD_MS.
let promptBackAt = -Infinity;
const CURRENT_KEY = "simhost.current";

const $ = (id) => document.getElementById(id);
const els = {
  viewName: $("view-name"),
  conn: $("conn"),
  newSession: $("new-session"),
  sessionList: $("session-list"),
  sessionsEmpty: $("sessions-empty"),
  sessionTitle: $("session-title"),
  turnState: $("turn-state"),
  cancelTurn: $("cancel-turn"),
  preset: $("preset"),
  presetNote: $("preset-note"),
  elsewhere: $("elsewhere"),
  notices: $("notices"),
  transcript: $("transcript"),
  cardSlot: $("card-slot"),
  composer: $("composer"),
  prompt: $("prompt"),
  send: $("send"),
  main: document.querySelector(".main"),
  rulesButton: $("rules-button"),
  rulesView: $("rules-view"),
  rulesClose: $("rules-close"),
  rulesStatus: $("rules-status"),
  rulesList: $("rules-list"),
  batchEffect: $("batch-effect"),
  batchWhat: $("batch-what"),
  batchPreview: $("batch-preview"),
  batchPanel: $("batch-panel"),
};

function stored(key) {
  try {
    return sessionStorage.getItem(key);
  } catch {
    return null;
  }
}

function store(key, value) {
  try {
    if (value === null) sessionStorage.removeItem(key);
    else sessionStorage.setItem(key, value);
  } catch {
    // (storage refused: the page works without it)
  }
}

/** `browser-XXXX`, the same for this tab across reloads. */
function makeViewName() {
  const kept = stored(VIEW_KEY);
  if (kept && /^browser-[0-9a-f]{4}$/.test(kept)) return kept;
  const bytes = new Uint8Array(2);
  crypto.getRandomValues(bytes);
  const name = "browser-" + Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("");
  store(VIEW_KEY, name);
  return name;
}

const state = {
  view: makeViewName(),
  phase: "connecting", // connecting | replaying | ready | reconnecting
  sessions: new Map(), // sessionId -> session record (the server's order)
  questions: new Map(), // questionId -> question, oldest first (the truth once replayed)
  replay: null, // the replay being received (a Map), swapped in at `replayed`
  current: null, // the session shown
  inFlight: new Set(), // questionIds answered by this view, not yet resolved
  cardErrors: new Map(), // questionId -> why its last answer did not land
  answeredHere: new Set(), // questionIds this page answered
  presetWait: null, // {sessionId, kind} of a list_presets / set_preset awaiting `presets`
  asked: new Map(), // ref -> what asked, for the requests whose replies may still come
  offers: new Map(), // questionId -> the editor rules its card may save
  ruleSaving: new Set(), // questionIds whose card's rule this view is saving
  rules: null, // the editor rules (the server's `rules`), once listed
  rulesError: null, // why there is no list of rules
  rulesOpen: false, // the Rules view is shown (instead of the session)
  revoking: null, // {number, rule} of a revoke_rule in flight
  batch: null, // {sessionId, effect, what, phase, questions, answered, error, shownAt}
  restore: stored(CURRENT_KEY), // the session to show again after a reload
};
let card = null; // the CardView shown, if any
let lastRef = 0;

function ready() {
  return state.phase === "ready";
}

function session(id) {
  let record = state.sessions.get(id);
  if (!record) {
    record = {
      id,
      title: "",
      running: false,
      listedWaiting: 0,
      entries: [],
      agentOpen: false,
      presets: null,
      presetError: null, // why this session has no presets
      presetNote: null, // why the last switch did not happen
    };
    state.sessions.set(id, record);
  }
  return record;
}

function titleOf(id) {
  const record = state.sessions.get(id);
  return record && record.title ? record.title : null;
}

function questionsOf(sessionId) {
  return [...state.questions.values()].filter((q) => q.sessionId === sessionId);
}

/** Questions waiting in a session: the ones held, once the replay came; before
 * that, the `sessions` count too. */
function waitingCount(sessionId) {
  const held = questionsOf(sessionId).length;
  if (ready()) return held;
  const record = state.sessions.get(sessionId);
  return Math.max(held, record ? record.listedWaiting : 0);
}

/** The sessions to list: the server's, then any that only a question names. */
function sessionIds() {
  const ids = [...state.sessions.keys()];
  for (const question of state.questions.values()) {
    if (!ids.includes(question.sessionId)) ids.push(question.sessionId);
  }
  return ids;
}

// ------------------------------------------------------------ the connection

const connection = new Connection(socketUrl(window.location), {
  onOpen() {
    send({ type: "open", view: state.view, version: PROTOCOL_VERSION });
  },
  onMessage: receive,
  onClose() {
    state.phase = "reconnecting";
    state.replay = null;
    for (const questionId of state.inFlight) {
      state.cardErrors.set(
        questionId,
        state.ruleSaving.has(questionId)
          ? "The connection dropped before the rule was confirmed: see Rules once reconnected."
          : "The connection dropped before the answer was confirmed: answer again once reconnected.",
      );
    }
    state.inFlight.clear();
    state.ruleSaving.clear();
    state.asked.clear(); // (the replies of a dropped connection never come)
    state.presetWait = null;
    state.revoking = null;
    if (state.batch && (state.batch.phase === "asking" || state.batch.phase === "sending")) {
      state.batch.phase = "error";
      state.batch.error = "The connection dropped before the server answered: try again once reconnected.";
    }
    for (const record of state.sessions.values()) record.agentOpen = false;
    render();
  },
});

function send(message) {
  return connection.send(message);
}

/** `message` with a `ref` of its own: the server echoes it in every reply to it. */
function withRef(message) {
  lastRef += 1;
  return { ...message, ref: String(lastRef) };
}

/** Send `message` (a withRef one), remembering what asked for it (`asker`), so that
 * its replies are told apart by their ref, never by when they come; false if not sent. */
function request(message, asker) {
  if (!send(message)) return false;
  state.asked.set(message.ref, asker);
  if (state.asked.size > MAX_ASKED) state.asked.delete(state.asked.keys().next().value);
  return true;
}

/** What asked for `message` (`{kind, ...}`, taken off the list), if it is a reply to
 * a request of this view's; else null. */
function askedBy(message) {
  const ref = message.ref;
  if (typeof ref !== "string" || !state.asked.has(ref)) return null;
  const asker = state.asked.get(ref);
  state.asked.delete(ref);
  return asker;
}

function receive(message) {
  const asker = askedBy(message);
  switch (message.type) {
    case "opened":
      connection.established();
      if (typeof message.view === "string" && message.view) state.view = message.view;
      state.phase = "replaying";
      state.replay = new Map();
      break;
    case "requested":
      requested(message.question);
      break;
    case "replayed":
      replayed();
      break;
    case "resolved":
      resolved(message);
      break;
    case "withdrawn":
      withdrawn(message);
      break;
    case "answer_refused":
      refused(message);
      break;
    case "sessions":
      sessionsListed(message.sessions);
      break;
    case "session_event":
      sessionEvent(message);
      break;
    case "presets":
      presetsCame(message);
      break;
    case "rule_offers":
      offersCame(message);
      break;
    case "rule_receipt":
      receiptCame(message);
      break;
    case "rules":
      rulesCame(message.rules);
      break;
    case "rule_saved":
      break; // (its card leaves on `resolved`, said to be the rule you saved)
    case "rule_revoked":
      state.revoking = null; // (the list without it comes to every view)
      break;
    case "batch_preview":
      batchPreviewed(message, asker);
      break;
    case "batch_answered":
      batchAnswered(message, asker);
      break;
    case "error":
      errorCame(String(message.reason ?? ""), asker);
      break;
    default:
      return; // (a newer server's message: nothing to do)
  }
  render();
}

function requested(question) {
  if (!question || typeof question.questionId !== "string" || typeof question.sessionId !== "string") return;
  if (!Array.isArray(question.options)) question.options = [];
  if (state.replay) state.replay.set(question.questionId, question);
  else state.questions.set(question.questionId, question);
}

function replayed() {
  const before = state.questions;
  state.questions = state.replay || new Map();
  state.replay = null;
  state.phase = "ready";
  for (const [questionId, question] of before) {
    if (!state.questions.has(questionId)) {
      notice(`“${question.title || "(untitled tool call)"}” is no longer pending: it ended while this view was disconnected.`, "gone");
      state.cardErrors.delete(questionId);
    }
  }
  for (const questionId of state.offers.keys()) {
    if (!state.questions.has(questionId)) state.offers.delete(questionId);
  }
  request(withRef({ type: "list_sessions" }), { kind: "list_sessions" });
  if (state.current !== null) askPresets(state.current);
  if (state.rulesOpen) askRules();
}

function forget(questionId) {
  const question = state.questions.get(questionId) || (state.replay && state.replay.get(questionId)) || null;
  state.questions.delete(questionId);
  if (state.replay) state.replay.delete(questionId);
  state.inFlight.delete(questionId);
  state.ruleSaving.delete(questionId);
  state.cardErrors.delete(questionId);
  state.offers.delete(questionId);
  return question;
}

function optionName(question, optionId) {
  const option = question && question.options.find((o) => o.optionId === optionId);
  return option ? option.name : optionId;
}

function resolved(message) {
  const saving = state.ruleSaving.has(message.questionId);
  const question = forget(message.questionId);
  const mine = state.answeredHere.delete(message.questionId);
  if (!question) return;
  const title = question.title || "(untitled tool call)";
  let what = message.outcome === "selected" ? optionName(question, message.optionId) : "cancelled";
  // A person's reason for a denial (the server's words: shown as text, escaped).
  if (typeof message.reason === "string" && message.reason) what += `, saying: ${message.reason}`;
  const by = String(message.by ?? "");
  if (by === state.view && mine) {
    notice(`You answered “${title}”: ${what}`, "answered");
  } else if (saving && /^rule \d+$/.test(by)) {
    notice(`The rule you saved answered “${title}”: ${by} (${what})`, "answered");
  } else if (/^(rule \d+|batch .*)$/.test(by)) {
    notice(`“${title}” was answered by ${by} (${what})`, "resolved");
  } else {
    notice(`“${title}” was answered in another view: ${by} (${what})`, "resolved");
  }
}

function withdrawn(message) {
  const question = forget(message.questionId);
  state.answeredHere.delete(message.questionId);
  if (!question) return;
  const reason = String(message.reason ?? "");
  const why = WITHDRAWN_BECAUSE[reason];
  const title = question.title || "(untitled tool call)";
  notice(`“${title}” was withdrawn (${reason})${why ? `: ${why}` : ""}; the agent got “cancelled”`, "withdrawn");
}

// What each reason of a withdrawal means, in words.
const WITHDRAWN_BECAUSE = {
  peer: "the agent withdrew it",
  turn: "its turn was cancelled",
  timeout: "nobody answered in time",
  teardown: "the connection to the agent closed",
  shutdown: "the server stopped",
  "answered elsewhere": "the host answered it",
};

function refused(message) {
  const questionId = message.questionId;
  state.inFlight.delete(questionId);
  state.answeredHere.delete(questionId);
  const reason = String(message.reason ?? "");
  state.cardErrors.set(questionId, `Your answer was refused: ${reason}`);
  const question = state.questions.get(questionId);
  const title = question ? question.title || "(untitled tool call)" : questionId;
  notice(`Your answer to “${title}” was refused: ${reason}`, "refused");
}

function sessionsListed(list) {
  if (!Array.isArray(list)) return;
  const order = [];
  for (const info of list) {
    if (!info || typeof info.sessionId !== "string") continue;
    const record = session(info.sessionId);
    record.title = typeof info.title === "string" ? info.title : record.title;
    record.running = Boolean(info.running);
    record.listedWaiting = Number.isInteger(info.waiting) ? info.waiting : 0;
    order.push(info.sessionId);
  }
  // The listing is the truth (the server answers in order: a session created since
  // comes as an event after it): a session it does not list is gone, e.g. the
  // server was restarted.
  const sessions = new Map();
  for (const id of order) sessions.set(id, state.sessions.get(id));
  state.sessions = sessions;
  if (state.current !== null && !sessions.has(state.current)) state.current = null;
  // After a reload, the session this tab showed; else, at first, the first one.
  if (state.current === null && state.restore && state.sessions.has(state.restore)) {
    selectSession(state.restore);
  } else if (state.current === null && order.length > 0) {
    selectSession(order[0]);
  }
}

function sessionEvent(message) {
  if (typeof message.sessionId !== "string") return;
  const record = session(message.sessionId);
  const text = typeof message.text === "string" ? message.text : "";
  switch (message.event) {
    case "created":
      if (text) record.title = text;
      addEntry(record, { kind: "notice", text: "Session created." });
      if (message.view === state.view) {
        selectSession(record.id); // (this view asked for it)
        showRules(false);
      }
      break;
    case "turn_started":
      record.running = true;
      record.agentOpen = false;
      break;
    case "turn_ended":
      record.running = false;
      record.agentOpen = false;
      addEntry(record, { kind: "turn", text: `Turn ended: ${text || "(no stop reason)"}` });
      break;
    case "message":
      if (text) addChunk(record, text);
      break;
    default:
      break;
  }
}

function presetsCame(message) {
  if (typeof message.sessionId !== "string") return;
  const record = session(message.sessionId);
  record.presets = {
    presets: Array.isArray(message.presets) ? message.presets.filter((p) => typeof p === "string") : [],
    current: typeof message.current === "string" && message.current ? message.current : null,
    pending: typeof message.pending === "string" && message.pending ? message.pending : null,
  };
  record.presetError = null;
  record.presetNote = null;
  if (state.presetWait && state.presetWait.sessionId === message.sessionId) state.presetWait = null;
}

/** An error, shown by what asked for it (`asker`, from its ref), once. */
function errorCame(reason, asker) {
  switch (asker ? asker.kind : null) {
    case "answer":
      state.inFlight.delete(asker.questionId);
      state.answeredHere.delete(asker.questionId);
      cardError(asker.questionId, `Your answer was not taken: ${reason}`);
      return;
    case "save_rule":
      state.ruleSaving.delete(asker.questionId);
      state.inFlight.delete(asker.questionId);
      cardError(asker.questionId, `The rule: ${reason}`);
      if (card && card.question.questionId === asker.questionId) card.back();
      return;
    case "list_presets":
    case "set_preset": {
      const record = session(asker.sessionId);
      if (asker.kind === "list_presets" || !record.presets) record.presetError = reason;
      else record.presetNote = `Not switched: ${reason}`;
      if (state.presetWait && state.presetWait.sessionId === asker.sessionId) state.presetWait = null;
      return;
    }
    case "list_rules":
      state.rulesError = reason;
      return;
    case "revoke_rule":
      state.revoking = null;
      notice(`The rule was not revoked: ${reason}`, "error");
      return;
    case "preview_batch":
    case "answer_batch":
      if (asker.batch === state.batch && (asker.batch.phase === "asking" || asker.batch.phase === "sending")) {
        asker.batch.phase = "error";
        asker.batch.error = reason;
      } else {
        notice(`Batch: ${reason}`, "error"); // (one closed meanwhile)
      }
      return;
    case "prompt":
      addEntry(session(asker.sessionId), { kind: "notice", text: `Not sent to the agent: ${escapedText(reason, 4 * SHORT)}` });
      if (asker.sessionId !== state.current) {
        notice(`The prompt to ${sessionLabel(asker.sessionId, titleOf(asker.sessionId))} was not sent: ${reason}`, "error");
      }
      return;
    case "new_session":
      notice(`No new session: ${reason}`, "error");
      return;
    case "cancel_turn":
      notice(`The turn was not cancelled: ${reason}`, "error");
      return;
    default:
      notice(`Error: ${reason}`, "error");
  }
}

/** Why a card's answer or rule did not land, on its card; in a notice if the card
 * has gone meanwhile. */
function cardError(questionId, text) {
  if (known(questionId)) state.cardErrors.set(questionId, text);
  else notice(text, "error");
}

// ------------------------------------------------------------- editor rules

function known(questionId) {
  return state.questions.has(questionId) || Boolean(state.replay && state.replay.has(questionId));
}

function offersCame(message) {
  if (typeof message.questionId !== "string" || !Array.isArray(message.offers)) return;
  if (!known(message.questionId)) return; // (it ended meanwhile)
  const offers = [];
  for (const offer of message.offers) {
    if (!offer || !Number.isInteger(offer.index) || offer.index < 0 || offer.index > MAX_OFFER_INDEX) continue;
    if (typeof offer.label !== "string" || !offer.label) continue;
    offers.push({ index: offer.index, effect: offer.effect === "deny" ? "deny" : "allow", label: offer.label });
  }
  state.offers.set(message.questionId, offers);
}

function receiptCame(message) {
  if (typeof message.sessionId !== "string" || !message.sessionId) return;
  const number = Number.isInteger(message.number) ? message.number : "?";
  const outcome = message.outcome === "denied" ? "denied" : message.outcome === "allowed" ? "allowed" : "answered";
  const title = escapedText(typeof message.title === "string" && message.title ? message.title : message.toolCallId);
  const rule = escapedText(String(message.rule ?? ""), 2 * SHORT);
  addEntry(session(message.sessionId), { kind: "receipt", outcome, text: `⚖ rule ${number} ${outcome}: ${title} — ${rule}` });
  receiptCounted(message);
}

// The receipt carries the rule's hits: its row is kept current without a list per answer.
// The row must have both its number and its words (a list gone stale names another rule).
function receiptCounted(message) {
  if (!state.rules || !Number.isInteger(message.number) || typeof message.rule !== "string") return;
  if (!Number.isInteger(message.hits) || message.hits < 0) return;
  const row = state.rules.find((known) => known.number === message.number && known.rule === message.rule);
  if (row) row.hits = message.hits;
}

function rulesCame(list) {
  if (!Array.isArray(list)) return;
  state.rules = list
    .filter((row) => row && Number.isInteger(row.number) && typeof row.rule === "string")
    .map((row) => ({
      number: row.number,
      effect: row.effect === "deny" ? "deny" : "allow",
      rule: row.rule,
      hits: Number.isInteger(row.hits) ? row.hits : 0,
      keptIn: typeof row.keptIn === "string" ? row.keptIn : "",
    }));
  state.rulesError = null;
}

function askRules() {
  if (ready()) request(withRef({ type: "list_rules" }), { kind: "list_rules" });
}

function saveRule(question, index) {
  const message = withRef({ type: "save_rule", questionId: question.questionId, sessionId: question.sessionId, index });
  if (!ready() || !request(message, { kind: "save_rule", questionId: question.questionId })) {
    state.cardErrors.set(question.questionId, "Not connected: the rule was not saved. Try again once the page has reconnected.");
    renderCard();
    return;
  }
  state.inFlight.add(question.questionId);
  state.ruleSaving.add(question.questionId);
  state.cardErrors.delete(question.questionId);
  renderCard();
}

function revokeRule(row) {
  if (!ready() || state.revoking) return;
  if (request(withRef({ type: "revoke_rule", number: row.number, rule: row.rule }), { kind: "revoke_rule" })) {
    state.revoking = { number: row.number, rule: row.rule };
    renderRules();
  }
}

function showRules(open) {
  if (state.rulesOpen === open) return;
  state.rulesOpen = open;
  if (open) {
    askRules();
  } else if (card) {
    card.shown(); // (out of sight meanwhile: it appears anew, guard and all)
  }
  render();
  if (open) els.rulesClose.focus({ preventScroll: true });
  else if (card) card.element.focus({ preventScroll: true });
  else if (!els.prompt.disabled) els.prompt.focus({ preventScroll: true });
}

// ------------------------------------------------------------------- batches

function previewBatch() {
  const sessionId = state.current;
  const what = els.batchWhat.value.trim();
  if (sessionId === null || !ready()) return;
  if (!what) {
    state.batch = { sessionId, effect: "allow", what: "", phase: "error", error: "Name a tool kind (reads, edits, executes…) or a path glob (src/**).", questions: [] };
    renderBatch();
    return;
  }
  if ([...what].length > MAX_BATCH_WHAT) {
    state.batch = { sessionId, effect: "allow", what: "", phase: "error", error: `At most ${MAX_BATCH_WHAT} characters.`, questions: [] };
    renderBatch();
    return;
  }
  const effect = els.batchEffect.value === "deny" ? "deny" : "allow";
  const batch = { sessionId, effect, what, phase: "asking", questions: [], answered: 0, error: null, shownAt: 0 };
  if (!request(withRef({ type: "preview_batch", sessionId, effect, what }), { kind: "preview_batch", batch })) return;
  state.batch = batch;
  renderBatch();
}

function batchPreviewed(message, asker) {
  const batch = state.batch;
  if (!asker || asker.batch !== batch || batch.phase !== "asking") return; // (one closed meanwhile)
  if (!Array.isArray(message.questions)) return;
  batch.questions = message.questions
    .filter((item) => item && typeof item.questionId === "string")
    .map((item) => ({
      questionId: item.questionId,
      title: typeof item.title === "string" ? item.title : "",
      optionName: typeof item.optionName === "string" ? item.optionName : "",
    }));
  batch.phase = "preview";
  batch.shownAt = performance.now();
  setTimeout(renderBatch, GUARD_MS + 10); // (its answer button arms then)
}

function batchAnswered(message, asker) {
  const batch = state.batch;
  if (!asker || asker.batch !== batch || batch.phase !== "sending") return; // (one closed meanwhile)
  batch.phase = "done";
  batch.answered = Number.isInteger(message.answered) ? message.answered : 0;
}

function answerBatch() {
  const batch = state.batch;
  if (!batch || batch.phase !== "preview" || batch.questions.length === 0) return;
  if (performance.now() - batch.shownAt < GUARD_MS || !ready()) return;
  const message = withRef({
    type: "answer_batch",
    sessionId: batch.sessionId,
    effect: batch.effect,
    what: batch.what,
    questionIds: batch.questions.map((item) => item.questionId),
  });
  if (!request(message, { kind: "answer_batch", batch })) return;
  batch.phase = "sending";
  renderBatch();
}

function closeBatch() {
  state.batch = null;
  renderBatch();
}

function askPresets(sessionId) {
  if (!ready()) return;
  if (request(withRef({ type: "list_presets", sessionId }), { kind: "list_presets", sessionId })) {
    state.presetWait = { sessionId, kind: "list_presets" };
  }
}

// --------------------------------------------------------------- the sessions

function selectSession(id) {
  if (state.current === id) return;
  state.current = id;
  state.restore = null;
  store(CURRENT_KEY, id);
  session(id);
  renderTranscript();
  askPresets(id);
  render();
}

function sessionItem(id) {
  const button = el("button", { type: "button", class: "session-button" });
  button.addEventListener("click", () => {
    selectSession(id);
    showRules(false);
    if (card) card.element.focus({ preventScroll: true }); // the number keys reach the card
  });
  const item = el("li", { class: "session", "data-session-id": id }, button, el("span", { class: "badges" }));
  return item;
}

function updateSessionItem(item, id) {
  const record = state.sessions.get(id);
  const title = record && record.title ? record.title : "";
  const button = item.firstChild;
  const current = id === state.current;
  clear(button);
  if (title && title !== id) {
    button.append(
      el("span", { class: "session-name" }, visible(title, false, SHORT)),
      " ",
      el("span", { class: "session-id" }, visible(id, false, SHORT)),
    );
  } else {
    button.append(el("span", { class: "session-name" }, visible(id, false, SHORT)));
  }
  if (current) button.setAttribute("aria-current", "true");
  else button.removeAttribute("aria-current");
  const waiting = waitingCount(id);
  item.classList.toggle("current", current);
  item.classList.toggle("has-waiting", waiting > 0);
  const badges = clear(item.lastChild);
  if (record && record.running) {
    badges.append(el("span", { class: "running-dot", role: "img", "aria-label": "turn running", title: "turn running" }));
  }
  if (waiting > 0) {
    badges.append(el("span", { class: "waiting", role: "img", "aria-label": "waiting for approval", title: "waiting for approval" }));
    if (waiting > 1) badges.append(el("span", { class: "waiting-count", "aria-hidden": "true" }, String(waiting)));
  }
}

function renderSessions() {
  const list = els.sessionList;
  const existing = new Map();
  for (const item of list.children) existing.set(item.dataset.sessionId, item);
  const ids = sessionIds();
  ids.forEach((id, index) => {
    let item = existing.get(id);
    existing.delete(id);
    if (!item) item = sessionItem(id);
    updateSessionItem(item, id);
    if (list.children[index] !== item) list.insertBefore(item, list.children[index] || null);
  });
  for (const item of existing.values()) item.remove();
  els.sessionsEmpty.hidden = ids.length > 0;
}

// -------------------------------------------------------------- the transcript

function entryNode(entry) {
  switch (entry.kind) {
    case "user":
      return el("div", { class: "entry entry-user" }, el("span", { class: "who" }, "you"), el("div", { class: "body" }, entry.text));
    case "agent":
      return el("div", { class: "entry entry-agent" }, el("span", { class: "who" }, "agent"), el("div", { class: "body" }, entry.text));
    case "turn":
      return el("div", { class: "entry entry-turn" }, entry.text);
    case "receipt":
      return el("div", { class: ["entry", "entry-receipt", entry.outcome === "denied" ? "denied" : "allowed"] }, entry.text);
    default:
      return el("div", { class: "entry entry-notice" }, entry.text);
  }
}

function emptyTranscript() {
  const text = state.current === null
    ? "Choose a session on the left, or start a new one."
    : "Nothing yet in this view: send a prompt.";
  return el("p", { class: "transcript-empty" }, text);
}

function renderTranscript() {
  clear(els.transcript);
  const record = state.current === null ? null : state.sessions.get(state.current);
  if (!record || record.entries.length === 0) {
    els.transcript.append(emptyTranscript());
    return;
  }
  for (const entry of record.entries) els.transcript.append(entryNode(entry));
  els.transcript.scrollTop = els.transcript.scrollHeight;
}

function nearBottom() {
  const box = els.transcript;
  return box.scrollHeight - box.scrollTop - box.clientHeight < 40;
}

function addEntry(record, entry) {
  record.entries.push(entry);
  const trimmed = record.entries.length > MAX_ENTRIES;
  if (trimmed) record.entries.splice(0, record.entries.length - MAX_ENTRIES);
  if (record.id !== state.current) return;
  if (trimmed) {
    renderTranscript();
    return;
  }
  const stick = nearBottom();
  const empty = els.transcript.querySelector(".transcript-empty");
  if (empty) empty.remove();
  els.transcript.append(entryNode(entry));
  if (stick) els.transcript.scrollTop = els.transcript.scrollHeight;
}

function addChunk(record, text) {
  const last = record.entries[record.entries.length - 1];
  if (record.agentOpen && last && last.kind === "agent") {
    last.text += text;
    if (record.id === state.current) {
      const stick = nearBottom();
      const body = els.transcript.lastElementChild && els.transcript.lastElementChild.querySelector(".body");
      if (body) body.append(text);
      else renderTranscript();
      if (stick) els.transcript.scrollTop = els.transcript.scrollHeight;
    }
    return;
  }
  record.agentOpen = true;
  addEntry(record, { kind: "agent", text });
}

// ------------------------------------------------------------------ notices

function notice(text, kind) {
  const dismiss = el("button", { type: "button", class: "dismiss", "aria-label": "Dismiss notice", title: "Dismiss" }, "×");
  const item = el("div", { class: ["notice", `notice-${kind}`] }, el("span", { class: "notice-text" }, escapedText(text, 4 * SHORT)), dismiss);
  dismiss.addEventListener("click", () => item.remove());
  els.notices.append(item); // the newest last, scrolled into view
  while (els.notices.children.length > MAX_NOTICES) els.notices.firstElementChild.remove();
  els.notices.scrollTop = els.notices.scrollHeight;
}

// -------------------------------------------------------------------- the card

function answer(question, decision, reason = null) {
  const message = withRef({ type: "answer", questionId: question.questionId, sessionId: question.sessionId, decision });
  if (typeof reason === "string" && reason.trim() !== "") message.reason = reason;
  if (!ready() || !request(message, { kind: "answer", questionId: question.questionId })) {
    state.cardErrors.set(question.questionId, "Not connected: the answer was not sent. It can be given once the page has reconnected.");
    renderCard();
    return;
  }
  state.inFlight.add(question.questionId);
  state.answeredHere.add(question.questionId);
  state.cardErrors.delete(question.questionId);
  renderCard();
}

function renderCard() {
  const pending = state.current === null ? [] : questionsOf(state.current);
  const top = pending[0] || null;
  let focusWasInCard = false;
  let wasTyping = false;
  if (card && (!top || card.question.questionId !== top.questionId)) {
    const active = document.activeElement;
    focusWasInCard = card.element.contains(active) || active === document.body || active === null;
    // A reason being typed as its card leaves (answered elsewhere, withdrawn) must
    // not go on in the prompt box: an Enter there would send it to the agent.
    wasTyping = card.typing;
    card.destroy();
    card = null;
  }
  if (top && !card) {
    card = new CardView(top, {
      sessionTitle: titleOf(top.sessionId),
      position: [1, pending.length],
      offers: state.offers.get(top.questionId) || null,
      onAnswer: (decision, reason) => answer(top, decision, reason),
      onSaveRule: (index) => saveRule(top, index),
    });
    els.cardSlot.append(card.element);
    card.shown();
    card.element.focus({ preventScroll: true });
    card.element.scrollIntoView({ block: "nearest" });
  } else if (!card && focusWasInCard && !wasTyping && !els.prompt.disabled) {
    els.composer.hidden = false;
    els.prompt.focus({ preventScroll: true });
    promptBackAt = performance.now();
  }
  if (card) {
    card.setPosition([1, pending.length]);
    card.setOffers(state.offers.get(card.question.questionId) || null);
    const sending = state.inFlight.has(card.question.questionId);
    const hadFocus = card.element.contains(document.activeElement);
    if (sending !== card.sending) card.setSending(sending);
    if (hadFocus && !card.element.contains(document.activeElement)) card.element.focus({ preventScroll: true });
    card.setError(state.cardErrors.get(card.question.questionId) || null);
  }
  els.composer.hidden = card !== null;
}

// Keys for the card when nothing else has the focus (the card's own keys are
// handled on the card).
document.addEventListener("keydown", (event) => {
  if (!card || event.defaultPrevented || state.rulesOpen) return; // (the card is out of sight)
  const active = document.activeElement;
  if (active && active !== document.body && active !== document.documentElement) return;
  if (card.handleKey(event)) event.preventDefault();
});

// A card that was out of sight (another tab, a minimised window) appears anew.
document.addEventListener("visibilitychange", () => {
  if (card && document.visibilityState === "visible") card.shown();
});

// ------------------------------------------------------------ the controls

function sendPrompt() {
  const record = state.current === null ? null : state.sessions.get(state.current);
  const text = els.prompt.value;
  if (!record || text.trim() === "") return;
  const message = withRef({ type: "prompt", sessionId: record.id, text });
  if ([...text].length > MAX_PROMPT_CHARS || new TextEncoder().encode(JSON.stringify(message)).length > MAX_MESSAGE_BYTES) {
    notice(`The prompt is too long: at most ${MAX_PROMPT_CHARS.toLocaleString("en")} characters (132 KiB of UTF-8).`, "error");
    return;
  }
  if (!ready() || !request(message, { kind: "prompt", sessionId: record.id })) {
    notice("Not connected: the prompt was not sent.", "error");
    return;
  }
  record.agentOpen = false;
  addEntry(record, { kind: "user", text });
  els.prompt.value = "";
}

els.send.addEventListener("click", sendPrompt);
els.prompt.addEventListener("keydown", (event) => {
  if (performance.now() - promptBackAt < GUARD_MS && /^([0-9]|Escape|Enter)$/.test(event.key)) {
    event.preventDefault();
    return;
  }
  if (event.key === "Enter" && !event.shiftKey && !event.isComposing && !event.altKey && !event.metaKey && !event.ctrlKey) {
    event.preventDefault();
    sendPrompt();
  }
});

els.newSession.addEventListener("click", () => {
  request(withRef({ type: "new_session" }), { kind: "new_session" });
});

els.cancelTurn.addEventListener("click", () => {
  const sessionId = state.current;
  if (sessionId !== null) request(withRef({ type: "cancel_turn", sessionId }), { kind: "cancel_turn", sessionId });
});

els.rulesButton.addEventListener("click", () => showRules(!state.rulesOpen));
els.rulesClose.addEventListener("click", () => showRules(false));
els.rulesView.addEventListener("keydown", (event) => {
  if (event.key === "Escape" && !event.defaultPrevented) {
    event.preventDefault();
    showRules(false);
  }
});

els.batchPreview.addEventListener("click", previewBatch);
els.batchWhat.addEventListener("keydown", (event) => {
  if (event.key === "Enter" && !event.isComposing) {
    event.preventDefault();
    previewBatch();
  }
});

els.preset.addEventListener("change", () => {
  const id = state.current;
  if (id === null) return;
  const preset = els.preset.value;
  if (request(withRef({ type: "set_preset", sessionId: id, preset }), { kind: "set_preset", sessionId: id })) {
    state.presetWait = { sessionId: id, kind: "set_preset" };
    session(id).presetNote = null;
  }
});

// ---------------------------------------------------------------- rendering

function renderStatus() {
  const texts = {
    connecting: "connecting…",
    replaying: "connecting…",
    ready: "connected",
    reconnecting: "reconnecting…",
  };
  const text = texts[state.phase];
  if (els.conn.textContent !== text) els.conn.textContent = text;
  els.conn.dataset.state = state.phase === "replaying" ? "connecting" : state.phase;
  els.viewName.textContent = `this view: ${state.view}`;
}

function renderHeader() {
  const record = state.current === null ? null : state.sessions.get(state.current);
  els.sessionTitle.textContent = record ? sessionLabel(record.id, record.title) : "No session";
  els.turnState.textContent = record ? (record.running ? "turn running" : "idle") : "";
  els.turnState.classList.toggle("running", Boolean(record && record.running));
  els.cancelTurn.disabled = !(record && record.running && ready());
  let elsewhere = 0;
  for (const question of state.questions.values()) if (question.sessionId !== state.current) elsewhere += 1;
  els.elsewhere.hidden = elsewhere === 0;
  els.elsewhere.textContent = elsewhere === 1
    ? "1 question is waiting for approval in another session."
    : `${elsewhere} questions are waiting for approval in other sessions.`;
}

function renderPresets() {
  const record = state.current === null ? null : state.sessions.get(state.current);
  const select = els.preset;
  const note = els.presetNote;
  note.classList.remove("error");
  if (!record) {
    clear(select);
    select.disabled = true;
    note.textContent = "";
    return;
  }
  if (record.presetError) {
    clear(select);
    select.disabled = true;
    note.textContent = `Presets unavailable: ${record.presetError}`;
    note.classList.add("error");
    return;
  }
  if (!record.presets) {
    clear(select);
    select.disabled = true;
    note.textContent = ready() ? "loading…" : "";
    return;
  }
  const { presets, current, pending } = record.presets;
  const values = [...select.options].map((option) => option.value);
  if (values.join("\n") !== presets.join("\n")) {
    clear(select);
    for (const preset of presets) select.append(el("option", { value: preset }, preset));
  }
  const shown = pending || current;
  if (shown !== null && select.value !== shown && !(state.presetWait && state.presetWait.kind === "set_preset")) {
    select.value = shown;
  }
  select.disabled = !ready();
  if (record.presetNote) {
    note.textContent = record.presetNote;
    note.classList.add("error");
  } else if (pending && pending !== current) {
    note.textContent = `applies at the next turn: ${pending} (now: ${current})`;
  } else if (pending) {
    note.textContent = `applies at the next turn: ${pending}`;
  } else {
    note.textContent = "";
  }
}

function renderComposer() {
  const has = state.current !== null;
  els.prompt.disabled = !has;
  els.send.disabled = !has || !ready();
  els.prompt.placeholder = has
    ? "Write to the agent: Enter sends, Shift+Enter starts a new line"
    : "Choose or start a session first";
  els.newSession.disabled = !ready();
}

function renderRules() {
  const open = state.rulesOpen;
  els.rulesView.hidden = !open;
  els.main.classList.toggle("showing-rules", open);
  els.rulesButton.setAttribute("aria-pressed", String(open));
  els.rulesButton.classList.toggle("current", open);
  if (!open) return;
  const rules = state.rules;
  let status = "";
  if (state.rulesError) status = `Rules unavailable: ${escapedText(state.rulesError, 4 * SHORT)}`;
  else if (rules === null) status = ready() ? "loading…" : "not connected";
  else if (rules.length === 0) status = "No editor rules yet: save one from a card's “Editor rules”.";
  else status = `${rules.length} rule${rules.length === 1 ? "" : "s"}, in the order they are checked (a deny beats an allow).`;
  if (els.rulesStatus.textContent !== status) els.rulesStatus.textContent = status;
  // Drawn again only when it changed (a redraw would take the focus off a button); hits
  // change with every receipt, so they are written into the rows drawn.
  const drawn = JSON.stringify([(rules || []).map(({ hits, ...row }) => row), state.revoking, ready()]);
  if (els.rulesList.dataset.drawn !== drawn) {
    els.rulesList.dataset.drawn = drawn;
    drawRules(rules || []);
  }
  (rules || []).forEach((row, index) => {
    const hits = els.rulesList.children[index]?.querySelector(".rule-hits");
    if (hits && hits.textContent !== String(row.hits)) hits.textContent = String(row.hits);
  });
}

function drawRules(rules) {
  clear(els.rulesList);
  for (const row of rules) {
    const revoke = el(
      "button",
      { type: "button", class: "rule-revoke", "aria-label": `Revoke rule ${row.number}`, disabled: !ready() || state.revoking !== null },
      "Revoke",
    );
    revoke.addEventListener("click", () => revokeRule(row));
    els.rulesList.append(
      el(
        "li",
        { class: ["rule-row", row.effect], "data-rule-number": String(row.number) },
        el("span", { class: "rule-number" }, String(row.number)),
        el(
          "div",
          { class: "rule-body" },
          el("span", { class: "rule-words" }, visible(row.rule, false, 4 * SHORT)),
          el(
            "span",
            { class: "rule-meta" },
            "hits: ",
            el("span", { class: "rule-hits" }, String(row.hits)),
            " · kept in: ",
            el("span", { class: "rule-file" }, visible(row.keptIn || "memory", false, SHORT)),
          ),
        ),
        revoke,
      ),
    );
  }
}

function renderBatch() {
  const record = state.current === null ? null : state.sessions.get(state.current);
  const usable = Boolean(record) && ready();
  els.batchEffect.disabled = !usable;
  els.batchWhat.disabled = !usable;
  els.batchPreview.disabled = !usable || Boolean(state.batch && state.batch.phase === "asking");
  const batch = state.batch;
  const panel = els.batchPanel;
  if (!batch || batch.sessionId !== state.current) {
    panel.hidden = true;
    clear(panel);
    delete panel.dataset.drawn;
    return;
  }
  panel.hidden = false;
  // Drawn again only when it changed (a redraw would take the focus off a button).
  const armed = performance.now() - (batch.shownAt || 0) >= GUARD_MS;
  const gone = batch.questions.map((item) => !state.questions.has(item.questionId));
  const drawn = JSON.stringify([batch, gone, armed, ready()]);
  if (panel.dataset.drawn === drawn) return;
  panel.dataset.drawn = drawn;
  clear(panel);
  const verb = batch.effect === "deny" ? "Deny all" : "Allow all";
  const back = el("button", { type: "button", class: "batch-back" }, batch.phase === "done" ? "Close" : "Back");
  back.addEventListener("click", closeBatch);
  if (batch.phase === "error") {
    panel.append(el("p", { class: "batch-error" }, `Batch: ${escapedText(batch.error || "", 4 * SHORT)}`), el("div", { class: "batch-buttons" }, back));
    return;
  }
  const heading = el("p", { class: "batch-heading" }, `${verb} `, el("code", {}, visible(batch.what, false, SHORT)), ": ");
  panel.append(heading);
  if (batch.phase === "asking") {
    heading.append("asking the server…");
    return;
  }
  if (batch.phase === "done") {
    const listed = batch.questions.length;
    const rest = listed - batch.answered;
    heading.append(`${batch.answered} answered`);
    if (rest > 0) heading.append(` (${rest} of the ${listed} listed ${rest === 1 ? "was" : "were"} no longer pending)`);
    panel.append(el("div", { class: "batch-buttons" }, back));
    return;
  }
  const count = batch.questions.length;
  if (count === 0) {
    heading.append("no pending question of this session matches.");
    panel.append(el("div", { class: "batch-buttons" }, back));
    return;
  }
  heading.append(`these ${count} pending question${count === 1 ? "" : "s"} of this session, and no other (one that comes later is not answered):`);
  const list = el("ol", { class: "batch-list", "aria-label": "Questions the batch answers" });
  batch.questions.forEach((item, index) => {
    list.append(
      el(
        "li",
        { class: ["batch-item", gone[index] && "gone"], "data-question-id": item.questionId },
        el("span", { class: "batch-title" }, visible(item.title || "(untitled tool call)", false, SHORT)),
        " → ",
        el("span", { class: "batch-option" }, visible(item.optionName || "(no such option)", false, SHORT)),
        gone[index] ? el("span", { class: "batch-gone" }, " (no longer pending)") : null,
      ),
    );
  });
  const go = el(
    "button",
    { type: "button", class: ["batch-answer", batch.effect], disabled: batch.phase !== "preview" || !armed || !ready() },
    `Answer these ${count}`,
  );
  go.addEventListener("click", answerBatch);
  panel.append(list, el("div", { class: "batch-buttons" }, go, back));
  if (batch.phase === "sending") panel.append(el("p", { class: "batch-status" }, "Sending…"));
}

function render() {
  renderStatus();
  renderSessions();
  renderHeader();
  renderPresets();
  renderComposer();
  renderBatch();
  renderRules();
  renderCard();
}

renderTranscript();
render();
connection.start();
