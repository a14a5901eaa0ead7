"""Host quotas through `atoll mcp`, as a model would meet them: over the disk quota
sandbox_create is a tool error with exactly the CLI's text, at once, leaving nothing; a
config file with an unknown key is refused naming the key, in both faces; the operator's
`atoll mcp --max-sandboxes 1` caps what a model may create, over the environment, also
for two creates made at once."""

from __future__ import annotations

import asyncio
import os
import subprocess
import time
from pathlib import Path

import pytest

from conftest import binary, call_err, call_ok, data_dir, mcp_session, text_of
from test_sandboxes import need_vm, sandbox_dirs

pytestmark = pytest.mark.anyio


def cli(state_dir: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    full = {k: v for k, v in os.environ.items() if k not in ("ATOLL_AGENT", "ATOLL_SANDBOX")}
    full.update({"ATOLL_STATE_DIR": str(state_dir), **env})
    return subprocess.run([str(binary("atoll")), *args], env=full, capture_output=True, text=True, timeout=120)


async def test_disk_quota_refuses_sandbox_create_with_the_cli_text(state_dir: Path) -> None:
    if not (data_dir() / "templates" / "debian" / "template.json").exists():
        pytest.skip("the `debian` template is not built (rootfs/setup.sh --with-debian)")
    env = {"ATOLL_MAX_DISK": "1G", "ATOLL_CONFIG": "/dev/null"}
    async with mcp_session(env={"ATOLL_STATE_DIR": str(state_dir), **env}) as session:
        started = time.monotonic()
        text = await call_err(session, "sandbox_create", template="debian", network="none")
        assert time.monotonic() - started < 20, "refused only after booting"
        assert text.startswith("Disk quota reached: sandboxes hold 0 MiB"), text
        assert "atoll kill" in text and "$ATOLL_MAX_DISK" in text, text
        assert (await call_ok(session, "sandbox_list"))["sandboxes"] == []
    out = cli(state_dir, env, "create", "--template", "debian", "--net", "none")
    assert out.returncode != 0
    assert out.stderr.strip() == f"atoll: {text}", out.stderr
    assert sandbox_dirs(state_dir) == []


async def test_a_config_file_with_an_unknown_key_is_refused_naming_it(state_dir: Path, tmp_path: Path) -> None:
    config = tmp_path / "config.toml"
    config.write_text("[quotas]\nmax_sandbox = 2\n")
    env = {"ATOLL_CONFIG": str(config)}
    async with mcp_session(env={"ATOLL_STATE_DIR": str(state_dir), **env}) as session:
        text = await call_err(session, "sandbox_create", network="none")
        assert "unknown field `max_sandbox`" in text and "line 2" in text and str(config) in text, text
    out = cli(state_dir, env, "create", "--net", "none")
    assert out.returncode != 0 and "unknown field `max_sandbox`" in out.stderr, out.stderr
    assert sandbox_dirs(state_dir) == []


async def test_the_operators_max_sandboxes_flag_caps_sandbox_create(state_dir: Path) -> None:
    """`atoll mcp --max-sandboxes 1`: the first sandbox_create boots, the second is a tool
    error at once with exactly the CLI's text (naming the flag), and leaves nothing; the
    flag wins over a looser $ATOLL_MAX_SANDBOXES."""
    need_vm()
    env = {"ATOLL_STATE_DIR": str(state_dir), "ATOLL_MAX_SANDBOXES": "10", "ATOLL_CONFIG": "/dev/null"}
    async with mcp_session("--max-sandboxes", "1", env=env) as session:
        # Two creates at once: one boots, the other is refused at once (a sandbox still
        # starting counts, so the two cannot both pass the check).
        ask = {"template": "minimal", "network": "none", "boot_timeout_s": 300}
        both = await asyncio.gather(*(session.call_tool("sandbox_create", ask) for _ in range(2)))
        booted = [r.structured_content for r in both if not r.is_error]
        said = [text_of(r) for r in both if r.is_error]
        assert len(booted) == 1, [text_of(r) for r in both]
        assert said[0].startswith("Sandbox quota reached: 1 sandbox runs, at most 1 may"), said[0]
        first = booted[0]
        try:
            started = time.monotonic()
            text = await call_err(session, "sandbox_create", template="minimal", network="none")
            assert time.monotonic() - started < 20, "refused only after booting"
            assert text.startswith("Sandbox quota reached: 1 sandbox runs, at most 1 may"), text
            assert "--max-sandboxes, $ATOLL_MAX_SANDBOXES" in text and "atoll pause --to-disk NAME" in text, text
            listed = (await call_ok(session, "sandbox_list"))["sandboxes"]
            assert [s["id"] for s in listed] == [first["id"]], listed
            assert len(sandbox_dirs(state_dir)) == 1, "the refused create left a sandbox directory"
            out = cli(state_dir, env, "--max-sandboxes", "1", "create", "--net", "none")
            assert out.returncode != 0
            assert out.stderr.strip() == f"atoll: {text}", out.stderr
        finally:
            await call_ok(session, "sandbox_kill", sandbox_id=first["id"])
    assert sandbox_dirs(state_dir) == []
