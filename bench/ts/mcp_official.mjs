// Drives MCP servers with the official TypeScript MCP SDK's stdio client, for atoll-bench;
// the same protocol as bench/mcp_official.py. Reads a JSON document on stdin:
// {"cold_runs", "warmup", "iterations", "servers": [ServerSpec]} (see bench/src/mcp.rs),
// and prints one JSON document on stdout:
// {server name: {"cold": [seconds], "calls": {op: [seconds]}, "error": str or null}}.
// Every call result is checked (not an error, holds the expected text) before it counts;
// the client checks structured results against the output schemas from tools/list.

import { text } from "node:stream/consumers";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";

const seconds = (start) => Number(process.hrtime.bigint() - start) / 1e9;

async function connected(spec) {
  const transport = new StdioClientTransport({
    command: spec.command,
    args: spec.args,
    env: { ...process.env, ...Object.fromEntries(spec.env) },
    cwd: spec.cwd ?? undefined,
    stderr: "ignore",
  });
  const client = new Client({ name: "atoll-bench", version: "0" });
  await client.connect(transport);
  await client.listTools();
  return client;
}

function check(spec, call, result) {
  const json = JSON.stringify(result);
  if (result.isError || !json.includes(call.expect)) {
    throw new Error(`${spec.name} \`${call.tool}\` did not do what was asked: ${json.slice(0, 300)}`);
  }
}

async function measure(spec, cfg) {
  const entry = { cold: [], calls: {}, error: null };
  for (let i = 0; i < cfg.cold_runs; i++) {
    const start = process.hrtime.bigint();
    const client = await connected(spec);
    entry.cold.push(seconds(start));
    await client.close();
  }
  const client = await connected(spec);
  try {
    for (const call of spec.calls) {
      const samples = [];
      for (let i = 0; i < cfg.warmup + cfg.iterations; i++) {
        const start = process.hrtime.bigint();
        const result = await client.callTool({ name: call.tool, arguments: call.arguments });
        const elapsed = seconds(start);
        check(spec, call, result);
        if (i >= cfg.warmup) samples.push(elapsed);
      }
      entry.calls[call.op] = samples;
    }
  } finally {
    await client.close();
  }
  return entry;
}

const cfg = JSON.parse(await text(process.stdin));
const report = {};
for (const spec of cfg.servers) {
  try {
    report[spec.name] = await measure(spec, cfg);
  } catch (e) {
    // One broken peer must not hide the others' figures.
    report[spec.name] = { cold: [], calls: {}, error: `${e.name}: ${e.message}` };
  }
}
process.stdout.write(JSON.stringify(report));
