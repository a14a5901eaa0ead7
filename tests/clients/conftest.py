"""Fixtures: stubs generated from agent.proto by grpcio-tools, and a real sbx-agent on a
Unix socket whose path holds `/` (as every path does), reached by a stock grpcio channel.

The agent comes from $CARGO_TARGET_DIR/debug (or ./target/debug); run.sh builds it.
"""

from __future__ import annotations

import importlib
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from types import ModuleType

import pytest

REPO = Path(__file__).resolve().parents[2]
PROTO_ROOT = REPO / "proto"
PROTO = "agent/v1/agent.proto"


def binary(name: str) -> Path:
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    if not target.is_absolute():
        target = REPO / target
    path = target / "debug" / name
    if not path.exists():
        pytest.fail(f"{path} is not built; run `cargo build -p sbx-agent` first")
    return path


@pytest.fixture(scope="session")
def stubs() -> tuple[ModuleType, ModuleType]:
    """`agent_pb2` and `agent_pb2_grpc`, generated now from the repository's proto, as a
    user of the proto would generate them."""
    from grpc_tools import protoc

    out = Path(tempfile.mkdtemp(prefix="sbx-stubs-"))
    args = ["protoc", f"-I{PROTO_ROOT}", f"--python_out={out}", f"--grpc_python_out={out}", PROTO]
    assert protoc.main(args) == 0, "grpc_tools.protoc failed on agent.proto"
    sys.path.insert(0, str(out))
    try:
        pb2 = importlib.import_module("agent.v1.agent_pb2")
        pb2_grpc = importlib.import_module("agent.v1.agent_pb2_grpc")
    finally:
        sys.path.remove(str(out))
    yield pb2, pb2_grpc
    shutil.rmtree(out, ignore_errors=True)


def connectable(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(str(path))
            return True
        except OSError:
            return False


@pytest.fixture(scope="module")
def agent_socket() -> Path:
    """A running sbx-agent on `unix://<tmp>/x/agent.sock`; yields the socket's path."""
    tmp = Path(tempfile.mkdtemp(prefix="sbx-clients-"))
    (tmp / "x").mkdir()
    sock = tmp / "x" / "agent.sock"
    log = open(tmp / "agent.log", "wb")
    process = subprocess.Popen(
        [str(binary("sbx-agent")), "--listen", f"unix://{sock}", "--job-dir", str(tmp / "jobs")],
        stdin=subprocess.DEVNULL,
        stdout=log,
        stderr=log,
    )
    try:
        deadline = time.monotonic() + 20
        while not connectable(sock) and process.poll() is None:
            if time.monotonic() > deadline:
                pytest.fail("gave up waiting for sbx-agent to listen")
            time.sleep(0.02)
        if process.poll() is not None:
            pytest.fail(f"sbx-agent exited with {process.returncode}: {(tmp / 'agent.log').read_text()}")
        yield sock
    finally:
        process.kill()
        process.wait()
        log.close()
        shutil.rmtree(tmp, ignore_errors=True)
