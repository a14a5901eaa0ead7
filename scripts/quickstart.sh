#!/usr/bin/env bash
# The main job, from a fresh machine: install what sbx needs (rootfs/setup.sh), build sbx,
# boot a microVM with sbx-agent inside, use it through `sbx`, then remove it.
#   scripts/quickstart.sh          # boot, run commands, remove the sandbox
#   scripts/quickstart.sh --keep   # leave the sandbox running and say how to use it
set -euo pipefail
cd "$(dirname "$0")/.."

keep=0
[ "${1:-}" = "--keep" ] && keep=1

rootfs/setup.sh
cargo build --release -p sbx
sbx=target/release/sbx

echo "==> sbx create (boots a microVM; under software emulation this takes a few seconds)"
id=$("$sbx" create)
[ "$keep" = 1 ] || trap '"$sbx" kill "$id" >/dev/null' EXIT

echo "==> sbx -s $id exec -- uname -a"
"$sbx" -s "$id" exec -- uname -a
echo "==> sbx -s $id exec -- sh -c 'echo hello from \$(hostname); exit 3'  (exit code passes through)"
status=0
"$sbx" -s "$id" exec -- sh -c 'echo hello from $(hostname); exit 3' || status=$?
echo "exit code: $status"
echo "==> write, then read back, a file in the guest"
echo "written from the host at $(date -u +%FT%TZ)" | "$sbx" -s "$id" write /tmp/hello.txt
"$sbx" -s "$id" cat /tmp/hello.txt
echo "==> sbx ls (sandboxes)"
"$sbx" ls

if [ "$keep" = 1 ]; then
  echo
  echo "The sandbox $id is still running. Try:"
  echo "  $sbx -s $id exec -- ls /"
  echo "  $sbx inspect $id"
  echo "  $sbx kill $id"
fi
