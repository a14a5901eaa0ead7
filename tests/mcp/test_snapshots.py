"""Snapshots through MCP: sandbox_snapshot_create, _list, _restore and _delete,
sandbox_create from_snapshot (a fork) and sandbox_pause to_disk (parking), on one real
microVM and its fork; and started_from, which says whether a sandbox booted, restored
its template's snapshot, or forked a snapshot; two saves and two deletes asked at once
both complete (the server waits for the state lock off its one thread)."""

from __future__ import annotations

from pathlib import Path

import pytest

import anyio

from conftest import call_err, call_ok, mcp_session, wait_for
from test_sandboxes import need_vm, processes_mentioning

pytestmark = pytest.mark.anyio


async def test_snapshot_fork_park_restore_and_delete(state_dir: Path) -> None:
    need_vm()
    async with mcp_session(env={"ATOLL_STATE_DIR": str(state_dir)}) as session:
        text = await call_err(session, "sandbox_snapshot_create", sandbox_id="nope")
        assert "nope" in text
        src = await call_ok(
            session, "sandbox_create", template="minimal", name="src", network="none", boot_timeout_s=300
        )
        try:
            # The first of its shape boots (and saves the template's snapshot); the next
            # restores that snapshot.
            assert src["started_from"] == "boot", src
            twin = await call_ok(
                session, "sandbox_create", template="minimal", name="twin", network="none", boot_timeout_s=300
            )
            assert twin["started_from"] == "template snapshot", twin
            await call_ok(session, "sandbox_kill", sandbox_id="twin")
            await call_ok(session, "sandbox_files_write", path="/tmp/file", content="original", sandbox_id="src")
            snap = await call_ok(session, "sandbox_snapshot_create", sandbox_id="src", name="base")
            assert snap["name"] == "base" and snap["source_sandbox"] == "src" and snap["size_bytes"] > 0
            text = await call_err(session, "sandbox_snapshot_create", sandbox_id="src", name="base")
            assert "already exists" in text
            # Two saves asked at once: each holds the state lock while QEMU writes, and the
            # server serves both calls on one thread; the second waits for the first
            # instead of stopping the server for good. Then two deletes at once.
            saved: list[str] = []

            async def save(name: str) -> None:
                made = await call_ok(session, "sandbox_snapshot_create", sandbox_id="src", name=name)
                saved.append(made["name"])

            async def delete(name: str) -> None:
                await call_ok(session, "sandbox_snapshot_delete", snapshot=name)

            with anyio.fail_after(240):
                async with anyio.create_task_group() as group:
                    for name in ("at-once-1", "at-once-2"):
                        group.start_soon(save, name)
                assert sorted(saved) == ["at-once-1", "at-once-2"], saved
                async with anyio.create_task_group() as group:
                    for name in saved:
                        group.start_soon(delete, name)
            listed = await call_ok(session, "sandbox_snapshot_list")
            assert [s["name"] for s in listed["snapshots"]] == ["base"]

            fork = await call_ok(session, "sandbox_create", from_snapshot="base", name="fork", boot_timeout_s=300)
            assert fork["state"] == "running" and fork["id"] != src["id"]
            assert fork["started_from"] == "snapshot base", fork
            listed = await call_ok(session, "sandbox_list")
            origins = {s["name"]: s["started_from"] for s in listed["sandboxes"]}
            assert origins == {"src": "boot", "fork": "snapshot base"}, origins
            info = await call_ok(session, "sandbox_info", sandbox_id="fork")
            assert info["sandbox"]["started_from"] == "snapshot base", info
            out = await call_ok(session, "sandbox_exec", command="cat /tmp/file; echo; hostname", sandbox_id="fork")
            assert out["stdout"] == "original\nfork\n"
            await call_ok(session, "sandbox_files_write", path="/tmp/file", content="changed", sandbox_id="fork")
            read = await call_ok(session, "sandbox_files_read", path="/tmp/file", sandbox_id="src")
            assert read["content"] == "original"

            parked = await call_ok(session, "sandbox_pause", sandbox_id="fork", to_disk=True)
            assert parked["state"] == "parked"
            assert not processes_mentioning(f"{state_dir}/{fork['id']}")
            # A guest tool brings a parked sandbox back by itself.
            read = await call_ok(session, "sandbox_files_read", path="/tmp/file", sandbox_id="fork")
            assert read["content"] == "changed"

            restored = await call_ok(session, "sandbox_snapshot_restore", sandbox_id="fork", snapshot="base")
            assert restored["id"] == fork["id"] and restored["state"] == "running"
            read = await call_ok(session, "sandbox_files_read", path="/tmp/file", sandbox_id="fork")
            assert read["content"] == "original"

            assert (await call_ok(session, "sandbox_snapshot_delete", snapshot="base")) == {"deleted": "base"}
            text = await call_err(session, "sandbox_snapshot_delete", snapshot="base")
            assert "no snapshot is called `base`" in text
            assert (await call_ok(session, "sandbox_snapshot_list"))["snapshots"] == []
        finally:
            for name in ("fork", "twin", "src"):
                await session.call_tool("sandbox_kill", {"sandbox_id": name})
        await anyio.to_thread.run_sync(
            lambda: wait_for(lambda: not processes_mentioning(str(state_dir)), "the VMs' processes to end")
        )
