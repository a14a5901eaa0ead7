#!/usr/bin/env bash
# Host folders (`atoll create --mount`, virtio-9p) against the guest's own disk, in one
# run on one `minimal` microVM (1 GiB memory, --disk 1G):
#   - stat every entry of a 10,000-file tree (100 dirs x 100 files of 1 KiB, `du -s`)
#     and read every file (`find | xargs cat`), on the mount and on a copy of the same
#     tree in the guest's root;
#   - read a 256 MiB file through the mount (`cat > /dev/null` in the guest) against
#     `atoll cp` of the same file out of the guest to the host.
# Guest-side times come from /proc/uptime (10 ms steps) around the command inside the
# guest, so they leave out the `atoll exec` round trip; `atoll cp` is timed on the host.
#
# Usage: bench/mounts.sh [path/to/atoll]   (default: target/debug/atoll; set ATOLL_DATA_DIR
# for templates baked elsewhere)
set -euo pipefail
atoll="${1:-$(dirname "$0")/../target/debug/atoll}"
work="$(mktemp -d /tmp/atoll-bench-mounts-XXXX)"
export ATOLL_STATE_DIR="$work/state"
trap '"$atoll" kill --all --force >/dev/null 2>&1; rm -rf "$work"' EXIT
now() { date +%s.%N; }

mkdir -p "$work/share"
python3 - "$work/share/tree" <<'PY'
import os, sys
root = sys.argv[1]
for d in range(100):
    os.makedirs(f"{root}/d{d:02}")
    for f in range(100):
        with open(f"{root}/d{d:02}/f{f:02}", "wb") as out:
            out.write(os.urandom(1024))
PY
head -c $((256 << 20)) /dev/urandom >"$work/share/big"

"$atoll" create --name bm --net none --memory 1024 --disk 1G --timeout 300s \
    --mount "$work/share:/work:rw" >/dev/null 2>&1
g() { "$atoll" -s bm exec --timeout 10m --sh "$1"; }
# Seconds a guest command takes, from the guest's own clock.
timed() {
    g "a=\$(cut -d' ' -f1 /proc/uptime); $1 >/dev/null; b=\$(cut -d' ' -f1 /proc/uptime); awk -v a=\$a -v b=\$b 'BEGIN{print b - a}'"
}
g "cp -a /work/tree /root/tree && cp /work/big /root/big"

stat_mount=$(timed "du -s /work/tree")
stat_own=$(timed "du -s /root/tree")
read_mount=$(timed "find /work/tree -type f | xargs cat")
read_own=$(timed "find /root/tree -type f | xargs cat")
big_mount=$(timed "cat /work/big")
t0=$(now); "$atoll" cp bm:/root/big "$work/big.out"; t1=$(now)
big_cp=$(awk "BEGIN{printf \"%.2f\", $t1 - $t0}")
cmp -s "$work/share/big" "$work/big.out" || { echo "bench/mounts.sh: atoll cp copied the wrong bytes" >&2; exit 1; }

ratio() { awk "BEGIN{ if ($2 > 0) printf \"%.1fx\", $1 / $2; else print \"-\" }"; }
mibs() { awk "BEGIN{ if ($1 > 0) printf \"%.0f MiB/s\", 256 / $1; else print \"-\" }"; }
cat <<EOF
| figure | mounted folder (9p) | guest's own disk / atoll cp | ratio |
|---|---|---|---|
| stat a 10,000-file tree (\`du -s\`) | ${stat_mount} s | ${stat_own} s | $(ratio "$stat_mount" "$stat_own") |
| read every file of it (\`find \| xargs cat\`) | ${read_mount} s | ${read_own} s | $(ratio "$read_mount" "$read_own") |
| read a 256 MiB file: through the mount vs \`atoll cp\` out | ${big_mount} s ($(mibs "$big_mount")) | ${big_cp} s ($(mibs "$big_cp")) | $(ratio "$big_mount" "$big_cp") |
EOF
