"""A snapshot whose disk header was altered, through MCP: sandbox_create with
from_snapshot and sandbox_snapshot_restore refuse it, saying it was altered and what to
do, before anything starts or stops. On one real `debian` microVM (a disk template);
the CLI's side, and every way of altering the header, are in
tests/tests/vm_snapshot.rs (disk_attack)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from conftest import call_err, call_ok, data_dir, mcp_session
from test_sandboxes import need_vm, processes_mentioning

pytestmark = pytest.mark.anyio


def backing_name(disk: Path) -> str:
    head = disk.read_bytes()[:65536]
    offset = int.from_bytes(head[8:16], "big")
    size = int.from_bytes(head[16:20], "big")
    return head[offset : offset + size].decode()


async def test_an_altered_snapshot_disk_is_refused(state_dir: Path) -> None:
    need_vm()
    if not (data_dir() / "templates" / "debian" / "template.json").exists():
        pytest.skip("the `debian` template is not built (rootfs/setup.sh --with-debian)")
    async with mcp_session(env={"ATOLL_STATE_DIR": str(state_dir)}) as session:
        src = await call_ok(
            session, "sandbox_create", template="debian", name="src", network="none", boot_timeout_s=300
        )
        try:
            await call_ok(session, "sandbox_snapshot_create", sandbox_id="src", name="ds")
            disk = state_dir / ".snapshots" / "ds" / "disk.qcow2"
            template_image = backing_name(disk)
            subprocess.run(["qemu-img", "rebase", "-u", "-F", "raw", "-b", "/etc/shadow", str(disk)], check=True)
            before = sorted(p.name for p in state_dir.iterdir() if not p.name.startswith("."))
            # src's QEMU and network helper: the same processes, none stopped or started.
            running = sorted(processes_mentioning(str(state_dir)))
            assert running, "src's processes are not found"

            fork = await call_err(session, "sandbox_create", from_snapshot="ds", name="evil", boot_timeout_s=300)
            restore = await call_err(session, "sandbox_snapshot_restore", sandbox_id="src", snapshot="ds")
            for text in (fork, restore):
                assert "snapshot `ds` was altered" in text and "backed by `/etc/shadow`" in text, text
                assert "atoll snapshot rm ds" in text, text
            assert sorted(p.name for p in state_dir.iterdir() if not p.name.startswith(".")) == before
            assert sorted(processes_mentioning(str(state_dir))) == running
            info = await call_ok(session, "sandbox_info", sandbox_id="src")
            assert info["sandbox"]["state"] == "running", info

            # Put back, it restores.
            subprocess.run(["qemu-img", "rebase", "-u", "-F", "raw", "-b", template_image, str(disk)], check=True)
            restored = await call_ok(session, "sandbox_snapshot_restore", sandbox_id="src", snapshot="ds")
            assert restored["state"] == "running", restored
        finally:
            await call_ok(session, "sandbox_kill", sandbox_id=src["id"])
