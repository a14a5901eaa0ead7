"""The MCP handshake and the JSON-RPC channel: versions, capabilities, stdout hygiene,
and which failures are protocol errors (malformed or unroutable requests only)."""

from __future__ import annotations

import json
import subprocess

import mcp.types as types
import pytest
from mcp import ClientSession
from mcp.client.stdio import stdio_client

from conftest import Agent, agent_session, binary, call_ok, server_params

pytestmark = pytest.mark.anyio

HANDSHAKE_VERSIONS = ["2024-11-05", "2025-03-26", "2025-06-18", "2025-11-25"]


async def test_initialize_with_the_sdk_default_version(agent: Agent) -> None:
    async with agent_session(agent) as session:
        result = session.initialize_result
        assert result is not None
        assert result.protocol_version == "2025-11-25"
        assert result.server_info.name == "atoll"
        assert result.capabilities.tools is not None
        assert "sandbox_exec" in (result.instructions or "")


@pytest.mark.parametrize("version", HANDSHAKE_VERSIONS)
async def test_each_handshake_version_is_echoed_and_serves_tools(agent: Agent, version: str) -> None:
    async with stdio_client(server_params("--agent", agent.address)) as (read, write):
        async with ClientSession(read, write) as session:
            result = await session.send_request(
                types.InitializeRequest(
                    params=types.InitializeRequestParams(
                        protocol_version=version,
                        capabilities=types.ClientCapabilities(),
                        client_info=types.Implementation(name="pytest", version="0"),
                    )
                ),
                types.InitializeResult,
            )
            assert result.protocol_version == version
            session.adopt(result)
            await session.send_notification(types.InitializedNotification())
            tools = await session.list_tools()
            assert any(tool.name == "sandbox_exec" for tool in tools.tools)
            info = await call_ok(session, "sandbox_info")
            assert info["agent"]["agent_version"]


async def test_the_stateless_2026_revision_is_served_over_discover(agent: Agent) -> None:
    async with stdio_client(server_params("--agent", agent.address)) as (read, write):
        async with ClientSession(read, write) as session:
            discovered = await session.discover()
            assert "2024-11-05" in discovered.supported_versions
            assert "2026-07-28" in discovered.supported_versions
            assert session.protocol_version == "2026-07-28"
            tools = await session.list_tools()
            assert any(tool.name == "sandbox_files_read" for tool in tools.tools)
            info = await call_ok(session, "sandbox_info")
            assert info["agent"]["agent_version"]


def raw_exchange(agent: Agent, lines: list[str], log: str = "warn") -> tuple[list[dict], str]:
    """Writes raw lines to `atoll mcp`, closes stdin, returns every stdout line parsed as
    JSON (the test fails if one is not) and stderr."""
    process = subprocess.run(
        [str(binary("atoll")), "mcp", "--agent", agent.address],
        input="".join(line + "\n" for line in lines).encode(),
        capture_output=True,
        timeout=60,
        env={**server_params().env, "RUST_LOG": log},
    )
    messages = []
    for line in process.stdout.decode().splitlines():
        try:
            messages.append(json.loads(line))
        except json.JSONDecodeError:
            pytest.fail(f"stdout carried something that is not JSON-RPC: {line!r}")
    return messages, process.stderr.decode()


def by_id(messages: list[dict]) -> dict:
    return {m["id"]: m for m in messages if "id" in m}


def initialize(version: str = "2024-11-05") -> str:
    return json.dumps(
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": version,
                "capabilities": {},
                "clientInfo": {"name": "raw", "version": "0"},
            },
        }
    )


def request(id: int, method: str, params: dict | None = None) -> str:
    message = {"jsonrpc": "2.0", "id": id, "method": method}
    if params is not None:
        message["params"] = params
    return json.dumps(message)


INITIALIZED = json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"})


@pytest.mark.parametrize("log", ["warn", "trace"])
def test_stdout_carries_only_protocol_and_unroutable_requests_are_jsonrpc_errors(agent: Agent, log: str) -> None:
    messages, stderr = raw_exchange(
        agent,
        [
            initialize(),
            INITIALIZED,
            request(2, "tools/list"),
            request(3, "tools/call", {"name": "no_such_tool", "arguments": {}}),
            request(4, "no/such/method"),
            request(5, "tools/call", {"name": "sandbox_exec", "arguments": {"command": "echo raw"}}),
        ],
        log=log,
    )
    if log == "trace":
        assert "tools/call" in stderr or "sandbox_exec" in stderr, "trace logs should go to stderr"
    replies = by_id(messages)
    assert replies[1]["result"]["protocolVersion"] == "2024-11-05"
    assert len(replies[2]["result"]["tools"]) >= 12
    assert "error" in replies[3], "an unknown tool is unroutable: a JSON-RPC error"
    assert replies[4]["error"]["code"] == -32601
    call = replies[5]["result"]
    assert call.get("isError") is not True
    assert call["structuredContent"]["stdout"] == "raw\n"


def test_bad_arguments_are_tool_errors_not_protocol_errors(agent: Agent) -> None:
    messages, _ = raw_exchange(
        agent,
        [
            initialize("2025-06-18"),
            INITIALIZED,
            request(2, "tools/call", {"name": "sandbox_exec", "arguments": {}}),
            request(3, "tools/call", {"name": "sandbox_exec", "arguments": {"command": 42}}),
            request(4, "tools/call", {"name": "sandbox_exec", "arguments": {"command": "true", "bogus": 1}}),
        ],
    )
    replies = by_id(messages)
    for id, needle in [(2, "missing field `command`"), (3, "expected a string"), (4, "unknown field `bogus`")]:
        result = replies[id]["result"]
        assert result["isError"] is True, replies[id]
        text = result["content"][0]["text"]
        assert text.startswith("invalid arguments for sandbox_exec: "), text
        assert needle in text, text
        assert "takes command (string, required)" in text, text


def test_a_malformed_line_does_not_end_the_session(agent: Agent) -> None:
    messages, _ = raw_exchange(
        agent,
        [initialize(), INITIALIZED, "{this is not json", request(2, "ping"), request(3, "tools/list")],
    )
    replies = by_id(messages)
    assert replies[2]["result"] == {}, "the session must survive a malformed line"
    assert "tools" in replies[3]["result"]
