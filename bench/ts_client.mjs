// The official ACP TypeScript SDK (@agentclientprotocol/sdk, the CLIENT side: `client()`
// + `connectWith` + `ndJsonStream`) answering bench/cheap_agent.py's permission requests,
// for bench/approvals.py. Run by approvals.py as:
//
//   node bench/ts_client.mjs '{"argv": [AGENT_ARGV...], "stderr": LOG_PATH,
//                              "warmup": N0, "count": N, "repeat": R, "gated": G}'
//
// It spawns the agent (stderr appended to LOG_PATH), registers an async
// `session/request_permission` handler that answers `selected allow` (as the Python
// SDK's `request_permission` does in approvals.py), sends `bench/start {"count": N0}` as
// a warm-up, then R times `bench/start {"count": N}`, reading `performance.now()` and
// `process.cpuUsage()` (this process's CPU, all threads, user + system) right around
// each. The agent checks every answer. Its last line on stdout is JSON:
//   {"runs": [{count, errors, elapsed, cpu, agent_elapsed, agent_cpu}], "agent_exit"}
// and it exits 1 if the SDK failed or an answer was counted wrong. With "gated" (as
// approvals.py's driver runs it), it prints "ready" after the warm-up and waits for a
// line on stdin before each burst, and prints each burst's run as a JSON line.
//
// The SDK is resolved from tests/interop/node/node_modules (installed there by npm).
import { spawn } from "node:child_process";
import { openSync, readSync } from "node:fs";
import { createRequire } from "node:module";
import { dirname, join } from "node:path";
import { Readable, Writable } from "node:stream";
import { fileURLToPath, pathToFileURL } from "node:url";

const here = dirname(fileURLToPath(import.meta.url));
const requireFromInterop = createRequire(join(here, "..", "tests", "interop", "node", "package.json"));
const sdk = await import(pathToFileURL(requireFromInterop.resolve("@agentclientprotocol/sdk")).href);
const { client, methods, ndJsonStream } = sdk;

const config = JSON.parse(process.argv[2] ?? "null");
if (!config || !Array.isArray(config.argv)) {
  console.error("usage: node ts_client.mjs '{\"argv\": [...], \"stderr\": PATH, \"warmup\": N0, \"count\": N, \"repeat\": R}'");
  process.exit(2);
}

const agentProcess = spawn(config.argv[0], config.argv.slice(1), {
  stdio: ["pipe", "pipe", config.stderr ? openSync(config.stderr, "a") : "inherit"],
});
const exited = new Promise((resolve) => agentProcess.on("exit", (code) => resolve(code)));

// The driver's go: a line on stdin, read blocking (nothing else runs between bursts).
// False when the driver went away.
function gate(runs) {
  if (!config.gated) return true;
  process.stdout.write((runs.length ? JSON.stringify(runs.at(-1)) : "ready") + "\n");
  const byte = Buffer.alloc(1);
  for (;;) {
    if (readSync(0, byte, 0, 1, null) === 0) return false;
    if (byte[0] === 10) return true;
  }
}

const ALLOW = { outcome: { outcome: "selected", optionId: "allow" } };
const app = client({ name: "permclient-bench" }).onRequest(
  methods.client.session.requestPermission,
  async () => ALLOW,
);

const runs = [];
let failed = false;
try {
  await app.connectWith(
    ndJsonStream(Writable.toWeb(agentProcess.stdin), Readable.toWeb(agentProcess.stdout)),
    async (ctx) => {
      const start = (count) => ctx.request("bench/start", { count });
      if (config.warmup) await start(config.warmup);
      for (let i = 0; i < config.repeat; i++) {
        if (!gate(runs)) break;
        const cpu0 = process.cpuUsage();
        const t0 = performance.now();
        const result = await start(config.count);
        const elapsed = (performance.now() - t0) / 1000;
        const cpu = process.cpuUsage(cpu0);
        runs.push({
          count: result.count,
          errors: result.errors,
          elapsed,
          cpu: (cpu.user + cpu.system) / 1e6,
          agent_elapsed: result.elapsed,
          agent_cpu: result.cpu,
        });
      }
      if (config.gated && runs.length) process.stdout.write(JSON.stringify(runs.at(-1)) + "\n");
    },
  );
} catch (error) {
  failed = true;
  console.error(`ts_client: the SDK failed: ${error?.stack ?? error}`);
}
agentProcess.stdin.end();
const agentExit = await exited;
process.stdout.write(JSON.stringify({ runs, agent_exit: agentExit }) + "\n");
process.exit(failed || runs.some((r) => r.errors) ? 1 : 0);
