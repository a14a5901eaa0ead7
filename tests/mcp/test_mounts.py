"""Host folders over MCP: `sandbox_create` mounts only folders under the roots the client
declares (MCP roots/list) or under `atoll mcp --allow-mount DIR`; anything else is a tool
error naming what is allowed. Paths are made canonical first, so a symlink or `..`
inside an allowed folder cannot lead out of it.

One test boots a `minimal` microVM (the template must be built with the 9p modules:
rootfs/setup.sh); the refusals are checked before anything boots."""

from __future__ import annotations

import os
import shutil
import tempfile
from contextlib import asynccontextmanager
from pathlib import Path
from typing import AsyncIterator

import pytest
from mcp import ClientSession, types
from mcp.client.stdio import stdio_client

from conftest import call_err, call_ok, server_params

pytestmark = pytest.mark.anyio


@pytest.fixture
def dirs():
    # Short: the sandbox's Unix sockets live under the state dir.
    base = Path(tempfile.mkdtemp(prefix="atollm-", dir="/tmp"))
    (base / "state").mkdir(mode=0o700)  # atoll refuses a state directory others may enter
    (base / "root" / "proj").mkdir(parents=True)
    (base / "outside").mkdir()
    (base / "root" / "proj" / "hello.txt").write_text("from the host\n")
    if os.geteuid() == 0:
        # QEMU never runs as root: as root, atoll shares read-write only a folder an
        # ordinary user owns.
        for p in (base / "root" / "proj", base / "root" / "proj" / "hello.txt"):
            os.chown(p, 4243, 4243)
    (base / "root" / "escape").symlink_to(base / "outside")
    yield base
    shutil.rmtree(base, ignore_errors=True)


@asynccontextmanager
async def session_with_roots(
    roots: list[Path], *args: str, env: dict[str, str]
) -> AsyncIterator[ClientSession]:
    """`atoll mcp ARGS` driven by a client that declares `roots`."""

    async def list_roots(_context) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri=p.as_uri(), name=p.name) for p in roots])

    async with stdio_client(server_params(*args, env=env)) as (read, write):
        async with ClientSession(read, write, list_roots_callback=list_roots) as session:
            await session.initialize()
            yield session


def mount(host: Path | str, guest: str = "/work", **kw) -> dict:
    return {"host_path": str(host), "guest_path": guest, **kw}


async def test_a_declared_root_can_be_mounted_and_the_guest_sees_it(dirs: Path) -> None:
    env = {"ATOLL_STATE_DIR": str(dirs / "state")}
    async with session_with_roots([dirs / "root"], env=env) as session:
        created = await call_ok(
            session,
            "sandbox_create",
            network="none",
            # read_only defaults to true: the second share is read-only without asking.
            mounts=[mount(dirs / "root" / "proj", read_only=False), mount(dirs / "root" / "proj", "/ro")],
        )
        try:
            assert created["mounts"][0] == {
                "host_path": str((dirs / "root" / "proj").resolve()),
                "guest_path": "/work",
                "read_only": False,
            }
            assert created["mounts"][1]["read_only"] is True, created
            ran = await call_ok(
                session,
                "sandbox_exec",
                sandbox_id=created["id"],
                command="cat /work/hello.txt && echo guest > /work/made.txt && ! touch /ro/x 2>/dev/null",
            )
            assert ran["exit_code"] == 0, ran
            assert ran["stdout"] == "from the host\n"
            assert (dirs / "root" / "proj" / "made.txt").read_text() == "guest\n"
        finally:
            await call_ok(session, "sandbox_kill", sandbox_id=created["id"])


async def test_folders_outside_the_roots_are_refused_naming_the_roots(dirs: Path) -> None:
    env = {"ATOLL_STATE_DIR": str(dirs / "state")}
    root = str((dirs / "root").resolve())
    async with session_with_roots([dirs / "root"], env=env) as session:
        for host in (
            dirs / "outside",
            dirs / "root" / "escape",  # a symlink inside the root, to a folder outside it
            f"{dirs}/root/../outside",  # `..` out of the root
            "/etc",
        ):
            text = await call_err(session, "sandbox_create", network="none", mounts=[mount(host)])
            assert "may not be mounted" in text and f"`{root}`" in text, (host, text)
        text = await call_err(session, "sandbox_create", mounts=[mount(dirs / "root" / "nope")])
        assert "does not exist" in text, text
        text = await call_err(session, "sandbox_create", mounts=[mount(dirs / "root" / "proj", "work")])
        assert "relative" in text, text
        text = await call_err(session, "sandbox_create", disk="10X")
        assert "unknown unit" in text, text
        assert (await call_ok(session, "sandbox_list"))["sandboxes"] == []


async def test_a_folder_holding_the_state_directory_is_refused_even_inside_a_root(dirs: Path) -> None:
    """A client whose root holds atoll's state directory still cannot share that folder
    (its guest would see every sandbox's records and sockets), nor the state directory,
    nor a folder inside it."""
    env = {"ATOLL_STATE_DIR": str(dirs / "state")}
    async with session_with_roots([dirs], env=env) as session:
        for host in (dirs, dirs / "state"):
            text = await call_err(session, "sandbox_create", network="none", mounts=[mount(host)])
            assert "holds atoll's state directory" in text, (host, text)
        # Nor a folder inside it: the secrets store (every secret's value), read-only even.
        (dirs / "state" / ".secrets").mkdir(mode=0o700)
        secrets = mount(dirs / "state" / ".secrets", read_only=True)
        text = await call_err(session, "sandbox_create", network="none", mounts=[secrets])
        assert "is inside atoll's state directory" in text, text
        assert (await call_ok(session, "sandbox_list"))["sandboxes"] == []


async def test_allow_mount_opens_a_folder_for_a_client_without_roots(dirs: Path) -> None:
    env = {"ATOLL_STATE_DIR": str(dirs / "state")}
    allowed = dirs / "outside"
    async with session_with_roots([], "--allow-mount", str(allowed), env=env) as session:
        text = await call_err(session, "sandbox_create", mounts=[mount(dirs / "root" / "proj")])
        assert "may not be mounted" in text and f"`{allowed.resolve()}`" in text, text
        # Accepted by the mount rules: it fails only later, at the template.
        text = await call_err(session, "sandbox_create", template="no-such-template", mounts=[mount(allowed)])
        assert "no-such-template" in text and "mounted" not in text, text
    async with session_with_roots([], env=env) as session:
        text = await call_err(session, "sandbox_create", mounts=[mount(allowed)])
        assert "declared no roots" in text and "--allow-mount" in text, text


async def test_over_http_client_roots_never_count_only_allow_mount(dirs: Path) -> None:
    """A client over HTTP declares `file:///` as its root and asks for / and the home:
    refused, naming the operator's --allow-mount. Only --allow-mount folders count, made
    canonical on the server (a symlink inside leads nowhere else). Nothing boots."""
    from http_server import http_server
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared._httpx_utils import create_mcp_http_client

    async def list_roots(_context) -> types.ListRootsResult:
        return types.ListRootsResult(roots=[types.Root(uri="file:///", name="everything")])

    env = {"ATOLL_STATE_DIR": str(dirs / "state")}
    with http_server("--allow-mount", str(dirs / "root" / "proj"), env=env) as server:
        async with create_mcp_http_client(headers={"Authorization": f"Bearer {server.token}"}) as http:
            async with streamable_http_client(server.url, http_client=http) as (read, write):
                async with ClientSession(read, write, list_roots_callback=list_roots) as session:
                    await session.initialize()
                    for host in ("/", str(Path.home()), str(dirs / "outside"), str(dirs / "root" / "escape")):
                        text = await call_err(session, "sandbox_create", mounts=[mount(host)])
                        assert "may not be mounted" in text, (host, text)
                        assert "only the operator" in text and "--allow-mount" in text, (host, text)
                        assert "roots a client declares never count" in text, (host, text)
    # A sandbox's directory is `<state>/<id>`; dot-entries (`.lock`) are not sandboxes.
    left = [p for p in (dirs / "state").iterdir() if p.is_dir() and not p.name.startswith(".")]
    assert left == [], f"a refused create left a sandbox behind: {left}"
