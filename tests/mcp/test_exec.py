"""sandbox_exec: results, limits, errors, non-UTF-8 output, progress and cancellation."""

from __future__ import annotations

import os
from pathlib import Path

import anyio
import pytest

from conftest import Agent, agent_session, call_err, call_ok, wait_for

pytestmark = pytest.mark.anyio


async def test_exit_code_stdout_stderr_cwd_env_and_stdin(agent: Agent) -> None:
    work = agent.scratch("exec-basics")
    async with agent_session(agent) as session:
        out = await call_ok(
            session,
            "sandbox_exec",
            command='echo "out:$GREETING"; pwd; cat; echo oops >&2; exit 3',
            cwd=str(work),
            env={"GREETING": "hi"},
            stdin="from stdin\n",
        )
    assert out["exit_code"] == 3
    assert out["stdout"] == f"out:hi\n{work}\nfrom stdin\n"
    assert out["stderr"] == "oops\n"
    assert out["timed_out"] is False
    assert out["stdout_truncated"] is False and out["stdout_bytes"] == len(out["stdout"].encode())
    assert isinstance(out["duration_ms"], int)
    assert "notes" not in out


async def test_stdin_up_to_the_inline_limit_reaches_the_command(agent: Agent) -> None:
    async with agent_session(agent) as session:
        out = await call_ok(session, "sandbox_exec", command="wc -c", stdin="x" * (8 * 1024 * 1024))
    assert out["stdout"].strip() == str(8 * 1024 * 1024)


async def test_large_output_keeps_head_and_tail_and_reports_the_real_size(agent: Agent) -> None:
    async with agent_session(agent) as session:
        out = await call_ok(
            session,
            "sandbox_exec",
            command="echo FIRST; head -c 200000 /dev/zero | tr '\\0' x; echo; echo LAST",
        )
    assert out["stdout_truncated"] is True
    assert out["stdout_bytes"] == len("FIRST\n") + 200000 + len("\nLAST\n")
    assert out["stdout"].startswith("FIRST\n")
    assert out["stdout"].endswith("LAST\n")
    assert len(out["stdout"].encode()) <= 32 * 1024 + 256
    assert any("head and tail" in note for note in out["notes"])


async def test_non_utf8_output_is_rendered_lossily_with_a_note(agent: Agent) -> None:
    async with agent_session(agent) as session:
        out = await call_ok(session, "sandbox_exec", command="printf 'ok \\377\\376 end'; printf '\\351' >&2")
    assert out["exit_code"] == 0
    assert out["stdout"] == "ok \ufffd\ufffd end"
    assert out["stderr"] == "\ufffd"
    assert out["stdout_bytes"] == 9
    assert any("not valid UTF-8" in note and "stdout and stderr" in note for note in out["notes"])


async def test_timeout_kills_the_command_and_says_so(agent: Agent) -> None:
    async with agent_session(agent) as session:
        out = await call_ok(session, "sandbox_exec", command="echo started; sleep 30", timeout_ms=500)
    assert out["timed_out"] is True
    assert "exit_code" not in out and out["signal"] in (9, 15)
    assert out["stdout"] == "started\n"
    assert any("sandbox_exec_background" in note for note in out["notes"])


@pytest.mark.parametrize(
    "arguments, needle",
    [
        ({"command": "true", "timeout_ms": 600001}, "between 1 and 600000 ms"),
        ({"command": "true", "timeout_ms": 0}, "between 1 and 600000 ms"),
        ({"command": "   "}, "command is empty"),
        ({}, "missing field `command`"),
        ({"command": "true", "workdir": "/"}, "unknown field `workdir`"),
        ({"command": "true", "env": {"A": 1}}, "invalid type"),
        ({"command": "true", "cwd": "relative/dir"}, "relative"),
        ({"command": "true", "cwd": "/no/such/dir/anywhere"}, "/no/such/dir/anywhere"),
        ({"command": "wc -c", "stdin": "x" * (8 * 1024 * 1024 + 1)}, "stdin is 8 MiB (8388609 bytes), over the 8 MiB (8388608 bytes) inline limit"),
    ],
)
async def test_bad_arguments_are_tool_errors_that_say_what_to_fix(agent: Agent, arguments: dict, needle: str) -> None:
    async with agent_session(agent) as session:
        text = await call_err(session, "sandbox_exec", **arguments)
    assert needle in text


async def test_progress_is_reported_while_a_command_runs(agent: Agent) -> None:
    updates: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append((progress, total, message))

    async with agent_session(agent) as session:
        result = await session.call_tool(
            "sandbox_exec", {"command": "sleep 3.5; echo done", "timeout_ms": 20000}, progress_callback=on_progress
        )
    assert not result.is_error
    assert result.structured_content["stdout"] == "done\n"
    assert len(updates) >= 2, f"expected progress every second, got {updates}"
    progress = [p for p, _, _ in updates]
    assert progress == sorted(progress) and progress[-1] > progress[0]
    assert all(total == 20 for _, total, _ in updates)
    assert all(message and message.startswith("running ") for _, _, message in updates)


def pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    # A zombie has finished; only its parent's wait is missing.
    # The process may be reaped between the kill and the read (the open then fails
    # with ENOENT, or the read with ESRCH): then it is gone.
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.split(")")[-1].split()[0] != "Z"


async def start_and_cancel_a_sleeper(session, pids: Path) -> tuple[int, int]:
    """Calls sandbox_exec with a shell that starts `sleep 300` and waits for it, and
    cancels the call once both have written their pids to `pids`; returns (sleep, shell)."""
    async with anyio.create_task_group() as group:

        async def call() -> None:
            await session.call_tool(
                "sandbox_exec",
                {"command": f"sleep 300 & echo $! >> {pids}; echo $$ >> {pids}; wait", "timeout_ms": 600000},
            )

        group.start_soon(call)
        await anyio.to_thread.run_sync(
            lambda: wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 2, "the command to start")
        )
        group.cancel_scope.cancel()
    child, shell = (int(pid) for pid in pids.read_text().split())
    return child, shell


async def test_cancellation_kills_the_command_process_group(agent: Agent) -> None:
    work = agent.scratch("exec-cancel")
    pids = work / "pids"
    async with agent_session(agent) as session:
        child, shell = await start_and_cancel_a_sleeper(session, pids)
        # The session goes on after a cancellation.
        info = await call_ok(session, "sandbox_info")
        assert info["agent"]["agent_version"]
    await anyio.to_thread.run_sync(
        lambda: wait_for(lambda: not pid_alive(child) and not pid_alive(shell), "the cancelled command to be killed")
    )


async def test_parallel_calls_on_one_session_are_independent(agent: Agent) -> None:
    results: dict[int, dict] = {}
    async with agent_session(agent) as session:

        async def run(i: int) -> None:
            results[i] = await call_ok(session, "sandbox_exec", command=f"sleep 0.5; echo call-{i}")

        async with anyio.create_task_group() as group:
            for i in range(4):
                group.start_soon(run, i)
    assert {i: r["stdout"] for i, r in results.items()} == {i: f"call-{i}\n" for i in range(4)}


def test_a_client_that_goes_away_leaves_no_command_running(agent: Agent) -> None:
    """An editor that quits mid-command closes stdin; atoll mcp exits and the agent kills
    the command's process group."""
    import json
    import subprocess

    from conftest import binary, server_params

    work = agent.scratch("exec-client-gone")
    pids = work / "pids"
    process = subprocess.Popen(
        [str(binary("atoll")), "mcp", "--agent", agent.address],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        env=server_params().env,
    )
    messages = [
        {"jsonrpc": "2.0", "id": 1, "method": "initialize",
         "params": {"protocolVersion": "2025-06-18", "capabilities": {}, "clientInfo": {"name": "raw", "version": "0"}}},
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/call",
         "params": {"name": "sandbox_exec",
                    "arguments": {"command": f"sleep 300 & echo $! >> {pids}; echo $$ >> {pids}; wait"}}},
    ]
    assert process.stdin is not None
    for message in messages:
        process.stdin.write((json.dumps(message) + "\n").encode())
    process.stdin.flush()
    wait_for(lambda: pids.exists() and len(pids.read_text().split()) == 2, "the command to start")
    process.stdin.close()
    process.wait(timeout=60)
    child, shell = (int(pid) for pid in pids.read_text().split())
    wait_for(lambda: not pid_alive(child) and not pid_alive(shell), "the orphaned command to be killed")
