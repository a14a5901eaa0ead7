// Tool schemas a TypeScript host reads without complaint: the SDK's validator (Ajv)
// logs no "unknown format", the Inspector CLI's --strict mode reports no warning, and
// results validate against the output schemas the client compiled from tools/list.

import assert from "node:assert/strict";
import { execFile } from "node:child_process";
import { join } from "node:path";
import { after, before, test } from "node:test";
import { promisify } from "node:util";

import { REPO, binary, mcpClient, startAgent } from "./harness.mjs";

let agent;
let client;
before(async () => {
  agent = await startAgent();
  client = await mcpClient(agent.address);
});
after(async () => {
  await client?.close();
  await agent?.stop();
});

/** Runs `fn` with console.warn/error/log captured; returns what they were given. */
async function capturingConsole(fn) {
  const said = [];
  const saved = { warn: console.warn, error: console.error, log: console.log };
  for (const level of Object.keys(saved)) console[level] = (...args) => said.push(args.join(" "));
  try {
    await fn();
  } finally {
    Object.assign(console, saved);
  }
  return said;
}

test("listTools logs no unknown-format warning and every schema is draft-07", async () => {
  let tools;
  const said = await capturingConsole(async () => {
    tools = (await client.listTools()).tools;
    // The SDK compiles each output schema when the first call's result is checked.
    await client.callTool({ name: "sandbox_job_list", arguments: {} });
  });
  assert.ok(tools.length >= 18, `only ${tools.length} tools listed`);
  assert.deepEqual(said.filter((line) => /unknown format|strict mode/i.test(line)), []);
  for (const tool of tools) {
    for (const schema of [tool.inputSchema, tool.outputSchema]) {
      assert.equal(schema.$schema, "http://json-schema.org/draft-07/schema#", tool.name);
      assert.doesNotMatch(JSON.stringify(schema), /"format"|"null"/, tool.name);
    }
  }
});

test("the Inspector CLI --strict has no warning for any tool", async () => {
  const inspector = join(REPO, "tests/mcp-ts/node_modules/.bin/mcp-inspector");
  const { stdout, stderr } = await promisify(execFile)(
    inspector,
    ["--cli", "--strict", "--method", "tools/list", binary("atoll"), "mcp", "--agent", agent.address],
    { maxBuffer: 16 << 20, env: { ...process.env, RUST_LOG: "warn" } },
  );
  assert.ok(JSON.parse(stdout).tools.length >= 18, "the Inspector listed no tools");
  assert.doesNotMatch(stderr, /warning/i, stderr);
});

test("tool calls through the TypeScript client return results that validate", async () => {
  const said = await capturingConsole(async () => {
    await client.listTools();
    const path = join(agent.dir, "hello.txt");
    const written = await client.callTool({
      name: "sandbox_files_write",
      arguments: { path, content: "hello from TypeScript\n" },
    });
    assert.ok(!written.isError, JSON.stringify(written));
    const read = await client.callTool({ name: "sandbox_files_read", arguments: { path } });
    assert.equal(read.structuredContent.content, "hello from TypeScript\n");
    const listed = await client.callTool({ name: "sandbox_files_list", arguments: { path: agent.dir } });
    assert.ok(listed.structuredContent.entries.some((e) => e.path === "hello.txt"));
    // A command a signal ends has no exit code: the field is absent, not null.
    const killed = await client.callTool({ name: "sandbox_exec", arguments: { command: "kill -9 $$" } });
    assert.equal(killed.structuredContent.signal, 9);
    assert.ok(!("exit_code" in killed.structuredContent), JSON.stringify(killed.structuredContent));
    const ran = await client.callTool({ name: "sandbox_exec", arguments: { command: "echo ok; exit 3" } });
    assert.equal(ran.structuredContent.exit_code, 3);
    assert.equal(ran.structuredContent.stdout, "ok\n");
    const job = await client.callTool({ name: "sandbox_exec_background", arguments: { command: "true" } });
    const status = await client.callTool({
      name: "sandbox_job_status",
      arguments: { job_id: job.structuredContent.job_id, wait_ms: 10_000 },
    });
    assert.equal(status.structuredContent.state, "exited");
    const info = await client.callTool({ name: "sandbox_info", arguments: {} });
    assert.ok(info.structuredContent.agent.agent_version);
  });
  assert.deepEqual(said, []);
});
