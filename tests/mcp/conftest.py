"""Shared fixtures: a real atoll-agent on a Unix socket, and `atoll mcp` driven by the
official MCP Python SDK over stdio.

Binaries come from $CARGO_TARGET_DIR/debug (or ./target/debug); build them first with
`cargo build -p atoll -p atoll-agent`. tests/lib/local_agent.py (on the path by pytest.ini)
finds them and starts the agent.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

# binary, start_agent, wait_for and REPO are imported from here by the tests too.
from local_agent import REPO, binary, running_agent, start_agent, wait_for  # noqa: F401


@dataclass
class Agent:
    """A running atoll-agent and the scratch directory it serves."""

    process: subprocess.Popen[bytes]
    dir: Path
    socket: Path

    @property
    def address(self) -> str:
        return f"unix://{self.socket}"

    def scratch(self, name: str) -> Path:
        """A fresh directory under the agent's temp dir (the agent runs on this host)."""
        path = self.dir / "scratch" / name
        path.mkdir(parents=True, exist_ok=False)
        return path


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def agent() -> Agent:
    with running_agent("atoll-mcp-test-") as (process, tmp, sock):
        yield Agent(process=process, dir=tmp, socket=sock)


def data_dir() -> Path:
    """Where atoll keeps its kernel and templates, as atoll itself finds it."""
    for var, rel in (("ATOLL_DATA_DIR", ""), ("XDG_DATA_HOME", "atoll")):
        if os.environ.get(var):
            return Path(os.environ[var]) / rel
    return Path.home() / ".local/share/atoll"


@pytest.fixture
def state_dir() -> Path:
    """A fresh ATOLL_STATE_DIR for the tests that make sandboxes; short, as the sandboxes'
    Unix sockets live under it. Removed afterwards."""
    path = Path(tempfile.mkdtemp(prefix="atolls-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def server_params(*args: str, env: dict[str, str] | None = None) -> StdioServerParameters:
    base = {k: v for k, v in os.environ.items() if k not in ("ATOLL_AGENT", "ATOLL_SANDBOX")}
    base.setdefault("RUST_LOG", "warn")
    base.update(env or {})
    return StdioServerParameters(command=str(binary("atoll")), args=["mcp", *args], env=base)


# `ATOLL_MCP_TEST_TRANSPORT=http` runs the same tests through `atoll mcp --http` and the SDK's
# streamable HTTP client (run.sh does so for the guest tools' files).
TRANSPORT = os.environ.get("ATOLL_MCP_TEST_TRANSPORT", "stdio")


@asynccontextmanager
async def mcp_session(*args: str, env: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    """`atoll mcp ARGS` as a subprocess, with an initialized SDK session (over stdio, or
    over HTTP when ATOLL_MCP_TEST_TRANSPORT=http)."""
    if TRANSPORT == "http":
        from http_server import http_server, session_client

        with http_server(*args, env=env) as server:
            # A 1 MiB sandbox_files_read answers with one SSE event of over 2 MiB, over the
            # Python SDK's default 1 MiB cap per event (docs/mcp.md): lift it, as a
            # client reading whole files must.
            async with session_client(server.url, server.token, max_sse_event_size=None) as session:
                yield session
        return
    async with stdio_client(server_params(*args, env=env)) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


@asynccontextmanager
async def agent_session(agent: Agent) -> AsyncIterator[ClientSession]:
    async with mcp_session("--agent", agent.address) as session:
        yield session


def text_of(result: Any) -> str:
    """The text content of a tool result (one text block)."""
    texts = [block.text for block in result.content if getattr(block, "type", None) == "text"]
    assert len(texts) == 1, f"expected one text block, got {result.content!r}"
    return texts[0]


# Tools whose text content renders the result as lines for a model instead of repeating
# the structured content's JSON (docs/mcp.md says why).
LINES_TEXT = {"sandbox_files_list"}


async def call_ok(session: ClientSession, tool: str, **arguments: Any) -> dict[str, Any]:
    """Calls a tool that must succeed; returns its structured content, after checking
    the text content carries the same result."""
    result = await session.call_tool(tool, arguments)
    assert not result.is_error, f"{tool} failed: {text_of(result)}"
    structured = result.structured_content
    assert isinstance(structured, dict), f"{tool} returned no structuredContent"
    text = text_of(result)
    if tool in LINES_TEXT:
        lines = text.splitlines()
        if "entries" in structured:
            typed = [(e["type"], e["path"]) for e in structured["entries"]]
        else:  # names_only: paths grouped by type
            groups = {"file": "files", "dir": "dirs", "symlink": "symlinks", "other": "other"}
            typed = [(kind, path) for kind, key in groups.items() for path in structured[key]]
        assert lines[0].startswith(f"{structured['path']}: {len(typed)} "), lines[0]
        entry_lines = lines[1 : 1 + len(typed)]
        for kind, path in typed:
            assert any(
                line.startswith(kind + " ") and (line.endswith(" " + path) or f" {path} -> " in line)
                for line in entry_lines
            ), (kind, path)
    else:
        assert json.loads(text) == structured, "text content differs from structuredContent"
    return structured


async def call_err(session: ClientSession, tool: str, **arguments: Any) -> str:
    """Calls a tool that must fail as a tool error (isError: true); returns its text."""
    result = await session.call_tool(tool, arguments)
    assert result.is_error, f"{tool} should have failed but returned {result.structured_content!r}"
    return text_of(result)
