"""`atoll mcp --http` against a booted microVM (one VM for every check): the official
Python SDK's streamable HTTP clients create it, run commands and move files in it, see
progress, cancel a guest command, and vanish mid-call; either way the guest command is
killed. Needs the `minimal` template and QEMU, like test_sandboxes.py."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import anyio
import pytest

from conftest import call_ok, wait_for
from http_server import http_server, session_client, stateless_client
from test_http import VANISHING_CLIENT
from test_sandboxes import need_vm, processes_mentioning

pytestmark = pytest.mark.anyio


async def guest_alive(session, sid: str, pids: str) -> bool:
    """Whether any pid listed in the guest file `pids` is still running (not a zombie)."""
    script = f"for p in $(cat {pids}); do s=$(cut -d' ' -f3 /proc/$p/stat 2>/dev/null) && [ \"$s\" != Z ] && echo $p; done"
    out = await call_ok(session, "sandbox_exec", command=script, sandbox_id=sid)
    return out["stdout"].strip() != ""


async def wait_guest_dead(session, sid: str, pids: str, what: str) -> None:
    with anyio.fail_after(120):
        while await guest_alive(session, sid, pids):
            await anyio.sleep(0.2)


async def wait_guest_started(session, sid: str, pids: str) -> None:
    with anyio.fail_after(120):
        while True:
            out = await call_ok(session, "sandbox_exec", command=f"cat {pids} 2>/dev/null | wc -w", sandbox_id=sid)
            if out["stdout"].strip() == "2":
                return
            await anyio.sleep(0.2)


async def test_a_real_microvm_over_http(state_dir: Path) -> None:  # noqa: F811
    need_vm()
    updates: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append(message)

    with http_server(env={"ATOLL_STATE_DIR": str(state_dir)}) as server:
        async with session_client(server.url, server.token) as session:
            created = await session.call_tool(
                "sandbox_create", {"template": "minimal", "name": "http-vm", "boot_timeout_s": 300},
                progress_callback=on_progress,
            )
            assert not created.is_error, created.content
            sid = created.structured_content["id"]
            try:
                out = await call_ok(session, "sandbox_exec", command="echo $((6*7)); cat /proc/1/comm", sandbox_id=sid)
                assert out["stdout"].splitlines()[0] == "42"
                await call_ok(session, "sandbox_files_write", path="/tmp/h/hello.txt", content="over http", sandbox_id=sid)

                # A stateless client sees the same VM, and progress while a guest command runs.
                ticks: list[float] = []

                async def tick(progress: float, total: float | None, message: str | None) -> None:
                    ticks.append(progress)

                async with stateless_client(server.url, server.token) as client:
                    read = await client.call_tool("sandbox_files_read", {"path": "/tmp/h/hello.txt", "sandbox_id": sid})
                    assert read.structured_content["content"] == "over http"
                    slow = await client.call_tool(
                        "sandbox_exec", {"command": "sleep 2.5; echo slow", "sandbox_id": sid, "timeout_ms": 60000},
                        progress_callback=tick,
                    )
                    assert slow.structured_content["stdout"] == "slow\n"
                assert len(ticks) >= 2, ticks

                # Cancelling a call kills the guest command.
                pids = "/tmp/cancel-pids"
                async with anyio.create_task_group() as group:

                    async def long_call() -> None:
                        await session.call_tool(
                            "sandbox_exec",
                            {"command": f"sleep 300 & echo $! >> {pids}; echo $$ >> {pids}; wait",
                             "timeout_ms": 600000, "sandbox_id": sid},
                        )

                    group.start_soon(long_call)
                    async with session_client(server.url, server.token) as probe:
                        await wait_guest_started(probe, sid, pids)
                        assert await guest_alive(probe, sid, pids), "the probe cannot see a running command"
                    group.cancel_scope.cancel()
                await wait_guest_dead(session, sid, pids, "the cancelled guest command to be killed")

                # A client SIGKILLed mid-call: the guest command is killed, the server lives on.
                for mode in ("session", "stateless"):
                    pids = f"/tmp/vanish-{mode}"
                    command = f"sleep 300 & echo $! >> {pids}; echo $$ >> {pids}; wait"
                    client = subprocess.Popen(
                        [sys.executable, "-c", VANISHING_CLIENT, str(Path(__file__).parent), server.url, mode, command, sid, server.token],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                    )
                    try:
                        await wait_guest_started(session, sid, pids)
                        assert await guest_alive(session, sid, pids)
                    finally:
                        client.kill()
                        client.wait()
                    await wait_guest_dead(session, sid, pids, f"the {mode} client's guest command to be killed")
                assert server.process.poll() is None
            finally:
                killed = await session.call_tool("sandbox_kill", {"sandbox_id": sid})
            assert not killed.is_error, killed.content
    await anyio.to_thread.run_sync(lambda: wait_for(lambda: not processes_mentioning(str(state_dir)), "the VM's processes to end"))
    assert all(m and m.startswith("booting ") for m in updates), updates
