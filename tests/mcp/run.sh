#!/usr/bin/env bash
# Runs the MCP test suite: `atoll mcp` driven by the official MCP Python SDK (stdio
# client, and its streamable HTTP client for `atoll mcp --http`) against a real atoll-agent;
# without arguments, the tools' suites run a second time over HTTP. Creates the virtual
# environment at .venv when it is missing or its requirements changed, builds the
# binaries, then runs pytest.
# Extra arguments go to pytest (e.g. `tests/mcp/run.sh -k exec`).
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$repo/tests/lib/venv.sh"
venv="$repo/.venv"
ensure_venv "$venv" "$repo/tests/mcp/requirements.txt"

if [[ "${ATOLL_MCP_SKIP_BUILD:-}" != 1 ]]; then
    (cd "$repo" && cargo build --quiet -p atoll -p atoll-agent && cargo build --quiet -p atoll-tests --bin netns-world)
fi

cd "$repo/tests/mcp"
pytest=("$venv/bin/python" -m pytest -p no:cacheprovider --timeout=300)
if [[ $# -gt 0 ]]; then
    exec "${pytest[@]}" "$@"
fi
status=0
"${pytest[@]}" || status=$?
# The tools' own suites once more through `atoll mcp --http` and the SDK's streamable HTTP
# client (conftest.py: ATOLL_MCP_TEST_TRANSPORT); test_http*.py test HTTP itself above.
echo "tests/mcp/run.sh: the tools' suites again, over Streamable HTTP" >&2
ATOLL_MCP_TEST_TRANSPORT=http "${pytest[@]}" test_exec.py test_files.py test_jobs.py test_archive_info.py \
    test_tools_list.py test_vocabulary.py test_sandboxes.py test_snapshots.py test_network.py test_faults.py \
    test_templates_code_metrics.py test_mounts.py test_secrets.py test_template_snapshot_lock.py \
    || status=$?
exit "$status"
