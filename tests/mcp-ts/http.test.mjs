// `atoll mcp --http` driven by the official TypeScript SDK's StreamableHTTPClientTransport
// against a real atoll-agent: the same tools as stdio, progress, cancellation killing the
// command, the bearer token, and 50 clients at once.

import assert from "node:assert/strict";
import { existsSync, readFileSync } from "node:fs";
import { join } from "node:path";
import { after, before, test } from "node:test";

import { httpClient, mcpClient, startAgent, startHttpServer } from "./harness.mjs";

const TOKEN = "ts-test-token-0123456789abcdef0123456789";

let agent;
before(async () => {
  agent = await startAgent();
});
after(async () => {
  await agent?.stop();
});

/** Whether `pid` is a live (not zombie) process. */
function alive(pid) {
  try {
    return readFileSync(`/proc/${pid}/stat`, "utf8").split(")").at(-1).trim().split(" ")[0] !== "Z";
  } catch {
    return false;
  }
}

async function until(predicate, what, within = 30_000) {
  const deadline = Date.now() + within;
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error(`gave up waiting: ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}

test("over HTTP: the same tools as stdio, results and progress", async () => {
  const stdio = await mcpClient(agent.address);
  const stdioTools = (await stdio.listTools()).tools.map((t) => [t.name, t.inputSchema]);
  await stdio.close();
  const server = await startHttpServer(["--agent", agent.address]);
  try {
    const client = await httpClient(server.url, server.auth);
    const httpTools = (await client.listTools()).tools.map((t) => [t.name, t.inputSchema]);
    assert.deepEqual(httpTools, stdioTools);
    const path = join(agent.dir, "ts-http.txt");
    await client.callTool({ name: "sandbox_files_write", arguments: { path, content: "ts over http" } });
    const read = await client.callTool({ name: "sandbox_files_read", arguments: { path } });
    assert.equal(read.structuredContent.content, "ts over http");
    const updates = [];
    const slow = await client.callTool(
      { name: "sandbox_exec", arguments: { command: "sleep 2.5; echo done", timeout_ms: 20000 } },
      undefined,
      { onprogress: (p) => updates.push(p) },
    );
    assert.equal(slow.structuredContent.stdout, "done\n");
    assert.ok(updates.length >= 2, JSON.stringify(updates));
    assert.ok(updates.every((u) => u.total === 20 && u.message.startsWith("running ")), JSON.stringify(updates));
    await client.close();
  } finally {
    await server.stop();
  }
});

test("over HTTP: aborting a call kills the command and the client goes on", async () => {
  const server = await startHttpServer(["--agent", agent.address]);
  try {
    const client = await httpClient(server.url, server.auth);
    const pids = join(agent.dir, "ts-http-cancel-pids");
    const abort = new AbortController();
    const call = client.callTool(
      {
        name: "sandbox_exec",
        arguments: { command: `sleep 300 & echo $! >> ${pids}; echo $$ >> ${pids}; wait`, timeout_ms: 600000 },
      },
      undefined,
      { signal: abort.signal },
    );
    await until(() => existsSync(pids) && readFileSync(pids, "utf8").trim().split(/\s+/).length === 2, "the command to start");
    const started = readFileSync(pids, "utf8").trim().split(/\s+/).map(Number);
    assert.ok(started.every(alive));
    abort.abort();
    await assert.rejects(call);
    await until(() => !started.some(alive), "the aborted command to be killed");
    const again = await client.callTool({ name: "sandbox_exec", arguments: { command: "echo still here" } });
    assert.equal(again.structuredContent.stdout, "still here\n");
    await client.close();
  } finally {
    await server.stop();
  }
});

test("over HTTP with a token: the client with it works, one without it is refused", async () => {
  const server = await startHttpServer(["--agent", agent.address], { ATOLL_MCP_TOKEN: TOKEN });
  try {
    const client = await httpClient(server.url, { Authorization: `Bearer ${TOKEN}` });
    const out = await client.callTool({ name: "sandbox_exec", arguments: { command: "echo authorized" } });
    assert.equal(out.structuredContent.stdout, "authorized\n");
    await client.close();
    for (const headers of [{}, { Authorization: `Bearer ${TOKEN}x` }]) {
      await assert.rejects(httpClient(server.url, headers), /bearer token/);
    }
    assert.ok(!server.stderr().includes(TOKEN), "the token was logged");
  } finally {
    await server.stop();
  }
});

test("over HTTP: 50 clients calling at once are all answered", async () => {
  const server = await startHttpServer(["--agent", agent.address]);
  try {
    const answers = await Promise.all(
      Array.from({ length: 50 }, async (_, i) => {
        const client = await httpClient(server.url, server.auth);
        const out = await client.callTool({ name: "sandbox_exec", arguments: { command: `sleep 0.2; echo ts-${i}` } });
        await client.close();
        return out.structuredContent.stdout;
      }),
    );
    assert.deepEqual(answers, Array.from({ length: 50 }, (_, i) => `ts-${i}\n`));
    assert.ok(server.alive());
  } finally {
    await server.stop();
  }
});
