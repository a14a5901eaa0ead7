"""Who may act on which sandbox over MCP (issue 31): each sandbox records the face that
created it, and MCP tools act only on the sandboxes their own identity created (every
stdio server of the user shares one identity; each HTTP token is a client of its own),
on those the operator hands over (`--share-sandbox`), or, for a server pinned with
`--sandbox`/ATOLL_SANDBOX, on that one only. The attacks come from where an attacker
sits: a second HTTP client, another MCP face, a pinned model. One `minimal` microVM."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import call_err, call_ok, mcp_session
from http_server import http_server, session_client, stateless_client
from test_sandboxes import need_vm

pytestmark = pytest.mark.anyio

TOKEN_A = "client-a-token-" + "0123456789abcdef" * 2
TOKEN_B = "client-b-token-" + "fedcba9876543210" * 2


async def test_a_client_acts_only_on_its_own_or_handed_over_sandboxes(state_dir: Path, tmp_path: Path) -> None:
    need_vm()
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN_A}\n{TOKEN_B}\n")
    tokens.chmod(0o600)
    env = {"ATOLL_STATE_DIR": str(state_dir)}
    with http_server("--token-file", str(tokens), env=env) as server:
        async with session_client(server.url, TOKEN_A) as a, session_client(server.url, TOKEN_B) as b:
            created = await call_ok(a, "sandbox_create", template="minimal", name="owned-a", boot_timeout_s=300)
            sid = created["id"]
            try:
                assert [s["name"] for s in (await call_ok(a, "sandbox_list"))["sandboxes"]] == ["owned-a"]
                # Client B (another token) sees nothing and may touch nothing of A's.
                assert (await call_ok(b, "sandbox_list"))["sandboxes"] == []
                for tool, args in (("sandbox_exec", {"command": "true"}), ("sandbox_kill", {}),
                                   ("sandbox_files_read", {"path": "/etc/hostname"}), ("sandbox_update", {"allow_out": []})):
                    for name in ("owned-a", sid):
                        text = await call_err(b, tool, sandbox_id=name, **args)
                        assert "created by another MCP client over HTTP" in text, (tool, text)
                        assert "--share-sandbox owned-a" in text, (tool, text)
                # B's stateless (2026-07-28) requests are B's too.
                async with stateless_client(server.url, TOKEN_B) as b2:
                    result = await b2.call_tool("sandbox_exec", {"command": "true", "sandbox_id": "owned-a"})
                    assert result.is_error, result
                    assert "created by another MCP client over HTTP" in result.content[0].text, result.content
                # MCP never replaces a built-in template (nor one it did not save), whoever asks.
                for name in ("minimal", "debian"):
                    text = await call_err(a, "sandbox_template_create", from_sandbox="owned-a", name=name, replace=True)
                    assert f"template `{name}` was not saved by this MCP client" in text, text
                    assert "--replace" in text and "new name" in text, text
                # A's sandbox is untouched and still A's.
                out = await call_ok(a, "sandbox_exec", command="echo still-a", sandbox_id=sid)
                assert out["stdout"] == "still-a\n"

                # Another face (stdio) is another identity too ...
                async with mcp_session(env=env) as stdio:
                    assert (await call_ok(stdio, "sandbox_list"))["sandboxes"] == []
                    text = await call_err(stdio, "sandbox_exec", command="true", sandbox_id="owned-a")
                    assert "created by another MCP client over HTTP" in text, text
                # ... unless the operator hands the sandbox over.
                async with mcp_session("--share-sandbox", "owned-a", env=env) as stdio:
                    assert [s["name"] for s in (await call_ok(stdio, "sandbox_list"))["sandboxes"]] == ["owned-a"]
                    out = await call_ok(stdio, "sandbox_exec", command="echo handed", sandbox_id="owned-a")
                    assert out["stdout"] == "handed\n"

                # A server pinned to another sandbox acts on that one only.
                async with mcp_session(env={**env, "ATOLL_SANDBOX": "scratch"}) as pinned:
                    assert (await call_ok(pinned, "sandbox_list"))["sandboxes"] == []
                    for tool, args in (("sandbox_exec", {"command": "true"}), ("sandbox_kill", {}), ("sandbox_info", {})):
                        text = await call_err(pinned, tool, sandbox_id="owned-a", **args)
                        assert "acts only on sandbox `scratch`" in text and "--sandbox" in text, (tool, text)
                # Pinned to A's sandbox, the server acts on it (the operator's grant).
                async with mcp_session(env={**env, "ATOLL_SANDBOX": "owned-a"}) as pinned:
                    assert [s["name"] for s in (await call_ok(pinned, "sandbox_list"))["sandboxes"]] == ["owned-a"]
                    out = await call_ok(pinned, "sandbox_exec", command="echo pinned")
                    assert out["stdout"] == "pinned\n"
            finally:
                killed = await a.call_tool("sandbox_kill", {"sandbox_id": sid})
            assert not killed.is_error, killed.content
            assert (await call_ok(a, "sandbox_list"))["sandboxes"] == []
