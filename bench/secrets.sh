#!/usr/bin/env bash
# Secrets swapped at egress (docs/secrets.md) against the same HTTPS requests passed
# through untouched, in one run, in one debian sandbox (BENCHMARKS.md "Secrets swapped
# at egress"):
#
#   bench/secrets.sh            # 1000 requests each way, 128 MiB download, release build
#   bench/secrets.sh 200 32     # fewer requests, smaller download
#
# Needs root (the test world's network namespaces: tests/src/netns.rs, through the
# `netns-world` binary), QEMU and the `debian` template (rootfs/setup.sh --with-debian
# --with-test-tools). Builds release `atoll` (its network helper does the swap). The
# guest side is bench/secrets_guest.py (Python's http.client, TLS verified on both
# paths): allowed.test is a bound secret's host (intercepted: TLS terminated with the
# sandbox CA, headers swapped, a second verified TLS connection to the server);
# other.test is the same world server, not intercepted. Nothing leaves the machine.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
requests="${1:-1000}"
mib="${2:-128}"
[[ "$(id -u)" == 0 ]] || { echo "bench/secrets.sh: needs root (network namespaces)" >&2; exit 1; }

# ATOLL_BENCH_PROFILE=debug: the debug build (quicker to build, not what ships; its
# unoptimised TLS and HTTP code make the swap look slower than it is).
profile="${ATOLL_BENCH_PROFILE:-release}"
if [[ "$profile" == release ]]; then
    cargo build --quiet --release -p atoll --manifest-path "$repo/Cargo.toml"
else
    cargo build --quiet -p atoll --manifest-path "$repo/Cargo.toml"
fi
cargo build --quiet -p atoll-tests --bin netns-world --manifest-path "$repo/Cargo.toml"
atoll="$repo/target/$profile/atoll"
value="bench_VALUE_$(head -c 12 /dev/urandom | od -An -tx1 | tr -d ' \n')"
state="$(mktemp -d /tmp/atsec.XXXXXX)"
export ATOLL_STATE_DIR="$state"
coproc WORLD { "$repo/target/debug/netns-world"; }
read -r info <&"${WORLD[0]}"
client="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["client"])' "$info")"
cert="$(python3 -c 'import json,sys; print(json.loads(sys.argv[1])["cert"])' "$info")"
in_ns() { ip netns exec "$client" env ATOLL_SECRETS_CA_FILE="$cert" "$atoll" "$@"; }
cleanup() {
    in_ns kill bench >/dev/null 2>&1 || true
    exec {WORLD[1]}>&- 2>/dev/null || true
    wait "$WORLD_PID" 2>/dev/null || true
    rm -rf "$state"
}
trap cleanup EXIT

echo "$value" | in_ns secret set bench --host allowed.test >/dev/null
in_ns create --name bench --template debian --timeout 3600s --secret TOKEN=bench >/dev/null
in_ns -s bench write /world.pem --from "$cert"
in_ns -s bench write /bench.py --from "$repo/bench/secrets_guest.py"
digest="auth-sha256=$(printf 'Bearer %s' "$value" | sha256sum | cut -d' ' -f1)"
json="$(in_ns -s bench exec --timeout 600s -- python3 /bench.py "$requests" "$mib" "$digest")"

python3 - "$json" "$profile" <<'PY'
import json, sys
r = json.loads(sys.argv[1])
s, p = "allowed.test", "other.test"
print(f"atoll build: {sys.argv[2]}; requests: {r['requests']} each way, kept alive; {max(r['requests'] // 5, 10)} on new connections; "
      f"download {r['download_mib']} MiB, best of 3")
print("| figure | through the swap | passed through | swap against pass-through |")
print("|---|---|---|---|")
for kind, what in (("keepalive", "HTTPS GET, one kept-alive connection"),
                   ("newconn", "HTTPS GET on a new connection each (TLS handshakes included)")):
    a, b = r[f"{s}/{kind}"], r[f"{p}/{kind}"]
    print(f"| {what}: latency p50 (p99) | {a['p50_ms']:.2f} ms ({a['p99_ms']:.2f}) | "
          f"{b['p50_ms']:.2f} ms ({b['p99_ms']:.2f}) | +{a['p50_ms'] - b['p50_ms']:.2f} ms at p50, "
          f"{a['p50_ms'] / b['p50_ms']:.2f}x |")
    print(f"| {what}: requests per second | {a['rps']:.1f} | {b['rps']:.1f} | {a['rps'] / b['rps']:.2f}x |")
a, b = r[f"{s}/download_mib_s"], r[f"{p}/download_mib_s"]
print(f"| download of {r['download_mib']} MiB, one connection | {a:.1f} MiB/s | {b:.1f} MiB/s | {a / b:.2f}x |")
PY
