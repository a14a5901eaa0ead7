"""sandbox_files_download_dir (inline zip, cap, skipped symlinks), sandbox_info, and
what a call says when there is no agent to act on."""

from __future__ import annotations

import base64
import io
import os
import zipfile

import pytest

from conftest import Agent, agent_session, call_err, call_ok, mcp_session

pytestmark = pytest.mark.anyio

MiB = 1024 * 1024


async def test_download_dir_returns_a_zip_and_lists_skipped_symlinks(agent: Agent) -> None:
    work = agent.scratch("zip-small")
    (work / "src").mkdir()
    (work / "src" / "main.py").write_text("print('hi')\n")
    (work / "README").write_text("readme\n")
    os.symlink("/etc/passwd", work / "escape")
    async with agent_session(agent) as session:
        out = await call_ok(session, "sandbox_files_download_dir", path=str(work))
    data = base64.b64decode(out["zip_base64"])
    assert out["archive_bytes"] == len(data)
    with zipfile.ZipFile(io.BytesIO(data)) as archive:
        assert archive.read("src/main.py") == b"print('hi')\n"
        assert archive.read("README") == b"readme\n"
        assert not any(name.startswith("escape") for name in archive.namelist())
    assert out["files"] == 2 and out["file_bytes"] == len("print('hi')\n") + len("readme\n")
    assert [s["path"] for s in out["skipped"]] == ["escape"]
    assert out["skipped"][0]["reason"]


async def test_download_dir_over_ten_mib_names_the_atoll_command(agent: Agent) -> None:
    work = agent.scratch("zip-big")
    # Random bytes do not compress, so the zip is as large as the file.
    (work / "noise.bin").write_bytes(os.urandom(11 * MiB))
    async with agent_session(agent) as session:
        text = await call_err(session, "sandbox_files_download_dir", path=str(work))
    assert "10 MiB" in text
    assert f"atoll --agent {agent.address} download {work}" in text, text


async def test_download_dir_of_a_missing_directory(agent: Agent) -> None:
    work = agent.scratch("zip-missing")
    async with agent_session(agent) as session:
        text = await call_err(session, "sandbox_files_download_dir", path=str(work / "nope"))
    assert str(work / "nope") in text


async def test_info_describes_the_agent_and_its_machine(agent: Agent) -> None:
    async with agent_session(agent) as session:
        out = await call_ok(session, "sandbox_info")
    assert out["address"] == agent.address
    assert "sandbox" not in out, "a bare agent address is not a sandbox"
    info = out["agent"]
    assert info["agent_version"]
    assert info["hostname"] == os.uname().nodename
    assert info["kernel"].startswith("Linux")
    assert info["cpus"] >= 1
    assert info["memory_total_bytes"] >= info["memory_available_bytes"] > 0
    assert info["disk_total_bytes"] >= info["disk_free_bytes"]
    assert info["pid1"] is False
    assert info["time"].endswith("Z")


async def test_without_an_agent_tools_list_but_calls_say_how_to_configure() -> None:
    async with mcp_session() as session:
        tools = await session.list_tools()
        assert any(tool.name == "sandbox_exec" for tool in tools.tools)
        text = await call_err(session, "sandbox_exec", command="true")
    assert "sandbox_id" in text and "--agent" in text and "ATOLL_AGENT" in text


async def test_atoll_agent_env_pins_the_agent(agent: Agent) -> None:
    async with mcp_session(env={"ATOLL_AGENT": agent.address}) as session:
        info = await call_ok(session, "sandbox_info")
    assert info["address"] == agent.address


async def test_an_unreachable_agent_is_a_tool_error_naming_the_socket(tmp_path) -> None:
    sock = tmp_path / "gone.sock"
    async with mcp_session("--agent", f"unix://{sock}") as session:
        text = await call_err(session, "sandbox_info")
    assert str(sock) in text
