#!/usr/bin/env bash
# One run of the desktop figures for BENCHMARKS.md: a cold desktop create (no template
# snapshot) until the desktop is up, the template snapshot, a create that restores it,
# screenshot latency and size, an action followed by a screenshot, and the idle desktop's
# memory (host RSS/PSS of its processes, guest `free`). Uses a scratch state directory.
# Usage: bench/desktop.sh [path/to/atoll]   (needs the `desktop` template)
set -euo pipefail
atoll="${1:-target/debug/atoll}"
export ATOLL_STATE_DIR="$(mktemp -d /tmp/atoll-bench-desk.XXXXXX)"
trap '"$atoll" kill --all --force >/dev/null 2>&1 || true; rm -rf "$ATOLL_STATE_DIR"' EXIT
now() { date +%s.%N; }
secs() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", b - a }'; }
median() { sort -n | awk '{ v[NR] = $1 } END { print v[int((NR + 1) / 2)] }'; }

t0=$(now); ATOLL_TEMPLATE_SNAPSHOT=off "$atoll" create --template desktop --memory 1024 --name cold --timeout 300s >/dev/null; t1=$(now)
echo "cold create until the desktop is up: $(secs "$t0" "$t1") s"
t0=$(now); "$atoll" template snapshot desktop --memory 1024 >/dev/null; t1=$(now)
snap="$(du -sm "$ATOLL_STATE_DIR/.template-snapshots" | cut -f1)"
echo "template snapshot: $(secs "$t0" "$t1") s, ${snap} MiB on disk"
t0=$(now); "$atoll" create --template desktop --memory 1024 --name warm >/dev/null; t1=$(now)
echo "create from the template snapshot: $(secs "$t0" "$t1") s"

shot=$(mktemp /tmp/shot.XXXXXX.png)
for i in $(seq 10); do
    t0=$(now); "$atoll" screenshot warm -o "$shot" >/dev/null; t1=$(now); secs "$t0" "$t1"; echo
done | median | sed 's/^/screenshot 1280x800, whole command, median of 10: /; s/$/ s/'
echo "screenshot size: $(stat -c %s "$shot") bytes (full), $("$atoll" screenshot warm --scale 640 -o "$shot" >/dev/null; stat -c %s "$shot") bytes (640 wide)"
for i in $(seq 5); do
    t0=$(now); "$atoll" input warm click $((100 + i)) 100; "$atoll" screenshot warm -o "$shot" >/dev/null; t1=$(now); secs "$t0" "$t1"; echo
done | median | sed 's/^/click then screenshot, median of 5: /; s/$/ s/'
rm -f "$shot"
sleep 10
for name in cold warm; do
    dir="$(ls -d "$ATOLL_STATE_DIR"/*/ | while read -r d; do grep -q "\"name\": *\"$name\"" "$d/sandbox.json" 2>/dev/null && echo "$d"; done | head -n1 || true)"
    rss=0; pss=0
    [ -n "$dir" ] || { echo "no directory for sandbox $name"; continue; }
    for pid in $(grep -l "${dir%/}" /proc/[0-9]*/cmdline 2>/dev/null | cut -d/ -f3 || true); do
        r=$(awk '/^Rss:/ {s += $2} END {print s + 0}' "/proc/$pid/smaps_rollup" 2>/dev/null || echo 0)
        p=$(awk '/^Pss:/ {s += $2} END {print s + 0}' "/proc/$pid/smaps_rollup" 2>/dev/null || echo 0)
        rss=$((rss + r)); pss=$((pss + p))
    done
    used=$("$atoll" -s "$name" exec -- sh -c "free -m | awk '/^Mem:/ {print \$3}'")
    echo "idle $name desktop: host RSS $((rss / 1024)) MiB, PSS $((pss / 1024)) MiB, guest used ${used} MiB"
done
