#!/usr/bin/env bash
# Runs the TypeScript-client tests: `atoll mcp` driven by the official TypeScript MCP SDK
# and checked by the MCP Inspector CLI --strict, against a real atoll-agent. Installs
# Node.js when missing (Debian's nodejs and npm) and the locked npm packages when
# node_modules is missing or package-lock.json changed, builds the binaries, then runs
# node's test runner. Extra arguments go to `node --test` (e.g. --test-name-pattern).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
here="$repo/tests/mcp-ts"
stamp="$here/node_modules/.atoll-package-lock"

if ! command -v npm >/dev/null; then
    if command -v apt-get >/dev/null && [[ "$(id -u)" == 0 ]]; then
        apt-get install -y --no-install-recommends nodejs npm
    else
        echo "tests/mcp-ts/run.sh: install Node.js (18 or later) and npm" >&2
        exit 1
    fi
fi
if ! cmp -s "$here/package-lock.json" "$stamp" 2>/dev/null; then
    (cd "$here" && npm ci --silent --no-audit --no-fund)
    cp "$here/package-lock.json" "$stamp"
fi

if [[ "${ATOLL_MCP_SKIP_BUILD:-}" != 1 ]]; then
    (cd "$repo" && cargo build --quiet -p atoll -p atoll-agent)
fi

cd "$here"
exec node --test --test-concurrency=1 "$@" ./*.test.mjs
