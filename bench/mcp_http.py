"""Drives `atoll mcp` over stdio and over Streamable HTTP with the official Python MCP SDK,
for atoll-bench's `http` group (bench/src/http.rs).

Reads a JSON document on stdin:
{"url", "stdio": {"command", "args"}, "call": {"tool", "arguments", "expect"},
 "warmup", "iterations", "clients", "calls_per_client"}
and prints one JSON document on stdout:
{"stdio": [s], "http_session": [s], "http_stateless": [s],
 "concurrent": {"clients", "calls", "seconds"}}.
The same call is timed, one at a time on a warm connection, over stdio, over HTTP in a
session (the initialize handshake) and over HTTP statelessly (2026-07-28); then `clients`
HTTP sessions, all connected first, make `calls_per_client` calls each at once, and the
wall time from the start signal to the last answer is reported. Every result is checked.
"""

import json
import sys
import time

import anyio
from mcp import Client, ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client


def check(call, result):
    text = result.model_dump_json()
    if getattr(result, "is_error", None) or call["expect"] not in text:
        raise RuntimeError(f"`{call['tool']}` did not do what was asked: {text[:300]}")


async def timed(session, cfg):
    call, samples = cfg["call"], []
    for i in range(cfg["warmup"] + cfg["iterations"]):
        t = time.perf_counter()
        result = await session.call_tool(call["tool"], call["arguments"])
        elapsed = time.perf_counter() - t
        check(call, result)
        if i >= cfg["warmup"]:
            samples.append(elapsed)
    return samples


async def over_stdio(cfg):
    params = StdioServerParameters(command=cfg["stdio"]["command"], args=cfg["stdio"]["args"])
    with open("/dev/null", "w") as errlog:
        async with stdio_client(params, errlog=errlog) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await timed(session, cfg)


async def over_http_session(cfg):
    async with create_mcp_http_client() as http:
        async with streamable_http_client(cfg["url"], http_client=http) as (read, write):
            async with ClientSession(read, write) as session:
                await session.initialize()
                return await timed(session, cfg)


async def over_http_stateless(cfg):
    async with Client(cfg["url"], mode="2026-07-28") as client:
        return await timed(client, cfg)


async def concurrent(cfg):
    clients, per = cfg["clients"], cfg["calls_per_client"]
    call = cfg["call"]
    ready, go = anyio.Event(), anyio.Event()
    connected = 0
    finished = []

    async def one():
        nonlocal connected
        async with create_mcp_http_client() as http:
            async with streamable_http_client(cfg["url"], http_client=http) as (read, write):
                async with ClientSession(read, write) as session:
                    await session.initialize()
                    connected += 1
                    if connected == clients:
                        ready.set()
                    await go.wait()
                    for _ in range(per):
                        check(call, await session.call_tool(call["tool"], call["arguments"]))
                    finished.append(time.perf_counter())
                    # Stay connected until everyone is done, so closing is not timed.
                    await done.wait()

    done = anyio.Event()
    async with anyio.create_task_group() as group:
        for _ in range(clients):
            group.start_soon(one)
        await ready.wait()
        start = time.perf_counter()
        go.set()
        while len(finished) < clients:
            await anyio.sleep(0.001)
        done.set()
    return {"clients": clients, "calls": clients * per, "seconds": max(finished) - start}


async def main():
    cfg = json.load(sys.stdin)
    report = {
        "stdio": await over_stdio(cfg),
        "http_session": await over_http_session(cfg),
        "http_stateless": await over_http_stateless(cfg),
        "concurrent": await concurrent(cfg),
    }
    json.dump(report, sys.stdout)


anyio.run(main)
