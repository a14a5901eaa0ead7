"""Authority holes that need no VM to show (issue 31), each attacked from where the
attacker sits, with the sandbox records and snapshot a real one would leave:

- a client handed sandbox `dev` (`--share-sandbox dev`) removes it and makes its own
  `dev`: the others must not take it for the operator's and work in it;
- a server pinned to `dev` uses a snapshot its identity took of an earlier sandbox
  called `dev` (the user's, since removed);
- a client forks or restores a snapshot whose egress rules open loopback (taken by the
  operator, or under an `--allow-private-egress` grant since withdrawn): a sandbox of its
  own would keep rules this server may not grant;
- a client restores its own snapshot into the first sandbox of a shape while that is
  still booting (`starting`), before it is saved as the template snapshot every later
  sandbox of that shape, of every client, starts from; or runs a command in it, writes
  or reads a file, snapshots it, pauses or parks it, or saves it as a template."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from conftest import binary, call_err, call_ok, data_dir, mcp_session

pytestmark = pytest.mark.anyio

OTHER_HTTP_CLIENT = "mcp:http:0123456789abcdef"


def proc_ref(pid: int) -> dict:
    """atoll's identity of a live process: its pid and start time (`/proc/PID/stat` 22)."""
    stat = Path(f"/proc/{pid}/stat").read_text()
    fields = stat[stat.rindex(")") + 2 :].split()
    return {"pid": pid, "start_ticks": int(fields[19])}


def write_record(state_dir: Path, sid: str, name: str, created_by: str | None, **fields) -> Path:
    """A sandbox record as atoll writes it (dead unless `fields` gives it live processes)."""
    d = state_dir / sid
    d.mkdir(mode=0o700)
    record = {
        "id": sid,
        "name": name,
        "template": "minimal",
        "memory_mib": 256,
        "cpus": 1,
        "accel": "tcg",
        "created_unix_ms": 1_700_000_000_000,
        "qemu": None,
        "net_helper": None,
        "creator": None,
        "ready": True,
        "agent_version": None,
        "paused": False,
        "paths": {
            "dir": str(d),
            "qmp_socket": str(d / "qmp.sock"),
            "console_log": str(d / "console.log"),
            "qemu_log": str(d / "qemu.log"),
            "overlay": None,
        },
        **fields,
    }
    if created_by:
        record["created_by"] = created_by
    (d / "sandbox.json").write_text(json.dumps(record))
    return d


def write_snapshot(
    state_dir: Path,
    name: str,
    created_by: str,
    source: tuple[str, str] = ("5eed0001", "earlier"),
    allow_out: list[str] | None = None,
) -> None:
    """A named snapshot that reads as whole (`atoll snapshot ls` lists it), taken of the
    sandbox `source` (id, name)."""
    d = state_dir / ".snapshots" / name
    d.mkdir(parents=True)
    magic = b"QEVM\x00\x00\x00\x03"
    (d / "memory.bin").write_bytes(magic)
    with open(d / "ram.bin", "wb") as ram:
        ram.truncate(1 << 20)
    meta = {
        "format": 3,
        "name": name,
        "source_id": source[0],
        "source_name": source[1],
        "template": "minimal",
        "template_fingerprint": "whatever",
        "memory_mib": 1,
        "cpus": 1,
        "accel": "tcg",
        "qemu_version": "7.2",
        "programs": "",
        "created_unix_ms": 1_700_000_000_000,
        "memory_bytes": len(magic),
        "disk": False,
        "created_by": created_by,
    }
    if allow_out is not None:
        meta["network"] = {"policy": {"allow_out": allow_out, "deny_out": []}, "open_flows": []}
    (d / "snapshot.json").write_text(json.dumps(meta))


async def test_a_shared_name_taken_over_by_another_client_is_not_handed_over(state_dir: Path) -> None:
    env = {"ATOLL_STATE_DIR": str(state_dir)}
    write_record(state_dir, "0aaa0001", "dev", None)

    async with mcp_session("--share-sandbox", "dev", env=env) as stdio:
        assert [s["id"] for s in (await call_ok(stdio, "sandbox_list"))["sandboxes"]] == ["0aaa0001"]
        # Another client (any one handed `dev` may kill it) removes the operator's `dev`
        # and makes its own under that name ...
        for f in (state_dir / "0aaa0001").iterdir():
            f.unlink()
        (state_dir / "0aaa0001").rmdir()
        write_record(state_dir, "0bbb0002", "dev", OTHER_HTTP_CLIENT)
        # ... which is not handed over: it is neither listed nor reached.
        assert (await call_ok(stdio, "sandbox_list"))["sandboxes"] == []
        for tool, args in (("sandbox_exec", {"command": "true"}), ("sandbox_info", {})):
            text = await call_err(stdio, tool, sandbox_id="dev", **args)
            assert "created by another MCP client over HTTP" in text, (tool, text)
        text = await call_err(stdio, "sandbox_exec", command="true", sandbox_id="0bbb0002")
        assert "created by another MCP client over HTTP" in text, text

    # A share of a sandbox there is not is refused at start, saying which.
    run = subprocess.run(
        [str(binary("atoll")), "mcp", "--share-sandbox", "nosuch"],
        env={**os.environ, **env},
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert run.returncode != 0, run
    assert "--share-sandbox nosuch" in run.stderr and "no sandbox is called `nosuch`" in run.stderr, run.stderr


async def test_a_sandbox_still_booting_is_not_restored(state_dir: Path) -> None:
    env = {"ATOLL_STATE_DIR": str(state_dir)}
    # The first sandbox of a shape, booted by this very client (its create still at work:
    # QEMU and the creating process run, it is not ready yet).
    qemu = subprocess.Popen(["sleep", "600"])
    try:
        ref = proc_ref(qemu.pid)
        d = write_record(state_dir, "0ccc0003", "booting", "mcp:stdio", qemu=ref, creator=ref, ready=False)
        before = (d / "sandbox.json").read_text()
        write_snapshot(state_dir, "mine", "mcp:stdio")
        async with mcp_session(env=env) as stdio:
            listed = (await call_ok(stdio, "sandbox_list"))["sandboxes"]
            assert [(s["name"], s["state"]) for s in listed] == [("booting", "starting")], listed
            assert [s["name"] for s in (await call_ok(stdio, "sandbox_snapshot_list"))["snapshots"]] == ["mine"]
            # Nothing reaches it before its create has saved it: no guest tool, snapshot,
            # restore, pause (in memory or to disk) or template save.
            on = {"sandbox_id": "booting"}
            refusals = {}
            for tool, args in (
                ("sandbox_snapshot_restore", {**on, "snapshot": "mine"}),
                ("sandbox_exec", {**on, "command": "touch /tmp/early"}),
                ("sandbox_files_write", {**on, "path": "/tmp/early", "content": "early"}),
                ("sandbox_files_read", {**on, "path": "/etc/hostname"}),
                ("sandbox_snapshot_create", {**on, "name": "early"}),
                ("sandbox_pause", on),
                ("sandbox_pause", {**on, "to_disk": True}),
                ("sandbox_template_create", {"from_sandbox": "booting", "name": "early-template"}),
            ):
                result = await stdio.call_tool(tool, args)
                text = result.content[0].text if result.content else ""
                refused = result.is_error and "sandbox `booting` is still booting" in text
                refusals[f"{tool} {args}"] = "refused" if refused else text
            assert set(refusals.values()) == {"refused"}, refusals
            assert [s["name"] for s in (await call_ok(stdio, "sandbox_snapshot_list"))["snapshots"]] == ["mine"]
            templates = [t["name"] for t in (await call_ok(stdio, "sandbox_template_list"))["templates"]]
            assert "early-template" not in templates, templates
            listed = (await call_ok(stdio, "sandbox_list"))["sandboxes"]
            assert [(s["name"], s["state"]) for s in listed] == [("booting", "starting")], listed
        # Nothing was touched: its VM runs on (not frozen), its record is as it was, and no
        # snapshot or template was made.
        assert qemu.poll() is None
        assert Path(f"/proc/{qemu.pid}/stat").read_text().split(") ")[1][0] != "T"
        assert (d / "sandbox.json").read_text() == before
        assert sorted(p.name for p in (state_dir / ".snapshots").iterdir()) == ["mine"]
        assert not (data_dir() / "templates" / "early-template").exists()
    finally:
        qemu.kill()
        qemu.wait()


async def test_a_pinned_server_uses_no_snapshot_of_an_earlier_sandbox_of_its_name(state_dir: Path) -> None:
    env = {"ATOLL_STATE_DIR": str(state_dir)}
    # The user's stdio server snapshotted its sandbox `dev` (0eee0005), since removed; the
    # operator now pins a server to a new scratch sandbox that is also called `dev`.
    write_record(state_dir, "0ddd0004", "dev", None)
    write_snapshot(state_dir, "old-dev", "mcp:stdio", source=("0eee0005", "dev"))
    write_snapshot(state_dir, "this-dev", "mcp:stdio", source=("0ddd0004", "dev"))
    async with mcp_session(env={**env, "ATOLL_SANDBOX": "dev"}) as pinned:
        listed = [s["name"] for s in (await call_ok(pinned, "sandbox_snapshot_list"))["snapshots"]]
        assert listed == ["this-dev"], listed
        text = await call_err(pinned, "sandbox_snapshot_restore", sandbox_id="dev", snapshot="old-dev")
        assert "snapshot `old-dev` was not" in text and "only the snapshots taken of that very sandbox" in text, text


async def test_a_pinned_server_does_not_follow_its_name_to_another_sandbox(state_dir: Path) -> None:
    env = {"ATOLL_STATE_DIR": str(state_dir)}
    first = write_record(state_dir, "0fff0006", "dev", None)
    async with mcp_session(env={**env, "ATOLL_SANDBOX": "dev"}) as pinned:
        assert [s["id"] for s in (await call_ok(pinned, "sandbox_list"))["sandboxes"]] == ["0fff0006"]
        # The pinned sandbox is removed (the pinned model's own sandbox_kill may do it), and
        # another client makes a sandbox under its name ...
        for f in first.iterdir():
            f.unlink()
        first.rmdir()
        write_record(state_dir, "0abc0007", "dev", OTHER_HTTP_CLIENT)
        # ... which the pinned server neither lists nor reaches, named or by default.
        assert (await call_ok(pinned, "sandbox_list"))["sandboxes"] == []
        for args in ({}, {"sandbox_id": "dev"}, {"sandbox_id": "0abc0007"}):
            result = await pinned.call_tool("sandbox_info", args)
            text = result.content[0].text if result.content else ""
            assert result.is_error, (args, result.structured_content)
            assert "0abc0007" not in text or "acts only on sandbox `0fff0006`" in text, (args, text)


async def test_a_snapshot_whose_rules_open_loopback_is_neither_forked_nor_restored(state_dir: Path) -> None:
    env = {"ATOLL_STATE_DIR": str(state_dir)}
    write_record(state_dir, "0abc0008", "mine", "mcp:stdio")
    # Taken under a grant of 127.0.0.0/8 (or by the operator), now held by this client.
    write_snapshot(state_dir, "opens-loopback", "mcp:stdio", source=("0abc0008", "mine"), allow_out=["127.0.0.1:8765"])
    before = sorted(p.name for p in state_dir.iterdir())
    async with mcp_session(env=env) as stdio:
        text = await call_err(stdio, "sandbox_create", from_snapshot="opens-loopback")
        assert "127.0.0.1:8765" in text and "--allow-private-egress" in text, text
        text = await call_err(stdio, "sandbox_snapshot_restore", sandbox_id="mine", snapshot="opens-loopback")
        assert "127.0.0.1:8765" in text and "--allow-private-egress" in text, text
    # Nothing was made.
    assert sorted(p.name for p in state_dir.iterdir()) == before
    # With the grant, the check passes and the call goes on (to the snapshot's own checks:
    # this one's template fingerprint is made up, so it stops there, not at the rules).
    async with mcp_session("--allow-private-egress", "127.0.0.0/8", env=env) as stdio:
        text = await call_err(stdio, "sandbox_create", from_snapshot="opens-loopback")
        assert "--allow-private-egress" not in text, text
