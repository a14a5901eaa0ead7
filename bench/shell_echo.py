#!/usr/bin/env python3
"""Keystroke echo round trip in `atoll shell` against `atoll exec -- true`, on one microVM.

Echo: the host side of a real pty (as a terminal emulator) types one byte and waits for
it to come back: host pty -> atoll (raw mode) -> the agent link -> the guest's pty ->
`cat` started in the shell (terminal echo off, byte at a time, so the program echoes it as an editor or a
shell's line editor would) -> back the same way. Floor: the same `cat` on a local pty.
`atoll exec -- true`: the whole command, from starting the atoll process to its exit.

Usage: bench/shell_echo.py [--atoll PATH] [--keys N] [--execs N]   (rows for BENCHMARKS.md)
  (default atoll: target/release/atoll if built, else target/debug/atoll; build it with
   `cargo build --release -p atoll`; the `minimal` template must exist: rootfs/setup.sh)
Prints markdown table rows (p50 and p99).
"""
import argparse
import os
import pty
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CAT = "stty -echo -icanon min 1 time 0; echo READY; exec cat"
# Typed into `atoll shell`: the quotes keep the typed line's echo from showing READY.
CAT_TYPED = "stty -echo -icanon min 1 time 0; echo RE''ADY; exec cat\r"


def pct(samples, p):
    s = sorted(samples)
    return s[min(len(s) - 1, int(len(s) * p))]


def fmt(seconds):
    us = seconds * 1e6
    return f"{us / 1000:.2f} ms" if us >= 10000 else f"{us:.0f} µs"


def read_until(fd, needle, limit=120.0):
    seen = b""
    deadline = time.monotonic() + limit
    while needle not in seen:
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            sys.exit(f"shell_echo: no {needle!r} within {limit} s; got {seen[-300:]!r}")
        seen += os.read(fd, 4096)
    return seen


def echo_round_trips(argv, keys, env=None, typed=None):
    """Runs argv on a new pty (typing `typed` first); returns one round trip per key."""
    pid, fd = pty.fork()
    if pid == 0:
        os.execvpe(argv[0], argv, env or os.environ)
    try:
        if typed:
            os.write(fd, typed.encode())
        read_until(fd, b"READY")
        times = []
        for i in range(keys):
            key = bytes([ord("a") + i % 26])
            t0 = time.perf_counter()
            os.write(fd, key)
            read_until(fd, key, 30.0)
            times.append(time.perf_counter() - t0)
        return times
    finally:
        os.kill(pid, 15)
        os.waitpid(pid, 0)
        os.close(fd)


def main():
    ap = argparse.ArgumentParser()
    release = os.path.join(REPO, "target/release/atoll")
    ap.add_argument("--atoll", default=release if os.path.exists(release) else os.path.join(REPO, "target/debug/atoll"))
    ap.add_argument("--keys", type=int, default=500)
    ap.add_argument("--execs", type=int, default=100)
    a = ap.parse_args()
    state = tempfile.mkdtemp(prefix="atoll-bench-echo-", dir="/tmp")
    env = dict(os.environ, ATOLL_STATE_DIR=state, TERM="xterm")
    env.pop("ATOLL_AGENT", None)
    env.pop("ATOLL_SANDBOX", None)
    atoll = a.atoll
    try:
        subprocess.run([atoll, "create", "--name", "echo", "--net", "none", "--timeout", "240s"],
                       env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        local = echo_round_trips(["sh", "-c", CAT], a.keys)
        guest = echo_round_trips([atoll, "shell", "echo"], a.keys, env, CAT_TYPED)
        execs = []
        for _ in range(a.execs):
            t0 = time.perf_counter()
            subprocess.run([atoll, "-s", "echo", "exec", "--", "true"], env=env, check=True)
            execs.append(time.perf_counter() - t0)
    finally:
        subprocess.run([atoll, "kill", "--all", "--force"], env=env,
                       stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        shutil.rmtree(state, ignore_errors=True)
    print(f"| keystroke echo round trip in `atoll shell` ({a.keys} keys) | "
          f"{fmt(statistics.median(guest))} | {fmt(pct(guest, 0.99))} | "
          f"`atoll exec -- true`, whole command: {fmt(statistics.median(execs))} (p99 {fmt(pct(execs, 0.99))}) | "
          f"{statistics.median(guest) / statistics.median(execs):.2f}x |")
    print(f"| same echo on a local pty (floor) | {fmt(statistics.median(local))} | {fmt(pct(local, 0.99))} | | "
          f"atoll adds {fmt(statistics.median(guest) - statistics.median(local))} |")


if __name__ == "__main__":
    main()
