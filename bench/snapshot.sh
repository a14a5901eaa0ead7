#!/usr/bin/env bash
# Snapshots against a cold boot, in one run (real microVMs, `minimal`, 512 MiB, with a
# network, the default):
# - cold `sbx create` until the first exec answers (SBX_TEMPLATE_SNAPSHOT=off: a boot);
# - plain `sbx create` restored from the template's snapshot until the first exec
#   (the cold sandbox above is booted with template snapshots on first, which saves it);
# - `sbx create --from` (fork) until the first exec;
# - park-to-first-exec, and the host memory a parked sandbox holds (RSS of every process
#   whose command line names its directory);
# - the snapshot's size on disk;
# - $N forks in a row (time per fork), and the host memory (RSS of QEMU,
#   vhost-device-vsock and the network helper) of the $N idle forks against $N idle
#   cold-booted sandboxes (N=10 by default).
#
# Usage: bench/snapshot.sh [path/to/sbx]   (default: target/debug/sbx); N=5 for less.
set -euo pipefail
sbx="${1:-$(dirname "$0")/../target/debug/sbx}"
export SBX_STATE_DIR="$(mktemp -d /tmp/sbx-bench-XXXX)"
trap '"$sbx" kill --all --force >/dev/null 2>&1; rm -rf "$SBX_STATE_DIR"' EXIT
now() { date +%s.%N; }
secs() { echo "$2 - $1" | bc; }
dir_of() { "$sbx" --json inspect "$1" | sed -n 's/.*"dir": *"\([^"]*\)".*/\1/p'; }
rss_of() { # total RSS in KiB of the processes whose command line names any of the dirs
    local total=0 p d
    for p in /proc/[0-9]*; do
        for d in "$@"; do
            if cat "$p/cmdline" 2>/dev/null | tr "\0" " " | grep -qF "$d"; then
                total=$((total + $(awk '/VmRSS/{print $2}' "$p/status" 2>/dev/null || echo 0)))
                break
            fi
        done
    done
    echo "$total"
}

# The first create boots and saves the template snapshot (not timed).
"$sbx" create --name first >/dev/null 2>&1
t0=$(now); SBX_TEMPLATE_SNAPSHOT=off "$sbx" create --name cold >/dev/null 2>&1; "$sbx" -s cold exec -- true; t1=$(now)
cold=$(secs "$t0" "$t1")
t0=$(now); "$sbx" create --name warm >/dev/null 2>&1; "$sbx" -s warm exec -- true; t1=$(now)
warm=$(secs "$t0" "$t1")
from=$("$sbx" --json inspect warm | sed -n 's/.*"started_from": *"\([^"]*\)".*/\1/p')
[ "$from" = "template snapshot" ] || { echo "warm started from $from" >&2; exit 1; }
"$sbx" snapshot create cold --name base >/dev/null
t0=$(now); "$sbx" create --from base --name fork >/dev/null 2>&1; "$sbx" -s fork exec -- true; t1=$(now)
fork=$(secs "$t0" "$t1")
"$sbx" pause --to-disk fork >/dev/null
rss=$(rss_of "$(dir_of fork)")
t0=$(now); "$sbx" -s fork exec -- true; t1=$(now)
park=$(secs "$t0" "$t1")
"$sbx" kill first warm fork >/dev/null

n="${N:-10}"
cold_dirs=() fork_dirs=()
t0=$(now)
for i in $(seq 1 "$n"); do "$sbx" create --from base --name "f$i" >/dev/null 2>&1; done
t1=$(now)
per_fork=$(echo "($t1 - $t0) / $n" | bc -l)
for i in $(seq 1 "$n"); do
    SBX_TEMPLATE_SNAPSHOT=off "$sbx" create --name "c$i" >/dev/null 2>&1
    cold_dirs+=("$(dir_of "c$i")")
    fork_dirs+=("$(dir_of "f$i")")
done
sleep 5
forks_rss=$(rss_of "${fork_dirs[@]}")
cold_rss=$(rss_of "${cold_dirs[@]}")
size=$("$sbx" --json snapshot ls | sed -n 's/.*"size_bytes": *\([0-9]*\).*/\1/p' | head -n1)

printf '| cold create until first exec | %.2f s |\n' "$cold"
printf '| create from the template snapshot until first exec | %.2f s | %.2fx of cold |\n' "$warm" "$(echo "$warm / $cold" | bc -l)"
printf '| create --from a snapshot until first exec | %.2f s | %.2fx of cold |\n' "$fork" "$(echo "$fork / $cold" | bc -l)"
printf '| parked sandbox: first exec (brings it back) | %.2f s | %.2fx of cold |\n' "$park" "$(echo "$park / $cold" | bc -l)"
printf '| parked sandbox: host memory held | %d KiB |\n' "$rss"
printf '| snapshot size on disk, 512 MiB guest | %.1f MiB | %.3fx of guest memory |\n' \
    "$(echo "$size / 1048576" | bc -l)" "$(echo "$size / 536870912" | bc -l)"
printf '| %d forks in a row: time per fork (create only) | %.2f s | %.2fx of cold create+exec |\n' "$n" "$per_fork" "$(echo "$per_fork / $cold" | bc -l)"
printf '| host memory of %d idle forks vs %d idle cold boots | %d MiB vs %d MiB | %.2fx |\n' "$n" "$n" \
    $((forks_rss / 1024)) $((cold_rss / 1024)) "$(echo "$forks_rss / $cold_rss" | bc -l)"
