"""A stock grpcio client, as someone scripting the agent from Python writes it:
`grpc.insecure_channel("unix:///path/agent.sock")` and generated stubs, no options.

grpcio sends the socket path, percent-encoded, as `:authority`; the agent must serve
it like any other request (issue 18.1).
"""

from __future__ import annotations

import grpc
import pytest


@pytest.fixture
def stub(stubs, agent_socket):
    _, pb2_grpc = stubs
    with grpc.insecure_channel(f"unix://{agent_socket}") as channel:
        yield pb2_grpc.AgentStub(channel)


def test_info(stubs, stub):
    pb2, _ = stubs
    info = stub.Info(pb2.InfoRequest(), timeout=30)
    assert info.agent_version, info


def test_exec_returns_output_and_exit_code(stubs, stub):
    pb2, _ = stubs
    command = pb2.Command(argv=["sh", "-c", "echo out; echo err >&2; exit 3"])
    reply = stub.Exec(pb2.ExecRequest(command=command), timeout=30)
    assert reply.stdout.data == b"out\n"
    assert reply.stderr.data == b"err\n"
    assert reply.status.code == 3, reply


def test_exec_stream_feeds_stdin_and_streams_output(stubs, stub):
    pb2, _ = stubs

    def inputs():
        start = pb2.ExecRequest(command=pb2.Command(argv=["cat"]))
        yield pb2.ExecStreamInput(start=start)
        yield pb2.ExecStreamInput(stdin=b"hello over a stream\n")
        yield pb2.ExecStreamInput(stdin_eof=True)

    out = b""
    exited = None
    for event in stub.ExecStream(inputs(), timeout=30):
        kind = event.WhichOneof("event")
        if kind == "stdout":
            out += event.stdout
        elif kind == "exited":
            exited = event.exited
    assert out == b"hello over a stream\n"
    assert exited is not None and exited.code == 0


def test_read_file_streams_its_chunks(stubs, stub, agent_socket):
    pb2, _ = stubs
    path = agent_socket.parent / "greeting.txt"
    path.write_bytes(b"x" * 300_000)
    data = b"".join(c.data for c in stub.ReadFile(pb2.ReadFileRequest(path=str(path)), timeout=30))
    assert data == b"x" * 300_000
