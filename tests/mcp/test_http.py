"""`atoll mcp --http`: the same tools over Streamable HTTP, driven by the official Python
SDK's streamable HTTP client (a session, and a stateless 2026-07-28 client) against a
real atoll-agent; the bearer token, the Host/Origin checks, many clients at once, and
clients that go away mid-call."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import anyio
import httpx2
import pytest

from conftest import Agent, agent_session, binary, call_ok, text_of, wait_for
from http_server import bearer, http_server, server_env, session_client, stateless_client
from test_exec import pid_alive, start_and_cancel_a_sleeper

pytestmark = pytest.mark.anyio

TOKEN = "test-token-" + "0123456789abcdef" * 2
ACCEPT = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}


def initialize_body(version: str) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}},
    }


def sse_messages(text: str) -> list[dict]:
    return [json.loads(line[5:]) for line in text.splitlines() if line.startswith("data:") and line[5:].strip()]


def stateless_call(tool: str, arguments: dict) -> tuple[dict, dict]:
    """A 2026-07-28 tools/call as one raw HTTP request: headers and body."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": tool,
            "arguments": arguments,
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "0"},
                "io.modelcontextprotocol/clientCapabilities": {},
            },
        },
    }
    headers = {**ACCEPT, "MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": tool}
    return headers, body


async def test_a_session_client_gets_the_same_tools_and_results_as_stdio(agent: Agent) -> None:
    work = agent.scratch("http-session")
    async with agent_session(agent) as stdio:
        stdio_tools = {t.name: t.input_schema for t in (await stdio.list_tools()).tools}
    updates: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append(message)

    with http_server("--agent", agent.address) as server:
        async with session_client(server.url, server.token) as session:
            http_tools = {t.name: t.input_schema for t in (await session.list_tools()).tools}
            assert http_tools == stdio_tools
            await call_ok(session, "sandbox_files_write", path=str(work / "a.txt"), content="over http")
            read = await call_ok(session, "sandbox_files_read", path=str(work / "a.txt"))
            assert read["content"] == "over http"
            result = await session.call_tool(
                "sandbox_exec", {"command": "sleep 2.5; echo done", "timeout_ms": 20000}, progress_callback=on_progress
            )
            assert not result.is_error, text_of(result)
            assert result.structured_content["stdout"] == "done\n"
    assert len(updates) >= 2 and all(m and m.startswith("running ") for m in updates), updates


async def test_a_stateless_2026_client_calls_tools_with_progress(agent: Agent) -> None:
    updates: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append(progress)

    with http_server("--agent", agent.address) as server:
        async with stateless_client(server.url, server.token) as client:
            assert client.protocol_version == "2026-07-28"
            names = {t.name for t in (await client.list_tools()).tools}
            assert {"sandbox_exec", "sandbox_files_read", "sandbox_create"} <= names
            result = await client.call_tool(
                "sandbox_exec", {"command": "sleep 2.5; echo stateless", "timeout_ms": 20000}, progress_callback=on_progress
            )
            assert not result.is_error
            assert result.structured_content["stdout"] == "stateless\n"
    assert len(updates) >= 2 and updates == sorted(updates), updates


@pytest.mark.parametrize("version", ["2025-03-26", "2025-06-18", "2025-11-25"])
async def test_each_handshake_version_gets_a_session(agent: Agent, version: str) -> None:
    with http_server("--agent", agent.address) as server:
        async with httpx2.AsyncClient(timeout=60) as http:
            init = await http.post(server.url, headers={**ACCEPT, **server.auth}, json=initialize_body(version))
            assert init.status_code == 200, init.text
            assert sse_messages(init.text)[0]["result"]["protocolVersion"] == version
            sid = init.headers["mcp-session-id"]
            headers = {**ACCEPT, **server.auth, "Mcp-Session-Id": sid, "MCP-Protocol-Version": version}
            done = await http.post(server.url, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"})
            assert done.status_code == 202
            call = {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
                    "params": {"name": "sandbox_exec", "arguments": {"command": f"echo {version}"}}}
            answer = await http.post(server.url, headers=headers, json=call)
            assert answer.status_code == 200
            result = sse_messages(answer.text)[-1]["result"]
            assert result["structuredContent"]["stdout"] == f"{version}\n"
            # Without the session id a call is refused: the session is what the handshake set up.
            lost = await http.post(server.url, headers={**ACCEPT, **server.auth, "MCP-Protocol-Version": version}, json=call)
            assert lost.status_code >= 400


async def test_cancelling_a_call_kills_the_command_in_either_mode(agent: Agent) -> None:
    with http_server("--agent", agent.address) as server:
        for mode, client in (("session", session_client), ("stateless", stateless_client)):
            pids = agent.scratch(f"http-cancel-{mode}") / "pids"
            async with client(server.url, server.token) as session:
                child, shell = await start_and_cancel_a_sleeper(session, pids)
                # The client goes on after a cancellation.
                again = await session.call_tool("sandbox_exec", {"command": "echo still here"})
                assert again.structured_content["stdout"] == "still here\n"
            await anyio.to_thread.run_sync(
                lambda: wait_for(lambda: not pid_alive(child) and not pid_alive(shell), f"the {mode} call's command to be killed")
            )


# A client in its own process, killed with SIGKILL in the middle of a call: no
# notifications/cancelled, no DELETE, just a closed connection.
VANISHING_CLIENT = """
import sys, anyio
sys.path[:0] = [sys.argv[1], sys.argv[1] + "/../lib"]  # tests/mcp, and tests/lib as pytest.ini adds it
from http_server import session_client, stateless_client
async def main():
    client = session_client if sys.argv[3] == "session" else stateless_client
    arguments = {"command": sys.argv[4], "timeout_ms": 600000}
    if sys.argv[5]:
        arguments["sandbox_id"] = sys.argv[5]
    async with client(sys.argv[2], sys.argv[6]) as c:
        await c.call_tool("sandbox_exec", arguments)
anyio.run(main)
"""


@pytest.mark.parametrize("mode", ["session", "stateless"])
async def test_a_client_that_disconnects_mid_call_has_its_command_killed(agent: Agent, mode: str) -> None:
    pids = agent.scratch(f"http-vanish-{mode}") / "pids"
    command = f"sleep 300 & echo $! >> {pids}; echo $$ >> {pids}; wait"
    with http_server("--agent", agent.address) as server:
        client = subprocess.Popen(
            [sys.executable, "-c", VANISHING_CLIENT, str(Path(__file__).parent), server.url, mode, command, "", server.token],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 2, "the command to start")
        finally:
            client.kill()
            client.wait()
        child, shell = (int(pid) for pid in pids.read_text().split())
        await anyio.to_thread.run_sync(
            lambda: wait_for(lambda: not pid_alive(child) and not pid_alive(shell), "the abandoned command to be killed")
        )
        # The server lives on and serves the next client.
        assert server.process.poll() is None
        async with session_client(server.url, server.token) as session:
            out = await call_ok(session, "sandbox_exec", command="echo next")
            assert out["stdout"] == "next\n"


async def test_without_the_right_token_nothing_runs(agent: Agent) -> None:
    marker = agent.scratch("http-auth") / "ran"
    headers, body = stateless_call("sandbox_exec", {"command": f"touch {marker}"})
    with http_server("--agent", agent.address, env={"ATOLL_MCP_TOKEN": TOKEN}) as server:
        async with httpx2.AsyncClient(timeout=60) as http:
            for label, auth in (("no token", {}), ("wrong token", bearer(TOKEN + "x")), ("other scheme", {"Authorization": f"Basic {TOKEN}"})):
                refused = await http.post(server.url, headers={**headers, **auth}, json=body)
                assert refused.status_code == 401, (label, refused.text)
                assert refused.headers["www-authenticate"].startswith("Bearer"), label
                assert "Authorization: Bearer" in refused.text
                init = await http.post(server.url, headers={**ACCEPT, **auth}, json=initialize_body("2025-11-25"))
                assert init.status_code == 401 and "mcp-session-id" not in init.headers, label
            assert not marker.exists(), "a request without the right token ran its command"
            # The same request with the token runs: the refusals above were the token's doing.
            ran = await http.post(server.url, headers={**headers, **bearer(TOKEN)}, json=body)
            assert ran.status_code == 200, ran.text
            assert marker.exists()
        # The SDK client with the token works; without it, it fails to connect.
        async with session_client(server.url, token=TOKEN) as session:
            out = await call_ok(session, "sandbox_exec", command="echo authorized")
            assert out["stdout"] == "authorized\n"
        with pytest.raises(BaseException):
            async with session_client(server.url, server.token) as session:
                pass
        assert TOKEN not in server.stderr(), "the token was logged"


async def test_without_a_token_given_the_server_makes_one_in_a_private_file(agent: Agent) -> None:
    """Loopback is no reason to serve without a token: the server makes one (0600, in its
    state directory), prints where it is, and refuses requests without it."""
    marker = agent.scratch("http-made-token") / "ran"
    headers, body = stateless_call("sandbox_exec", {"command": f"touch {marker}"})
    for bind in ("127.0.0.1:0", "0.0.0.0:0"):
        with http_server("--agent", agent.address, bind=bind) as server:
            assert server.token_file is not None, server.stderr()
            assert server.token_file.stat().st_mode & 0o777 == 0o600
            assert server.token_file.name == "mcp-token" and server.token and len(server.token) >= 32
            assert server.token not in server.stderr(), "the token was logged"
            port = server.url.rsplit(":", 1)[1].split("/")[0]
            url = f"http://127.0.0.1:{port}/mcp"
            async with httpx2.AsyncClient(timeout=60) as http:
                refused = await http.post(url, headers=headers, json=body)
                assert refused.status_code == 401 and "Authorization: Bearer" in refused.text, refused.text
                assert not marker.exists()
                ran = await http.post(url, headers={**headers, **server.auth}, json=body)
                assert ran.status_code == 200, ran.text
                assert marker.exists()
                marker.unlink()
    # A token that is too short is refused.
    out = subprocess.run(
        [str(binary("atoll")), "mcp", "--http", "0.0.0.0:0"],
        capture_output=True, text=True, timeout=60, env=server_env({"ATOLL_MCP_TOKEN": "short"}), stdin=subprocess.DEVNULL,
    )
    assert out.returncode != 0 and "at least 16" in out.stderr, out.stderr


async def test_a_made_token_file_others_can_read_is_refused(tmp_path: Path) -> None:
    (tmp_path / "mcp-token").write_text("x" * 40 + "\n")
    (tmp_path / "mcp-token").chmod(0o644)
    out = subprocess.run(
        [str(binary("atoll")), "mcp", "--http", "127.0.0.1:0"],
        capture_output=True, text=True, timeout=60, env=server_env({"ATOLL_STATE_DIR": str(tmp_path)}), stdin=subprocess.DEVNULL,
    )
    assert out.returncode != 0 and "0600" in out.stderr and "serving MCP" not in out.stderr, out.stderr


async def test_a_client_over_its_session_cap_is_refused(agent: Agent) -> None:
    with http_server("--agent", agent.address, "--max-sessions", "2") as server:
        async with httpx2.AsyncClient(timeout=60) as http:
            sids = []
            for _ in range(2):
                init = await http.post(server.url, headers={**ACCEPT, **server.auth}, json=initialize_body("2025-11-25"))
                assert init.status_code == 200, init.text
                sids.append(init.headers["mcp-session-id"])
            over = await http.post(server.url, headers={**ACCEPT, **server.auth}, json=initialize_body("2025-11-25"))
            assert over.status_code == 429 and "--max-sessions" in over.text, over.text
            assert "mcp-session-id" not in over.headers
            # Ending a session frees its place.
            ended = await http.delete(server.url, headers={**server.auth, "Mcp-Session-Id": sids[0]})
            assert ended.status_code < 300, ended.text
            again = await http.post(server.url, headers={**ACCEPT, **server.auth}, json=initialize_body("2025-11-25"))
            assert again.status_code == 200, again.text


async def test_a_client_over_its_in_flight_cap_is_refused_and_nothing_runs(agent: Agent, tmp_path: Path) -> None:
    """`--max-in-flight 2`: a third request of one token while two calls run gets 429 naming
    the flag and runs nothing; another token is not held back; a finished call frees its
    place. Without the cap the third call would run and touch its marker."""
    scratch = agent.scratch("http-in-flight")
    token_b = "other-token-" + "fedcba9876543210" * 2
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN}\n{token_b}\n")
    tokens.chmod(0o600)
    release = scratch / "release"
    started = [scratch / f"started-{i}" for i in range(2)]
    marker = scratch / "third-ran"
    with http_server("--agent", agent.address, "--token-file", str(tokens), "--max-in-flight", "2") as server:
        async with httpx2.AsyncClient(timeout=120) as http:

            async def call(command: str, token: str) -> httpx2.Response:
                headers, body = stateless_call("sandbox_exec", {"command": command, "timeout_ms": 100000})
                return await http.post(server.url, headers={**headers, **bearer(token)}, json=body)

            answers: list[httpx2.Response] = []
            async with anyio.create_task_group() as tasks:
                for mark in started:
                    async def hold(mark: Path = mark) -> None:
                        answers.append(await call(f"touch {mark}; while [ ! -e {release} ]; do sleep 0.1; done; echo held", TOKEN))
                    tasks.start_soon(hold)
                await anyio.to_thread.run_sync(lambda: wait_for(lambda: all(m.exists() for m in started), "both calls to run"))
                over = await call(f"touch {marker}", TOKEN)
                assert over.status_code == 429, over.text
                assert "--max-in-flight" in over.text and "2 requests in flight" in over.text, over.text
                # Another client (token) has places of its own.
                other = await call("echo other", token_b)
                assert other.status_code == 200 and "other" in other.text, other.text
                release.touch()
            assert [a.status_code for a in answers] == [200, 200], [a.text for a in answers]
            assert all("held" in a.text for a in answers)
            assert not marker.exists(), "a request over the in-flight cap ran its command"
            # The finished calls gave their places back.
            again = await call(f"touch {marker}", TOKEN)
            assert again.status_code == 200, again.text
            assert marker.exists()


async def test_a_wildcard_bind_with_a_token_file_serves_and_checks_host(agent: Agent) -> None:
    token_file = Path(tempfile.mkdtemp(prefix="atoll-token-")) / "mcp-token"
    token_file.write_text(TOKEN + "\n")
    with http_server("--agent", agent.address, "--token-file", str(token_file), "--allowed-host", "atoll.internal", bind="0.0.0.0:0") as server:
        port = server.url.rsplit(":", 1)[1].split("/")[0]
        url = f"http://127.0.0.1:{port}/mcp"
        headers, body = stateless_call("sandbox_exec", {"command": "echo wildcard"})
        async with httpx2.AsyncClient(timeout=60) as http:
            for host in (f"127.0.0.1:{port}", f"atoll.internal:{port}", f"10.1.2.3:{port}"):
                ok = await http.post(url, headers={**headers, **bearer(TOKEN), "Host": host}, json=body)
                assert ok.status_code == 200, (host, ok.text)
            rebound = await http.post(url, headers={**headers, **bearer(TOKEN), "Host": f"rebound.example:{port}"}, json=body)
            assert rebound.status_code == 403 and "--allowed-host rebound.example" in rebound.text
    token_file.unlink()


async def test_a_foreign_origin_is_refused_and_runs_nothing(agent: Agent) -> None:
    marker = agent.scratch("http-origin") / "ran"
    headers, body = stateless_call("sandbox_exec", {"command": f"touch {marker}"})
    with http_server("--agent", agent.address, "--allowed-origin", "https://app.example.com") as server:
        headers = {**headers, **server.auth}
        async with httpx2.AsyncClient(timeout=60) as http:
            # Only exact origins: a page on another loopback port (a preview) or another
            # port of the allowed host is another origin.
            for origin in ("https://evil.example", "null", "http://app.example.com", "http://localhost:6274",
                           "http://127.0.0.1:8080", "https://app.example.com:8443"):
                refused = await http.post(server.url, headers={**headers, "Origin": origin}, json=body)
                assert refused.status_code == 403, (origin, refused.text)
            rebound = await http.post(server.url, headers={**headers, "Host": "rebound.example"}, json=body)
            assert rebound.status_code == 403
            assert not marker.exists()
            ok = await http.post(server.url, headers={**headers, "Origin": "https://app.example.com"}, json=body)
            assert ok.status_code == 200, ok.text
            assert marker.exists()


async def test_fifty_clients_calling_at_once_are_all_answered(agent: Agent) -> None:
    answers: dict[int, str] = {}
    with http_server("--agent", agent.address) as server:

        async def one(i: int) -> None:
            client = session_client if i % 2 else stateless_client
            async with client(server.url, server.token) as session:
                result = await session.call_tool("sandbox_exec", {"command": f"sleep 0.2; echo client-{i}"})
                assert not result.is_error, text_of(result)
                answers[i] = result.structured_content["stdout"]

        with anyio.fail_after(240):
            async with anyio.create_task_group() as group:
                for i in range(50):
                    group.start_soon(one, i)
    assert answers == {i: f"client-{i}\n" for i in range(50)}


async def test_sigterm_stops_the_server_and_kills_open_calls(agent: Agent) -> None:
    pids = agent.scratch("http-sigterm") / "pids"
    command = f"sleep 300 & echo $! >> {pids}; echo $$ >> {pids}; wait"
    with http_server("--agent", agent.address) as server:
        client = subprocess.Popen(
            [sys.executable, "-c", VANISHING_CLIENT, str(Path(__file__).parent), server.url, "session", command, "", server.token],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 2, "the command to start")
            server.process.send_signal(signal.SIGTERM)
            assert server.process.wait(timeout=60) == 0, server.stderr()
        finally:
            client.kill()
            client.wait()
    child, shell = (int(pid) for pid in pids.read_text().split())
    await anyio.to_thread.run_sync(
        lambda: wait_for(lambda: not pid_alive(child) and not pid_alive(shell), "the open call's command to be killed")
    )
