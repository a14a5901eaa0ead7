"""A Dockerfile build over MCP that waits for the state lock does not stop the server:
`atoll mcp` serves every call on one thread, and the build's step cache waits for the
lock off it. The test process holds the state directory's lock (`<state>/.lock`) while
a rebuild installs its cached result; tools/list and sandbox_list still answer, and
the build finishes once the lock is let go."""

from __future__ import annotations

import fcntl
import os
from pathlib import Path

import anyio
import pytest

from conftest import call_ok, mcp_session, wait_for
from test_sandboxes import need_vm, processes_mentioning
from test_templates_code_metrics import dirs  # noqa: F401 (the fixture)

pytestmark = pytest.mark.anyio

DOCKERFILE = "FROM debian\nRUN echo built > /made\n"


def flock_waiters(path: Path) -> list[int]:
    """The processes /proc/locks shows waiting for a flock on `path` (blocked lines
    read `N: -> FLOCK ADVISORY WRITE PID MAJ:MIN:INODE START END`)."""
    inode = str(path.stat().st_ino)
    waiters = []
    for line in Path("/proc/locks").read_text().splitlines():
        fields = line.split()
        if len(fields) >= 7 and fields[1] == "->" and fields[2] == "FLOCK" and fields[6].split(":")[-1] == inode:
            waiters.append(int(fields[5]))
    return waiters


def staged(data: Path) -> list[Path]:
    """The staging directories of a cached install of template `app`."""
    return [p for p in (data / "templates").iterdir() if p.name.startswith(".app.cached-")]


@pytest.mark.timeout(600)  # one build of debian under TCG, then a cached one
async def test_a_build_waiting_for_the_state_lock_leaves_the_server_answering(dirs) -> None:  # noqa: F811
    need_vm()
    state, data = dirs
    env = {"ATOLL_STATE_DIR": str(state), "ATOLL_DATA_DIR": str(data)}
    async with mcp_session(env=env) as session:
        first = await call_ok(session, "sandbox_template_create", name="app", dockerfile=DOCKERFILE)
        assert first["run_steps"] == 1 and first["cached_steps"] == 0, first

        lock_path = state / ".lock"
        lock = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX)
            rebuilt: dict = {}
            answered: dict = {}

            async def rebuild() -> None:
                rebuilt.update(
                    await call_ok(session, "sandbox_template_create", name="app", dockerfile=DOCKERFILE, replace=True)
                )

            async with anyio.create_task_group() as group:
                group.start_soon(rebuild)
                # The rebuild takes its one RUN step from the cache: it stages the cached
                # disk beside the templates, then waits for the state lock to check the
                # snapshot quota.
                await anyio.to_thread.run_sync(
                    lambda: wait_for(
                        lambda: staged(data) and flock_waiters(lock_path), "the build to wait for the lock"
                    ),
                )
                with anyio.move_on_after(20):
                    answered["tools"] = await session.list_tools()
                    answered["sandboxes"] = await call_ok(session, "sandbox_list")
                assert not rebuilt, "the rebuild finished while the state lock was held"
                fcntl.flock(lock, fcntl.LOCK_UN)
        finally:
            os.close(lock)
        assert "tools" in answered and "sandboxes" in answered, (
            "atoll mcp did not answer tools/list and sandbox_list within 20 s while a Dockerfile build waited for the state lock"
        )
        assert any(t.name == "sandbox_list" for t in answered["tools"].tools)
        assert answered["sandboxes"]["sandboxes"] == []
        assert rebuilt["cached_steps"] == 2 and rebuilt["run_steps"] == 0 and rebuilt["replaced"], rebuilt
        assert not staged(data), "the cached disk was staged and left there"
    await anyio.to_thread.run_sync(
        lambda: wait_for(lambda: not processes_mentioning(str(state)), "the VMs' processes to end")
    )
