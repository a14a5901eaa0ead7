"""Every error text `atoll mcp` can give names MCP tools and their arguments, never an RPC
of the agent's proto (the model cannot call those) nor a tool that does not exist; a
missing thing also says what to do next."""

from __future__ import annotations

import re

import pytest

from conftest import REPO, Agent, agent_session, call_err

pytestmark = pytest.mark.anyio

RPCS = set(re.findall(r"^\s*rpc (\w+)", (REPO / "proto/agent/v1/agent.proto").read_text(), re.M))


def cases(agent: Agent) -> list[tuple[str, dict, bool]]:
    """(tool, arguments, names a missing thing) for each failure a model can cause."""
    d = agent.scratch("vocabulary")
    (d / "plain.txt").write_text("x")
    (d / "sub").mkdir()
    (d / "sub" / "f").write_text("f")
    plain, sub, missing = str(d / "plain.txt"), str(d / "sub"), str(d / "missing")
    return [
        ("sandbox_files_read", {"path": str(d)}, False),
        ("sandbox_files_read", {"path": missing}, True),
        ("sandbox_files_read", {"path": "relative/path"}, False),
        ("sandbox_files_read", {"path": plain, "offset": 5}, False),
        ("sandbox_files_list", {"path": plain}, False),
        ("sandbox_files_list", {"path": missing}, True),
        ("sandbox_files_write", {"path": plain + "/child", "content": "data"}, False),
        ("sandbox_files_write", {"path": sub, "content": "data"}, False),
        ("sandbox_files_write", {"path": str(d / "b64"), "content": "!!", "encoding": "base64"}, False),
        ("sandbox_files_write", {"path": str(d / "m"), "content": "x", "mode": "999"}, False),
        ("sandbox_files_remove", {"path": missing}, True),
        ("sandbox_files_remove", {"path": sub}, False),
        ("sandbox_files_remove", {"path": "/", "recursive": True}, False),
        ("sandbox_files_move", {"from": missing, "to": str(d / "to")}, True),
        ("sandbox_files_move", {"from": sub, "to": sub + "/inner"}, False),
        ("sandbox_files_move", {"from": plain, "to": sub}, False),
        ("sandbox_files_mkdir", {"path": plain + "/child"}, False),
        ("sandbox_files_download_dir", {"path": plain}, False),
        ("sandbox_files_download_dir", {"path": missing}, True),
        ("sandbox_exec", {"command": "true", "cwd": missing}, True),
        ("sandbox_exec", {"command": "true", "cwd": plain}, False),
        ("sandbox_exec", {"command": "  "}, False),
        ("sandbox_exec", {"command": "true", "timeout_ms": 700_000}, False),
        ("sandbox_exec_background", {"command": "true", "cwd": missing}, True),
        ("sandbox_job_status", {"job_id": "job-999"}, True),
        ("sandbox_job_kill", {"job_id": "job-999"}, True),
        ("sandbox_job_kill", {"job_id": "job-999", "signal": "BOOM"}, False),
        ("sandbox_info", {"sandbox_id": "no-such-sandbox"}, True),
        ("sandbox_exec", {"command": "true", "unknown_argument": 1}, False),
    ]


async def test_every_error_names_only_mcp_tools(agent: Agent) -> None:
    async with agent_session(agent) as session:
        tools = {tool.name for tool in (await session.list_tools()).tools}
        texts = []
        for tool, arguments, missing_thing in cases(agent):
            text = await call_err(session, tool, **arguments)
            words = set(re.findall(r"\w+", text))
            assert not words & RPCS, f"{tool} {arguments}: names RPC {words & RPCS}: {text}"
            named = set(re.findall(r"\bsandbox_[a-z_]+", text)) - {"sandbox_id"}
            assert named <= tools, f"{tool} {arguments}: names no such tool {named - tools}: {text}"
            if missing_thing:
                assert named, f"{tool} {arguments}: says no tool to use next: {text}"
            texts.append(text)
    # Different failures, not one message repeated.
    assert len(set(texts)) > len(texts) * 3 // 4, texts


async def test_the_reported_messages_point_at_real_tools(agent: Agent) -> None:
    d = agent.scratch("reported")
    (d / "f").write_text("x")
    async with agent_session(agent) as session:
        text = await call_err(session, "sandbox_files_read", path=str(d))
        assert "sandbox_files_list" in text, text
        text = await call_err(session, "sandbox_files_list", path=str(d / "f"))
        assert "sandbox_files_read" in text, text
        text = await call_err(session, "sandbox_files_download_dir", path=str(d / "f"))
        assert "sandbox_files_read" in text, text
        text = await call_err(session, "sandbox_exec", command="true", cwd=str(d / "missing"))
        assert "sandbox_files_mkdir" in text and "cwd" in text, text
        text = await call_err(session, "sandbox_job_status", job_id="job-999")
        assert text.count("sandbox_job_list") == 1, text
