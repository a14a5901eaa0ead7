"""The secret tools through the official MCP SDK, on a booted `debian` sandbox inside the
netns world (docs/secrets.md): the operator stores secrets with `atoll secret set` and
grants one with `atoll mcp --secret NAME`; secret_list shows only granted ones and no
value; sandbox_create {secrets} binds, sandbox_info lists bindings, the guest holds a
placeholder and the world's HTTPS host receives the value (seen through a digest, so the
value never reaches the guest or the MCP output); a secret not granted is refused before
anything boots; detach takes effect on the next request. A server started with neither
flag lists no secret and binds none; one started with `--allow-all-secrets` lists and
binds both. No tool sets a value. Runs over stdio, and over Streamable HTTP in run.sh's
second pass (the server in the netns, the SDK's client connecting from a thread moved
into it)."""

from __future__ import annotations

import ctypes
import hashlib
import os
import subprocess
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path
from typing import AsyncIterator, Iterator

import pytest
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from conftest import TRANSPORT, binary, call_err, call_ok, data_dir
from test_network import world  # noqa: F401  (the netns world fixture)

pytestmark = pytest.mark.anyio

VALUE = "ghp_MCP_REAL_VALUE_93be1f"
OTHER_VALUE = "sk_MCP_OTHER_VALUE_5a0c2d"
CLONE_NEWNET = 0x40000000

FETCH = (
    "import os, ssl, sys, urllib.request\n"
    "req = urllib.request.Request(sys.argv[1], headers={'Authorization': 'Bearer ' + os.environ[sys.argv[2]]})\n"
    "ctx = ssl.create_default_context()\n"
    "if len(sys.argv) > 3:\n"
    "    ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE\n"
    "try:\n"
    "    print(urllib.request.urlopen(req, timeout=30, context=ctx).read().decode().strip())\n"
    "except Exception as e:\n"
    "    print('FAIL', repr(getattr(e, 'reason', e)))\n"
)


def digest(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()


def secret_set(state_dir: Path, name: str, value: str, host: str) -> None:
    env = dict(os.environ, ATOLL_STATE_DIR=str(state_dir))
    done = subprocess.run(
        [str(binary("atoll")), "secret", "set", name, "--host", host],
        input=value + "\n", text=True, env=env, capture_output=True,
    )
    assert done.returncode == 0, done.stderr


@contextmanager
def thread_in_netns(netns: str) -> Iterator[None]:
    """This thread (the event loop's) in the network namespace `netns`, so the sockets it
    opens reach a server listening on the namespace's loopback; back on the way out."""
    libc = ctypes.CDLL(None, use_errno=True)
    own = os.open("/proc/thread-self/ns/net", os.O_RDONLY)
    target = os.open(f"/var/run/netns/{netns}", os.O_RDONLY)
    try:
        if libc.setns(target, CLONE_NEWNET) != 0:
            raise OSError(ctypes.get_errno(), f"setns into {netns}")
        try:
            yield
        finally:
            if libc.setns(own, CLONE_NEWNET) != 0:
                raise OSError(ctypes.get_errno(), "setns back")
    finally:
        os.close(target)
        os.close(own)


@asynccontextmanager
async def session_in(netns: str, state_dir: Path, cert: str, *args: str) -> AsyncIterator[ClientSession]:
    """`atoll mcp ARGS` inside `netns` (so its sandboxes' helpers reach the world), over
    stdio, or over Streamable HTTP when ATOLL_MCP_TEST_TRANSPORT=http."""
    env = {k: v for k, v in os.environ.items() if k not in ("ATOLL_AGENT", "ATOLL_SANDBOX")}
    env.update({"ATOLL_STATE_DIR": str(state_dir), "RUST_LOG": "warn", "ATOLL_SECRETS_CA_FILE": cert})
    if TRANSPORT == "http":
        from http_server import http_server, session_client

        prefix = ("ip", "netns", "exec", netns)
        with http_server(*args, env=env, prefix=prefix) as server, thread_in_netns(netns):
            assert server.token, "the HTTP server made no token"
            async with session_client(server.url, server.token) as session:
                yield session
        return
    params = StdioServerParameters(
        command="ip", args=["netns", "exec", netns, str(binary("atoll")), "mcp", *args], env=env
    )
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            yield session


async def test_secret_tools_bind_a_placeholder_and_never_show_a_value(world: dict, state_dir: Path) -> None:  # noqa: F811
    if not (data_dir() / "templates" / "debian" / "template.json").exists():
        pytest.fail("the `debian` template is not built (rootfs/setup.sh --with-debian)")
    secret_set(state_dir, "gh", VALUE, "allowed.test")
    secret_set(state_dir, "other", OTHER_VALUE, "allowed.test")
    seen: list[str] = []

    async def ok(session: ClientSession, tool: str, **args) -> dict:
        out = await call_ok(session, tool, **args)
        seen.append(repr(out))
        return out

    async def err(session: ClientSession, tool: str, **args) -> str:
        text = await call_err(session, tool, **args)
        seen.append(text)
        return text

    # Neither --secret nor --allow-all-secrets: no secret is listed or bound.
    async with session_in(world["client"], state_dir, world["cert"]) as session:
        assert (await ok(session, "secret_list"))["secrets"] == []
        for secret in ("gh", "other"):
            text = await err(session, "sandbox_create", template="debian", name="nope", secrets={"TOKEN": secret})
            assert f"may not bind the secret `{secret}`" in text and "--secret" in text, text
        assert (await ok(session, "sandbox_list"))["sandboxes"] == []

    async with session_in(world["client"], state_dir, world["cert"], "--secret", "gh") as session:
        names = {t.name for t in (await session.list_tools()).tools}
        assert not any("secret" in n and ("set" in n or "value" in n) for n in names), names
        listed = await ok(session, "secret_list")
        assert [s["name"] for s in listed["secrets"]] == ["gh"], listed
        assert listed["secrets"][0]["hosts"] == ["allowed.test"], listed

        # A secret the operator did not grant: refused before anything boots.
        text = await err(session, "sandbox_create", template="debian", name="nope", secrets={"TOKEN": "other"})
        assert "may not bind the secret `other`" in text and "--secret" in text, text
        assert (await ok(session, "sandbox_list"))["sandboxes"] == []

        created = await ok(
            session, "sandbox_create", template="debian", name="mcpsec", boot_timeout_s=600,
            secrets={"GH_TOKEN": "gh"},
        )
        sid = created["id"]
        try:
            (binding,) = created["secrets"]
            assert binding["env"] == "GH_TOKEN" and binding["secret"] == "gh", binding
            placeholder = binding["placeholder"]
            assert placeholder.startswith("atoll-secret-gh-"), binding
            info = await ok(session, "sandbox_info", sandbox_id=sid)
            assert info["sandbox"]["secrets"] == [binding], info

            out = await ok(session, "sandbox_exec", command='printf %s "$GH_TOKEN"', sandbox_id=sid)
            assert out["stdout"] == placeholder, out
            await ok(session, "sandbox_files_write", path="/fetch.py", content=FETCH, sandbox_id=sid)
            out = await ok(
                session, "sandbox_exec", command="python3 /fetch.py https://allowed.test/auth-digest GH_TOKEN",
                sandbox_id=sid, timeout_ms=120000,
            )
            assert f"auth-sha256={digest('Bearer ' + VALUE)}" in out["stdout"], out

            text = await err(session, "sandbox_attach_secret", sandbox_id=sid, secret="other")
            assert "may not bind the secret `other`" in text, text
            second = await ok(session, "sandbox_attach_secret", sandbox_id=sid, secret="gh", env="SECOND")
            assert second["placeholder"] != placeholder, second
            out = await ok(session, "sandbox_exec", command='printf %s "$SECOND"', sandbox_id=sid)
            assert out["stdout"] == second["placeholder"], out

            detached = await ok(session, "sandbox_detach_secret", sandbox_id=sid, secret="gh")
            assert len(detached["detached"]) == 2, detached
            # The variable is gone from new commands; a placeholder kept from before is sent
            # unchanged (the connection is no longer intercepted).
            out = await ok(session, "sandbox_exec", command='printf %s "${GH_TOKEN-unset}"', sandbox_id=sid)
            assert out["stdout"] == "unset", out
            out = await ok(
                session, "sandbox_exec", command="python3 /fetch.py https://allowed.test/auth-digest GH_TOKEN x",
                sandbox_id=sid, timeout_ms=120000, env={"GH_TOKEN": placeholder},
            )
            assert f"auth-sha256={digest('Bearer ' + placeholder)}" in out["stdout"], out
            log = await ok(session, "sandbox_network_log", sandbox_id=sid, limit=200)
            assert any(e.get("secret") == "gh" for e in log["entries"]), log
        finally:
            await call_ok(session, "sandbox_kill", sandbox_id=sid)

    # --allow-all-secrets: every stored secret is listed and may be bound, at create and later.
    async with session_in(world["client"], state_dir, world["cert"], "--allow-all-secrets") as session:
        listed = await ok(session, "secret_list")
        assert sorted(s["name"] for s in listed["secrets"]) == ["gh", "other"], listed
        assert all(s["hosts"] == ["allowed.test"] for s in listed["secrets"]), listed
        # The second sandbox of this shape: started from the template snapshot the first
        # one saved, unless atoll or QEMU changed on disk since (then it boots).
        created = await ok(
            session, "sandbox_create", template="debian", name="mcpall", boot_timeout_s=600,
            secrets={"GH_TOKEN": "gh", "OTHER_TOKEN": "other"},
        )
        sid = created["id"]
        try:
            bound = {b["env"]: b for b in created["secrets"]}
            assert sorted((env, b["secret"]) for env, b in bound.items()) == [
                ("GH_TOKEN", "gh"), ("OTHER_TOKEN", "other")
            ], created
            placeholder = bound["OTHER_TOKEN"]["placeholder"]
            assert placeholder.startswith("atoll-secret-other-"), bound
            out = await ok(session, "sandbox_exec", command='printf %s "$OTHER_TOKEN"', sandbox_id=sid)
            assert out["stdout"] == placeholder, out
            await ok(session, "sandbox_files_write", path="/fetch.py", content=FETCH, sandbox_id=sid)
            for env, value in (("OTHER_TOKEN", OTHER_VALUE), ("GH_TOKEN", VALUE)):
                out = await ok(
                    session, "sandbox_exec", command=f"python3 /fetch.py https://allowed.test/auth-digest {env}",
                    sandbox_id=sid, timeout_ms=120000,
                )
                assert f"auth-sha256={digest('Bearer ' + value)}" in out["stdout"], (env, out)
            third = await ok(session, "sandbox_attach_secret", sandbox_id=sid, secret="other", env="THIRD")
            out = await ok(session, "sandbox_exec", command='printf %s "$THIRD"', sandbox_id=sid)
            assert out["stdout"] == third["placeholder"] != placeholder, (out, third)
            # A server with neither flag, of the same client, may not bind either to it.
            async with session_in(world["client"], state_dir, world["cert"]) as bare:
                for secret in ("gh", "other"):
                    text = await err(bare, "sandbox_attach_secret", sandbox_id=sid, secret=secret)
                    assert f"may not bind the secret `{secret}`" in text and "--secret" in text, text
        finally:
            await call_ok(session, "sandbox_kill", sandbox_id=sid)
    for text in seen:
        assert VALUE not in text and OTHER_VALUE not in text, f"a value reached the MCP client: {text}"
