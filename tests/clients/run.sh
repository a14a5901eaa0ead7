#!/usr/bin/env bash
# Runs the stock-client suite: sbx-agent driven by grpcio with stubs that grpcio-tools
# generates from proto/agent/v1/agent.proto, as someone scripting the agent from Python
# would. Creates the virtual environment at .venv-clients when it is missing or its
# requirements changed, builds the agent, then runs pytest. Extra arguments go to pytest.
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
venv="$repo/.venv-clients"
requirements="$repo/tests/clients/requirements.txt"
stamp="$venv/.sbx-clients-requirements"

make_venv() {
    rm -rf "$venv"
    "$1" -m venv "$venv"
}
if [[ ! -x "$venv/bin/python" ]]; then
    if ! make_venv python3; then
        # Debian's python3 lacks ensurepip until python3-venv is installed.
        if command -v apt-get >/dev/null && [[ "$(id -u)" == 0 ]]; then
            apt-get install -y --no-install-recommends python3-venv
            make_venv /usr/bin/python3
        else
            echo "tests/clients/run.sh: could not create $venv; install python3-venv" >&2
            exit 1
        fi
    fi
fi
if ! cmp -s "$requirements" "$stamp" 2>/dev/null; then
    "$venv/bin/pip" install --quiet --disable-pip-version-check -r "$requirements"
    cp "$requirements" "$stamp"
fi

if [[ "${SBX_CLIENTS_SKIP_BUILD:-}" != 1 ]]; then
    (cd "$repo" && cargo build --quiet -p sbx-agent)
fi

cd "$repo/tests/clients"
exec "$venv/bin/python" -m pytest -p no:cacheprovider --timeout=120 "$@"
