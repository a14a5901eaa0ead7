#!/usr/bin/env bash
# Runs the stock-client suite: atoll-agent driven by grpcio with stubs that grpcio-tools
# generates from proto/agent/v1/agent.proto, as someone scripting the agent from Python
# would. Creates the virtual environment at .venv-clients when it is missing or its
# requirements changed, builds the agent, then runs pytest. Extra arguments go to pytest.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
source "$repo/tests/lib/venv.sh"
venv="$repo/.venv-clients"
ensure_venv "$venv" "$repo/tests/clients/requirements.txt"

if [[ "${ATOLL_CLIENTS_SKIP_BUILD:-}" != 1 ]]; then
    (cd "$repo" && cargo build --quiet -p atoll-agent)
fi

cd "$repo/tests/clients"
exec "$venv/bin/python" -m pytest -p no:cacheprovider --timeout=120 "$@"
