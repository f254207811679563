// An ACP client built on the CLIENT side of the official TypeScript SDK
// (@agentclientprotocol/sdk 2.4.0: `client()` + `connectWith` + `ndJsonStream`), driving
// the reference runtime `simhost runtime --dialect acp` over its stdio. Run by
// tests/interop/test_acp_ts_client.py:
//
//   node ts_client_drives_runtime.mjs WORKSPACE -- RUNTIME_ARGV...
//
// It spawns RUNTIME_ARGV (stderr inherited), then, as an editor would:
//   1. initialize (protocol version 1, no fs/terminal capabilities);
//   2. session/new with cwd = WORKSPACE;
//   3. a turn "create approved.txt with ..." whose permission request it approves (the
//      offered option of kind allow_once);
//   4. a turn "create denied.txt with ..." whose permission request it denies (the
//      option of kind reject_once);
//   5. a turn "run touch cancelled.txt" whose permission request it leaves open, then
//      sends session/cancel; the runtime withdraws the request with
//      `$/cancel_request {"requestId"}`, which the SDK turns into an abort of the
//      handler's signal; the handler then answers `cancelled`.
// It checks each turn's stop reason and the workspace as it goes (a failed check is
// recorded, not thrown), then prints ONE JSON summary on stdout:
//   {ok, failures, initialize, sessionId, turns: [...], exitCode,
//    fromRuntime: [every message the runtime wrote, parsed from the raw bytes],
//    toRuntime: [every message this client wrote]}
//
// Nothing here sleeps or polls: every step waits on a message from the runtime.
import { spawn } from "node:child_process";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { Readable, Writable } from "node:stream";

import { client, methods, ndJsonStream, PROTOCOL_VERSION } from "@agentclientprotocol/sdk";

const separator = process.argv.indexOf("--");
if (separator !== 3 || process.argv.length < 5) {
  console.error("usage: node ts_client_drives_runtime.mjs WORKSPACE -- RUNTIME_ARGV...");
  process.exit(2);
}
const workspace = process.argv[2];
const runtimeArgv = process.argv.slice(4);

const failures = [];
function check(condition, what) {
  if (!condition) failures.push(what);
}

// ---------------------------------------------------------------- the runtime

const child = spawn(runtimeArgv[0], runtimeArgv.slice(1), {
  stdio: ["pipe", "pipe", "inherit"],
});
const exited = new Promise((resolve) => child.on("exit", (code, signal) => resolve({ code, signal })));

// Raw taps: the exact bytes in both directions, split into messages at the end.
const fromRuntimeBytes = [];
const toRuntimeBytes = [];
const input = Readable.toWeb(child.stdout).pipeThrough(
  new TransformStream({
    transform(chunk, controller) {
      fromRuntimeBytes.push(Buffer.from(chunk));
      controller.enqueue(chunk);
    },
  }),
);
const outputTap = new TransformStream({
  transform(chunk, controller) {
    toRuntimeBytes.push(Buffer.from(chunk));
    controller.enqueue(chunk);
  },
});
outputTap.readable.pipeTo(Writable.toWeb(child.stdin)).catch(() => {});
const output = outputTap.writable;

function parseLines(chunks) {
  const text = Buffer.concat(chunks).toString("utf8");
  check(text === "" || text.endsWith("\n"), "every message ends with a newline");
  return text
    .split("\n")
    .filter((line) => line !== "")
    .map((line) => JSON.parse(line));
}

// ----------------------------------------------------------------- the client

// sessionId -> list of session/update params, in arrival order
const updates = new Map();
// What each permission request gets: a function (params, signal) -> outcome promise.
let answerNext = null;
const permissionRequests = [];

const app = client({ name: "simhost-interop-client" })
  .onNotification(methods.client.session.update, ({ params }) => {
    if (!updates.has(params.sessionId)) updates.set(params.sessionId, []);
    updates.get(params.sessionId).push(params.update);
  })
  .onRequest(methods.client.session.requestPermission, async ({ params, signal }) => {
    permissionRequests.push(params);
    const answer = answerNext;
    answerNext = null;
    if (answer === null) return { outcome: { outcome: "cancelled" } };
    return { outcome: await answer(params, signal) };
  });

function choose(kind) {
  return async (params) => {
    const option = params.options.find((o) => o.kind === kind);
    check(option !== undefined, `an option of kind ${kind} is offered`);
    return { outcome: "selected", optionId: option.optionId };
  };
}

function toolEvents(sessionId, toolCallId) {
  return (updates.get(sessionId) ?? []).filter(
    (u) =>
      (u.sessionUpdate === "tool_call" || u.sessionUpdate === "tool_call_update") &&
      u.toolCallId === toolCallId,
  );
}

function prompt(ctx, sessionId, text) {
  return ctx.request(methods.agent.session.prompt, {
    sessionId,
    prompt: [{ type: "text", text }],
  });
}

const summary = { turns: [] };

async function turn(ctx, sessionId, text, file, answer) {
  const before = permissionRequests.length;
  answerNext = answer;
  const response = await prompt(ctx, sessionId, text);
  const asked = permissionRequests.slice(before);
  check(asked.length === 1, `${text}: exactly one permission request`);
  const request = asked[0];
  const path = join(workspace, file);
  const events = request ? toolEvents(sessionId, request.toolCall.toolCallId) : [];
  return {
    prompt: text,
    stopReason: response.stopReason,
    permission: request ?? null,
    statuses: events.map((e) => e.status),
    fileExists: existsSync(path),
    fileText: existsSync(path) ? readFileSync(path, "utf8") : null,
  };
}

try {
  await app.connectWith(ndJsonStream(output, input), async (ctx) => {
    summary.initialize = await ctx.request(methods.agent.initialize, {
      protocolVersion: PROTOCOL_VERSION,
      clientCapabilities: { fs: { readTextFile: false, writeTextFile: false }, terminal: false },
      clientInfo: { name: "simhost-interop-client", version: "0.0.0" },
    });
    const created = await ctx.request(methods.agent.session.new, {
      cwd: workspace,
      mcpServers: [],
    });
    const sessionId = created.sessionId;
    summary.sessionId = sessionId;
    summary.modes = created.modes ?? null;

    // 3. approved
    const approved = await turn(
      ctx,
      sessionId,
      "create approved.txt with approved by the TS SDK",
      "approved.txt",
      choose("allow_once"),
    );
    check(approved.stopReason === "end_turn", "approved turn ends end_turn");
    check(approved.fileText === "approved by the TS SDK\n", "approved.txt was written");
    summary.turns.push(approved);

    // 4. denied
    const denied = await turn(
      ctx,
      sessionId,
      "create denied.txt with should never exist",
      "denied.txt",
      choose("reject_once"),
    );
    check(denied.stopReason === "end_turn", "denied turn ends end_turn");
    check(!denied.fileExists, "denied.txt was not written");
    summary.turns.push(denied);

    // 5. cancelled: the card stays open until the runtime withdraws it.
    let cardShown;
    const shown = new Promise((resolve) => (cardShown = resolve));
    const cancelled = { withdrawnBySignal: false };
    const pending = turn(ctx, sessionId, "run touch cancelled.txt", "cancelled.txt", (params, signal) => {
      cardShown();
      return new Promise((resolve) => {
        const dismiss = () => {
          cancelled.withdrawnBySignal = true;
          resolve({ outcome: "cancelled" });
        };
        if (signal.aborted) dismiss();
        else signal.addEventListener("abort", dismiss, { once: true });
      });
    });
    await shown;
    await ctx.notify(methods.agent.session.cancel, { sessionId });
    Object.assign(cancelled, await pending);
    check(cancelled.stopReason === "cancelled", "cancelled turn ends cancelled");
    check(cancelled.withdrawnBySignal, "the SDK aborted the withdrawn permission request");
    check(!cancelled.fileExists, "cancelled.txt was not created");
    summary.turns.push(cancelled);
  });
} catch (error) {
  failures.push(`the client failed: ${error?.stack ?? error}`);
}

// connectWith closed the stream: the runtime sees end of input and exits.
child.stdin.end();
const { code, signal } = await exited;
summary.exitCode = code;
summary.exitSignal = signal;
summary.fromRuntime = parseLines(fromRuntimeBytes);
summary.toRuntime = parseLines(toRuntimeBytes);
summary.failures = failures;
summary.ok = failures.length === 0;
process.stdout.write(JSON.stringify(summary) + "\n");
