"""The network tools through the official MCP SDK, on a booted `debian` sandbox: `atoll mcp`
(and so QEMU and the network helper) runs in the client namespace of the test "outside
world" (tests/src/netns.rs, started by the `netns-world` binary), whose hosts answer
`allowed.test` and `other.test`.

sandbox_create with rules, sandbox_exec reaching (or not) the world, sandbox_network_log,
sandbox_update changing the rules live, sandbox_preview_url, sandbox_info showing the
policy and ports. Needs root (network namespaces), as CI has."""

from __future__ import annotations

import json
import os
import subprocess
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from conftest import binary, call_err, call_ok, data_dir

pytestmark = pytest.mark.anyio

FETCH = (
    "import ssl, sys, urllib.request\n"
    "ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE\n"
    "try:\n"
    "    print('OK', urllib.request.urlopen(sys.argv[1], timeout=20, context=ctx).read().decode().strip())\n"
    "except Exception as e:\n"
    "    print('FAIL', repr(getattr(e, 'reason', e)))\n"
)


@pytest.fixture(scope="module")
def world() -> dict:
    if os.geteuid() != 0:
        pytest.fail("the network tests build network namespaces and need root (CI is root)")
    process = subprocess.Popen([str(binary("netns-world"))], stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    line = process.stdout.readline()
    if not line:
        process.wait()
        pytest.fail(f"netns-world exited with {process.returncode} before the world was up")
    try:
        yield json.loads(line)
    finally:
        process.stdin.close()
        process.wait(timeout=60)


@asynccontextmanager
async def session_in(netns: str, state_dir: Path) -> AsyncIterator[ClientSession]:
    """`atoll mcp` inside the network namespace `netns`."""
    env = {k: v for k, v in os.environ.items() if k not in ("ATOLL_AGENT", "ATOLL_SANDBOX")}
    env.update({"ATOLL_STATE_DIR": str(state_dir), "RUST_LOG": "warn"})
    params = StdioServerParameters(
        command="ip", args=["netns", "exec", netns, str(binary("atoll")), "mcp"], env=env
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


async def fetch(session: ClientSession, sid: str, url: str) -> str:
    out = await call_ok(session, "sandbox_exec", command=f"python3 /fetch.py {url}", sandbox_id=sid)
    assert out["exit_code"] == 0, out
    return out["stdout"].strip()


async def test_network_tools_on_a_booted_sandbox(world: dict, state_dir: Path) -> None:
    if not (data_dir() / "templates" / "debian" / "template.json").exists():
        pytest.fail("the `debian` template is not built (rootfs/setup.sh --with-debian)")
    async with session_in(world["client"], state_dir) as session:
        text = await call_err(session, "sandbox_create", allow_out=["http://x/"])
        assert "invalid rule `http://x/`" in text and "a rule is a domain" in text, text
        # Private destinations are the operator's alone: refused before anything boots.
        text = await call_err(session, "sandbox_create", allow_out=["pypi.org", "127.0.0.1"])
        assert "127.0.0.1" in text and "--allow-private-egress" in text and "atoll net set" in text, text
        created = await call_ok(
            session,
            "sandbox_create",
            template="debian",
            name="mcpnet",
            deny_out=["0.0.0.0/0", "::/0"],
            allow_out=["allowed.test"],
            boot_timeout_s=300,
        )
        sid = created["id"]
        try:
            await call_ok(session, "sandbox_files_write", path="/fetch.py", content=FETCH, sandbox_id=sid)
            assert (await fetch(session, sid, "https://allowed.test/")).endswith("sni=allowed.test")
            assert (await fetch(session, sid, "https://other.test/")).startswith("FAIL")

            denied = await call_ok(session, "sandbox_network_log", sandbox_id=sid, verdict="deny")
            assert denied["entries"], denied
            assert all(e["verdict"] == "deny" for e in denied["entries"]), denied
            assert any(e.get("name") == "other.test" for e in denied["entries"]), denied
            allowed = await call_ok(session, "sandbox_network_log", sandbox_id=sid, verdict="allow", limit=50)
            https = [
                e for e in allowed["entries"] if e["kind"] == "tcp" and e["port"] == 443 and e.get("event") == "close"
            ]
            assert https and https[-1]["name"] == "allowed.test" and https[-1]["rule"] == "allowed.test", allowed
            assert https[-1]["bytes_in"] > 0, https[-1]
            text = await call_err(session, "sandbox_network_log", sandbox_id=sid, limit=0)
            assert "limit" in text, text

            text = await call_err(session, "sandbox_update", sandbox_id=sid, allow_out=["10.0.0.0/33"])
            assert "invalid rule `10.0.0.0/33`" in text, text
            updated = await call_ok(session, "sandbox_update", sandbox_id=sid, allow_out=["allowed.test", "other.test"])
            assert updated["allow_out"] == ["allowed.test", "other.test"], updated
            assert updated["deny_out"] == ["0.0.0.0/0", "::/0"], updated
            # Single rules added and removed; the others stay. One it does not have: an error.
            added = await call_ok(
                session, "sandbox_update", sandbox_id=sid, add_allow_out=["third.test"], remove=["other.test"]
            )
            assert added["allow_out"] == ["allowed.test", "third.test"], added
            assert added["deny_out"] == ["0.0.0.0/0", "::/0"], added
            text = await call_err(session, "sandbox_update", sandbox_id=sid, remove=["nosuch.test"])
            assert "no rule `nosuch.test`" in text, text
            back = await call_ok(
                session, "sandbox_update", sandbox_id=sid, add_allow_out=["other.test"], remove=["third.test"]
            )
            assert back["allow_out"] == ["allowed.test", "other.test"], back
            assert (await fetch(session, sid, "https://other.test/")).endswith("sni=other.test")
            # A model cannot open loopback, metadata or private ranges to the guest; the
            # refusal names who may, and the rules stay as they were.
            # (127.0.0.1 and ::1 are named as the host's own addresses or as loopback.)
            for rule, what in (("127.0.0.1", ("loopback", "host")), ("169.254.169.254", ("link-local",)),
                               ("10.0.0.0/8:22", ("private",)), ("[::1]:8765", ("loopback", "host"))):
                text = await call_err(session, "sandbox_update", sandbox_id=sid, allow_out=["other.test", rule])
                assert any(f"the {w} range" in text for w in what) and "only the operator" in text, text
                assert "--allow-private-egress" in text and "rules are unchanged" in text, text
            kept = (await call_ok(session, "sandbox_info", sandbox_id=sid))["network"]
            assert kept["allow_out"] == ["allowed.test", "other.test"], kept

            await call_ok(
                session,
                "sandbox_exec_background",
                command="cd /tmp && echo preview-ok > p.txt && python3 -m http.server 8000 --bind 127.0.0.1",
                sandbox_id=sid,
            )
            preview = await call_ok(session, "sandbox_preview_url", sandbox_id=sid, port=8000)
            assert preview["url"].startswith("http://127.0.0.1:"), preview
            assert preview["guest_port"] == 8000
            again = await call_ok(session, "sandbox_preview_url", sandbox_id=sid, port=8000)
            assert again["url"] == preview["url"], "a second call publishes the same port again"
            # The listener lives where the helper runs: in the client namespace.
            body = subprocess.run(
                ["ip", "netns", "exec", world["client"], "curl", "-sS", "--retry", "30", "--retry-delay", "1",
                 "--retry-all-errors", "--max-time", "60", preview["url"] + "/p.txt"],
                capture_output=True, text=True,
            )
            assert body.stdout == "preview-ok\n", body.stderr

            info = await call_ok(session, "sandbox_info", sandbox_id=sid)
            net = info["network"]
            assert net["network"] == "default" and net["helper"] == "running", net
            assert net["allow_out"] == ["allowed.test", "other.test"], net
            assert [p["guest_port"] for p in net["ports"]] == [8000], net
            text = await call_err(session, "sandbox_preview_url", sandbox_id="nope", port=8000)
            assert "nope" in text
        finally:
            killed = await session.call_tool("sandbox_kill", {"sandbox_id": sid})
        assert not killed.is_error, killed.content
