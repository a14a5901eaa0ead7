"""Background jobs: start, status (with waiting), kill, list, and their errors."""

from __future__ import annotations

import pytest

from conftest import Agent, agent_session, call_err, call_ok

pytestmark = pytest.mark.anyio


async def test_a_job_runs_in_the_background_and_reports_its_exit(agent: Agent) -> None:
    async with agent_session(agent) as session:
        job = await call_ok(
            session,
            "sandbox_exec_background",
            command='echo "hello $WHO"; echo warn >&2; sleep 1; exit 7',
            env={"WHO": "job"},
        )
        assert job["job_id"] and job["state"] == "running"
        assert job["pid"] > 0
        assert job["stdout_log"].startswith("/") and job["stderr_log"].startswith("/")
        updates: list[str | None] = []

        async def on_progress(progress: float, total: float | None, message: str | None) -> None:
            updates.append(message)

        result = await session.call_tool(
            "sandbox_job_status", {"job_id": job["job_id"], "wait_ms": 30000}, progress_callback=on_progress
        )
        assert not result.is_error, result.content
        done = result.structured_content
        assert done["state"] == "exited"
        assert done["exit_code"] == 7
        assert done["stdout_tail"] == "hello job\n"
        assert done["stderr_tail"] == "warn\n"
        assert done["stdout_bytes"] == len("hello job\n")
        assert done["duration_ms"] >= 0
        log = await call_ok(session, "sandbox_files_read", path=done["stdout_log"])
        assert log["content"] == "hello job\n"
        listed = await call_ok(session, "sandbox_job_list")
        assert job["job_id"] in [j["job_id"] for j in listed["jobs"]]


async def test_status_without_waiting_answers_at_once(agent: Agent) -> None:
    async with agent_session(agent) as session:
        job = await call_ok(session, "sandbox_exec_background", command="sleep 300")
        now = await call_ok(session, "sandbox_job_status", job_id=job["job_id"])
        assert now["state"] == "running" and "exit_code" not in now
        killed = await call_ok(session, "sandbox_job_kill", job_id=job["job_id"])
        if killed["state"] == "running":
            killed = await call_ok(session, "sandbox_job_status", job_id=job["job_id"], wait_ms=20000)
        assert killed["state"] == "exited"
        assert killed["signal"] == 9


async def test_kill_with_a_named_signal(agent: Agent) -> None:
    async with agent_session(agent) as session:
        job = await call_ok(session, "sandbox_exec_background", command="sleep 300")
        await call_ok(session, "sandbox_job_kill", job_id=job["job_id"], signal="TERM")
        done = await call_ok(session, "sandbox_job_status", job_id=job["job_id"], wait_ms=20000)
        assert done["state"] == "exited" and done["signal"] == 15


async def test_a_timed_out_job_says_so(agent: Agent) -> None:
    async with agent_session(agent) as session:
        job = await call_ok(session, "sandbox_exec_background", command="sleep 300", timeout_ms=300)
        done = await call_ok(session, "sandbox_job_status", job_id=job["job_id"], wait_ms=20000)
        assert done["state"] == "exited" and done["timed_out"] is True


@pytest.mark.parametrize(
    "tool, arguments, needle",
    [
        ("sandbox_job_status", {"job_id": "no-such-job"}, "no-such-job"),
        ("sandbox_job_kill", {"job_id": "no-such-job"}, "no-such-job"),
        ("sandbox_job_kill", {"job_id": "x", "signal": "BOOM"}, "not a signal"),
        ("sandbox_job_status", {"job_id": "x", "wait_ms": 600001}, "wait_ms must be between 1 and 600000"),
        ("sandbox_exec_background", {"command": ""}, "command is empty"),
        ("sandbox_exec_background", {"command": "true", "cwd": "rel"}, "rel"),
        ("sandbox_job_status", {}, "missing field `job_id`"),
    ],
)
async def test_job_errors_are_tool_errors(agent: Agent, tool: str, arguments: dict, needle: str) -> None:
    async with agent_session(agent) as session:
        text = await call_err(session, tool, **arguments)
    assert needle in text


async def test_long_output_tails_point_at_the_log_and_invalid_utf8_is_noted(agent: Agent) -> None:
    async with agent_session(agent) as session:
        job = await call_ok(
            session,
            "sandbox_exec_background",
            command="head -c 100000 /dev/zero | tr '\\0' a; printf 'END\\377'",
        )
        done = await call_ok(session, "sandbox_job_status", job_id=job["job_id"], wait_ms=30000)
    assert done["state"] == "exited" and done["exit_code"] == 0
    assert done["stdout_bytes"] == 100004
    assert done["stdout_tail"].endswith("END\ufffd")
    assert len(done["stdout_tail"]) < 100000
    notes = " ".join(done["notes"])
    assert "not valid UTF-8" in notes
    assert done["stdout_log"] in notes, "the note should say where the whole output is"
