"""An MCP client must not pull with the operator's registry logins. A real registry
(Debian's `docker-registry`, on loopback over TLS with a certificate made here) requires
a password (htpasswd, bcrypt); an image holding a "private" file is pushed there, and the
credentials are put where skopeo's default lookup finds them for the server
(REGISTRY_AUTH_FILE in its environment), as an operator's `docker login` would. Through
the official MCP Python SDK, `sandbox_template_create {image}` and a Dockerfile FROM that
image are refused with an authentication error naming --registry-credentials, and leave no
template, no VM and nothing in the image cache, and so is `sandbox_create {image}`; a
server started with `--registry-credentials` builds the template (one build VM boots),
and a sandbox of it reads the private file; `sandbox_create {image}` there builds the
image's template (with progress notifications) and boots it. With that template in place,
an anonymous client's `sandbox_create {image}`, by tag or by digest, is still refused and
makes nothing."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import os
import shutil
import socket
import subprocess
import tarfile
import tempfile
from pathlib import Path

import anyio
import pytest

from conftest import call_err, call_ok, mcp_session, wait_for
from test_sandboxes import need_vm, processes_mentioning
from test_templates_code_metrics import dirs  # noqa: F401 (the fixture)

pytestmark = pytest.mark.anyio

USER, PASSWORD = "operator", "s3cret-pass"
SECRET = b"only-with-the-operator-login\n"


def need_tools() -> None:
    for tool in ("docker-registry", "skopeo", "htpasswd", "openssl"):
        if shutil.which(tool) is None:
            pytest.fail(f"`{tool}` is not installed; rootfs/setup.sh --with-test-tools installs it")


def blob(layout: Path, media_type: str, data: bytes) -> dict:
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs/sha256").mkdir(parents=True, exist_ok=True)
    (layout / "blobs/sha256" / digest).write_bytes(data)
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def private_image(layout: Path) -> None:
    """An OCI layout (tag `1`): a busybox root and /private/secret."""
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w") as tar:

        def add(name: str, data: bytes | None = None, mode: int = 0o644, link: str | None = None) -> None:
            info = tarfile.TarInfo(name)
            info.mtime = 1_700_000_000
            if link is not None:
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, link, 0o777
                tar.addfile(info)
            elif data is None:
                info.type, info.mode = tarfile.DIRTYPE, 0o755
                tar.addfile(info)
            else:
                info.size, info.mode = len(data), mode
                tar.addfile(info, io.BytesIO(data))

        add("bin/")
        add("bin/busybox", Path("/bin/busybox").read_bytes(), 0o755)
        for applet in ("sh", "cat", "ls", "sync"):
            add(f"bin/{applet}", link="busybox")
        add("etc/")
        add("etc/passwd", b"root:x:0:0::/root:/bin/sh\n")
        add("etc/group", b"root:x:0:\n")
        add("private/")
        add("private/secret", SECRET)
    plain = raw.getvalue()
    layer = blob(layout, "application/vnd.oci.image.layer.v1.tar+gzip", gzip.compress(plain, mtime=0))
    config = {
        "architecture": "amd64",
        "os": "linux",
        "config": {"Env": ["PATH=/bin"], "WorkingDir": "/"},
        "rootfs": {"type": "layers", "diff_ids": [f"sha256:{hashlib.sha256(plain).hexdigest()}"]},
    }
    config_desc = blob(layout, "application/vnd.oci.image.config.v1+json", json.dumps(config).encode())
    manifest = {
        "schemaVersion": 2,
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "config": config_desc,
        "layers": [layer],
    }
    desc = blob(layout, "application/vnd.oci.image.manifest.v1+json", json.dumps(manifest).encode())
    desc["annotations"] = {"org.opencontainers.image.ref.name": "1"}
    (layout / "index.json").write_text(json.dumps({"schemaVersion": 2, "manifests": [desc]}))
    (layout / "oci-layout").write_text('{"imageLayoutVersion":"1.0.0"}')


@pytest.fixture
def registry():
    """A password-protected registry on 127.0.0.1 over TLS: yields (image reference,
    environment whose skopeo lookup trusts it and holds the login)."""
    need_tools()
    work = Path(tempfile.mkdtemp(prefix="atoll-reg-", dir="/tmp"))
    run = lambda *a, **kw: subprocess.run(a, check=True, capture_output=True, **kw)  # noqa: E731
    run(
        "openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:P-256", "-nodes",
        "-days", "2", "-subj", "/CN=127.0.0.1", "-addext", "subjectAltName=IP:127.0.0.1",
        "-keyout", str(work / "key.pem"), "-out", str(work / "cert.pem"),
    )  # fmt: skip
    (work / "htpasswd").write_bytes(run("htpasswd", "-Bbn", USER, PASSWORD).stdout)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    (work / "config.yml").write_text(
        f"""version: 0.1
log:
  level: error
storage:
  filesystem:
    rootdirectory: {work / "storage"}
auth:
  htpasswd:
    realm: atoll-test
    path: {work / "htpasswd"}
http:
  addr: 127.0.0.1:{port}
  tls:
    certificate: {work / "cert.pem"}
    key: {work / "key.pem"}
"""
    )
    server = subprocess.Popen(
        ["docker-registry", "serve", str(work / "config.yml")],
        stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:

        def listening() -> bool:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                return True
            except OSError:
                return False

        wait_for(listening, "the registry to listen", within=30)
        image = f"127.0.0.1:{port}/team/private:1"
        private_image(work / "layout")
        run(
            "skopeo", "copy", "--quiet", "--dest-tls-verify=false", "--dest-creds", f"{USER}:{PASSWORD}",
            f"oci:{work / 'layout'}:1", f"docker://{image}",
        )  # fmt: skip
        # The operator's login, where skopeo's default lookup finds it.
        login = base64.b64encode(f"{USER}:{PASSWORD}".encode()).decode()
        (work / "auth.json").write_text(json.dumps({"auths": {f"127.0.0.1:{port}": {"auth": login}}}))
        env = {"REGISTRY_AUTH_FILE": str(work / "auth.json"), "SSL_CERT_FILE": str(work / "cert.pem")}
        # The world is what the test needs: the registry refuses an anonymous pull and
        # the default lookup in this environment (what `atoll mcp` inherits) passes.
        inspect = ["skopeo", "inspect", "--raw", f"docker://{image}"]
        anonymous = subprocess.run([*inspect, "--no-creds"], capture_output=True, env={**os.environ, **env})
        assert anonymous.returncode != 0 and b"authentication required" in anonymous.stderr, anonymous
        subprocess.run(inspect, check=True, capture_output=True, env={**os.environ, **env})
        yield image, env
    finally:
        server.kill()
        server.wait()
        shutil.rmtree(work, ignore_errors=True)


async def test_mcp_pulls_anonymously_unless_the_operator_grants_registry_credentials(dirs, registry) -> None:  # noqa: F811
    need_vm()
    state, data = dirs
    image, registry_env = registry
    env = {"ATOLL_STATE_DIR": str(state), "ATOLL_DATA_DIR": str(data), **registry_env}

    async with mcp_session(env=env) as session:
        text = await call_err(session, "sandbox_template_create", name="stolen", image=image)
        assert "anonymously" in text and "authentication required" in text, text
        assert "--registry-credentials" in text, text
        text = await call_err(session, "sandbox_template_create", name="stolen", dockerfile=f"FROM {image}\n")
        assert f"FROM {image}" in text and "anonymously" in text and "authentication required" in text, text
        # sandbox_create {image} follows the same rule (the same fetch as atoll create --image).
        text = await call_err(session, "sandbox_create", image=image, network="none")
        assert "anonymously" in text and "authentication required" in text, text
        assert "--registry-credentials" in text, text
        listed = await call_ok(session, "sandbox_template_list")
        assert sorted(t["name"] for t in listed["templates"]) == ["debian", "minimal"], listed
        assert (await call_ok(session, "sandbox_list"))["sandboxes"] == []
    refs = data / "images/refs"
    assert not refs.exists() or not any(refs.iterdir()), "nothing was fetched"
    blobs = data / "images/blobs/sha256"
    assert not blobs.exists() or not any(blobs.iterdir()), "no blob of the image was fetched"

    async with mcp_session("--registry-credentials", env=env) as session:
        made = await call_ok(session, "sandbox_template_create", name="granted", image=image)
        assert made["from_image"].startswith(f"{image}@sha256:"), made
        by_digest = image.rsplit(":", 1)[0] + "@" + made["from_image"].rsplit("@", 1)[1]
        listed = await call_ok(session, "sandbox_template_list")
        assert "granted" in [t["name"] for t in listed["templates"]], listed
        await call_ok(session, "sandbox_create", template="granted", name="g", network="none", boot_timeout_s=300)
        try:
            out = await call_ok(session, "sandbox_exec", sandbox_id="g", command="cat /private/secret")
            assert out["stdout"] == SECRET.decode(), out
        finally:
            await session.call_tool("sandbox_kill", {"sandbox_id": "g"})

        # A background build returns at once; sandbox_template_list shows it building,
        # then ready, or failed with the reason (and nothing installed).
        async def status_of(name: str) -> dict:
            listed = await call_ok(session, "sandbox_template_list")
            return next(t for t in listed["templates"] if t["name"] == name)

        async def settled(name: str) -> dict:
            for _ in range(600):
                view = await status_of(name)
                if view["status"] != "building":
                    return view
                await anyio.sleep(0.5)
            raise AssertionError(f"{name} still building after 300 s")

        nope = image.rsplit(":", 1)[0] + ":nope"
        started = anyio.current_time()
        made = await call_ok(session, "sandbox_template_create", name="bad-bg", image=nope, background=True)
        assert made["status"] == "building" and anyio.current_time() - started < 10, made
        view = await settled("bad-bg")
        assert view["status"] == "failed" and "nope" in view["problem"], view
        assert "manifest unknown" in view["problem"] or "not found" in view["problem"], view
        assert not (data / "templates/bad-bg").exists()
        text = await call_err(session, "sandbox_template_create", name="granted", image=image, background=True)
        assert "already exists" in text, text
        made = await call_ok(session, "sandbox_template_create", name="bg", image=image, background=True)
        assert made["status"] == "building", made
        assert (await status_of("bg"))["status"] in ("building", "ready")
        view = await settled("bg")
        assert view["status"] == "ready" and view["kind"] == "disk" and view["size_bytes"] > 0, view
        assert "problem" not in view, view

        # sandbox_create {image}: the image's template is built (progress is reported
        # while it is fetched and built) and a sandbox boots from it.
        progress: list[tuple[float, str | None]] = []

        async def on_progress(done: float, total: float | None, message: str | None) -> None:
            progress.append((done, message))

        result = await session.call_tool(
            "sandbox_create",
            {"image": image, "name": "direct", "network": "none", "boot_timeout_s": 300},
            progress_callback=on_progress,
        )
        assert not result.is_error, result
        made = result.structured_content
        assert made["template"].startswith("image-") and len(made["template"]) == 22, made
        image_template = made["template"]
        assert any(m and "fetching the image and building its template" in m for _, m in progress), progress
        assert any(m and m.startswith("booting") for _, m in progress), progress
        values = [p for p, _ in progress]
        assert values == sorted(values) and len(set(values)) == len(values), f"progress must increase: {progress}"
        try:
            out = await call_ok(session, "sandbox_exec", sandbox_id="direct", command="cat /private/secret")
            assert out["stdout"] == SECRET.decode(), out
        finally:
            await session.call_tool("sandbox_kill", {"sandbox_id": "direct"})
    await anyio.to_thread.run_sync(
        lambda: wait_for(lambda: not processes_mentioning(str(state)), "the VMs' processes to end")
    )

    # The image's template now exists, made from the image under the grant: an anonymous
    # client is still refused the image, by tag and by digest, and nothing is made.
    assert (data / "templates" / image_template / "from-image").is_file()
    tree = lambda d: sorted(str(p.relative_to(d)) for p in d.rglob("*"))  # noqa: E731
    templates, cache, records = tree(data / "templates"), tree(data / "images"), sorted(os.listdir(state))
    async with mcp_session(env=env) as session:
        for ref in (image, by_digest):
            text = await call_err(session, "sandbox_create", image=ref, name="anon", network="none", boot_timeout_s=300)
            assert "anonymously" in text and "authentication required" in text, (ref, text)
            assert "--registry-credentials" in text, (ref, text)
        assert (await call_ok(session, "sandbox_list"))["sandboxes"] == []
    assert tree(data / "templates") == templates, "a template changed"
    assert tree(data / "images") == cache, "the image cache changed"
    assert sorted(os.listdir(state)) == records, "a sandbox record was made"
    assert not processes_mentioning(str(state))
