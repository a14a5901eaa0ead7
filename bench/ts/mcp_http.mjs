// Drives `atoll mcp` over stdio and over Streamable HTTP with the official TypeScript MCP
// SDK, for atoll-bench's `http` group (bench/src/http.rs); the same protocol as
// bench/mcp_http.py, without the stateless row (this SDK speaks no 2026-07-28). Reads
// {"url", "stdio": {"command", "args"}, "call": {"tool", "arguments", "expect"},
//  "warmup", "iterations", "clients", "calls_per_client"} on stdin and prints
// {"stdio": [s], "http_session": [s], "concurrent": {"clients", "calls", "seconds"}}.

import { text } from "node:stream/consumers";

import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const now = () => process.hrtime.bigint();
const seconds = (start) => Number(now() - start) / 1e9;

function check(call, result) {
  const json = JSON.stringify(result);
  if (result.isError || !json.includes(call.expect)) {
    throw new Error(`\`${call.tool}\` did not do what was asked: ${json.slice(0, 300)}`);
  }
}

async function timed(client, cfg) {
  const samples = [];
  for (let i = 0; i < cfg.warmup + cfg.iterations; i++) {
    const start = now();
    const result = await client.callTool({ name: cfg.call.tool, arguments: cfg.call.arguments });
    const elapsed = seconds(start);
    check(cfg.call, result);
    if (i >= cfg.warmup) samples.push(elapsed);
  }
  return samples;
}

async function connect(transport) {
  const client = new Client({ name: "atoll-bench", version: "0" });
  await client.connect(transport);
  return client;
}

const overHttp = (cfg) => connect(new StreamableHTTPClientTransport(new URL(cfg.url)));

async function measure(client, cfg) {
  try {
    return await timed(client, cfg);
  } finally {
    await client.close();
  }
}

async function concurrent(cfg) {
  const clients = await Promise.all(Array.from({ length: cfg.clients }, () => overHttp(cfg)));
  const start = now();
  await Promise.all(
    clients.map(async (client) => {
      for (let i = 0; i < cfg.calls_per_client; i++) {
        check(cfg.call, await client.callTool({ name: cfg.call.tool, arguments: cfg.call.arguments }));
      }
    }),
  );
  const elapsed = seconds(start);
  await Promise.all(clients.map((c) => c.close()));
  return { clients: cfg.clients, calls: cfg.clients * cfg.calls_per_client, seconds: elapsed };
}

const cfg = JSON.parse(await text(process.stdin));
const stdio = new StdioClientTransport({ command: cfg.stdio.command, args: cfg.stdio.args, stderr: "ignore" });
const report = {
  stdio: await measure(await connect(stdio), cfg),
  http_session: await measure(await overHttp(cfg), cfg),
  concurrent: await concurrent(cfg),
};
process.stdout.write(JSON.stringify(report));
