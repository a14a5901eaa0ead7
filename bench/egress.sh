#!/usr/bin/env bash
# Download through the sandbox's egress path against the raw vsock stream floor, in the
# same VM and the same run (issue 19's "256 MiB download" row in BENCHMARKS.md).
#
#   bench/egress.sh            # 256 MiB, best of 3 each
#   bench/egress.sh 64 5       # 64 MiB, best of 5
#
# Needs root (it makes two network namespaces, as tests/src/netns.rs does), QEMU and a
# `minimal` template (rootfs/setup.sh), and builds release `sbx` and the musl
# `sbx-vsock-floor`. Nothing leaves the machine: the "outside world" is a namespace
# holding 203.0.113.10 (documentation address) with `python3 -m http.server` serving a
# file from /dev/shm; the sandbox (QEMU and its network helper) runs in a second
# namespace routed to it.
#
# - egress: `wget -O /dev/null` of the file in the guest (busybox), through virtio-net,
#   QEMU's stream netdev, the helper's user-space TCP/IP stack and policy check, and a
#   host TCP socket to the server; timed on the host around `sbx exec`.
# - floor: the same number of bytes from a file on the guest's tmpfs, written by
#   `sbx-vsock-floor source` straight into a vsock stream and read on the host from the
#   hybrid vsock socket, discarded (no file write on either side, like the wget).
set -euo pipefail
repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
mib="${1:-256}"
runs="${2:-3}"
[[ "$(id -u)" == 0 ]] || { echo "bench/egress.sh: needs root (network namespaces)" >&2; exit 1; }

cargo build --quiet --release -p sbx --manifest-path "$repo/Cargo.toml"
cargo build --quiet --release -p sbx-vsock-floor --target x86_64-unknown-linux-musl --manifest-path "$repo/Cargo.toml"
sbx="$repo/target/release/sbx"
floor="$repo/target/x86_64-unknown-linux-musl/release/sbx-vsock-floor"

tag="sbxeg$$"
world="$tag-w" client="$tag-c" name="$tag"
files="/dev/shm/$tag"
server=""
cleanup() {
    "$sbx" kill "$name" >/dev/null 2>&1 || true
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
ip netns exec "$client" "$sbx" create --name "$name" --memory "$memory" \
    2>/dev/null \
    --allow-out 203.0.113.10 >/dev/null
"$sbx" -s "$name" write --mode 755 /tmp/floor < "$floor"
"$sbx" -s "$name" exec -- dd if=/dev/urandom of=/tmp/big bs=1M count="$mib" 2>/dev/null
"$sbx" -s "$name" run -d -- /tmp/floor source 5003 /tmp/big >/dev/null
vsock=$("$sbx" inspect "$name" --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["address"])')

python3 - "$sbx" "$name" "$vsock" "$mib" "$runs" <<'EOF'
import os, socket, subprocess, sys, time
sbx, name, agent, mib, runs = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4]), int(sys.argv[5])
size = mib << 20
path = agent.removeprefix("hvsock://").rsplit(":", 1)[0]
os.chdir(os.path.dirname(path))  # a state dir's socket path can exceed AF_UNIX's 108 bytes
path = os.path.basename(path)

def egress():
    t = time.perf_counter()
    subprocess.run([sbx, "-s", name, "exec", "--", "wget", "-q", "-O", "/dev/null",
                    "http://203.0.113.10/big"], check=True)
    return time.perf_counter() - t

def floor():
    deadline = time.time() + 20
    while True:
        s = socket.socket(socket.AF_UNIX)
        s.connect(path)
        s.sendall(b"CONNECT 5003\n")
        line = b""
        while not line.endswith(b"\n"):
            got = s.recv(1)
            if not got:
                break
            line += got
        if line.startswith(b"OK"):
            break
        s.close()
        if time.time() > deadline:
            sys.exit(f"the vsock floor did not answer: {line!r}")
        time.sleep(0.1)
    t = time.perf_counter()
    head = b""
    while len(head) < 8:
        head += s.recv(8 - len(head))
    want, got = int.from_bytes(head, "little"), 0
    buf = bytearray(128 * 1024)
    while got < want:
        n = s.recv_into(buf)
        if not n:
            sys.exit(f"the vsock floor stopped after {got} of {want} bytes")
        got += n
    took = time.perf_counter() - t
    s.close()
    return took

egress()  # warm: ARP, the helper's first flow, page cache on the server
e = min(egress() for _ in range(runs))
f = min(floor() for _ in range(runs))
rate = lambda took: size / took / (1 << 20)
print(f"egress download {mib} MiB (best of {runs}): {rate(e):.0f} MiB/s ({e:.2f} s)")
print(f"raw vsock stream {mib} MiB, same VM (best of {runs}): {rate(f):.0f} MiB/s ({f:.2f} s)")
print(f"egress / floor: {rate(e) / rate(f) * 100:.0f}%")
EOF
