// A runtime built on Microsoft's vscode-jsonrpc (Content-Length framing over stdio),
// driven by tests/interop/test_vscode_jsonrpc.py through permclient's "bridge" dialect.
//
// The editor (permclient) drives it with requests:
//   runScenario {}          -> sends session/request_permission for s-A, s-B (twice) and
//                              s-C concurrently; withdraws the second s-B request through a
//                              CancellationTokenSource (vscode-jsonrpc writes
//                              `$/cancelRequest {"id"}`) once the editor's handler for it
//                              reports `test/waiting`; returns what each request resolved to
//                              and the raw responses the editor wrote.
//   chatSend {sessionId, toolCallId?, expectCancel?}
//                           -> a turn: asks one permission for the session and waits for it
//                              (and, with expectCancel, for the editor's $/cancelRequest).
//   waitForCancel {}        -> notifies `test/started`, then waits until its token is cancelled.
//   getState {}             -> waits for every chatSend / waitForCancel handler to finish, then
//                              returns their logs and the raw traffic in both directions.
//
// Nothing here sleeps: every step waits on a message from the editor.
import {
  CancellationTokenSource,
  createMessageConnection,
  StreamMessageReader,
  StreamMessageWriter,
} from "vscode-jsonrpc/node";

const PERMISSION = "session/request_permission";

// Raw taps on both directions, so the test can see the exact bytes-level messages
// (after framing) and not only what vscode-jsonrpc chose to deliver to us.
const wire = { received: [], sent: [] };
const reader = new StreamMessageReader(process.stdin);
const writer = new StreamMessageWriter(process.stdout);
const listen = reader.listen.bind(reader);
reader.listen = (callback) =>
  listen((message) => {
    wire.received.push(message);
    callback(message);
  });
const write = writer.write.bind(writer);
writer.write = (message) => {
  wire.sent.push(message);
  return write(message);
};

const logger = {
  error: (m) => console.error(`[vscode-peer] error: ${m}`),
  warn: (m) => console.error(`[vscode-peer] warn: ${m}`),
  info: (m) => console.error(`[vscode-peer] info: ${m}`),
  log: (m) => console.error(`[vscode-peer] log: ${m}`),
};
const connection = createMessageConnection(reader, writer, logger);

// toolCallId -> resolve(), for handlers that told us they are waiting.
const waiting = new Map();
const waiters = new Map();
function whenWaiting(toolCallId) {
  if (waiting.has(toolCallId)) return Promise.resolve();
  return new Promise((resolve) => waiters.set(toolCallId, resolve));
}
connection.onNotification("test/waiting", (params) => {
  const id = params?.toolCallId;
  waiting.set(id, true);
  waiters.get(id)?.();
  waiters.delete(id);
});

function permissionParams(sessionId, toolCallId, options) {
  return {
    sessionId,
    toolCall: {
      toolCallId,
      title: `run ${toolCallId}`,
      kind: "execute",
      status: "pending",
      rawInput: { command: `echo ${toolCallId}` },
    },
    options: options ?? [
      { optionId: "allow", name: "Allow", kind: "allow_once" },
      { optionId: "deny", name: "Deny", kind: "reject_once" },
    ],
  };
}

// Sends one permission request; returns {id, settled} where id is the JSON-RPC id
// vscode-jsonrpc gave it (read back from the tap: sendRequest writes synchronously).
function ask(sessionId, toolCallId, options, token) {
  const before = wire.sent.length;
  const promise =
    token === undefined
      ? connection.sendRequest(PERMISSION, permissionParams(sessionId, toolCallId, options))
      : connection.sendRequest(PERMISSION, permissionParams(sessionId, toolCallId, options), token);
  const sent = wire.sent
    .slice(before)
    .find((m) => m.method === PERMISSION && m.params?.toolCall?.toolCallId === toolCallId);
  const settled = promise.then(
    (value) => ({ status: "resolved", value }),
    (error) => ({ status: "rejected", code: error?.code ?? null, message: String(error?.message) }),
  );
  return { id: sent === undefined ? null : sent.id, settled };
}

function responsesTo(id) {
  return wire.received.filter((m) => m.id === id && m.method === undefined);
}

connection.onRequest("runScenario", async () => {
  const cts = new CancellationTokenSource();
  const asks = {
    A1: ask("s-A", "call-A1"),
    B1: ask("s-B", "call-B1", [
      { optionId: "allow", name: "Allow", kind: "allow_once" },
      { optionId: "allow-always", name: "Always allow", kind: "allow_always" },
      { optionId: "deny", name: "Deny", kind: "reject_once" },
    ]),
    B2: ask("s-B", "call-B2", undefined, cts.token),
    C1: ask("s-C", "call-C1"),
  };
  // Withdraw B2 only once the editor's handler is really showing it.
  await whenWaiting("call-B2");
  cts.cancel();
  const answers = {};
  const requestIds = {};
  for (const [key, { id, settled }] of Object.entries(asks)) {
    answers[key] = await settled;
    requestIds[key] = id;
  }
  const responses = {};
  for (const [key, id] of Object.entries(requestIds)) responses[key] = responsesTo(id);
  const cancelsSent = wire.sent.filter((m) => m.method === "$/cancelRequest").map((m) => m.params);
  return { answers, requestIds, responses, cancelsSent };
});

const turns = []; // promises of finished handler logs
connection.onRequest("chatSend", (params, token) => {
  const done = (async () => {
    const { id, settled } = ask(params.sessionId, params.toolCallId ?? "call-turn");
    const answer = await settled;
    if (params.expectCancel) {
      // The editor cancels this turn: wait until its $/cancelRequest has arrived.
      await new Promise((resolve) =>
        token.isCancellationRequested ? resolve() : token.onCancellationRequested(resolve),
      );
    }
    return {
      kind: "chatSend",
      sessionId: params.sessionId,
      permissionId: id,
      answer,
      tokenCancelled: token.isCancellationRequested,
    };
  })();
  turns.push(done);
  return done.then((log) => ({ approved: log.answer.value?.outcome?.outcome === "selected", log }));
});

connection.onRequest("waitForCancel", (_params, token) => {
  const done = new Promise((resolve) => {
    token.onCancellationRequested(() =>
      resolve({ kind: "waitForCancel", tokenCancelled: token.isCancellationRequested }),
    );
  });
  turns.push(done);
  connection.sendNotification("test/started", {});
  return done;
});

connection.onRequest("getState", async () => {
  const logs = await Promise.all(turns);
  // Copies: the response to this request is itself appended to wire.sent.
  const copy = (messages) => JSON.parse(JSON.stringify(messages));
  return { logs, received: copy(wire.received), sent: copy(wire.sent) };
});

connection.onClose(() => process.exit(0));
connection.listen();
