#!/usr/bin/env bash
# Download through the sandbox's egress path against the raw stream floor over the agent
# link's transport, in the same run (issue 19's "256 MiB download" row in BENCHMARKS.md).
#
#   bench/egress.sh            # 256 MiB, best of 3 each
#   bench/egress.sh 64 5       # 64 MiB, best of 5
#
# Needs root (it makes two network namespaces, as tests/src/netns.rs does), QEMU and a
# `minimal` template (rootfs/setup.sh), and builds release `atoll`, `atoll-bench` and the musl
# `atoll-link-floor`. Nothing leaves the machine: the "outside world" is a namespace
# holding 203.0.113.10 (documentation address) with `python3 -m http.server` serving a
# file from /dev/shm; the sandbox (QEMU and its network helper) runs in a second
# namespace routed to it.
#
# - egress: `wget -O /dev/null` of the file in the guest (busybox), through virtio-net,
#   QEMU's stream netdev, the helper's user-space TCP/IP stack and policy check, and a
#   host TCP socket to the server; timed on the host around `atoll exec`.
# - floor: the same number of bytes from a file on a guest's tmpfs, written by
#   `atoll-link-floor` straight into the virtio-serial port the agent link uses and read on
#   the host from QEMU's chardev socket, discarded (no file write on either side, like
#   the wget). The sandbox's one port carries its agent link, so this runs in a bare VM
#   of the same QEMU line and memory whose init is the floor (`atoll-bench
#   --port-stream-mib`, BENCHMARKS.md "Real VM"), after the sandbox is gone.
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mib="${1:-256}"
runs="${2:-3}"
[[ "$(id -u)" == 0 ]] || { echo "bench/egress.sh: needs root (network namespaces)" >&2; exit 1; }

cargo build --quiet --release -p atoll -p atoll-bench --manifest-path "$repo/Cargo.toml"
cargo build --quiet --release -p atoll-link-floor --target x86_64-unknown-linux-musl --manifest-path "$repo/Cargo.toml"
atoll="$repo/target/release/atoll"
bench="$repo/target/release/atoll-bench"
floor="$repo/target/x86_64-unknown-linux-musl/release/atoll-link-floor"

tag="ateg$$"
world="$tag-w" client="$tag-c" name="$tag"
files="/dev/shm/$tag"
server=""
cleanup() {
    "$atoll" kill "$name" >/dev/null 2>&1 || true
    [[ -n "$server" ]] && kill "$server" 2>/dev/null || true
    ip netns del "$world" 2>/dev/null || true
    ip netns del "$client" 2>/dev/null || true
    rm -rf "$files" "/etc/netns/$client"
}
trap cleanup EXIT

ip netns add "$world"
ip netns add "$client"
ip link add "$tag-a" type veth peer name "$tag-b"
ip link set "$tag-a" netns "$world"
ip link set "$tag-b" netns "$client"
ip -n "$world" addr add 192.0.2.1/24 dev "$tag-a"
ip -n "$world" addr add 203.0.113.10/32 dev lo
ip -n "$world" link set lo up
ip -n "$world" link set "$tag-a" up
ip -n "$client" addr add 192.0.2.2/24 dev "$tag-b"
ip -n "$client" link set lo up
ip -n "$client" link set "$tag-b" up
ip -n "$client" route add default via 192.0.2.1
mkdir -p "$files" "/etc/netns/$client"
echo "nameserver 192.0.2.1" > "/etc/netns/$client/resolv.conf"
head -c "${mib}M" /dev/urandom > "$files/big"
ip netns exec "$world" python3 -m http.server 80 --bind 203.0.113.10 --directory "$files" \
    >/dev/null 2>&1 &
server=$!

# Memory for the guest's copy of the file on its tmpfs, plus room to run.
memory=$(( mib * 2 + 256 ))
ip netns exec "$client" "$atoll" create --name "$name" --memory "$memory" \
    2>/dev/null \
    --allow-out 203.0.113.10 >/dev/null
python3 - "$atoll" "$name" "$mib" "$runs" "$bench" "$floor" <<'EOF'
import re, subprocess, sys, time
atoll, name, mib, runs, bench, floor = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5], sys.argv[6]

def egress():
    t = time.perf_counter()
    subprocess.run([atoll, "-s", name, "exec", "--", "wget", "-q", "-O", "/dev/null",
                    "http://203.0.113.10/big"], check=True)
    return time.perf_counter() - t

egress()  # warm: ARP, the helper's first flow, page cache on the server
e = min(egress() for _ in range(runs))
# The floor's bare VM runs after the sandbox is gone, so the two never share the machine.
subprocess.run([atoll, "kill", name], check=True, stdout=subprocess.DEVNULL)
out = subprocess.run([bench, "--link-floor-bin", floor, "--port-stream-mib", str(mib),
                      "--port-stream-runs", str(runs)], check=True, capture_output=True, text=True).stdout
f = float(re.search(r"\(([0-9.]+) s\)", out).group(1))
rate = lambda took: mib / took
print(f"egress download {mib} MiB (best of {runs}): {rate(e):.0f} MiB/s ({e:.2f} s)")
print(f"raw virtio-serial stream {mib} MiB, bare VM (best of {runs}): {rate(f):.0f} MiB/s ({f:.2f} s)")
print(f"egress / floor: {rate(e) / rate(f) * 100:.0f}%")
EOF
