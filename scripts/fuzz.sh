#!/usr/bin/env bash
# Runs each cargo-fuzz target of atoll for a bounded time (default 30 s each) and keeps
# what it finds in fuzz/corpus/<target>/. A crash stops the script with the reproducer
# under fuzz/artifacts/<target>/.
#
#   scripts/fuzz.sh            # every target, 30 s each
#   scripts/fuzz.sh 300        # every target, 5 min each
#   scripts/fuzz.sh 60 capture # one target
#
# Needs cargo-fuzz (`cargo install cargo-fuzz`) and a nightly toolchain; without
# nightly, RUSTC_BOOTSTRAP=1 lets the pinned stable toolchain take cargo-fuzz's -Z flags.
set -euo pipefail

seconds="${1:-30}"
shift || true
cd "$(dirname "$0")/.."

if ! command -v cargo-fuzz >/dev/null; then
    echo "fuzz.sh: cargo-fuzz is not installed; run: cargo install cargo-fuzz" >&2
    exit 1
fi
if rustup toolchain list 2>/dev/null | grep -q '^nightly'; then
    toolchain=(+nightly)
else
    toolchain=()
    export RUSTC_BOOTSTRAP=1
fi

targets=("$@")
if [ ${#targets[@]} -eq 0 ]; then
    mapfile -t targets < <(cargo "${toolchain[@]}" fuzz list)
fi

for target in "${targets[@]}"; do
    echo "== fuzzing $target for ${seconds}s"
    mkdir -p "fuzz/corpus/$target"
    cargo "${toolchain[@]}" fuzz run -O "$target" "fuzz/corpus/$target" -- \
        -max_total_time="$seconds" -max_len=4096 -print_final_stats=1
done
echo "fuzz.sh: no crash in ${targets[*]} (${seconds}s each)"
