// An ACP agent built on the AGENT side of the official TypeScript SDK
// (@agentclientprotocol/sdk 2.4.0: `agent()` + `ndJsonStream` over stdio), driven by
// tests/interop/test_acp_ts.py through permclient's "acp" dialect. No LLM: each line of
// the prompt's text blocks is a command ("; " also separates commands, so a one-line
// prompt, e.g. typed into simhost chat, can hold several).
//
//   write NAME TEXT        a tool call "write NAME" (kind edit, a diff creating NAME
//                          with TEXT); NAME is written in the session's cwd only if the
//                          permission answer selects an allow_* option.
//   bigwrite NAME BYTES    the same, with generated text of exactly BYTES bytes of UTF-8
//                          (quotes, backslashes, tabs, newlines, U+2028, non-BMP
//                          characters); its sha256 is logged (event "generated").
//   withdraw NAME          the permission request of "write NAME" is withdrawn with the
//                          SDK's own cancellation (an AbortSignal passed as
//                          `cancellationSignal`; on the wire `$/cancel_request
//                          {"requestId"}`) once every other request of the prompt has
//                          been answered. The SDK then keeps waiting for the client's
//                          answer (its default), and the agent reports what it got.
//
// A prompt reports a `tool_call` (pending) for each call, then asks permission for all of
// them at once (concurrently), and reports each call's end with `tool_call_update`:
// in_progress then completed (allowed and written), or failed (denied, cancelled,
// withdrawn, or the turn was cancelled). The turn ends with `end_turn`, or `cancelled`
// when `session/cancel` arrived for the session during the turn. On `session/cancel` the
// agent does NOT withdraw its questions: the client must answer them itself.
//
// `_permclient/wait` (an extension request) waits until the client cancels it; see below.
//
// Log: one JSON object per line to the file named by $PERMCLIENT_AGENT_LOG (else stderr):
//   {"event": "wire", "dir": "in"|"out", "msg": ...}   every JSON-RPC message, as the SDK
//       read it from (in) or handed it to (out) the ndjson stream
//   {"event": "answer", "sessionId", "toolCallId", "ok", "value"|"error"}  what the SDK
//       delivered for each permission request
//   {"event": "withdraw", "sessionId", "toolCallId"}, {"event": "wrote", "path", "bytes"},
//   {"event": "generated", "toolCallId", "bytes", "sha256"}, {"event": "session_cancel", ...},
//   {"event": "wait_started" | "wait_aborted", "requestId"}
//
// Nothing here sleeps or polls: every step waits on a message from the client.
import { createHash } from "node:crypto";
import { appendFileSync, writeFileSync } from "node:fs";
import { isAbsolute, join } from "node:path";
import { Readable, Writable } from "node:stream";
import { setImmediate as nextMacrotask } from "node:timers/promises";

import { agent, methods, ndJsonStream, PROTOCOL_VERSION, RequestError } from "@agentclientprotocol/sdk";

const LOG = process.env.PERMCLIENT_AGENT_LOG;
function log(entry) {
  const line = JSON.stringify(entry) + "\n";
  if (LOG) appendFileSync(LOG, line);
  else process.stderr.write(`[ts-agent] ${line}`);
}

const OPTIONS = [
  { optionId: "allow", name: "Allow", kind: "allow_once" },
  { optionId: "allow-always", name: "Always allow", kind: "allow_always" },
  { optionId: "deny", name: "Deny", kind: "reject_once" },
];
const OPTION_KIND = new Map(OPTIONS.map((o) => [o.optionId, o.kind]));

// sessionId -> { cwd, turn }: `turn` is the latest prompt's { cancelled } (a session/cancel
// marks that turn; the next prompt starts a fresh one, so a turn still winding down is
// never un-cancelled by it)
const sessions = new Map();
let sessionCount = 0;

function generatedText(bytes) {
  // Deterministic text of exactly `bytes` bytes of UTF-8, with everything JSON has to
  // escape or that a careless line splitter could trip on.
  const parts = [];
  let size = 0;
  for (let i = 0; ; i++) {
    const unit = `line ${i}: "quoted" back\\slash\ttab é € 𝄞 \u2028 ${"abcdefgh".repeat(i % 7)}\n`;
    const unitBytes = Buffer.byteLength(unit, "utf8");
    if (size + unitBytes > bytes) break;
    parts.push(unit);
    size += unitBytes;
  }
  parts.push("x".repeat(bytes - size));
  return parts.join("");
}

function parseCommands(prompt) {
  const calls = [];
  const withdraw = new Set();
  const lines = prompt
    .filter((block) => block.type === "text")
    .flatMap((block) => block.text.split(/\n|; /))
    .map((line) => line.trim())
    .filter((line) => line !== "");
  for (const line of lines) {
    const [command, name, ...rest] = line.split(" ");
    if (!name || name.includes("/") || name.startsWith(".")) {
      throw RequestError.invalidParams({ line }, "expected a plain file name");
    }
    if (command === "write") {
      calls.push({ name, text: rest.join(" ") });
    } else if (command === "bigwrite") {
      const bytes = Number(rest[0]);
      if (!Number.isSafeInteger(bytes) || bytes < 0) {
        throw RequestError.invalidParams({ line }, "expected a byte count");
      }
      calls.push({ name, text: generatedText(bytes), big: true });
    } else if (command === "withdraw") {
      withdraw.add(name);
    } else {
      throw RequestError.invalidParams({ line }, `unknown command ${command}`);
    }
  }
  for (const name of withdraw) {
    if (!calls.some((call) => call.name === name)) {
      throw RequestError.invalidParams({ name }, "withdraw names no write of this prompt");
    }
  }
  return { calls, withdraw };
}

async function runTurn(client, sessionId, session, turn, prompt) {
  const { calls, withdraw } = parseCommands(prompt);
  const update = (u) => client.notify(methods.client.session.update, { sessionId, update: u });

  for (const call of calls) {
    call.toolCallId = `write:${call.name}`;
    call.path = join(session.cwd, call.name);
    call.toolCall = {
      toolCallId: call.toolCallId,
      title: `write ${call.name}`,
      kind: "edit",
      status: "pending",
      content: [{ type: "diff", path: call.path, oldText: null, newText: call.text }],
      locations: [{ path: call.path }],
      rawInput: { path: call.path, bytes: Buffer.byteLength(call.text, "utf8") },
    };
    if (call.big) {
      const sha256 = createHash("sha256").update(call.text, "utf8").digest("hex");
      log({ event: "generated", toolCallId: call.toolCallId, bytes: call.toolCall.rawInput.bytes, sha256 });
    }
    await update({ sessionUpdate: "tool_call", ...call.toolCall });
  }

  // Ask for every call at once; each call goes on as soon as its own answer arrives.
  for (const call of calls) {
    call.abort = new AbortController();
    call.done = client
      .request(
        methods.client.session.requestPermission,
        { sessionId, toolCall: call.toolCall, options: OPTIONS },
        { cancellationSignal: call.abort.signal },
      )
      .then(
        (value) => ({ ok: true, value }),
        (error) => ({ ok: false, error: { code: error?.code, message: String(error?.message ?? error) } }),
      )
      .then((answer) => finish(call, answer));
  }

  async function finish(call, answer) {
    // Let the SDK finish dispatching what it has already read: a `session/cancel` the
    // client wrote before this answer has been read, but its handler runs a few
    // microtasks later. One macrotask turn drains them (no timer, no polling).
    await nextMacrotask();
    log({ event: "answer", sessionId, toolCallId: call.toolCallId, ...answer });
    const outcome = answer.ok ? answer.value?.outcome : undefined;
    const allowed =
      outcome?.outcome === "selected" &&
      (OPTION_KIND.get(outcome.optionId) ?? "").startsWith("allow_") &&
      !turn.cancelled;
    if (!allowed) {
      await update({
        sessionUpdate: "tool_call_update",
        toolCallId: call.toolCallId,
        status: "failed",
        rawOutput: { applied: false, answer },
      });
      return;
    }
    await update({ sessionUpdate: "tool_call_update", toolCallId: call.toolCallId, status: "in_progress" });
    writeFileSync(call.path, call.text, "utf8");
    const bytes = Buffer.byteLength(call.text, "utf8");
    log({ event: "wrote", path: call.path, bytes });
    await update({
      sessionUpdate: "tool_call_update",
      toolCallId: call.toolCallId,
      status: "completed",
      rawOutput: { applied: true, path: call.path, bytes },
    });
  }

  await Promise.all(calls.filter((call) => !withdraw.has(call.name)).map((call) => call.done));
  for (const call of calls) {
    if (withdraw.has(call.name)) {
      log({ event: "withdraw", sessionId, toolCallId: call.toolCallId });
      call.abort.abort();
    }
  }
  await Promise.all(calls.map((call) => call.done));
  return { stopReason: turn.cancelled ? "cancelled" : "end_turn" };
}

const app = agent({ name: "permclient-ts-interop-agent" })
  .onRequest(methods.agent.initialize, async () => ({
    protocolVersion: PROTOCOL_VERSION,
    agentCapabilities: { loadSession: false },
    agentInfo: { name: "permclient-ts-interop-agent", version: "0.0.0" },
    authMethods: [],
  }))
  .onRequest(methods.agent.session.new, async ({ params }) => {
    if (!isAbsolute(params.cwd)) {
      throw RequestError.invalidParams({ cwd: params.cwd }, "cwd must be absolute");
    }
    const sessionId = `ts-session-${++sessionCount}`;
    sessions.set(sessionId, { cwd: params.cwd, turn: null });
    return { sessionId };
  })
  .onRequest(methods.agent.session.prompt, async ({ params, client }) => {
    const session = sessions.get(params.sessionId);
    if (!session) throw RequestError.sessionNotFound(params.sessionId);
    const turn = { cancelled: false };
    session.turn = turn;
    return runTurn(client, params.sessionId, session, turn, params.prompt);
  })
  // An extension request (ACP: methods starting with "_") that waits until the client
  // withdraws it with `$/cancel_request`: the SDK then aborts this handler's signal, and
  // the agent answers with the SDK's own -32800 error. It tells the client it is waiting
  // with an extension notification, so the client cancels only once it surely arrived.
  .onRequest(
    "_permclient/wait",
    (params) => params ?? {},
    async ({ client, signal, requestId }) => {
      log({ event: "wait_started", requestId });
      await client.notify("_permclient/waiting", { requestId });
      await new Promise((resolve) => {
        if (signal.aborted) resolve();
        else signal.addEventListener("abort", resolve, { once: true });
      });
      log({ event: "wait_aborted", requestId });
      throw signal.reason;
    },
  )
  .onNotification(methods.agent.session.cancel, async ({ params }) => {
    log({ event: "session_cancel", sessionId: params.sessionId });
    const session = sessions.get(params.sessionId);
    if (session?.turn) session.turn.cancelled = true;
  });

// Taps on both directions of the SDK's message stream.
const stream = ndJsonStream(Writable.toWeb(process.stdout), Readable.toWeb(process.stdin));
const tap = (dir) =>
  new TransformStream({
    transform(msg, controller) {
      log({ event: "wire", dir, msg });
      controller.enqueue(msg);
    },
  });
const outbound = tap("out");
void outbound.readable.pipeTo(stream.writable).catch(() => {});
const connection = app.connect({
  readable: stream.readable.pipeThrough(tap("in")),
  writable: outbound.writable,
});
void connection.closed.then(() => {
  log({ event: "closed" });
  process.exit(0);
});
