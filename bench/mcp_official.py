"""Drives MCP servers with the official Python MCP SDK's stdio client, for atoll-bench.

Reads a JSON document on stdin: {"cold_runs", "warmup", "iterations", "servers": [ServerSpec]}
(see bench/src/mcp.rs), and prints one JSON document on stdout:
{server name: {"cold": [seconds], "calls": {op: [seconds]}, "error": str or null}}.
Every call result is checked (not an error, holds the expected text) before it counts.
"""

import json
import os
import sys
import time

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def params(spec):
    env = dict(os.environ)
    env.update({k: v for k, v in spec["env"]})
    return StdioServerParameters(
        command=spec["command"], args=spec["args"], env=env, cwd=spec["cwd"]
    )


def check(spec, call, result):
    text = result.model_dump_json()
    failed = getattr(result, "is_error", None) or getattr(result, "isError", None)
    if failed or call["expect"] not in text:
        raise RuntimeError(f"{spec['name']} `{call['tool']}` did not do what was asked: {text[:300]}")


async def cold_start(spec, errlog):
    start = time.perf_counter()
    async with stdio_client(params(spec), errlog=errlog) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await session.list_tools()
            return time.perf_counter() - start


async def warm_calls(spec, warmup, iterations, errlog):
    out = {}
    async with stdio_client(params(spec), errlog=errlog) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            await session.list_tools()
            for call in spec["calls"]:
                samples = []
                for i in range(warmup + iterations):
                    t = time.perf_counter()
                    result = await session.call_tool(call["tool"], call["arguments"])
                    elapsed = time.perf_counter() - t
                    check(spec, call, result)
                    if i >= warmup:
                        samples.append(elapsed)
                out[call["op"]] = samples
    return out


def describe(e):
    """The innermost cause of `e`, since anyio wraps failures in ExceptionGroups."""
    while isinstance(e, BaseExceptionGroup) and e.exceptions:
        e = e.exceptions[0]
    return f"{type(e).__name__}: {e}"


async def main():
    cfg = json.load(sys.stdin)
    report = {}
    with open(os.devnull, "w") as errlog:
        for spec in cfg["servers"]:
            entry = {"cold": [], "calls": {}, "error": None}
            try:
                for _ in range(cfg["cold_runs"]):
                    entry["cold"].append(await cold_start(spec, errlog))
                entry["calls"] = await warm_calls(spec, cfg["warmup"], cfg["iterations"], errlog)
            except Exception as e:  # one broken peer must not hide the others' figures
                entry["error"] = describe(e)
            report[spec["name"]] = entry
    json.dump(report, sys.stdout)


anyio.run(main)
