#!/usr/bin/env bash
# The whole atoll test suite, from a fresh machine: installs what it needs (idempotent),
# then runs formatting and lint checks (setup.sh has made the static musl builds), every Rust
# test (real VMs included), the MCP suite driven by the official Python MCP client, and
# the agent driven by a stock gRPC client (grpcio).
set -euo pipefail
cd "$(dirname "$0")/.."

step() { printf '\n==> %s\n' "$*"; }

# Every QEMU and network helper a test started must be gone when its step ends: a test's
# clean-up kills its sandboxes, but one killed at its time limit runs none, and a VM left
# running would slow every later test on a 2-core machine. Those present before the run
# (the user's own sandboxes) are left alone; new ones are listed, killed, and fail the run.
vm_pids() { pgrep -f 'qemu-system|atoll net-helper --dir|atoll secret-runner --dir' | sort || true; }
before_vms=$(vm_pids)
sweep_vms() {
  local left pid
  left=$(comm -13 <(printf '%s\n' "$before_vms") <(vm_pids) | grep . || true)
  [ -z "$left" ] && return 0
  printf '\n==> left running by the tests (killed now):\n' >&2
  for pid in $left; do ps -o pid=,etime=,args= -p "$pid" >&2 || true; done
  kill $left 2>/dev/null || true
  return 1
}
trap 'sweep_vms || true' EXIT

step "set-up (packages and strace, musl target, static agent and atoll, vhost-device-vsock for vm_images, kernel, minimal, debian and desktop templates, novnc and chromium for the desktop tests)"
# The tests use state directories of their own, not the default one setup.sh would make
# template snapshots in (the quickstart below makes its own).
ATOLL_TEMPLATE_SNAPSHOT=off rootfs/setup.sh --with-debian --with-desktop --with-test-tools --with-vsock

if ! cargo nextest --version >/dev/null 2>&1; then
  step "installing cargo-nextest"
  cargo install cargo-nextest --locked
fi

step "cargo fmt --check"
cargo fmt --all -- --check

step "cargo clippy --all-targets -D warnings"
cargo clippy --workspace --all-targets -- -D warnings

step "cargo doc (no warnings)"
RUSTDOCFLAGS="-D warnings" cargo doc --workspace --no-deps --quiet

step "build"
cargo build --workspace

step "Rust tests (agent, CLI, VMs)"
cargo nextest run --workspace --no-fail-fast || { sweep_vms || true; exit 1; }
sweep_vms || { echo "the Rust tests passed but left the VMs above running" >&2; exit 1; }

step "quickstart (installs the atoll just built into ~/.cargo/bin, boots a VM, finds atoll in a new login shell)"
ATOLL_QUICKSTART_BIN="$PWD/target/debug/atoll" scripts/quickstart.sh

step "MCP tests (official Python MCP SDK as the client)"
tests/mcp/run.sh

step "stock gRPC clients (grpcio with stubs generated from agent.proto)"
tests/clients/run.sh

step "MCP tests (official TypeScript MCP SDK as the client, MCP Inspector CLI --strict)"
tests/mcp-ts/run.sh

sweep_vms || { echo "the tests passed but left the VMs above running" >&2; exit 1; }
