"""sandbox_template_create {dockerfile | image} through the official MCP Python SDK on
real microVMs: a Dockerfile FROM the `debian` template with ARG (build_args), ENV,
WORKDIR, RUN and CMD, started at boot (start) behind a ready check (ready_cmd); and
bad input, each a clear tool error that leaves no template and no VM: an unknown
instruction, a COPY (over MCP there is no build context), an image naming host files,
two sources at once, and a failing RUN."""

from __future__ import annotations

import anyio
import pytest

from conftest import call_err, call_ok, mcp_session, wait_for
from test_sandboxes import need_vm, processes_mentioning
from test_templates_code_metrics import dirs  # noqa: F401 (the fixture)

pytestmark = pytest.mark.anyio

DOCKERFILE = """FROM debian
ARG WHO
ENV GREETING=hello-$WHO
WORKDIR /srv
RUN echo built > /srv/made && echo "RUN saw $WHO"
CMD ["sleep", "1000"]
"""


@pytest.mark.timeout(600)  # five failing builds, then three of debian under TCG (one cached)
async def test_template_from_a_dockerfile_and_bad_builds(dirs) -> None:  # noqa: F811
    need_vm()
    state, data = dirs
    env = {"ATOLL_STATE_DIR": str(state), "ATOLL_DATA_DIR": str(data)}
    async with mcp_session(env=env) as session:

        async def nothing_left() -> None:
            listed = await call_ok(session, "sandbox_template_list")
            assert sorted(t["name"] for t in listed["templates"]) == ["debian", "minimal"], listed
            assert (await call_ok(session, "sandbox_list"))["sandboxes"] == []

        text = await call_err(session, "sandbox_template_create", name="t", dockerfile="FROM debian\nFROBNICATE x\n")
        assert "line 2" in text and "unknown instruction `FROBNICATE`" in text, text
        text = await call_err(session, "sandbox_template_create", name="t", dockerfile="FROM debian\nCOPY passwd /x\n")
        assert "`passwd` does not exist in the build context" in text, text
        text = await call_err(session, "sandbox_template_create", name="t", image="oci:/etc")
        assert "names files on the host" in text, text
        text = await call_err(session, "sandbox_template_create", name="t", dockerfile="FROM docker-archive:/etc/x\n")
        assert "not host files" in text, text
        text = await call_err(session, "sandbox_template_create", name="t", image="debian:12", dockerfile="FROM debian\n")
        assert "exactly one of" in text, text
        await nothing_left()

        text = await call_err(
            session, "sandbox_template_create", name="t", dockerfile="FROM debian\nRUN echo partial > /p; exit 3\n"
        )
        assert "step 2 (Dockerfile line 2)" in text and "exited with code 3" in text, text
        await nothing_left()

        made = await call_ok(
            session,
            "sandbox_template_create",
            name="app",
            dockerfile=DOCKERFILE,
            build_args={"WHO": "mcp"},
            start=True,
            ready_cmd="test -e /srv/made",
        )
        assert made["name"] == "app" and made["from_template"] == "debian" and made["run_steps"] == 1, made
        assert made["cached_steps"] == 0, made
        # The same build again takes its RUN step from the step cache; no_cache runs it again.
        same = dict(name="app", dockerfile=DOCKERFILE, build_args={"WHO": "mcp"}, start=True, replace=True)
        again = await call_ok(session, "sandbox_template_create", ready_cmd="test -e /srv/made", **same)
        assert again["cached_steps"] > 0 and again["replaced"], again
        fresh = await call_ok(session, "sandbox_template_create", ready_cmd="test -e /srv/made", no_cache=True, **same)
        assert fresh["cached_steps"] == 0 and fresh["replaced"], fresh
        listed = await call_ok(session, "sandbox_template_list")
        assert {t["name"]: t["kind"] for t in listed["templates"]}["app"] == "disk", listed
        assert (await call_ok(session, "sandbox_list"))["sandboxes"] == [], "the build VM is gone"

        await call_ok(session, "sandbox_create", template="app", name="a", network="none", boot_timeout_s=300)
        try:
            out = await call_ok(session, "sandbox_exec", sandbox_id="a", command="cat made; echo $GREETING; pwd")
            assert out["stdout"] == "built\nhello-mcp\n/srv\n", out
            jobs = await call_ok(session, "sandbox_job_list", sandbox_id="a")
            assert any("sleep 1000" in j["command"] and j["state"] == "running" for j in jobs["jobs"]), jobs
        finally:
            await session.call_tool("sandbox_kill", {"sandbox_id": "a"})
    await anyio.to_thread.run_sync(
        lambda: wait_for(lambda: not processes_mentioning(str(state)), "the VMs' processes to end")
    )
