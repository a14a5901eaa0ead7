#!/usr/bin/env bash
# The main job, from a fresh machine: install what sbx needs (rootfs/setup.sh), install
# the `sbx` command into ~/.cargo/bin, boot a microVM with sbx-agent inside, use it
# through `sbx`, remove it, and check that a new login shell finds `sbx` on PATH.
#   scripts/quickstart.sh          # boot, run commands, remove the sandbox
#   scripts/quickstart.sh --keep   # leave the sandbox running and say how to use it
# SBX_QUICKSTART_BIN=PATH installs that already-built sbx instead of building one
# (scripts/test.sh passes its own build, so CI does not compile sbx a second time).
set -euo pipefail
cd "$(dirname "$0")/.."

keep=0
[ "${1:-}" = "--keep" ] && keep=1

# setup.sh would make the template's snapshot with the `sbx` on PATH, which may be
# missing or older than the one installed below; it is made after the install instead.
SBX_TEMPLATE_SNAPSHOT=off rootfs/setup.sh
[ -x "$HOME/.cargo/bin/cargo" ] && export PATH="$HOME/.cargo/bin:$PATH"

# `cargo install --path` builds in this workspace's target/ (so a rebuild reuses it) and
# puts the binary in $CARGO_HOME/bin, where rustup's cargo already is.
root="${CARGO_HOME:-$HOME/.cargo}"
bin_dir="$root/bin"
if [ -n "${SBX_QUICKSTART_BIN:-}" ]; then
  echo "==> installing $SBX_QUICKSTART_BIN as $bin_dir/sbx"
  mkdir -p "$bin_dir"
  install -m 0755 "$SBX_QUICKSTART_BIN" "$bin_dir/sbx.tmp"
  mv "$bin_dir/sbx.tmp" "$bin_dir/sbx"
else
  echo "==> cargo install --path host-cli (the sbx command, into $bin_dir)"
  cargo install --path host-cli --locked --root "$root"
fi
sbx="$bin_dir/sbx"

# The template's snapshot, made by this sbx (a snapshot is used only by the sbx that made
# it). Without one, `sbx create` boots and makes it itself: a failure is only a warning.
if [[ ! "${SBX_TEMPLATE_SNAPSHOT:-}" =~ ^(off|0|no)$ ]]; then
  echo "==> sbx template snapshot minimal (boots it once and saves it; sbx create restores that)"
  "$sbx" template snapshot minimal || echo "warning: no template snapshot; sbx create boots instead" >&2
fi

echo "==> sbx create (restores the template's snapshot; a boot takes a few seconds under software emulation)"
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
  echo "  sbx shell $id"
  echo "  sbx -s $id exec -- ls /"
  echo "  sbx inspect $id"
  echo "  sbx kill $id"
fi

# A new login shell, with nothing inherited from this one, must find `sbx`.
fresh_login() { env -i HOME="$HOME" USER="${USER:-$(id -un)}" TERM="${TERM:-dumb}" bash -lc "$1"; }
if ! fresh_login 'command -v sbx >/dev/null'; then
  if [ "$(id -u)" = 0 ]; then
    echo "==> $bin_dir is not on a login shell's PATH; linking /usr/local/bin/sbx to $sbx"
    ln -sf "$sbx" /usr/local/bin/sbx
  else
    echo
    echo "sbx is installed as $sbx, but $bin_dir is not on your PATH in a new login shell."
    echo "Add it (then open a new shell):"
    echo "  echo 'export PATH=\"$bin_dir:\$PATH\"' >> ~/.profile"
    exit 1
  fi
fi
echo "==> in a new login shell: command -v sbx && sbx --version"
fresh_login 'command -v sbx && sbx --version'
