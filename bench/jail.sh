#!/usr/bin/env bash
# What QEMU's jail (host-cli/src/jail/: bwrap namespaces, seccomp, setpriv to an
# unprivileged user, a cgroup per sandbox, shares opened once and bound from their
# handles, save and load over fd: migration) costs, against the host command as it was
# just before the jail landed, in the same run. There is no switch to turn the jail off,
# so the old command is built from git:
#
#   base = the parent of the first commit that added host-cli/src/jail/mod.rs
#   (override with BASE=<commit>), exported with `git archive` into
#   target/jail-base/src/ and built there with its own target directory
#   (target/jail-base/target, kept between runs: only the first run compiles it all).
#   NEW=<commit> builds the new side from git the same way (target/jail-base/src-new/,
#   target/jail-base/target-new)
#   instead of this work tree: NEW=<the commit that added the jail> shows it alone.
#
# Both commands boot the same kernel and templates (ATOLL_DATA_DIR or the default data
# directory; the guest agent and its protocol are the same on both sides) and each gets a
# state directory of its own (template snapshots live there). Per round, old and new
# alternate (old first on odd rounds, new first on even ones):
#   - cold `atoll create` until the first exec answers (ATOLL_TEMPLATE_SNAPSHOT=off);
#   - `atoll create` restored from the template snapshot until the first exec answers
#     (checked: `started_from` is "template snapshot");
#   - an exec round trip: `atoll -s NAME exec -- true`, E times on one running sandbox
#     per side (the median call).
# Prints one markdown row per figure: median (min-max) of each side and new/old.
#
# Usage: bench/jail.sh            R=5 rounds, E=10 execs per side per round
#        R=3 E=5 bench/jail.sh    fewer
#        PROFILE=release bench/jail.sh   both commands built in release (default: debug)
#        NEW=6965a53 bench/jail.sh       the commit that added the jail against its parent
#        BASE=self OLD_ENV='VAR=value' bench/jail.sh
#                                 both sides this work tree's command, the old one run
#                                 with OLD_ENV (what a switch's default saves)
set -euo pipefail

repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$repo"
rounds="${R:-5}"
execs="${E:-10}"
profile="${PROFILE:-debug}"
case "$profile" in
    debug) flag=() ;;
    release) flag=(--release) ;;
    *) echo "bench/jail.sh: PROFILE must be debug or release, not '$profile'" >&2; exit 2 ;;
esac

# shellcheck disable=SC2206 # OLD_ENV is split into its VAR=value words on purpose
old_env=(${OLD_ENV:-})
first_jail=$(git log --format=%H --diff-filter=A -- host-cli/src/jail/mod.rs | tail -n1)
if [[ -z "$first_jail" && -z "${BASE:-}" ]]; then
    echo "bench/jail.sh: no commit adds host-cli/src/jail/mod.rs in this history; set BASE=<commit>" >&2
    exit 2
fi
if [[ "${BASE:-}" == self ]]; then
    base=$(git rev-parse HEAD)
    old_label="the same, ${OLD_ENV:-no OLD_ENV}"
    new_label_head="this work tree"
else
    base=$(git rev-parse --verify "${BASE:-$first_jail^}^{commit}")
    old_label="before the jail"
    new_label_head="with the jail"
fi
cache="$repo/target/jail-base"
# Builds the host command at commit $2 from an export in $cache/$1 (the commit written
# beside it) with the target directory $3 (one per side: with git archive's mtimes, one
# shared target directory can take one side's build for the other's), and copies it to
# $cache/$1.atoll.
build_at() {
    local dir="$cache/$1" commit="$2" target="$3"
    if [[ "$(cat "$dir.commit" 2>/dev/null)" != "$commit" ]]; then
        rm -rf "$dir" "$dir.commit" && mkdir -p "$dir"
        git archive "$commit" | tar -x -C "$dir"
        echo "$commit" >"$dir.commit"
    fi
    (cd "$dir" && CARGO_TARGET_DIR="$target" cargo build --quiet "${flag[@]}" -p atoll)
    cp "$target/$profile/atoll" "$dir.atoll"
}
if [[ "${BASE:-}" != self ]]; then
    echo "bench/jail.sh: building the old command ($(git log -1 --format='%h %s' "$base" | cut -c1-70))" >&2
    build_at src "$base" "$cache/target"
    old_bin="$cache/src.atoll"
fi
if [[ -n "${NEW:-}" ]]; then
    # NEW=<commit>: the new side from git too (say the commit that added the jail, to
    # see it alone).
    new_commit=$(git rev-parse --verify "$NEW^{commit}")
    echo "bench/jail.sh: building the new command ($(git log -1 --format='%h %s' "$new_commit" | cut -c1-70))" >&2
    build_at src-new "$new_commit" "$cache/target-new"
    new_label="${new_commit:0:7}"
    new_bin="$cache/src-new.atoll"
    cmp -s "$old_bin" "$new_bin" && { echo "bench/jail.sh: the two builds are the same binary" >&2; exit 1; }
else
    echo "bench/jail.sh: building the new command ($(git log -1 --format='%h' HEAD), work tree as it is)" >&2
    cargo build --quiet "${flag[@]}" -p atoll
    new_label="$(git log -1 --format=%h HEAD)$(git diff --quiet HEAD -- host-cli net proto || echo '+uncommitted changes')"
    new_bin="$repo/target/$profile/atoll"
fi

[[ "${BASE:-}" == self ]] && old_bin="$new_bin"
declare -A bin state
bin[old]="$old_bin"
bin[new]="$new_bin"
state[old]="$(mktemp -d /tmp/atoll-jb-old-XXXX)"
state[new]="$(mktemp -d /tmp/atoll-jb-new-XXXX)"
chmod 700 "${state[old]}" "${state[new]}"
work="$(mktemp -d /tmp/atoll-jb-XXXX)"
log="$work/create.log"
cleanup() {
    for s in old new; do
        ATOLL_STATE_DIR="${state[$s]}" "${bin[$s]}" kill --all --force >/dev/null 2>&1 || true
        rm -rf "${state[$s]}"
    done
    rm -rf "$work"
}
trap cleanup EXIT

run() {
    local s="$1" e=()
    shift
    [[ "$s" == old ]] && e=("${old_env[@]}")
    env "${e[@]}" ATOLL_STATE_DIR="${state[$s]}" "${bin[$s]}" "$@"
}
now() { date +%s.%N; }
# Side $1 creates sandbox $2 (extra create arguments follow; environment from the caller)
# and runs one exec; prints seconds.
# The create runs with -vv (both sides log the same steps); its log is kept in $log.
timed_create() {
    local s="$1" name="$2" t0 t1
    shift 2
    t0=$(now)
    run "$s" -vv create --name "$name" "$@" >/dev/null 2>"$log" || { cat "$log" >&2; exit 1; }
    run "$s" -s "$name" exec -- true
    t1=$(now)
    echo "$t1 - $t0" | bc
}
# The restore's steps in $log ("restore: WHAT at N ms"), as "WHAT<TAB>ms since the step
# before" lines appended to $work/steps.$1.
steps() {
    sed -n 's/.*restore: \(.*\) at \([0-9.]*\) ms$/\1\t\2/p' "$log" |
        awk -F'\t' '{printf "%s\t%.1f\n", $1, $2 - prev; prev = $2}' >>"$work/steps.$1"
}
# Side $1: $execs exec round trips on sandbox `keep`; prints each call's seconds.
exec_calls() {
    local s="$1" i t0 t1
    for i in $(seq 1 "$execs"); do
        t0=$(now)
        run "$s" -s keep exec -- true
        t1=$(now)
        echo "$t1 - $t0" | bc
    done
}
median() { printf '%s\n' "$@" | sort -n | awk '{v[NR]=$1} END {m=v[int((NR+1)/2)]; printf "%.3f %.3f %.3f\n", m, v[1], v[NR]}'; }

# Each side: `keep` (its first create boots and saves the template snapshot; not timed)
# stays up for the exec round trips.
for s in old new; do
    run "$s" create --name keep >/dev/null 2>"$log" || { cat "$log" >&2; exit 1; }
    run "$s" -s keep exec -- true
done
load_start=$(cut -d' ' -f1-3 /proc/loadavg)
declare -A cold warm calls
for r in $(seq 1 "$rounds"); do
    if ((r % 2)); then order=(old new); else order=(new old); fi
    for s in "${order[@]}"; do
        cold[$s]+=" $(ATOLL_TEMPLATE_SNAPSHOT=off timed_create "$s" "cold$r")"
        run "$s" kill "cold$r" >/dev/null
    done
    for s in "${order[@]}"; do
        warm[$s]+=" $(timed_create "$s" "warm$r")"
        steps "$s"
        from=$(run "$s" --json inspect "warm$r" | sed -n 's/.*"started_from": *"\([^"]*\)".*/\1/p')
        [[ "$from" == "template snapshot" ]] || { echo "bench/jail.sh: $s warm$r started from '$from'" >&2; exit 1; }
        run "$s" kill "warm$r" >/dev/null
    done
    for s in "${order[@]}"; do
        calls[$s]+=" $(exec_calls "$s" | tr '\n' ' ')"
    done
done
load_end=$(cut -d' ' -f1-3 /proc/loadavg)

row() {
    local what="$1" o n ol oh nl nh
    # shellcheck disable=SC2086
    read -r o ol oh <<<"$(median $2)"
    # shellcheck disable=SC2086
    read -r n nl nh <<<"$(median $3)"
    printf '| %s | %.3f s (%.3f-%.3f) | %.3f s (%.3f-%.3f) | %.3fx |\n' "$what" "$o" "$ol" "$oh" "$n" "$nl" "$nh" \
        "$(echo "$n / $o" | bc -l)"
}
echo "old: ${base:0:7} ($old_label); new: $new_label; $profile builds"
echo "$rounds rounds, $execs execs per side per round; $(nproc) CPUs; load average at start $load_start, at end $load_end"
echo
echo "| | $old_label | $new_label_head | new/old |"
echo "|---|---|---|---|"
row "cold \`atoll create\` until the first exec answers" "${cold[old]}" "${cold[new]}"
row "\`atoll create\` from the template snapshot until the first exec answers" "${warm[old]}" "${warm[new]}"
row "exec round trip (\`atoll exec -- true\`, one call)" "${calls[old]}" "${calls[new]}"
echo
echo "Where a restore's time goes: each step of \`atoll -vv create\` (restore: ...), ms since the step before, median (min-max)"
echo
echo "| step | $old_label | $new_label_head |"
echo "|---|---|---|"
step_row() {
    local name="$1" s out=()
    for s in old new; do
        # shellcheck disable=SC2046
        if grep -q "^$name"$'\t' "$work/steps.$s"; then
            read -r m lo hi <<<"$(median $(awk -F'\t' -v n="$name" '$1 == n {print $2}' "$work/steps.$s"))"
            out+=("$(printf '%.0f ms (%.0f-%.0f)' "$m" "$lo" "$hi")")
        else
            out+=("(no such step)")
        fi
    done
    echo "| $name | ${out[0]} | ${out[1]} |"
}
cut -f1 "$work/steps.new" "$work/steps.old" | awk '!seen[$0]++' | while read -r name; do step_row "$name"; done
