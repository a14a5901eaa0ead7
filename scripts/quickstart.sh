#!/usr/bin/env bash
# The main job, from a fresh machine: install what atoll needs (rootfs/setup.sh), install
# the `atoll` command into ~/.cargo/bin, boot a microVM with atoll-agent inside, use it
# through `atoll`, remove it, and check that a new login shell finds `atoll` on PATH.
#   scripts/quickstart.sh          # boot, run commands, remove the sandbox
#   scripts/quickstart.sh --keep   # leave the sandbox running and say how to use it
# ATOLL_QUICKSTART_BIN=PATH installs that already-built atoll instead of the static one
# setup.sh builds (scripts/test.sh passes its debug build, the one its tests ran).
set -euo pipefail
cd "$(dirname "$0")/.."

keep=0
[ "${1:-}" = "--keep" ] && keep=1

# setup.sh would make the template's snapshot with the `atoll` on PATH, which may be
# missing or older than the one installed below; it is made after the install instead.
# Each step's time, printed at the end (README's "First run" table is made from it).
t0=$SECONDS; times=()
mark() { times+=("$1 $((SECONDS - t0))s"); t0=$SECONDS; }
ATOLL_TEMPLATE_SNAPSHOT=off rootfs/setup.sh
mark "set-up (packages, one build of agent and atoll, kernel, template)"
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"

# setup.sh built a static `atoll` beside the agent (one build for both); install that into
# $CARGO_HOME/bin, where rustup's cargo already is.
root="${CARGO_HOME:-$HOME/.cargo}"
bin_dir="$root/bin"
src="${ATOLL_QUICKSTART_BIN:-$PWD/target/x86_64-unknown-linux-musl/release/atoll}"
[ -x "$src" ] || { echo "quickstart: no atoll binary at $src (rootfs/setup.sh builds it)" >&2; exit 1; }
echo "==> installing $src as $bin_dir/atoll"
mkdir -p "$bin_dir"
install -m 0755 "$src" "$bin_dir/atoll.tmp"
mv "$bin_dir/atoll.tmp" "$bin_dir/atoll"
atoll="$bin_dir/atoll"

# The template's snapshot, made by this atoll (a snapshot is used only by the atoll that made
# it). Without one, `atoll create` boots and makes it itself: a failure is only a warning.
if [[ ! "${ATOLL_TEMPLATE_SNAPSHOT:-}" =~ ^(off|0|no)$ ]]; then
  echo "==> atoll template snapshot minimal (boots it once and saves it; atoll create restores that)"
  "$atoll" template snapshot minimal || echo "warning: no template snapshot; atoll create boots instead" >&2
fi

mark "template snapshot"
echo "==> atoll create (restores the template's snapshot; a boot takes a few seconds under software emulation)"
id=$("$atoll" create)
[ "$keep" = 1 ] || trap '"$atoll" kill "$id" >/dev/null' EXIT

echo "==> atoll -s $id exec -- uname -a"
"$atoll" -s "$id" exec -- uname -a
echo "==> atoll -s $id exec -- sh -c 'echo hello from \$(hostname); exit 3'  (exit code passes through)"
status=0
"$atoll" -s "$id" exec -- sh -c 'echo hello from $(hostname); exit 3' || status=$?
echo "exit code: $status"
echo "==> write, then read back, a file in the guest"
echo "written from the host at $(date -u +%FT%TZ)" | "$atoll" -s "$id" write /tmp/hello.txt
"$atoll" -s "$id" cat /tmp/hello.txt
echo "==> atoll ls (sandboxes)"
"$atoll" ls

mark "create, commands, ls"
if [ "$keep" = 1 ]; then
  echo
  echo "The sandbox $id is still running. Try:"
  echo "  atoll shell $id"
  echo "  atoll -s $id exec -- ls /"
  echo "  atoll inspect $id"
  echo "  atoll kill $id"
fi

# A new login shell, with nothing inherited from this one, must find `atoll`.
fresh_login() { env -i HOME="$HOME" USER="${USER:-$(id -un)}" TERM="${TERM:-dumb}" bash -lc "$1"; }
if ! fresh_login 'command -v atoll >/dev/null'; then
  if [ "$(id -u)" = 0 ]; then
    echo "==> $bin_dir is not on a login shell's PATH; linking /usr/local/bin/atoll to $atoll"
    ln -sf "$atoll" /usr/local/bin/atoll
  else
    echo
    echo "atoll is installed as $atoll, but $bin_dir is not on your PATH in a new login shell."
    echo "Add it (then open a new shell):"
    echo "  echo 'export PATH=\"$bin_dir:\$PATH\"' >> ~/.profile"
    exit 1
  fi
fi
echo "==> in a new login shell: command -v atoll && atoll --version"
fresh_login 'command -v atoll && atoll --version'
echo "==> time per step (total ${SECONDS}s):"
printf '    %s\n' "${times[@]}"
