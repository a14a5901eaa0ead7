"""Shared fixtures: a real sbx-agent on a Unix socket, and `sbx mcp` driven by the
official MCP Python SDK over stdio.

Binaries come from $CARGO_TARGET_DIR/debug (or ./target/debug); build them first with
`cargo build -p sbx -p sbx-agent`.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, AsyncIterator

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

REPO = Path(__file__).resolve().parents[2]


def binary(name: str) -> Path:
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    if not target.is_absolute():
        target = REPO / target
    path = target / "debug" / name
    if not path.exists():
        pytest.fail(f"{path} is not built; run `cargo build -p sbx -p sbx-agent` first")
    return path


@dataclass
class Agent:
    """A running sbx-agent and the scratch directory it serves."""

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


def wait_for(predicate, what: str, within: float = 20.0, every: float = 0.02) -> None:
    """Polls until `predicate()` is true; fails the test if it never is. A bounded wait
    for an event, not a timing assertion."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting: {what}")
        time.sleep(every)


def connectable(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(str(path))
            return True
        except OSError:
            return False


@pytest.fixture(scope="session")
def anyio_backend() -> str:
    return "asyncio"


@pytest.fixture(scope="module")
def agent() -> Agent:
    tmp = Path(tempfile.mkdtemp(prefix="sbx-mcp-test-"))
    sock = tmp / "agent.sock"
    log = open(tmp / "agent.log", "wb")
    process = subprocess.Popen(
        [str(binary("sbx-agent")), "--listen", f"unix://{sock}", "--job-dir", str(tmp / "jobs")],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
    )
    try:
        wait_for(lambda: connectable(sock) or process.poll() is not None, "sbx-agent to listen")
        if process.poll() is not None:
            pytest.fail(f"sbx-agent exited with {process.returncode}: {(tmp / 'agent.log').read_text()}")
        yield Agent(process=process, dir=tmp, socket=sock)
    finally:
        process.kill()
        process.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)


def server_params(*args: str, env: dict[str, str] | None = None) -> StdioServerParameters:
    base = {k: v for k, v in os.environ.items() if k not in ("SBX_AGENT", "SBX_SANDBOX")}
    base.setdefault("RUST_LOG", "warn")
    base.update(env or {})
    return StdioServerParameters(command=str(binary("sbx")), args=["mcp", *args], env=base)


# `SBX_MCP_TEST_TRANSPORT=http` runs the same tests through `sbx mcp --http` and the SDK's
# streamable HTTP client (run.sh does so for the guest tools' files).
TRANSPORT = os.environ.get("SBX_MCP_TEST_TRANSPORT", "stdio")


@asynccontextmanager
async def mcp_session(*args: str, env: dict[str, str] | None = None) -> AsyncIterator[ClientSession]:
    """`sbx mcp ARGS` as a subprocess, with an initialized SDK session (over stdio, or
    over HTTP when SBX_MCP_TEST_TRANSPORT=http)."""
    if TRANSPORT == "http":
        from http_server import http_server, session_client

        with http_server(*args, env=env) as server:
            # A 1 MiB sandbox_files_read answers with one SSE event of over 2 MiB, over the
            # Python SDK's default 1 MiB cap per event (docs/mcp.md): lift it, as a
            # client reading whole files must.
            async with session_client(server.url, max_sse_event_size=None) as session:
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
