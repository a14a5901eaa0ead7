"""A sandbox_create dropped while it waits for the state lock to save its template's
snapshot does not stop the server: `atoll mcp` serves every call on one thread, and the
dropped create marks its sandbox ready on a thread of its own. The first sandbox of a
shape (a fresh state directory has no template snapshot) boots, then waits for the lock
to save the snapshot; the test holds the lock (`<state>/.lock`) and cancels the call
there. tools/list and sandbox_list still answer; once the lock is let go the sandbox is
running, with no snapshot saved, and sandbox_kill removes it."""

from __future__ import annotations

import fcntl
import json
import os
from pathlib import Path

import anyio
import pytest

from conftest import call_ok, mcp_session, wait_for
from test_sandboxes import need_vm, processes_mentioning, sandbox_dirs
from test_template_build_lock import flock_waiters

pytestmark = pytest.mark.anyio


def booted(state: Path) -> bool:
    """Whether the one sandbox in `state` booted: its record has the agent's version,
    saved once the agent answered, just before the create waits for the lock to save
    the template snapshot."""
    dirs = sandbox_dirs(state)
    if len(dirs) != 1:
        return False
    try:
        record = json.loads((dirs[0] / "sandbox.json").read_text())
    except (OSError, ValueError):  # not written yet, or being replaced
        return False
    return bool(record.get("agent_version")) and not record.get("ready")


async def states(session) -> list[str]:
    return [s["state"] for s in (await call_ok(session, "sandbox_list"))["sandboxes"]]


@pytest.mark.timeout(300)  # one boot under TCG at most, and 20 s for the answers
async def test_a_create_dropped_waiting_for_the_state_lock_leaves_the_server_answering(state_dir: Path) -> None:
    need_vm()
    lock_path = state_dir / ".lock"
    lock = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o600)
    created: list = []
    answered: dict = {}
    running = False
    async with mcp_session(env={"ATOLL_STATE_DIR": str(state_dir)}) as session:
        try:
            try:
                async with anyio.create_task_group() as group:

                    async def create() -> None:
                        created.append(
                            await session.call_tool(
                                "sandbox_create", {"template": "minimal", "name": "first", "boot_timeout_s": 300}
                            )
                        )

                    group.start_soon(create)
                    # The create makes the sandbox's directory under the lock and lets it
                    # go; the test takes it then and keeps it. The create takes it next
                    # after the boot, to save the template snapshot.
                    await anyio.to_thread.run_sync(
                        lambda: wait_for(lambda: sandbox_dirs(state_dir), "the create to make its sandbox", within=60)
                    )
                    await anyio.to_thread.run_sync(lambda: fcntl.flock(lock, fcntl.LOCK_EX))
                    await anyio.to_thread.run_sync(
                        lambda: wait_for(
                            lambda: booted(state_dir) and flock_waiters(lock_path),
                            "the sandbox to boot and the create to wait for the lock",
                            within=240,
                        )
                    )
                    # The SDK sends notifications/cancelled; the server drops the call.
                    group.cancel_scope.cancel()
                assert not created, "the create answered while the state lock was held"
                with anyio.move_on_after(20):
                    answered["tools"] = await session.list_tools()
                    answered["states"] = await states(session)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
                os.close(lock)
            with anyio.move_on_after(20):
                while not running:
                    running = await states(session) == ["running"]
                    await anyio.sleep(0.1)
        finally:
            for sandbox in (await call_ok(session, "sandbox_list"))["sandboxes"]:
                await call_ok(session, "sandbox_kill", sandbox_id=sandbox["id"])
            await anyio.to_thread.run_sync(
                lambda: wait_for(lambda: not processes_mentioning(str(state_dir)), "the VM's processes to end")
            )
        assert "tools" in answered and "states" in answered, (
            "atoll mcp did not answer tools/list and sandbox_list within 20 s after a create "
            "waiting for the state lock was cancelled"
        )
        assert any(t.name == "sandbox_list" for t in answered["tools"].tools)
        assert answered["states"] == ["starting"], answered["states"]
        assert running, "the dropped create's sandbox was not marked ready within 20 s of the lock's release"
        assert (await call_ok(session, "sandbox_list"))["sandboxes"] == []
    assert not sandbox_dirs(state_dir), sandbox_dirs(state_dir)
    # The call was dropped while it waited to save the template snapshot: none was saved.
    saved = state_dir / ".template-snapshots"
    assert not saved.exists() or not any(saved.iterdir()), list(saved.iterdir())
