#!/bin/sh
# Proves on real QEMU 7.2 that a stream split by vmm::stream_split loads: boots the
# minimal template's kernel with a counter as init (RAM a plain memory-backend-ram),
# saves it without x-ignore-shared, splits block `mem` out, and restores the VM from
# the stream with ram.bin mapped privately (memory-backend-file,share=off). The
# restored console must go on counting where the saved one stopped, with the same
# hash of 16 MiB of random data. Usage: spike/stream-split/run.sh [WORKDIR]
set -eu
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/../.." && pwd)
W=${1:-$(mktemp -d /tmp/stream-split.XXXXXX)}
T=${ATOLL_DATA_DIR:-$HOME/.local/share/atoll}/templates/minimal
mkdir -p "$W/init" "$W/out"
cp "$here/counter" "$W/init/counter"
(cd "$W/init" && echo counter | cpio -o -H newc 2>/dev/null) | cat "$T/initrd.cpio" - > "$W/initrd.cpio"

boot() { # MEMORY-OBJECT NAME [ARGS]: QEMU in the background, console in $W/NAME.log
  mem=$1 name=$2
  shift 2
  qemu-system-x86_64 -machine q35 -accel tcg -smp 1 -m 512M \
    -object "$mem" -numa node,memdev=mem \
    -nodefaults -no-user-config -display none -no-reboot \
    -serial "file:$W/$name.log" -qmp "unix:$W/$name.sock,server=on,wait=off" \
    -device vmgenid,guid=auto -kernel "$T/vmlinux" -initrd "$W/initrd.cpio" \
    -append "console=ttyS0 panic=-1 reboot=t nowatchdog rdinit=/counter" "$@" \
    > "$W/$name.out" 2>&1 &
}
console() { tr -d '\r' < "$W/$1.log" 2>/dev/null; } # the serial console ends lines with CRLF
wait_for() { # NAME PATTERN
  for _ in $(seq 600); do console "$1" | grep -q "$2" && return; sleep 0.2; done
  echo "no '$2' in $1 after 120 s" >&2
  exit 1
}
qmp() { python3 "$here/qmp.py" "$@"; }

boot memory-backend-ram,id=mem,size=512M saved
wait_for saved "^count 10"
qmp "$W/saved.sock" '{"execute":"stop"}' \
  '{"execute":"migrate-set-parameters","arguments":{"max-bandwidth":68719476736}}' \
  "{\"execute\":\"migrate\",\"arguments\":{\"uri\":\"exec:cat > $W/full\"}}" wait-migrate \
  '{"execute":"quit"}' > "$W/save.json"
sleep 0.5
last=$(console saved | grep '^count' | tail -1 | cut -d' ' -f2)
hash=$(console saved | grep '^blob' | head -1)

(cd "$repo" && ATOLL_SPLIT_FULL="$W/full" ATOLL_SPLIT_OUT="$W/out" \
  cargo test -q --release -p atoll --lib stream_split::tests::real_stream -- --ignored --nocapture 2>&1) |
  grep Split

boot "memory-backend-file,id=mem,size=512M,mem-path=$W/out/ram.bin,share=off" restored -S -incoming defer
for _ in $(seq 50); do [ -S "$W/restored.sock" ] && break; sleep 0.1; done
qmp "$W/restored.sock" "{\"execute\":\"migrate-incoming\",\"arguments\":{\"uri\":\"exec:cat $W/out/stream\"}}" \
  wait-migrate '{"execute":"cont"}' > "$W/load.json"
wait_for restored "^blob"
qmp "$W/restored.sock" '{"execute":"quit"}' > /dev/null
first=$(console restored | grep '^count' | head -1 | cut -d' ' -f2)
echo "saved at count $last, restored from count $first"
[ "$first" -eq $((last + 1)) ] || { echo "FAIL: the restored VM did not go on counting" >&2; exit 1; }
console restored | grep -qx "$hash" || { echo "FAIL: the blob's hash changed" >&2; exit 1; }
echo "same blob: $hash"
du -h --apparent-size "$W/full" "$W/out/stream" | sed 's/$/ (stream)/'
echo "$(du -h "$W/out/ram.bin" | cut -f1) allocated of $(du -h --apparent-size "$W/out/ram.bin" | cut -f1) ram.bin"
echo "ok: $W"
