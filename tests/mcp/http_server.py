"""`atoll mcp --http` as a subprocess on a free port, and the official SDK's streamable
HTTP clients connected to it: a session (the initialize handshake, 2025-11-25) or a
stateless 2026-07-28 client."""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import tempfile
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import AsyncIterator, Iterator

import pytest
from mcp import Client, ClientSession
from mcp.client.streamable_http import DEFAULT_MAX_SSE_EVENT_SIZE, streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

from conftest import binary, wait_for

# The whole line: the token file's path follows the URL.
URL_LINE = re.compile(r"serving MCP over Streamable HTTP at (http://\S+/mcp) \(.*\)\n")
# When given no token, the server makes one and says where it is.
TOKEN_FILE_LINE = re.compile(r"bearer token required; it is in (/\S+) \(mode 0600\)")


@dataclass
class HttpServer:
    """A running `atoll mcp --http` and where it logs."""

    process: subprocess.Popen[bytes]
    url: str
    log: Path
    # The token the server made (None when the test gave one).
    token: str | None = None
    token_file: Path | None = None

    def stderr(self) -> str:
        return self.log.read_text(errors="replace")

    @property
    def auth(self) -> dict[str, str]:
        """The Authorization header with the server's made token."""
        return bearer(self.token)


def server_env(env: dict[str, str] | None) -> dict[str, str]:
    base = {k: v for k, v in os.environ.items() if k not in ("ATOLL_AGENT", "ATOLL_SANDBOX", "ATOLL_MCP_TOKEN")}
    base.setdefault("RUST_LOG", "warn")
    base.update(env or {})
    return base


@contextmanager
def http_server(
    *args: str, bind: str = "127.0.0.1:0", env: dict[str, str] | None = None, prefix: tuple[str, ...] = ()
) -> Iterator[HttpServer]:
    """`atoll mcp --http BIND ARGS` (run through `prefix`, e.g. `ip netns exec NS`); port
    0 lets the server pick a free port, which it prints, and with no token given it makes
    one in its state directory (a private one unless `env` names one), also printed.
    Always stopped (SIGTERM, then SIGKILL) on the way out."""
    log = Path(tempfile.mkstemp(prefix="atoll-mcp-http-", suffix=".log")[1])
    env = dict(env or {})
    # A private state directory made here goes with the server.
    own_state = None if "ATOLL_STATE_DIR" in env else tempfile.mkdtemp(prefix="atoll-mcp-st-")
    if own_state:
        env["ATOLL_STATE_DIR"] = own_state
    with open(log, "wb") as sink:
        process = subprocess.Popen(
            [*prefix, str(binary("atoll")), "mcp", "--http", bind, *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=sink,
            env=server_env(env),
        )
    try:
        wait_for(lambda: URL_LINE.search(log.read_text()) or process.poll() is not None, "atoll mcp --http to listen")
        match = URL_LINE.search(log.read_text())
        if match is None:
            pytest.fail(f"atoll mcp --http exited with {process.returncode}: {log.read_text()}")
        made = TOKEN_FILE_LINE.search(log.read_text())
        token_file = Path(made.group(1)) if made else None
        token = token_file.read_text().strip() if token_file else None
        yield HttpServer(process=process, url=match.group(1), log=log, token=token, token_file=token_file)
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.wait(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        log.unlink(missing_ok=True)
        # Kept if a sandbox was made in it (its directory is how it is found and killed).
        if own_state and not any(p.is_dir() and not p.name.startswith(".") for p in Path(own_state).iterdir()):
            shutil.rmtree(own_state, ignore_errors=True)


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


@asynccontextmanager
async def session_client(
    url: str, token: str | None = None, max_sse_event_size: int | None = DEFAULT_MAX_SSE_EVENT_SIZE
) -> AsyncIterator[ClientSession]:
    """The SDK's streamable HTTP transport with the initialize handshake: a session."""
    async with create_mcp_http_client(headers=bearer(token)) as http:
        async with streamable_http_client(url, http_client=http, max_sse_event_size=max_sse_event_size) as (
            read,
            write,
        ):
            async with ClientSession(read, write) as session:
                await session.initialize()
                yield session


@asynccontextmanager
async def stateless_client(url: str, token: str | None = None) -> AsyncIterator[Client]:
    """The SDK's 2026-07-28 client: no handshake, every request stands alone."""
    async with create_mcp_http_client(headers=bearer(token)) as http:
        async with Client(streamable_http_client(url, http_client=http), mode="2026-07-28") as client:
            yield client
