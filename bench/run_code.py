"""sandbox_run_code against sandbox_exec of the same interpreter line, per call, with
the official MCP Python SDK (stdio client) driving `atoll mcp` against a real atoll-agent.

Rerun (from the repository root, after `cargo build --release -p atoll -p atoll-agent` and
`tests/mcp/run.sh --co -q` once, which makes .venv with the SDK):

    .venv/bin/python bench/run_code.py [--iterations 40] [--agent ADDR] [--target release]

Without --agent it starts target/<target>/atoll-agent on a Unix socket in a temp dir (the
interpreters are then the host's); with --agent hvsock:///.../vm.vsock:1024 it measures
a booted sandbox. Every result is checked (exit code 0, the expected output) before it
counts. Prints one Markdown table row per figure.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import anyio
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

REPO = Path(__file__).resolve().parents[1]

CASES = [
    # (label, run_code arguments, the same line for sandbox_exec, expected stdout)
    ("python `print(6*7)`", {"language": "python", "code": "print(6*7)"}, "python3 -c 'print(6*7)'", "42\n"),
    ("sh `echo $((6*7))`", {"language": "sh", "code": "echo $((6*7))"}, "echo $((6*7))", "42\n"),
]


def pct(samples: list[float], q: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def fmt(seconds: float) -> str:
    return f"{seconds * 1e6:.0f} µs" if seconds < 0.01 else f"{seconds * 1e3:.1f} ms"


async def timed(session: ClientSession, tool: str, args: dict, expect: str) -> float:
    start = time.perf_counter()
    result = await session.call_tool(tool, args)
    took = time.perf_counter() - start
    out = result.structured_content or {}
    if result.is_error or out.get("stdout") != expect or out.get("exit_code") != 0:
        raise SystemExit(f"{tool} {args} did not do what was asked: {result.model_dump_json()[:300]}")
    return took


async def bench(atoll: Path, agent: str, iterations: int) -> None:
    params = StdioServerParameters(command=str(atoll), args=["mcp", "--agent", agent], env=dict(os.environ))
    async with stdio_client(params) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            print("| Figure | p50 | p99 | Against | Ratio |")
            print("|---|---|---|---|---|")
            for label, code_args, line, expect in CASES:
                runs: dict[str, list[float]] = {"exec": [], "run_code": []}
                for i in range(iterations + 5):
                    # Interleaved, so that the machine's noise hits both alike.
                    e = await timed(session, "sandbox_exec", {"command": line}, expect)
                    r = await timed(session, "sandbox_run_code", code_args, expect)
                    if i >= 5:
                        runs["exec"].append(e)
                        runs["run_code"].append(r)
                e50, r50 = statistics.median(runs["exec"]), statistics.median(runs["run_code"])
                print(f"| {label}: `sandbox_exec` of the same line | {fmt(e50)} | {fmt(pct(runs['exec'], 0.99))} | | |")
                print(
                    f"| {label}: `sandbox_run_code` | {fmt(r50)} | {fmt(pct(runs['run_code'], 0.99))} "
                    f"| exec {fmt(e50)} | {r50 / e50:.2f}x |"
                )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--iterations", type=int, default=40)
    ap.add_argument("--agent")
    ap.add_argument("--target", default="release")
    a = ap.parse_args()
    target = Path(os.environ.get("CARGO_TARGET_DIR", REPO / "target")) / a.target
    agent, tmp = a.agent, None
    if agent is None:
        tmp = tempfile.TemporaryDirectory(prefix="atoll-bench-")
        sock = Path(tmp.name) / "agent.sock"
        proc = subprocess.Popen(
            [str(target / "atoll-agent"), "--listen", f"unix://{sock}", "--job-dir", f"{tmp.name}/jobs"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        while not sock.exists():
            time.sleep(0.01)
        agent = f"unix://{sock}"
    try:
        anyio.run(bench, target / "atoll", agent, a.iterations)
    finally:
        if tmp is not None:
            proc.kill()
            proc.wait()
            tmp.cleanup()


if __name__ == "__main__":
    main()
