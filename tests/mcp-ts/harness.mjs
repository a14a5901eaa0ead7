// Shared by the TypeScript-client tests: a real atoll-agent on a Unix socket, `atoll mcp`
// against it through the official TypeScript SDK's stdio client or, with `--http`, its
// Streamable HTTP client, and the binaries' paths ($CARGO_TARGET_DIR/debug or ./target/debug; tests/mcp-ts/run.sh builds them).

import { spawn } from "node:child_process";
import { existsSync, mkdtempSync, readdirSync, readFileSync, rmSync } from "node:fs";
import { connect } from "node:net";
import { tmpdir } from "node:os";
import { dirname, isAbsolute, join, resolve } from "node:path";
import { fileURLToPath } from "node:url";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

export const REPO = resolve(dirname(fileURLToPath(import.meta.url)), "../..");

export function binary(name) {
  let target = process.env.CARGO_TARGET_DIR ?? join(REPO, "target");
  if (!isAbsolute(target)) target = join(REPO, target);
  const path = join(target, "debug", name);
  if (!existsSync(path)) throw new Error(`${path} is not built; run tests/mcp-ts/run.sh`);
  return path;
}

function connectable(path) {
  return new Promise((done) => {
    const socket = connect(path, () => {
      socket.destroy();
      done(true);
    });
    socket.on("error", () => done(false));
  });
}

/** Starts atoll-agent on a Unix socket in a fresh temp dir; `stop()` kills it and cleans up. */
export async function startAgent() {
  const dir = mkdtempSync(join(tmpdir(), "atoll-mcp-ts-"));
  const socket = join(dir, "agent.sock");
  const agent = spawn(binary("atoll-agent"), ["--listen", `unix://${socket}`, "--job-dir", join(dir, "jobs")], {
    stdio: ["ignore", "ignore", "inherit"],
  });
  let exited = false;
  agent.on("exit", () => (exited = true));
  const deadline = Date.now() + 20_000;
  while (!(await connectable(socket))) {
    if (exited) throw new Error("atoll-agent exited before listening");
    if (Date.now() > deadline) throw new Error("gave up waiting for atoll-agent to listen");
    await new Promise((r) => setTimeout(r, 20));
  }
  return {
    dir,
    address: `unix://${socket}`,
    async stop() {
      if (!exited) {
        const gone = new Promise((r) => agent.once("exit", r));
        agent.kill("SIGKILL");
        await gone;
      }
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/** `atoll mcp --agent ADDR` with an initialized TypeScript SDK client. */
export async function mcpClient(address) {
  const env = { ...process.env, RUST_LOG: "warn" };
  delete env.ATOLL_AGENT;
  delete env.ATOLL_SANDBOX;
  const transport = new StdioClientTransport({
    command: binary("atoll"),
    args: ["mcp", "--agent", address],
    env,
    stderr: "inherit",
  });
  const client = new Client({ name: "atoll-mcp-ts-tests", version: "0" });
  await client.connect(transport);
  return client;
}

/**
 * `atoll mcp --http 127.0.0.1:0 ARGS` (the server picks a free port and prints its URL on
 * stderr; given no token, it makes one in its state directory, a private one unless
 * `extraEnv` names one, and prints where: `auth` carries it); `stop()` sends SIGTERM
 * (SIGKILL if it lingers) and waits for the exit.
 */
export async function startHttpServer(args = [], extraEnv = {}) {
  const env = { ...process.env, RUST_LOG: "warn", ...extraEnv };
  // A private state directory made here goes with the server.
  const ownState = "ATOLL_STATE_DIR" in extraEnv ? undefined : mkdtempSync(join(tmpdir(), "atoll-mcp-st-"));
  if (ownState) env.ATOLL_STATE_DIR = ownState;
  delete env.ATOLL_AGENT;
  delete env.ATOLL_SANDBOX;
  if (!("ATOLL_MCP_TOKEN" in extraEnv)) delete env.ATOLL_MCP_TOKEN;
  const server = spawn(binary("atoll"), ["mcp", "--http", "127.0.0.1:0", ...args], {
    env,
    stdio: ["ignore", "ignore", "pipe"],
  });
  let exited = false;
  let stderr = "";
  server.on("exit", () => {
    exited = true;
    // Kept if a sandbox was made in it (its directory is how it is found and killed).
    const sandboxes = ownState && readdirSync(ownState, { withFileTypes: true }).some((e) => e.isDirectory() && !e.name.startsWith("."));
    if (ownState && !sandboxes) rmSync(ownState, { recursive: true, force: true });
  });
  let timer;
  const url = await new Promise((done, fail) => {
    server.stderr.on("data", (chunk) => {
      stderr += chunk;
      // The whole line: the token file's path follows the URL.
      const found = /serving MCP over Streamable HTTP at (http:\/\/\S+\/mcp) \(.*\)\n/.exec(stderr);
      if (found) done(found[1]);
    });
    server.on("exit", (code) => fail(new Error(`atoll mcp --http exited with ${code}: ${stderr}`)));
    timer = setTimeout(() => fail(new Error(`gave up waiting for atoll mcp --http: ${stderr}`)), 30_000);
  }).finally(() => clearTimeout(timer));
  const made = /bearer token required; it is in (\/\S+) \(mode 0600\)/.exec(stderr);
  const token = made ? readFileSync(made[1], "utf8").trim() : undefined;
  return {
    url,
    token,
    auth: token ? { Authorization: `Bearer ${token}` } : {},
    alive: () => !exited,
    stderr: () => stderr,
    async stop() {
      if (exited) return;
      const gone = new Promise((r) => server.once("exit", r));
      server.kill("SIGTERM");
      const timer = setTimeout(() => server.kill("SIGKILL"), 30_000);
      await gone;
      clearTimeout(timer);
    },
  };
}

/** An initialized TypeScript SDK client on the Streamable HTTP transport. */
export async function httpClient(url, headers = {}) {
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } });
  const client = new Client({ name: "atoll-mcp-ts-http-tests", version: "0" });
  await client.connect(transport);
  return client;
}
