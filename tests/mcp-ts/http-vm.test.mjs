// `atoll mcp --http` against one booted microVM, driven by the official TypeScript SDK's
// StreamableHTTPClientTransport: create with progress, exec, files, and an aborted call
// whose guest command is killed. Skipped when the `minimal` template or QEMU is missing.

import assert from "node:assert/strict";
import { execFileSync } from "node:child_process";
import { existsSync, mkdtempSync, rmSync } from "node:fs";
import { homedir } from "node:os";
import { join } from "node:path";
import { test } from "node:test";

import { binary, httpClient, startHttpServer } from "./harness.mjs";

function dataDir() {
  if (process.env.ATOLL_DATA_DIR) return process.env.ATOLL_DATA_DIR;
  if (process.env.XDG_DATA_HOME) return join(process.env.XDG_DATA_HOME, "atoll");
  return join(homedir(), ".local/share/atoll");
}

function missing() {
  if (!existsSync(join(dataDir(), "templates/minimal/template.json"))) return "the `minimal` template is not built";
  for (const tool of ["qemu-system-x86_64"]) {
    try {
      execFileSync("which", [tool], { stdio: "ignore" });
    } catch {
      return `${tool} is not installed`;
    }
  }
  return false;
}

async function exec(client, sid, command) {
  const out = await client.callTool({ name: "sandbox_exec", arguments: { command, sandbox_id: sid } });
  assert.ok(!out.isError, JSON.stringify(out.content));
  return out.structuredContent.stdout;
}

async function until(predicate, what, within = 120_000) {
  const deadline = Date.now() + within;
  while (!(await predicate())) {
    if (Date.now() > deadline) throw new Error(`gave up waiting: ${what}`);
    await new Promise((r) => setTimeout(r, 200));
  }
}

test("over HTTP: a real microVM from create to kill", { skip: missing() }, async () => {
  // Short: the sandbox's Unix sockets live under it.
  const state = mkdtempSync("/tmp/atollt-");
  const server = await startHttpServer([], { ATOLL_STATE_DIR: state });
  let client;
  let sid;
  try {
    client = await httpClient(server.url, server.auth);
    const updates = [];
    const created = await client.callTool(
      { name: "sandbox_create", arguments: { template: "minimal", name: "ts-http-vm", boot_timeout_s: 300 } },
      undefined,
      { onprogress: (p) => updates.push(p.message), timeout: 600_000 },
    );
    assert.ok(!created.isError, JSON.stringify(created.content));
    sid = created.structuredContent.id;
    assert.ok(updates.every((m) => m.startsWith("booting ")), JSON.stringify(updates));
    assert.equal((await exec(client, sid, "echo $((6*7))")).trim(), "42");
    await client.callTool({
      name: "sandbox_files_write",
      arguments: { path: "/tmp/t/hello.txt", content: "ts in a vm", sandbox_id: sid },
    });
    assert.equal(await exec(client, sid, "cat /tmp/t/hello.txt"), "ts in a vm");

    const ticks = [];
    const slow = await client.callTool(
      { name: "sandbox_exec", arguments: { command: "sleep 2.5; echo slow", sandbox_id: sid, timeout_ms: 60000 } },
      undefined,
      { onprogress: (p) => ticks.push(p.progress) },
    );
    assert.equal(slow.structuredContent.stdout, "slow\n");
    assert.ok(ticks.length >= 2, JSON.stringify(ticks));

    // Aborting a call kills the guest command.
    const pids = "/tmp/ts-cancel-pids";
    const live = `for p in $(cat ${pids}); do s=$(cut -d' ' -f3 /proc/$p/stat 2>/dev/null) && [ "$s" != Z ] && echo $p; done`;
    const abort = new AbortController();
    const call = client.callTool(
      {
        name: "sandbox_exec",
        arguments: { command: `sleep 300 & echo $! >> ${pids}; echo $$ >> ${pids}; wait`, timeout_ms: 600000, sandbox_id: sid },
      },
      undefined,
      { signal: abort.signal },
    );
    await until(async () => (await exec(client, sid, `cat ${pids} 2>/dev/null | wc -w`)).trim() === "2", "the command to start");
    assert.notEqual((await exec(client, sid, live)).trim(), "", "the probe cannot see the running command");
    abort.abort();
    await assert.rejects(call);
    await until(async () => (await exec(client, sid, live)).trim() === "", "the aborted guest command to be killed");
  } finally {
    if (sid) {
      const killed = await client.callTool({ name: "sandbox_kill", arguments: { sandbox_id: sid } });
      assert.ok(!killed.isError, JSON.stringify(killed.content));
    }
    await client?.close();
    await server.stop();
    execFileSync(binary("atoll"), ["kill", "--all", "--force"], { env: { ...process.env, ATOLL_STATE_DIR: state }, stdio: "ignore" });
    rmSync(state, { recursive: true, force: true });
  }
});
