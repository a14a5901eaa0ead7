"""Templates, code and metrics through MCP on real microVMs: sandbox_run_code (python,
node and sh on `debian`; python and node missing from `minimal` naming the templates
that have them), sandbox_get_metrics (one sandbox and all), sandbox_template_list,
sandbox_template_create from a debian sandbox and sandbox_create {template} from it.

Templates are saved into a scratch data directory whose `minimal`, `debian` and kernel
are hard links to the real ones, so the shared data directory is never written."""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import anyio
import pytest

from conftest import call_err, call_ok, mcp_session, wait_for
from test_sandboxes import data_dir, need_vm, processes_mentioning

pytestmark = pytest.mark.anyio


@pytest.fixture
def dirs():
    state = Path(tempfile.mkdtemp(prefix="atollt-", dir="/tmp"))
    data = Path(tempfile.mkdtemp(prefix="atolld-", dir="/tmp"))
    real = data_dir()
    (data / "kernel").symlink_to(real / "kernel")
    for name in ("minimal", "debian"):
        source = real / "templates" / name
        if not (source / "template.json").exists():
            pytest.fail(f"template `{name}` is not built; run rootfs/setup.sh --with-debian")
        (data / "templates" / name).mkdir(parents=True)
        for f in source.iterdir():
            try:
                os.link(f, data / "templates" / name / f.name)
            except OSError:
                shutil.copy2(f, data / "templates" / name / f.name)
    yield state, data
    shutil.rmtree(state, ignore_errors=True)
    shutil.rmtree(data, ignore_errors=True)


async def test_run_code_metrics_and_templates_from_a_sandbox(dirs) -> None:
    need_vm()
    state, data = dirs
    env = {"ATOLL_STATE_DIR": str(state), "ATOLL_DATA_DIR": str(data)}
    async with mcp_session(env=env) as session:
        listed = await call_ok(session, "sandbox_template_list")
        kinds = {t["name"]: t["kind"] for t in listed["templates"]}
        assert kinds == {"debian": "disk", "minimal": "initramfs"}

        await call_ok(session, "sandbox_create", template="debian", name="deb", network="none", boot_timeout_s=300)
        try:
            code = 'import sys\nname = "wor" + "ld"\nprint(f"hello {name}", sys.stdin.read() == "")\nsys.exit(3)\n'
            out = await call_ok(session, "sandbox_run_code", sandbox_id="deb", language="python", code=code)
            assert out["stdout"] == "hello world True\n" and out["exit_code"] == 3, out
            # Quotes, `$`, and a command that reads stdin: the script is not eaten.
            sh = "x='it''s $HOME'; echo \"$x\"\nread line || echo no-stdin\necho last\n"
            out = await call_ok(session, "sandbox_run_code", sandbox_id="deb", language="sh", code=sh)
            assert out["stdout"] == "its $HOME\nno-stdin\nlast\n" and out["exit_code"] == 0, out
            # Node.js (Debian's nodejs, v18): a computation, stdin empty, stderr, exit code; the
            # same snippet through sandbox_exec (`node -` with it on stdin) returns the same.
            js = (
                'const input = require("fs").readFileSync(0, "utf8");\n'
                "const sum = [1, 2, 3].reduce((a, n) => a + n * n, 0);\n"
                'console.log(process.version.split(".")[0], sum, input === "");\n'
                'console.error("to stderr");\n'
                "process.exitCode = 4;\n"
            )
            out = await call_ok(session, "sandbox_run_code", sandbox_id="deb", language="node", code=js)
            assert (out["exit_code"], out["stdout"], out["stderr"]) == (4, "v18 14 true\n", "to stderr\n"), out
            assert not out["timed_out"], out
            same = await call_ok(session, "sandbox_exec", sandbox_id="deb", command="node -", stdin=js)
            del out["duration_ms"], same["duration_ms"]  # timings differ, all else is the same
            assert same == out, (same, out)
            throw = 'throw new Error("boom " + 6 * 7);\n'
            out = await call_ok(session, "sandbox_run_code", sandbox_id="deb", language="node", code=throw)
            assert out["exit_code"] == 1 and out["stdout"] == "", out
            assert "Error: boom 42" in out["stderr"] and "Node.js v18" in out["stderr"], out
            out = await call_ok(session, "sandbox_exec", sandbox_id="deb", command="ls /tmp")
            assert out["stdout"] == "", f"run_code left files in /tmp: {out['stdout']!r}"
            out = await call_ok(
                session, "sandbox_run_code", sandbox_id="deb", language="python", code="while True: pass", timeout_ms=2000
            )
            assert out["timed_out"], out
            text = await call_err(session, "sandbox_run_code", sandbox_id="deb", language="ruby", code="1")
            assert "language" in text, text

            metrics = await call_ok(session, "sandbox_get_metrics", sandbox_id="deb")
            [m] = metrics["sandboxes"]
            assert m["name"] == "deb" and m["state"] == "running", m
            assert m["memory_limit_bytes"] == 512 << 20 and 0 < m["memory_used_bytes"] < m["memory_limit_bytes"], m
            assert 0 < m["disk_used_bytes"] < m["disk_total_bytes"], m
            assert "net_rx_bytes" not in m, "a --net none sandbox has no network figures"

            await call_ok(session, "sandbox_exec", sandbox_id="deb", command="echo from-deb > /opt/made-here")
            made = await call_ok(session, "sandbox_template_create", from_sandbox="deb", name="deb2")
            assert made["name"] == "deb2" and made["from_template"] == "debian" and not made["replaced"], made
            text = await call_err(session, "sandbox_template_create", from_sandbox="deb", name="deb2")
            assert "already exists" in text, text
            listed = await call_ok(session, "sandbox_template_list")
            saved = next(t for t in listed["templates"] if t["name"] == "deb2")
            assert saved["kind"] == "disk" and saved["from_sandbox"] == "deb", saved

            await call_ok(session, "sandbox_create", template="deb2", name="copy", network="none", boot_timeout_s=300)
            out = await call_ok(session, "sandbox_run_code", sandbox_id="copy", language="sh", code="cat /opt/made-here")
            assert out["stdout"] == "from-deb\n", out

            await call_ok(session, "sandbox_create", template="minimal", name="mini", network="none", boot_timeout_s=300)
            text = await call_err(session, "sandbox_run_code", sandbox_id="mini", language="python", code="print(1)")
            assert "`python3` is not installed" in text and "deb2, debian" in text, text
            text = await call_err(session, "sandbox_run_code", sandbox_id="mini", language="node", code="1")
            assert "`node` is not installed" in text and "templates that have it: deb2, debian" in text, text
            out = await call_ok(session, "sandbox_run_code", sandbox_id="mini", language="sh", code="echo $((6*7))")
            assert out["stdout"] == "42\n", out
            text = await call_err(session, "sandbox_template_create", from_sandbox="mini", name="m2")
            assert "initramfs" in text, text

            every = await call_ok(session, "sandbox_get_metrics")
            assert sorted(m["name"] for m in every["sandboxes"]) == ["copy", "deb", "mini"]
            text = await call_err(session, "sandbox_get_metrics", sandbox_id="nope")
            assert "nope" in text
        finally:
            for name in ("copy", "mini", "deb"):
                await session.call_tool("sandbox_kill", {"sandbox_id": name})
        await anyio.to_thread.run_sync(
            lambda: wait_for(lambda: not processes_mentioning(str(state)), "the VMs' processes to end")
        )
