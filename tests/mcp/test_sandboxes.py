"""Sandbox lifecycle tools, and guest tools reaching a real microVM by sandbox_id.

Each test uses its own ATOLL_STATE_DIR, so it sees only the sandboxes it made. The
microVM test needs the `minimal` template (rootfs/build-minimal.sh) and QEMU; it boots
under KVM or, without it, software emulation."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

import anyio

from conftest import call_err, call_ok, data_dir, mcp_session, wait_for

pytestmark = pytest.mark.anyio


async def test_no_sandboxes_yet_and_unknown_ids_are_tool_errors(state_dir: Path) -> None:
    async with mcp_session(env={"ATOLL_STATE_DIR": str(state_dir)}) as session:
        listed = await call_ok(session, "sandbox_list")
        assert listed == {"sandboxes": []}
        state_dir.mkdir(exist_ok=True)
        for tool in ("sandbox_pause", "sandbox_resume", "sandbox_kill", "sandbox_info"):
            text = await call_err(session, tool, sandbox_id="nope")
            assert "nope" in text, f"{tool}: {text}"
        text = await call_err(session, "sandbox_exec", command="true", sandbox_id="nope")
        assert text == "no sandbox is called `nope`; sandbox_list shows the sandboxes, sandbox_create makes one"
        text = await call_err(session, "sandbox_pause")
        assert "missing field `sandbox_id`" in text


async def test_create_refuses_bad_arguments_before_booting(state_dir: Path) -> None:
    async with mcp_session(env={"ATOLL_STATE_DIR": str(state_dir)}) as session:
        text = await call_err(session, "sandbox_create", boot_timeout_s=601)
        assert "boot_timeout_s must be between 1 and 600 s" in text
        text = await call_err(session, "sandbox_create", template="no-such-template")
        assert "no-such-template" in text
        text = await call_err(session, "sandbox_create", memory_mib=1)
        assert "memory" in text.lower()
        assert (await call_ok(session, "sandbox_list"))["sandboxes"] == []


def sandbox_dirs(state_dir: Path) -> list[Path]:
    """The sandboxes' directories in `state_dir`; dot-directories are the caches kept on
    purpose across sandboxes (`.template-snapshots`, `.snapshots`)."""
    return [p for p in state_dir.iterdir() if p.is_dir() and not p.name.startswith(".")]


def processes_mentioning(text: str) -> list[int]:
    """Processes (QEMU, the sandbox's `atoll net-helper`) whose command line mentions `text`."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                if text.encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                pass
    return found


def need_vm() -> None:
    if not (data_dir() / "templates" / "minimal" / "template.json").exists():
        pytest.skip("the `minimal` template is not built (rootfs/build-minimal.sh)")
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 is not installed")


async def test_a_real_microvm_from_create_to_kill(state_dir: Path) -> None:
    need_vm()
    updates: list[str | None] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        updates.append(message)

    async with mcp_session(env={"ATOLL_STATE_DIR": str(state_dir)}) as session:
        created = await session.call_tool(
            "sandbox_create", {"template": "minimal", "name": "mcp-test", "boot_timeout_s": 300},
            progress_callback=on_progress,
        )
        assert not created.is_error, created.content
        sandbox = created.structured_content
        sid = sandbox["id"]
        try:
            assert sandbox["name"] == "mcp-test" and sandbox["state"] == "running"
            out = await call_ok(session, "sandbox_exec", command="echo $((6*7)); cat /proc/1/comm", sandbox_id=sid)
            assert out["exit_code"] == 0
            assert out["stdout"].splitlines()[0] == "42"
            await call_ok(session, "sandbox_files_write", path="/tmp/w/hello.txt", content="from mcp", sandbox_id="mcp-test")
            read = await call_ok(session, "sandbox_files_read", path="/tmp/w/hello.txt", sandbox_id=sid)
            assert read["content"] == "from mcp"
            info = await call_ok(session, "sandbox_info", sandbox_id=sid)
            assert info["sandbox"]["id"] == sid and info["agent"]["pid1"] is True
            paused = await call_ok(session, "sandbox_pause", sandbox_id=sid)
            assert paused["state"] == "paused"
            # A guest tool resumes a paused sandbox by itself.
            again = await call_ok(session, "sandbox_exec", command="cat /tmp/w/hello.txt", sandbox_id=sid)
            assert again["stdout"] == "from mcp"
            listed = await call_ok(session, "sandbox_list")
            assert [(s["id"], s["state"]) for s in listed["sandboxes"]] == [(sid, "running")]
        finally:
            killed = await session.call_tool("sandbox_kill", {"sandbox_id": sid})
        assert not killed.is_error, killed.content
        assert killed.structured_content["was"] == "running"
        assert (await call_ok(session, "sandbox_list"))["sandboxes"] == []
        await anyio.to_thread.run_sync(
            lambda: wait_for(lambda: not processes_mentioning(str(state_dir)), "the VM's processes to end")
        )
        text = await call_err(session, "sandbox_exec", command="true", sandbox_id=sid)
        assert sid in text
    # Booting under KVM may take less than the first progress tick.
    assert all(m and m.startswith("booting ") for m in updates), updates


async def test_a_server_pinned_to_a_sandbox_needs_no_sandbox_id(state_dir: Path) -> None:
    async with mcp_session(env={"ATOLL_STATE_DIR": str(state_dir), "ATOLL_SANDBOX": "ghost"}) as session:
        text = await call_err(session, "sandbox_exec", command="true")
    assert "ghost" in text


async def test_cancelling_sandbox_create_leaves_nothing_behind(state_dir: Path) -> None:
    need_vm()
    env = {"ATOLL_STATE_DIR": str(state_dir)}
    progressed = anyio.Event()
    created: list = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        progressed.set()

    async with mcp_session(env=env) as session:
        async with anyio.create_task_group() as group:

            async def create() -> None:
                created.append(
                    await session.call_tool(
                        "sandbox_create", {"template": "minimal", "boot_timeout_s": 300}, progress_callback=on_progress
                    )
                )
                progressed.set()

            group.start_soon(create)
            await progressed.wait()
            group.cancel_scope.cancel()
        if created:
            await call_ok(session, "sandbox_kill", sandbox_id=created[0].structured_content["id"])
            pytest.skip("the sandbox booted before the first progress tick; nothing to cancel")

        def nothing_left() -> bool:
            return not sandbox_dirs(state_dir) and not processes_mentioning(str(state_dir))

        await anyio.to_thread.run_sync(lambda: wait_for(nothing_left, "the cancelled sandbox to be cleaned up"))
        assert (await call_ok(session, "sandbox_list"))["sandboxes"] == []
