"""Faults under a long-lived `atoll mcp`: the sandbox's QEMU is SIGKILLed under an open
sandbox_exec (the call must come back as a tool error that says the connection was lost,
not hang), and the agent is restarted on the same socket (the next call must work)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from pathlib import Path

import anyio
import pytest

from conftest import binary, call_err, call_ok, mcp_session, start_agent, text_of, wait_for
from test_sandboxes import need_vm, processes_mentioning, sandbox_dirs

pytestmark = pytest.mark.anyio

# Bound on how long a call may take to notice its VM is gone: a hang guard, not a timing
# assertion.
HANG_GUARD_S = 60


@pytest.fixture
def state_dir(state_dir: Path):
    """conftest's state_dir, with any sandbox a failed test left killed before it goes."""
    path = state_dir
    yield path
    subprocess.run(
        [str(binary("atoll")), "kill", "--all", "--force"],
        env={**os.environ, "ATOLL_STATE_DIR": str(path)},
        capture_output=True,
        timeout=120,
    )


def atoll_json(state_dir: Path, *args: str):
    out = subprocess.run(
        [str(binary("atoll")), "--json", *args],
        env={**os.environ, "ATOLL_STATE_DIR": str(state_dir)},
        capture_output=True,
        timeout=120,
    )
    assert out.returncode == 0, f"atoll {args}: {out.stderr.decode()}"
    return json.loads(out.stdout)


async def test_vm_killed_under_an_open_sandbox_exec_is_a_clear_tool_error(state_dir: Path) -> None:
    need_vm()
    async with mcp_session(env={"ATOLL_STATE_DIR": str(state_dir)}) as session:
        sandbox = await call_ok(session, "sandbox_create", template="minimal", name="doomed", boot_timeout_s=300)
        sid = sandbox["id"]
        qemu_pid = atoll_json(state_dir, "inspect", "doomed")["qemu_pid"]
        results = []

        async def long_exec() -> None:
            results.append(
                await session.call_tool(
                    "sandbox_exec",
                    {"command": "touch /tmp/started; exec sleep 600", "timeout_ms": 600_000, "sandbox_id": sid},
                )
            )

        with anyio.fail_after(HANG_GUARD_S * 5):
            async with anyio.create_task_group() as group:
                group.start_soon(long_exec)
                # The same session polls the guest until the long command is running.
                while True:
                    probe = await call_ok(session, "sandbox_exec", command="test -e /tmp/started", sandbox_id=sid)
                    if probe["exit_code"] == 0:
                        break
                    await anyio.sleep(0.1)
                os.kill(qemu_pid, signal.SIGKILL)
                with anyio.fail_after(HANG_GUARD_S):
                    while not results:
                        await anyio.sleep(0.1)
        result = results[0]
        assert result.is_error, f"sandbox_exec on a killed VM returned {result.structured_content!r}"
        text = text_of(result)
        assert "lost the connection" in text, text

        listed = await call_ok(session, "sandbox_list")
        assert [(s["id"], s["state"]) for s in listed["sandboxes"]] == [(sid, "dead")]
        again = await call_err(session, "sandbox_exec", command="true", sandbox_id=sid)
        assert "dead" in again, again

        killed = await call_ok(session, "sandbox_kill", sandbox_id=sid)
        assert killed["was"] == "dead", killed
        assert (await call_ok(session, "sandbox_list"))["sandboxes"] == []
    wait_for(lambda: not processes_mentioning(str(state_dir)), "the VM's processes to end")
    assert sandbox_dirs(state_dir) == []


async def test_agent_restarted_under_a_long_lived_server_works_on_the_next_call() -> None:
    tmp = Path(tempfile.mkdtemp(prefix="atollr-"))
    sock, jobs, log = tmp / "agent.sock", tmp / "jobs", tmp / "agent.log"
    agents = [start_agent(sock, jobs, log)]
    try:
        async with mcp_session("--agent", f"unix://{sock}") as session:
            out = await call_ok(session, "sandbox_exec", command="echo one")
            assert out["stdout"] == "one\n"

            agents[0].kill()
            agents[0].wait()
            # Down: a tool error that says where nobody answered, and the server lives on.
            text = await call_err(session, "sandbox_exec", command="true")
            assert str(sock) in text, text

            agents.append(start_agent(sock, jobs, log))
            out = await call_ok(session, "sandbox_exec", command="echo two")
            assert out["stdout"] == "two\n"
            out = await call_ok(session, "sandbox_exec", command="echo three")
            assert out["stdout"] == "three\n"
    finally:
        for process in agents:
            process.kill()
            process.wait()
        shutil.rmtree(tmp, ignore_errors=True)
