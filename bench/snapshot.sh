#!/usr/bin/env bash
# Snapshots against a cold boot, in one run (real microVMs, `minimal`, 512 MiB):
# cold `sbx create` until the first exec answers, `sbx create --from` (fork) until the
# first exec, park-to-first-exec, the host memory a parked sandbox holds (RSS of every
# process whose command line names its directory), the snapshot's size on disk, and
# the host memory (RSS of QEMU and vhost-device-vsock) of $N idle forks against $N idle
# cold-booted sandboxes (N=5 by default: this machine is shared).
#
# Usage: bench/snapshot.sh [path/to/sbx]   (default: target/debug/sbx)
set -euo pipefail
sbx="${1:-$(dirname "$0")/../target/debug/sbx}"
export SBX_STATE_DIR="$(mktemp -d /tmp/sbx-bench-XXXX)"
trap '"$sbx" kill --all --force >/dev/null 2>&1; rm -rf "$SBX_STATE_DIR"' EXIT
now() { date +%s.%N; }
secs() { echo "$2 - $1" | bc; }

t0=$(now); "$sbx" create --name cold >/dev/null 2>&1; "$sbx" -s cold exec -- true; t1=$(now)
cold=$(secs "$t0" "$t1")
"$sbx" snapshot create cold --name base >/dev/null
t0=$(now); "$sbx" create --from base --name fork >/dev/null 2>&1; "$sbx" -s fork exec -- true; t1=$(now)
fork=$(secs "$t0" "$t1")
dir="$("$sbx" --json inspect fork | sed -n 's/.*"dir": *"\([^"]*\)".*/\1/p')"
"$sbx" pause --to-disk fork >/dev/null
rss=0
for p in /proc/[0-9]*; do
    if cat "$p/cmdline" 2>/dev/null | tr "\0" " " | grep -qF "$dir"; then
        rss=$((rss + $(awk '/VmRSS/{print $2}' "$p/status" 2>/dev/null || echo 0)))
    fi
done
t0=$(now); "$sbx" -s fork exec -- true; t1=$(now)
park=$(secs "$t0" "$t1")
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
n="${N:-5}"
cold_dirs=() fork_dirs=()
t0=$(now)
for i in $(seq 1 "$n"); do "$sbx" create --from base --name "f$i" >/dev/null 2>&1; done
t1=$(now)
per_fork=$(echo "($t1 - $t0) / $n" | bc -l)
for i in $(seq 1 "$n"); do
    "$sbx" create --name "c$i" >/dev/null 2>&1
    cold_dirs+=("$("$sbx" --json inspect "c$i" | sed -n 's/.*"dir": *"\([^"]*\)".*/\1/p')")
    fork_dirs+=("$("$sbx" --json inspect "f$i" | sed -n 's/.*"dir": *"\([^"]*\)".*/\1/p')")
done
sleep 5
forks_rss=$(rss_of "${fork_dirs[@]}")
cold_rss=$(rss_of "${cold_dirs[@]}")
size=$("$sbx" --json snapshot ls | sed -n 's/.*"size_bytes": *\([0-9]*\).*/\1/p' | head -n1)

printf '| cold create until first exec | %.2f s |\n' "$cold"
printf '| create --from a snapshot until first exec | %.2f s | %.2fx of cold |\n' "$fork" "$(echo "$fork / $cold" | bc -l)"
printf '| parked sandbox: first exec (brings it back) | %.2f s | %.2fx of cold |\n' "$park" "$(echo "$park / $cold" | bc -l)"
printf '| parked sandbox: host memory held | %d KiB |\n' "$rss"
printf '| snapshot size on disk, 512 MiB guest | %.1f MiB | %.3fx of guest memory |\n' \
    "$(echo "$size / 1048576" | bc -l)" "$(echo "$size / 536870912" | bc -l)"
printf '| %d forks in a row: time per fork (create only) | %.2f s | %.2fx of cold create+exec |\n' "$n" "$per_fork" "$(echo "$per_fork / $cold" | bc -l)"
printf '| host memory of %d idle forks vs %d idle cold boots | %d MiB vs %d MiB | %.2fx |\n' "$n" "$n" \
    $((forks_rss / 1024)) $((cold_rss / 1024)) "$(echo "$forks_rss / $cold_rss" | bc -l)"
