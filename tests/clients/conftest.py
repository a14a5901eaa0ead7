"""Fixtures: stubs generated from agent.proto by grpcio-tools, and a real atoll-agent on a
Unix socket whose path holds `/` (as every path does), reached by a stock grpcio channel.

The agent comes from $CARGO_TARGET_DIR/debug (or ./target/debug); run.sh builds it.
tests/lib/local_agent.py (on the path by pytest.ini) finds and starts it.
"""

from __future__ import annotations

import importlib
import shutil
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import pytest
from local_agent import REPO, running_agent

PROTO_ROOT = REPO / "proto"
PROTO = "agent/v1/agent.proto"


@pytest.fixture(scope="session")
def stubs() -> tuple[ModuleType, ModuleType]:
    """`agent_pb2` and `agent_pb2_grpc`, generated now from the repository's proto, as a
    user of the proto would generate them."""
    from grpc_tools import protoc

    out = Path(tempfile.mkdtemp(prefix="atoll-stubs-"))
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


@pytest.fixture(scope="module")
def agent_socket() -> Path:
    """A running atoll-agent on `unix://<tmp>/x/agent.sock`; yields the socket's path."""
    with running_agent("atoll-clients-", "x/agent.sock") as (_, _, sock):
        yield sock
