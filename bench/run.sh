#!/usr/bin/env bash
# Runs the atoll benchmarks and prints one markdown table.
#
#   bench/run.sh            full run: 1 GiB copies, 200 MiB tree, 1 GiB flood, 1000 calls/op
#   bench/run.sh --quick    smaller: 64 MiB file, 32 MiB tree, 256 MiB flood, 200 calls/op
#
# Other flags go to atoll-bench (`target/release/atoll-bench --help`), e.g. --no-peers,
# --no-python, --no-typescript, --iterations N, --file-bytes N, --out FILE.
#
# It builds atoll and atoll-bench in release and the agent as the shipped static musl binary,
# then installs the peer MCP servers into target/bench (npm: server-filesystem,
# desktop-commander, mcp-server-commands; PyPI: mcp-shell-server in its own venv, since it
# needs the 1.x MCP SDK), the official Python MCP clients (mcp 2.3.0 and mcp 1.30.0) into
# two more venvs, and the official TypeScript client (bench/ts, npm ci) for Node.js; the
# `http` group (`--only http`) drives `atoll mcp --http` next to stdio with those clients.
# Installs are skipped when already there; ATOLL_BENCH_NO_INSTALL=1 skips them outright.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
peers="$repo/target/bench"
mkdir -p "$peers/peers" "$peers/home"

cargo build --quiet --release -p atoll -p atoll-bench
cargo build --quiet --release -p atoll-agent -p atoll-link-floor --target x86_64-unknown-linux-musl

if [[ "${ATOLL_BENCH_NO_INSTALL:-}" != 1 ]]; then
    if [[ ! -x "$peers/peers/node_modules/.bin/desktop-commander" ]]; then
        echo "bench/run.sh: installing the npm peers into $peers/peers" >&2
        # desktop-commander pulls in puppeteer, whose browser download we do not need.
        (cd "$peers/peers" && [[ -f package.json ]] || npm init -y >/dev/null
         cd "$peers/peers" && PUPPETEER_SKIP_DOWNLOAD=1 npm install --silent --no-audit --no-fund \
             @modelcontextprotocol/server-filesystem @wonderwhy-er/desktop-commander \
             mcp-server-commands) || echo "bench/run.sh: npm install failed; those peers are left out" >&2
    fi
    if [[ ! -x "$peers/venv-shell/bin/mcp-shell-server" ]]; then
        echo "bench/run.sh: installing mcp-shell-server into $peers/venv-shell" >&2
        python3 -m venv "$peers/venv-shell"
        "$peers/venv-shell/bin/pip" install --quiet --disable-pip-version-check mcp-shell-server \
            || echo "bench/run.sh: pip install mcp-shell-server failed; it is left out" >&2
    fi
    if [[ ! -x "$peers/venv-client/bin/python" ]] || ! "$peers/venv-client/bin/python" -c 'import mcp' 2>/dev/null; then
        echo "bench/run.sh: installing the official MCP Python SDK into $peers/venv-client" >&2
        python3 -m venv "$peers/venv-client"
        "$peers/venv-client/bin/pip" install --quiet --disable-pip-version-check mcp==2.3.0
    fi
    if [[ ! -x "$peers/venv-client1/bin/python" ]] || ! "$peers/venv-client1/bin/python" -c 'import mcp' 2>/dev/null; then
        echo "bench/run.sh: installing the official MCP Python SDK 1.x into $peers/venv-client1" >&2
        python3 -m venv "$peers/venv-client1"
        "$peers/venv-client1/bin/pip" install --quiet --disable-pip-version-check mcp==1.30.0
    fi
    if ! cmp -s "$repo/bench/ts/package-lock.json" "$repo/bench/ts/node_modules/.atoll-package-lock" 2>/dev/null; then
        echo "bench/run.sh: installing the official MCP TypeScript SDK into bench/ts/node_modules" >&2
        (cd "$repo/bench/ts" && npm ci --silent --no-audit --no-fund)
        cp "$repo/bench/ts/package-lock.json" "$repo/bench/ts/node_modules/.atoll-package-lock"
    fi
fi

exec "$repo/target/release/atoll-bench" --peers-dir "$peers" "$@"
