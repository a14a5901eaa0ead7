"""The sandbox_files_* tools: read, write, list, remove, move, mkdir, with their limits
and errors. The agent runs on this host, so the test checks the real files too."""

from __future__ import annotations

import base64
import os
import stat

import pytest

from conftest import Agent, agent_session, call_err, call_ok, text_of

pytestmark = pytest.mark.anyio

MiB = 1024 * 1024


async def test_write_then_read_text_with_parents_created(agent: Agent) -> None:
    work = agent.scratch("files-text")
    path = work / "a" / "b" / "note.txt"
    async with agent_session(agent) as session:
        wrote = await call_ok(session, "sandbox_files_write", path=str(path), content="héllo\nworld\n")
        assert wrote == {"path": str(path), "bytes_written": 13, "size": 13}
        read = await call_ok(session, "sandbox_files_read", path=str(path))
    assert path.read_text() == "héllo\nworld\n"
    assert read["encoding"] == "utf8"
    assert read["content"] == "héllo\nworld\n"
    assert read["size"] == 13 and read["bytes"] == 13 and read["offset"] == 0 and read["eof"] is True


async def test_binary_round_trips_as_base64(agent: Agent) -> None:
    work = agent.scratch("files-binary")
    data = bytes(range(256)) * 4
    async with agent_session(agent) as session:
        await call_ok(
            session,
            "sandbox_files_write",
            path=str(work / "blob.bin"),
            content=base64.b64encode(data).decode(),
            encoding="base64",
        )
        read = await call_ok(session, "sandbox_files_read", path=str(work / "blob.bin"))
    assert (work / "blob.bin").read_bytes() == data
    assert read["encoding"] == "base64"
    assert base64.b64decode(read["content"]) == data
    assert read["notes"] == ["the bytes are not UTF-8 text, so content is base64"]


async def test_append_and_mode(agent: Agent) -> None:
    work = agent.scratch("files-append")
    path = work / "log.txt"
    async with agent_session(agent) as session:
        await call_ok(session, "sandbox_files_write", path=str(path), content="one\n", mode="0600")
        out = await call_ok(session, "sandbox_files_write", path=str(path), content="two\n", append=True)
        assert out["bytes_written"] == 4 and out["size"] == 8
        await call_ok(session, "sandbox_files_write", path=str(work / "run.sh"), content="#!/bin/sh\n", mode="755")
    assert path.read_text() == "one\ntwo\n"
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE((work / "run.sh").stat().st_mode) == 0o755


async def test_a_slice_that_splits_a_character_says_so(agent: Agent) -> None:
    work = agent.scratch("files-split")
    (work / "accents").write_text("héllo")
    async with agent_session(agent) as session:
        read = await call_ok(session, "sandbox_files_read", path=str(work / "accents"), length=2)
    assert read["encoding"] == "base64" and base64.b64decode(read["content"]) == "héllo".encode()[:2]
    assert "split a UTF-8 character" in read["notes"][0]


async def test_reading_a_slice(agent: Agent) -> None:
    work = agent.scratch("files-slice")
    (work / "digits").write_text("0123456789")
    async with agent_session(agent) as session:
        read = await call_ok(session, "sandbox_files_read", path=str(work / "digits"), offset=3, length=4)
        tail = await call_ok(session, "sandbox_files_read", path=str(work / "digits"), offset=8)
    assert read["content"] == "3456" and read["offset"] == 3 and read["size"] == 10 and read["eof"] is False
    assert tail["content"] == "89" and tail["eof"] is True


async def test_whole_files_over_one_mib_are_refused_with_the_size_and_how_to_slice(agent: Agent) -> None:
    work = agent.scratch("files-big")
    big = work / "big.log"
    big.write_bytes(b"y" * (3 * MiB + 200 * 1024))
    async with agent_session(agent) as session:
        text = await call_err(session, "sandbox_files_read", path=str(big))
        assert "offset" in text and "length" in text
        assert "3.2 MiB" in text or str(big.stat().st_size) in text, text
        # A slice of the same file is fine.
        read = await call_ok(session, "sandbox_files_read", path=str(big), offset=MiB, length=MiB)
        assert read["bytes"] == MiB and read["size"] == big.stat().st_size
        text = await call_err(session, "sandbox_files_read", path=str(big), length=MiB + 1)
        assert "1048576" in text


async def test_a_file_one_byte_over_the_read_limit_is_not_said_to_be_its_size(agent: Agent) -> None:
    work = agent.scratch("files-just-over")
    (work / "f").write_bytes(b"z" * (MiB + 1))
    async with agent_session(agent) as session:
        text = await call_err(session, "sandbox_files_read", path=str(work / "f"))
    assert "1 MiB (1048577 bytes), over the 1 MiB (1048576 bytes) read limit" in text, text


async def test_exactly_one_mib_is_allowed(agent: Agent) -> None:
    work = agent.scratch("files-one-mib")
    (work / "f").write_bytes(b"z" * MiB)
    async with agent_session(agent) as session:
        read = await call_ok(session, "sandbox_files_read", path=str(work / "f"))
    assert read["bytes"] == MiB and read["eof"] is True


async def test_write_limits_and_bad_content(agent: Agent) -> None:
    work = agent.scratch("files-write-limits")
    async with agent_session(agent) as session:
        text = await call_err(session, "sandbox_files_write", path=str(work / "huge"), content="x" * (8 * MiB + 1))
        assert "8 MiB" in text and "append" in text
        # Rounded, both sizes are "8 MiB": the exact sizes say which is larger.
        assert "content is 8 MiB (8388609 bytes), over the 8 MiB (8388608 bytes) inline write limit" in text, text
        text = await call_err(
            session, "sandbox_files_write", path=str(work / "b"), content="not base64!!", encoding="base64"
        )
        assert "base64" in text
        text = await call_err(session, "sandbox_files_write", path=str(work / "m"), content="x", mode="rwx")
        assert "octal" in text
        text = await call_err(session, "sandbox_files_write", path=str(work / "e"), content="x", encoding="utf16")
        assert "utf16" in text
        text = await call_err(session, "sandbox_files_write", path="relative.txt", content="x")
        assert "relative" in text.lower() or "absolute" in text.lower()
        # Exactly 8 MiB is accepted.
        out = await call_ok(session, "sandbox_files_write", path=str(work / "max"), content="x" * (8 * MiB))
        assert out["size"] == 8 * MiB
    assert not (work / "huge").exists() and not (work / "b").exists() and not (work / "m").exists()


async def test_listing_flat_recursive_and_depth_limited(agent: Agent) -> None:
    work = agent.scratch("files-list")
    (work / "d" / "e").mkdir(parents=True)
    (work / "top.txt").write_text("abc")
    (work / "d" / "mid.txt").write_text("x")
    (work / "d" / "e" / "deep.txt").write_text("y")
    os.symlink("top.txt", work / "link")
    async with agent_session(agent) as session:
        flat = await call_ok(session, "sandbox_files_list", path=str(work))
        deep = await call_ok(session, "sandbox_files_list", path=str(work), recursive=True)
        limited = await call_ok(session, "sandbox_files_list", path=str(work), max_depth=2)
    entries = {e["path"]: e for e in flat["entries"]}
    assert set(entries) == {"d", "top.txt", "link"}
    assert entries["top.txt"]["type"] == "file" and entries["top.txt"]["size"] == 3
    assert entries["d"]["type"] == "dir"
    assert entries["link"]["type"] == "symlink" and entries["link"]["symlink_target"] == "top.txt"
    assert len(entries["top.txt"]["mode"]) == 4 and entries["top.txt"]["mtime"].endswith("Z")
    assert flat["truncated"] is False
    assert {e["path"] for e in deep["entries"]} >= {"d/e/deep.txt", "d/mid.txt"}
    limited_paths = {e["path"] for e in limited["entries"]}
    assert "d/mid.txt" in limited_paths and "d/e/deep.txt" not in limited_paths


async def test_names_only_listing_groups_paths_by_type(agent: Agent) -> None:
    work = agent.scratch("files-list-names")
    (work / "d" / "e").mkdir(parents=True)
    (work / "top.txt").write_text("abc")
    (work / "d" / "mid.txt").write_text("x")
    os.symlink("top.txt", work / "link")
    async with agent_session(agent) as session:
        flat = await call_ok(session, "sandbox_files_list", path=str(work), names_only=True)
        deep = await call_ok(session, "sandbox_files_list", path=str(work), recursive=True, names_only=True)
        full = await call_ok(session, "sandbox_files_list", path=str(work), recursive=True)
        result = await session.call_tool("sandbox_files_list", {"path": str(work), "names_only": True})
    assert flat == {
        "path": str(work),
        "files": ["top.txt"],
        "dirs": ["d"],
        "symlinks": ["link"],
        "other": [],
        "truncated": False,
    }
    groups = {"file": "files", "dir": "dirs", "symlink": "symlinks", "other": "other"}
    for kind, key in groups.items():
        assert deep[key] == [e["path"] for e in full["entries"] if e["type"] == kind], kind
    assert deep["dirs"] == ["d", "d/e"] and deep["files"] == ["d/mid.txt", "top.txt"]
    assert text_of(result) == f"{work}: 3 entries (type path)\ndir d\nsymlink link\nfile top.txt"


async def test_listing_text_is_one_line_per_entry(agent: Agent) -> None:
    work = agent.scratch("files-list-text")
    (work / "top.txt").write_text("abc")
    os.symlink("top.txt", work / "link")
    async with agent_session(agent) as session:
        result = await session.call_tool("sandbox_files_list", {"path": str(work)})
    lines = text_of(result).splitlines()
    assert lines[0] == f"{work}: 2 entries (type size mode mtime path)"
    kind, size, mode, mtime, rest = lines[1].split(" ", 4)
    assert (kind, size, rest) == ("symlink", "7", "link -> top.txt") and mtime.endswith("Z")
    kind, size, mode, mtime, rest = lines[2].split(" ", 4)
    assert (kind, size, len(mode), rest) == ("file", "3", 4, "top.txt")


async def test_listing_stops_at_a_thousand_entries_and_says_so(agent: Agent) -> None:
    work = agent.scratch("files-many")
    for i in range(1005):
        (work / f"f{i:04}").touch()
    async with agent_session(agent) as session:
        listing = await call_ok(session, "sandbox_files_list", path=str(work))
    assert listing["truncated"] is True and len(listing["entries"]) == 1000
    assert any("1000 entries" in note for note in listing["notes"])
    async with agent_session(agent) as session:
        names = await call_ok(session, "sandbox_files_list", path=str(work), names_only=True)
    assert names["truncated"] is True and len(names["files"]) == 1000
    assert any("1000 entries" in note for note in names["notes"])


async def test_remove_move_and_mkdir(agent: Agent) -> None:
    work = agent.scratch("files-change")
    async with agent_session(agent) as session:
        made = await call_ok(session, "sandbox_files_mkdir", path=str(work / "x" / "y" / "z"))
        assert made == {"path": str(work / "x" / "y" / "z")}
        await call_ok(session, "sandbox_files_mkdir", path=str(work / "x" / "y" / "z"))
        (work / "x" / "y" / "z" / "f").write_text("content")
        text = await call_err(session, "sandbox_files_remove", path=str(work / "x"))
        assert "recursive" in text
        assert (work / "x").exists()
        await call_ok(session, "sandbox_files_remove", path=str(work / "x"), recursive=True)
        assert not (work / "x").exists()
        text = await call_err(session, "sandbox_files_remove", path=str(work / "x"))
        assert str(work / "x") in text
        (work / "a").write_text("A")
        (work / "b").write_text("B")
        text = await call_err(session, "sandbox_files_move", **{"from": str(work / "a"), "to": str(work / "b")})
        assert "overwrite" in text
        assert (work / "b").read_text() == "B"
        moved = await call_ok(
            session, "sandbox_files_move", **{"from": str(work / "a"), "to": str(work / "b"), "overwrite": True}
        )
        assert moved == {"path": str(work / "b")}
        text = await call_err(session, "sandbox_files_mkdir", path=str(work / "b"), mode="9")
        assert "octal" in text
    assert (work / "b").read_text() == "A" and not (work / "a").exists()


async def test_missing_paths_are_not_found_errors(agent: Agent) -> None:
    work = agent.scratch("files-missing")
    async with agent_session(agent) as session:
        for tool in ("sandbox_files_read", "sandbox_files_list"):
            text = await call_err(session, tool, path=str(work / "nope"))
            assert str(work / "nope") in text, f"{tool}: {text}"
