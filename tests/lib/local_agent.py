"""Shared by the Python suites (tests/mcp, tests/clients; their pytest.ini puts this folder on
the path): the workspace's built binaries, and a real atoll-agent started on a Unix socket.

- `binary(name)`: the path of a binary in $CARGO_TARGET_DIR/debug (or ./target/debug).
- `start_agent(sock, jobs, log)`: an atoll-agent listening on `unix://SOCK`.
- `running_agent(prefix, sock_name)`: the same in a fresh temp dir, for a fixture; killed
  and removed afterwards.
- `wait_for(predicate, what)`: a bounded wait for an event.
- `connectable(path)`: whether something accepts on a Unix socket.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import pytest

REPO = Path(__file__).resolve().parents[2]

# The cargo arguments that build each binary the suites run.
BUILDS = {"atoll": "-p atoll", "atoll-agent": "-p atoll-agent", "netns-world": "-p atoll-tests --bin netns-world"}


def binary(name: str) -> Path:
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target"))
    if not target.is_absolute():
        target = REPO / target
    path = target / "debug" / name
    if not path.exists():
        pytest.fail(f"{path} is not built; run `cargo build {BUILDS.get(name, '--workspace')}` first")
    return path


def wait_for(predicate, what: str, within: float = 20.0, every: float = 0.02) -> None:
    """Polls until `predicate()` is true; fails the test if it never is. A bounded wait
    for an event, not a timing assertion."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            pytest.fail(f"gave up waiting: {what}")
        time.sleep(every)


def connectable(path: Path) -> bool:
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as s:
        try:
            s.connect(str(path))
            return True
        except OSError:
            return False


def start_agent(sock: Path, jobs: Path, log: Path) -> subprocess.Popen[bytes]:
    """An atoll-agent listening on `unix://SOCK`, keeping its jobs' logs in JOBS and
    appending its own output to LOG; returns once it accepts connections. The caller
    kills it; one that never listens is killed here and fails the test."""
    with open(log, "ab") as out:
        process = subprocess.Popen(
            [str(binary("atoll-agent")), "--listen", f"unix://{sock}", "--job-dir", str(jobs)],
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=out,
        )
    try:
        wait_for(lambda: connectable(sock) or process.poll() is not None, "atoll-agent to listen")
    except BaseException:
        process.kill()
        process.wait()
        raise
    if process.poll() is not None:
        pytest.fail(f"atoll-agent exited with {process.returncode}: {log.read_text()}")
    return process


@contextmanager
def running_agent(
    prefix: str, sock_name: str = "agent.sock"
) -> Iterator[tuple[subprocess.Popen[bytes], Path, Path]]:
    """An atoll-agent in a fresh temp dir named PREFIX..., on the socket SOCK_NAME there (its
    parents created), with its jobs in `jobs/` and its output in `agent.log`: yields
    (process, dir, socket); then kills it and removes the dir."""
    tmp = Path(tempfile.mkdtemp(prefix=prefix))
    sock = tmp / sock_name
    try:
        sock.parent.mkdir(parents=True, exist_ok=True)
        process = start_agent(sock, tmp / "jobs", tmp / "agent.log")
        try:
            yield process, tmp, sock
        finally:
            process.kill()
            process.wait()
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
