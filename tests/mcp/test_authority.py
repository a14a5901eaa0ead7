"""Who may act on which sandbox over MCP (issue 31): each sandbox records the face that
created it, and MCP tools act only on the sandboxes their own identity created (every
stdio server of the user shares one identity; each HTTP token is a client of its own),
on those the operator hands over (`--share-sandbox`), or, for a server pinned with
`--sandbox`/ATOLL_SANDBOX, on that one only. Snapshots record who made them and are
used under the same rule; an id prefix is resolved once, among the client's own
sandboxes, and the tool acts on exactly that sandbox; the first sandbox of a machine
shape takes no command until it is saved as the template snapshot. The attacks come
from where an attacker sits: a second HTTP client, another MCP face, a pinned model, a
client racing its own sandboxes. One `minimal` microVM, one snapshot of it, one restore
of the template snapshot."""

from __future__ import annotations

import json
import os
import subprocess
import threading
import time
from pathlib import Path

import anyio
import pytest

from conftest import binary, call_err, call_ok, data_dir, mcp_session
from http_server import http_server, session_client, stateless_client
from test_sandboxes import need_vm

pytestmark = pytest.mark.anyio

TOKEN_A = "client-a-token-" + "0123456789abcdef" * 2
TOKEN_B = "client-b-token-" + "fedcba9876543210" * 2
POISON = "echo poisoned > /tmp/poison; (sleep 100000 &) ; echo ran"


async def create_while_racing_it(url: str, token: str, name: str, state_dir: Path) -> tuple[dict, list[str], list[str], list[str]]:
    """Creates sandbox `name` (the first of its shape: it boots and is saved as the template
    snapshot) while another session of the same client keeps trying to run POISON in it,
    as a model with parallel tool calls would, and lists it between attempts. Returns the
    create's result, the states sandbox_list showed before the create answered (marked
    when the template snapshot was on disk by then), the
    refusals, and the outputs of any attempt that ran and answered before the create did."""
    created: dict = {}
    seen: list[str] = []
    refusals: list[str] = []
    ran: list[str] = []
    async with session_client(url, token) as maker, session_client(url, token) as racer:
        done = anyio.Event()

        async def make() -> None:
            created.update(await call_ok(maker, "sandbox_create", template="minimal", name=name, boot_timeout_s=300))
            done.set()

        async with anyio.create_task_group() as tasks:
            tasks.start_soon(make)
            while not done.is_set():
                listed = await call_ok(racer, "sandbox_list")
                states = [x["state"] for x in listed["sandboxes"] if x["name"] == name]
                if states and not done.is_set():
                    saved = any((state_dir / ".template-snapshots").glob("minimal-*/snapshot.json"))
                    seen.append(f"{states[0]} (template snapshot saved)" if saved else states[0])
                result = await racer.call_tool("sandbox_exec", {"command": POISON, "sandbox_id": name})
                text = result.content[0].text if result.content else ""
                if result.is_error:
                    refusals.append(text)
                elif not done.is_set():
                    # Ran and answered while the create had not answered yet. (One sent
                    # just before the create answered may run right after; that is fine.)
                    ran.append(text)
                await anyio.sleep(0.005)
    return created, seen, refusals, ran


def fake_record(state_dir: Path, like: str, sid: str, name: str, created_by: str | None) -> Path:
    """A dead sandbox record `sid` in the state directory (no VM: a tool that reaches it
    says it is dead), shaped as the real record `like`."""
    record = json.loads((state_dir / like / "sandbox.json").read_text())
    record.update(id=sid, name=name, qemu=None, net_helper=None, creator=None, ready=True, paused=False)
    record.pop("created_by", None)
    if created_by:
        record["created_by"] = created_by
    (state_dir / sid).mkdir(mode=0o700)
    (state_dir / sid / "sandbox.json").write_text(json.dumps(record))
    return state_dir / sid


A_FILE, A_TEXT, A_RULE = "/tmp/a-file", "written-by-a", "a-only.test"


async def refused_every_way(session, sid: str, *why: str) -> None:
    """Asks `session` to act on A's sandbox `owned-a` (id `sid`), by name and by id: an exec
    that would overwrite A_FILE, a read of it, an update of its network rules and a kill.
    Each must be refused, saying each of `why`, without the file's content."""
    for target in ("owned-a", sid):
        for tool, args in (("sandbox_exec", {"command": f"echo taken > {A_FILE}; touch /tmp/reached"}),
                           ("sandbox_files_read", {"path": A_FILE}),
                           ("sandbox_update", {"allow_out": ["taken.test"]}),
                           ("sandbox_kill", {})):
            text = await call_err(session, tool, sandbox_id=target, **args)
            assert all(w in text for w in why), (tool, target, text)
            assert A_TEXT not in text, (tool, target, text)


async def untouched(a, sid: str) -> None:
    """A's sandbox is running, listed to A, and its file and network rules are as A left them."""
    listed = [(s["id"], s["state"]) for s in (await call_ok(a, "sandbox_list"))["sandboxes"]]
    assert listed == [(sid, "running")], listed
    out = await call_ok(a, "sandbox_exec", sandbox_id=sid, command=f"cat {A_FILE}; ls /tmp/reached 2>/dev/null || true")
    assert out["stdout"] == f"{A_TEXT}\n", out
    policy = await call_ok(a, "sandbox_update", sandbox_id=sid)
    assert (policy["allow_out"], policy["deny_out"]) == ([A_RULE], []), policy


def remove_record(d: Path) -> None:
    if d.exists():
        for f in d.iterdir():
            f.unlink()
        d.rmdir()


def other_id(prefix: str, avoid: list[str]) -> str:
    """An 8-hex id that begins with `prefix` and is none of `avoid`."""
    for fill in "fedcba9876543210":
        sid = (prefix + fill * 8)[:8]
        if sid not in avoid:
            return sid
    raise AssertionError(prefix)


async def test_a_client_acts_only_on_its_own_or_handed_over_sandboxes(state_dir: Path, tmp_path: Path) -> None:
    need_vm()
    tokens = tmp_path / "tokens"
    tokens.write_text(f"{TOKEN_A}\n{TOKEN_B}\n")
    tokens.chmod(0o600)
    env = {"ATOLL_STATE_DIR": str(state_dir)}
    with http_server("--token-file", str(tokens), env=env) as server:
        async with session_client(server.url, TOKEN_A) as a, session_client(server.url, TOKEN_B) as b:
            # The first sandbox of its shape takes no command before it is saved as the
            # template snapshot, not even from its own client.
            created, seen, refusals, ran = await create_while_racing_it(server.url, TOKEN_A, "owned-a", state_dir)
            sid = created["id"]
            try:
                # Until it is saved (the VM stopped, its memory written out) it is listed as
                # starting, never running (the record is written before QEMU starts, so the
                # very first look may find it dead).
                assert "starting" in seen and "running" not in seen, seen
                assert ran == [], f"a command ran in the first sandbox of its shape before it was saved: {ran}"
                assert any("still booting" in r for r in refusals), refusals
                # B's sandbox of the same shape restores that template snapshot: nothing of A's
                # attempts is in it.
                later = await call_ok(b, "sandbox_create", template="minimal", name="later-b", boot_timeout_s=300)
                try:
                    assert later["started_from"] == "template snapshot", later
                    out = await call_ok(
                        b, "sandbox_exec", sandbox_id=later["id"],
                        command="test -e /tmp/poison && echo yes || echo no; pgrep -f 'sleep 100000' || true",
                    )
                    assert out["stdout"] == "no\n", out
                    # Metrics with no id cover only the caller's own sandboxes.
                    names = lambda m: sorted(x["name"] for x in m["sandboxes"])  # noqa: E731
                    assert names(await call_ok(b, "sandbox_get_metrics")) == ["later-b"]
                    assert names(await call_ok(a, "sandbox_get_metrics")) == ["owned-a"]
                finally:
                    assert not (await b.call_tool("sandbox_kill", {"sandbox_id": later["id"]})).is_error

                assert [s["name"] for s in (await call_ok(a, "sandbox_list"))["sandboxes"]] == ["owned-a"]
                # A leaves a file and a network rule in its sandbox, for the others to try.
                await call_ok(a, "sandbox_exec", sandbox_id=sid, command=f"echo {A_TEXT} > {A_FILE}")
                await call_ok(a, "sandbox_update", sandbox_id=sid, allow_out=[A_RULE])
                await untouched(a, sid)
                # Client B (another token) sees nothing and may touch nothing of A's.
                assert (await call_ok(b, "sandbox_list"))["sandboxes"] == []
                await refused_every_way(b, sid, "created by another MCP client over HTTP", "--share-sandbox owned-a")
                await untouched(a, sid)
                # B's stateless (2026-07-28) requests are B's too.
                async with stateless_client(server.url, TOKEN_B) as b2:
                    result = await b2.call_tool("sandbox_exec", {"command": "true", "sandbox_id": "owned-a"})
                    assert result.is_error, result
                    assert "created by another MCP client over HTTP" in result.content[0].text, result.content
                # MCP never replaces a built-in template (nor one it did not save), whoever asks.
                for name in ("minimal", "debian"):
                    text = await call_err(a, "sandbox_template_create", from_sandbox="owned-a", name=name, replace=True)
                    assert f"template `{name}` was not saved by this MCP client" in text, text
                    assert "--replace" in text and "new name" in text, text
                # Snapshots are their maker's: B neither lists, forks nor deletes A's.
                snap = await call_ok(a, "sandbox_snapshot_create", sandbox_id=sid, name="snap-a")
                assert [x["name"] for x in (await call_ok(a, "sandbox_snapshot_list"))["snapshots"]] == ["snap-a"]
                assert (await call_ok(b, "sandbox_snapshot_list"))["snapshots"] == []
                for tool, args in (("sandbox_create", {"from_snapshot": "snap-a"}),
                                   ("sandbox_snapshot_delete", {"snapshot": "snap-a"})):
                    text = await call_err(b, tool, **args)
                    assert "snapshot `snap-a` was made by another MCP client over HTTP" in text, (tool, text)
                assert (await call_ok(b, "sandbox_list"))["sandboxes"] == [], "B forked A's snapshot"
                async with mcp_session(env=env) as stdio:
                    assert (await call_ok(stdio, "sandbox_snapshot_list"))["snapshots"] == []
                    text = await call_err(stdio, "sandbox_create", from_snapshot="snap-a")
                    assert "was made by another MCP client over HTTP" in text, text
                assert [x["name"] for x in (await call_ok(a, "sandbox_snapshot_list"))["snapshots"]] == [snap["name"]]
                assert (await call_ok(a, "sandbox_snapshot_delete", snapshot="snap-a"))["deleted"] == "snap-a"
                # The CLI's snapshots are the operator's: handed over only with --share-cli-sandboxes.
                made = subprocess.run(
                    [str(binary("atoll")), "snapshot", "create", sid, "--name", "snap-cli"],
                    capture_output=True, text=True, timeout=300, env={**os.environ, **env}, stdin=subprocess.DEVNULL,
                )
                assert made.returncode == 0, made.stderr
                async with mcp_session(env=env) as stdio:
                    assert (await call_ok(stdio, "sandbox_snapshot_list"))["snapshots"] == []
                    text = await call_err(stdio, "sandbox_snapshot_delete", snapshot="snap-cli")
                    assert "snapshot `snap-cli` was made by the CLI" in text and "--share-cli-sandboxes" in text, text
                async with mcp_session("--share-cli-sandboxes", env=env) as stdio:
                    listed = [x["name"] for x in (await call_ok(stdio, "sandbox_snapshot_list"))["snapshots"]]
                    assert listed == ["snap-cli"], listed
                    assert (await call_ok(stdio, "sandbox_snapshot_delete", snapshot="snap-cli"))["deleted"] == "snap-cli"

                # An id prefix names one sandbox, among the caller's own only. The stdio face
                # owns two dead records whose ids begin as A's does: the prefix is refused as
                # ambiguous, naming those two and not A's.
                prefix = sid[:3]
                mine = other_id(prefix, [sid])
                twin = other_id(prefix, [sid, mine])
                dirs = [fake_record(state_dir, sid, mine, "stdio-own", "mcp:stdio"),
                        fake_record(state_dir, sid, twin, "stdio-twin", "mcp:stdio")]
                try:
                    async with mcp_session(env=env) as stdio:
                        text = await call_err(stdio, "sandbox_exec", command="true", sandbox_id=prefix)
                        assert f"`{prefix}` begins the ids of several of your sandboxes" in text, text
                        assert f"stdio-own ({mine})" in text and f"stdio-twin ({twin})" in text, text
                        assert "owned-a" not in text and sid not in text, text
                        remove_record(dirs.pop())
                        # Now it keeps removing and putting back its own record (as a client
                        # killing and re-creating its own sandbox would) while it asks for the
                        # prefix: however the race falls, the call acts on its own record or is
                        # refused; it never reaches A's sandbox, nor names it.
                        stop = threading.Event()

                        def flap() -> None:
                            away = state_dir / f".away-{mine}"
                            while not stop.is_set():
                                os.rename(dirs[0], away)
                                time.sleep(0.0005)
                                os.rename(away, dirs[0])
                                time.sleep(0.0005)

                        flapper = threading.Thread(target=flap)
                        flapper.start()
                        outcomes: list[str] = []
                        try:
                            for _ in range(60):
                                result = await stdio.call_tool(
                                    "sandbox_exec", {"command": "touch /tmp/reached-by-prefix", "sandbox_id": prefix}
                                )
                                outcomes.append(result.content[0].text if result.is_error else "RAN")
                        finally:
                            stop.set()
                            flapper.join()
                        assert "RAN" not in outcomes, outcomes
                        assert not any("owned-a" in o or sid in o for o in outcomes), outcomes
                        for o in outcomes:
                            assert "stdio-own" in o or f"no sandbox is called `{prefix}`" in o or f"`{mine}`" in o, o
                finally:
                    for d in dirs:
                        remove_record(d)
                out = await call_ok(a, "sandbox_exec", command="test -e /tmp/reached-by-prefix && echo yes || echo no", sandbox_id=sid)
                assert out["stdout"] == "no\n", "a prefix resolved to another client's sandbox"

                # A's sandbox is untouched and still A's.
                out = await call_ok(a, "sandbox_exec", command="echo still-a", sandbox_id=sid)
                assert out["stdout"] == "still-a\n"

                # Another face (stdio) is another identity too ...
                async with mcp_session(env=env) as stdio:
                    assert (await call_ok(stdio, "sandbox_list"))["sandboxes"] == []
                    await refused_every_way(stdio, sid, "created by another MCP client over HTTP", "--share-sandbox owned-a")
                await untouched(a, sid)
                # ... unless the operator hands the sandbox over.
                async with mcp_session("--share-sandbox", "owned-a", env=env) as stdio:
                    assert [s["name"] for s in (await call_ok(stdio, "sandbox_list"))["sandboxes"]] == ["owned-a"]
                    out = await call_ok(stdio, "sandbox_exec", command="echo handed", sandbox_id="owned-a")
                    assert out["stdout"] == "handed\n"

                # A server pinned to another sandbox acts on that one only.
                async with mcp_session(env={**env, "ATOLL_SANDBOX": "scratch"}) as pinned:
                    assert (await call_ok(pinned, "sandbox_list"))["sandboxes"] == []
                    await refused_every_way(pinned, sid, "acts only on sandbox `scratch`", "--sandbox")
                    for name in ("owned-a", sid):
                        text = await call_err(pinned, "sandbox_info", sandbox_id=name)
                        assert "acts only on sandbox `scratch`" in text and "--sandbox" in text, text
                    # ... and makes no sandbox of its own.
                    text = await call_err(pinned, "sandbox_create", template="minimal", name="pinned-made")
                    assert "creates no other" in text, text
                    assert "pinned-made" not in [s["name"] for s in (await call_ok(a, "sandbox_list"))["sandboxes"]]
                await untouched(a, sid)
                # Pinned to A's sandbox, the server acts on it (the operator's grant).
                async with mcp_session(env={**env, "ATOLL_SANDBOX": "owned-a"}) as pinned:
                    assert [s["name"] for s in (await call_ok(pinned, "sandbox_list"))["sandboxes"]] == ["owned-a"]
                    out = await call_ok(pinned, "sandbox_exec", command="echo pinned")
                    assert out["stdout"] == "pinned\n"
            finally:
                killed = await a.call_tool("sandbox_kill", {"sandbox_id": sid})
            assert not killed.is_error, killed.content
            assert (await call_ok(a, "sandbox_list"))["sandboxes"] == []


async def test_a_template_another_client_saved_is_neither_listed_nor_booted(state_dir: Path, tmp_path: Path) -> None:
    """A template an MCP client saved holds that client's disk: other clients neither see
    nor boot it; the operator's templates and the client's own stay usable. A private data
    directory with copies of `minimal` marked as saved by an HTTP client and by stdio."""
    source = data_dir() / "templates" / "minimal"
    if not (source / "template.json").exists():
        pytest.skip("the `minimal` template is not built (rootfs/build-minimal.sh)")
    data = tmp_path / "data"
    for name, saved_by in (("minimal", None), ("theirs", "mcp:http:0123456789abcdef"), ("ours", "mcp:stdio")):
        target = data / "templates" / name
        target.mkdir(parents=True)
        for f in source.iterdir():
            (target / f.name).symlink_to(f)
        meta = json.loads((source / "template.json").read_text())
        meta.pop("saved_by", None)
        if saved_by:
            meta["saved_by"] = saved_by
        (target / "template.json").unlink()
        (target / "template.json").write_text(json.dumps(meta))
    env = {"ATOLL_STATE_DIR": str(state_dir), "ATOLL_DATA_DIR": str(data)}
    async with mcp_session(env=env) as stdio:
        names = [t["name"] for t in (await call_ok(stdio, "sandbox_template_list"))["templates"]]
        assert names == ["minimal", "ours"], names
        text = await call_err(stdio, "sandbox_create", template="theirs", boot_timeout_s=5)
        assert "template `theirs` is not open to this MCP client" in text, text
        assert (await call_ok(stdio, "sandbox_list"))["sandboxes"] == [], "a sandbox of another client's template was made"
    assert not any(p for p in state_dir.iterdir() if not p.name.startswith(".")), list(state_dir.iterdir())


async def test_templates_a_client_may_not_replace_build_from_or_name(state_dir: Path, tmp_path: Path) -> None:
    """The template holes an attacker review found, attacked over MCP and refused before
    any VM boots: a Dockerfile build with replace: true may not overwrite a built-in or
    another client's template; neither a registry image's template (made by `atoll create
    --image`, reachable over MCP only through sandbox_create {image}, which fetches the
    image under the client's registry rules) nor a build's temporary base is listed,
    booted or built FROM, nor is another client's template; a FROM that ARGs, a default
    or a continuation line turn into a host-file transport is refused on the FROM the
    parser made; and the names atoll keeps for itself (`image-`, `build-base-`,
    `build-step-`) are not a client's to take. The client is stdio; "theirs" was saved by
    an HTTP client."""
    source = data_dir() / "templates" / "minimal"
    if not (source / "template.json").exists():
        pytest.skip("the `minimal` template is not built (rootfs/build-minimal.sh)")
    data = tmp_path / "data"
    image_template = "image-0123456789abcdef"
    made = (("minimal", None), ("theirs", "mcp:http:0123456789abcdef"), ("ours", "mcp:stdio"),
            (image_template, None), ("build-base-1-0", None))
    for name, saved_by in made:
        target = data / "templates" / name
        target.mkdir(parents=True)
        for f in source.iterdir():
            (target / f.name).symlink_to(f)
        meta = json.loads((source / "template.json").read_text())
        meta.pop("saved_by", None)
        if saved_by:
            meta["saved_by"] = saved_by
        (target / "template.json").unlink()
        (target / "template.json").write_text(json.dumps(meta))
    (data / "templates" / image_template / "from-image").write_text("sha256:0123456789abcdef" + "0" * 48)
    before = {n: (data / "templates" / n / "template.json").read_text() for n, _ in made}
    env = {"ATOLL_STATE_DIR": str(state_dir), "ATOLL_DATA_DIR": str(data)}
    async with mcp_session(env=env) as stdio:
        # 1. replace: true on a built-in or another client's template, whatever the FROM.
        for name in ("minimal", "theirs"):
            for base in ("ours", "minimal", "busybox"):
                text = await call_err(stdio, "sandbox_template_create", name=name, replace=True,
                                      dockerfile=f"FROM {base}\nRUN true\n")
                assert f"template `{name}` was not saved by this MCP client" in text, (name, base, text)
        # 2. An image's template and a build's temporary are neither listed nor booted.
        names = [t["name"] for t in (await call_ok(stdio, "sandbox_template_list"))["templates"]]
        assert names == ["minimal", "ours"], names
        for name in (image_template, "build-base-1-0", "theirs"):
            text = await call_err(stdio, "sandbox_create", template=name, boot_timeout_s=5)
            assert f"template `{name}` is not open to this MCP client" in text, (name, text)
        # 2, 3. Nor built FROM (another client's template, an image's, a temporary).
        for base in (image_template, "build-base-1-0", "theirs"):
            text = await call_err(stdio, "sandbox_template_create", name="attack",
                                  dockerfile=f"FROM {base}\nRUN true\n")
            assert f"FROM {base}: over MCP, FROM takes a registry image, an installed template" in text, (base, text)
        # 4. Host-file transports the raw text hides: a default, a build arg, a continuation.
        for dockerfile, build_args, seen in (
            ("FROM ${X:-oci:/etc}\nRUN true\n", {}, "oci:/etc"),
            ("ARG B=busybox\nFROM $B\nRUN true\n", {"B": "docker-archive:/etc/passwd"}, "docker-archive:/etc/passwd"),
            ("FROM \\\n  oci-archive:/etc/passwd\nRUN true\n", {}, "oci-archive:/etc/passwd"),
        ):
            text = await call_err(stdio, "sandbox_template_create", name="attack", dockerfile=dockerfile,
                                  build_args=build_args)
            assert f"FROM {seen}: over MCP, FROM takes a registry image" in text, (dockerfile, text)
            assert "not host files" in text, text
        # 5. The names atoll keeps for itself.
        for name in ("image-0000000000000000", "build-base-9-9", "build-step-9-9"):
            # (from_sandbox meets the same check, after its sandbox is resolved.)
            for how in ({"image": "busybox"}, {"dockerfile": "FROM ours\nRUN true\n"}):
                text = await call_err(stdio, "sandbox_template_create", name=name, **how)
                assert f"template name `{name}`: names beginning `image-`" in text, (name, how, text)
        assert (await call_ok(stdio, "sandbox_list"))["sandboxes"] == [], "a sandbox was made"
    after = {n: (data / "templates" / n / "template.json").read_text() for n, _ in made}
    assert after == before, "a template changed"
    assert sorted(p.name for p in (data / "templates").iterdir()) == sorted(n for n, _ in made)
    assert not any(p for p in state_dir.iterdir() if not p.name.startswith(".")), list(state_dir.iterdir())
