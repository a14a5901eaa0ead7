#!/usr/bin/env bash
# Snapshots against a cold boot, in one run (real microVMs, `minimal`, 512 MiB, with a
# network, the default):
# - cold `atoll create` until the first exec answers (ATOLL_TEMPLATE_SNAPSHOT=off: a boot);
# - plain `atoll create` restored from the template's snapshot until the first exec
#   (a first, untimed create with template snapshots on saves that snapshot);
# - `atoll create --from` (fork) until the first exec;
# - park-to-first-exec, and the host memory a parked sandbox holds (RSS of every process
#   whose command line names its directory);
# - the snapshot's size on disk;
# - $N forks in a row (time per fork), and the host memory of the $N idle forks against
#   $N idle cold-booted sandboxes (QEMU and the network helper), both as RSS and as PSS
#   (RSS counts pages the processes share, such as QEMU's code and the pages of the
#   snapshot's ram.bin that forks map privately and have not written, once per process;
#   PSS splits them among sharers). Guest RAM is QEMU's own memory (anonymous on a cold
#   boot, a private copy-on-write mapping of ram.bin on a restore), so it is in QEMU's
#   RSS and PSS.
#
# The three create timings are taken $R times each, interleaved (cold, template, fork,
# cold, ...), and the median is shown with the range, so one slow moment on a busy
# machine does not decide a ratio.
#
# Usage: bench/snapshot.sh [path/to/atoll]   (default: target/debug/atoll)
#        N=5 for fewer forks, R=5 for more rounds (default 3).
set -euo pipefail
atoll="${1:-$(dirname "$0")/../target/debug/atoll}"
n="${N:-10}"
rounds="${R:-3}"
export ATOLL_STATE_DIR="$(mktemp -d /tmp/atoll-bench-XXXX)"
trap '"$atoll" kill --all --force >/dev/null 2>&1; rm -rf "$ATOLL_STATE_DIR"' EXIT
now() { date +%s.%N; }
secs() { echo "$2 - $1" | bc; }
dir_of() { "$atoll" --json inspect "$1" | sed -n 's/.*"dir": *"\([^"]*\)".*/\1/p'; }
mem_of() { # "RSS PSS" in KiB, summed over the processes whose command line names any of the dirs
    local rss=0 pss=0 p d
    for p in /proc/[0-9]*; do
        for d in "$@"; do
            if tr "\0" " " 2>/dev/null <"$p/cmdline" | grep -qF "$d"; then
                rss=$((rss + $(awk '/^VmRSS:/{r=$2} END{print r+0}' "$p/status" 2>/dev/null || echo 0)))
                pss=$((pss + $(awk '/^Pss:/{r=$2} END{print r+0}' "$p/smaps_rollup" 2>/dev/null || echo 0)))
                break
            fi
        done
    done
    echo "$rss $pss"
}
# Creates sandbox $1 (extra create arguments follow) and runs one exec; prints seconds.
timed_create() {
    local name="$1" t0 t1
    shift
    t0=$(now)
    "$atoll" create --name "$name" "$@" >/dev/null 2>&1
    "$atoll" -s "$name" exec -- true
    t1=$(now)
    secs "$t0" "$t1"
}
# "median (min-max)" of the arguments.
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {m=v[int((NR+1)/2)]; printf "%.2f %.2f %.2f\n", m, v[1], v[NR]}'; }

# The first create boots and saves the template snapshot (not timed); `base` is a
# snapshot of a booted sandbox, for the forks.
"$atoll" create --name first >/dev/null 2>&1
"$atoll" snapshot create first --name base >/dev/null
colds=() warms=() forks=()
for r in $(seq 1 "$rounds"); do
    colds+=("$(ATOLL_TEMPLATE_SNAPSHOT=off timed_create "cold$r")")
    warms+=("$(timed_create "warm$r")")
    from=$("$atoll" --json inspect "warm$r" | sed -n 's/.*"started_from": *"\([^"]*\)".*/\1/p')
    [ "$from" = "template snapshot" ] || { echo "warm$r started from $from" >&2; exit 1; }
    forks+=("$(timed_create "fork$r" --from base)")
    "$atoll" kill "cold$r" "warm$r" >/dev/null
    [ "$r" = "$rounds" ] || "$atoll" kill "fork$r" >/dev/null
done
read -r cold cold_lo cold_hi <<<"$(median "${colds[@]}")"
read -r warm warm_lo warm_hi <<<"$(median "${warms[@]}")"
read -r fork fork_lo fork_hi <<<"$(median "${forks[@]}")"
parked="fork$rounds"
"$atoll" pause --to-disk "$parked" >/dev/null
read -r parked_rss _ <<<"$(mem_of "$(dir_of "$parked")")"
t0=$(now); "$atoll" -s "$parked" exec -- true; t1=$(now)
park=$(secs "$t0" "$t1")
"$atoll" kill first "$parked" >/dev/null

cold_dirs=() fork_dirs=()
t0=$(now)
for i in $(seq 1 "$n"); do "$atoll" create --from base --name "f$i" >/dev/null 2>&1; done
t1=$(now)
per_fork=$(echo "($t1 - $t0) / $n" | bc -l)
for i in $(seq 1 "$n"); do
    ATOLL_TEMPLATE_SNAPSHOT=off "$atoll" create --name "c$i" >/dev/null 2>&1
    cold_dirs+=("$(dir_of "c$i")")
    fork_dirs+=("$(dir_of "f$i")")
done
sleep 5
read -r forks_rss forks_pss <<<"$(mem_of "${fork_dirs[@]}")"
read -r cold_rss cold_pss <<<"$(mem_of "${cold_dirs[@]}")"
size=$("$atoll" --json snapshot ls | sed -n 's/.*"size_bytes": *\([0-9]*\).*/\1/p' | head -n1)

ratio() { echo "$1 / $2" | bc -l; }
echo "($rounds rounds; median (min-max))"
printf '| cold create until first exec | %.2f s (%.2f-%.2f) |\n' "$cold" "$cold_lo" "$cold_hi"
printf '| create from the template snapshot until first exec | %.2f s (%.2f-%.2f) | %.2fx of cold |\n' \
    "$warm" "$warm_lo" "$warm_hi" "$(ratio "$warm" "$cold")"
printf '| create --from a snapshot until first exec | %.2f s (%.2f-%.2f) | %.2fx of cold |\n' \
    "$fork" "$fork_lo" "$fork_hi" "$(ratio "$fork" "$cold")"
printf '| parked sandbox: first exec (brings it back) | %.2f s | %.2fx of cold |\n' "$park" "$(ratio "$park" "$cold")"
printf '| parked sandbox: host memory held | %d KiB |\n' "$parked_rss"
printf '| snapshot size on disk, 512 MiB guest | %.1f MiB | %.3fx of guest memory |\n' \
    "$(echo "$size / 1048576" | bc -l)" "$(echo "$size / 536870912" | bc -l)"
printf '| %d forks in a row: time per fork (create only) | %.2f s | %.2fx of cold create+exec |\n' \
    "$n" "$per_fork" "$(ratio "$per_fork" "$cold")"
printf '| host memory of %d idle forks vs %d idle cold boots, RSS | %d MiB vs %d MiB | %.2fx |\n' "$n" "$n" \
    $((forks_rss / 1024)) $((cold_rss / 1024)) "$(ratio "$forks_rss" "$cold_rss")"
printf '| host memory of %d idle forks vs %d idle cold boots, PSS | %d MiB vs %d MiB | %.2fx |\n' "$n" "$n" \
    $((forks_pss / 1024)) $((cold_pss / 1024)) "$(ratio "$forks_pss" "$cold_pss")"
