#!/usr/bin/env bash
# The one set-up for a fresh machine (Debian bookworm or similar, x86_64); idempotent,
# so it is cheap to run again:
#   1. apt packages: QEMU, bubblewrap (the jail), busybox-static, cpio, e2fsprogs, debootstrap,
#      musl-tools, skopeo (`atoll template build --image`), ...
#   2. the musl Rust target; with --with-vsock also vhost-device-vsock (`cargo install`,
#      a minute or more, once; atoll's own VMs do not use it: it gives QEMU VMs you start
#      yourself the hybrid-vsock socket that `atoll --agent hvsock://...` reaches, and the
#      image tests use it)
#   3. the static agent and the static `atoll` command, in one cargo build for the musl
#      target (they share most of their dependencies, so those compile once); the agent is
#      copied to $DATA/bin/atoll-agent, the command is left in target/ for the quickstart
#   4. the kernel (rootfs/fetch-kernel.sh) and the `minimal` template
#   5. with --with-debian (or ATOLL_WITH_DEBIAN=1): the `debian` template (git, curl,
#      python3 with pip and venv, nodejs with npm, gcc and make), rebuilt only when the
#      agent or rootfs/build-debian.sh is newer than its image (4-8 minutes)
#   6. the snapshots of those templates, which a plain `atoll create` restores instead of
#      booting (`atoll template snapshot`, a few seconds each), made by the `atoll` on PATH
#      (or $ATOLL_BIN) in the state directory it uses; skipped when there is no `atoll` yet
#      (the first `atoll create` of a template then makes its snapshot) or with
#      ATOLL_TEMPLATE_SNAPSHOT=off. One that cannot be made is warned about, not fatal.
#   With --with-desktop (or ATOLL_WITH_DESKTOP=1): the `desktop` template too (Xorg,
#   openbox, xterm, pcmanfm, chromium; rootfs/build-desktop.sh, about 5 minutes and
#   1.2 GB), rebuilt only when the agent or its scripts changed; its snapshot is made
#   at 1024 MiB (a desktop needs more than the default 512); also novnc (`atoll desktop`'s
#   page), and with --with-test-tools chromium (tests/tests/vm_desktop.rs loads the view).
#   With --with-test-tools, also what the test suite uses beyond that: strace, and for
#   the network tests' outside world (tests/src/netns.rs) iproute2, dnsmasq-base,
#   openssl and python3, git (the repository vm_secrets.rs serves over HTTPS), and docker-registry (the image tests' registry on loopback) with
#   apache2-utils (htpasswd, for the registry that wants a password).
#
# Usage: rootfs/setup.sh [--with-debian] [--with-desktop] [--with-test-tools] [--with-vsock]
# $DATA is $ATOLL_DATA_DIR, else $XDG_DATA_HOME/atoll, else ~/.local/share/atoll.

source "$(dirname "$0")/lib.sh"

with_debian="${ATOLL_WITH_DEBIAN:-0}"
with_desktop="${ATOLL_WITH_DESKTOP:-0}"
test_tools=0
with_vsock="${ATOLL_WITH_VSOCK:-0}"
while [ $# -gt 0 ]; do
    case "$1" in
        --with-debian) with_debian=1 ;;
        --with-desktop) with_desktop=1 ;;
        --with-test-tools) test_tools=1 ;;
        --with-vsock) with_vsock=1 ;;
        -h|--help) sed -n '2,/^# $DATA is/p' "$0"; exit 0 ;;
        *) die "unknown argument \`$1\`; see --help" ;;
    esac
    shift
done

sudo=""
if [ "$(id -u)" != 0 ]; then
    command -v sudo >/dev/null || die "not root and no sudo: run this script as root"
    sudo=sudo
fi

# 1. Packages (installed only when missing, so a ready machine needs no network).
packages="qemu-system-x86 qemu-utils bubblewrap util-linux busybox-static cpio e2fsprogs debootstrap musl-tools xz-utils binutils ca-certificates curl gcc libc6-dev skopeo"
[ "$test_tools" = 1 ] && packages="$packages strace iproute2 dnsmasq-base openssl python3 git docker-registry apache2-utils"
# The desktop's live view serves Debian's noVNC page; its test loads it in Chromium.
[ "$with_desktop" = 1 ] && packages="$packages novnc"
[ "$with_desktop" = 1 ] && [ "$test_tools" = 1 ] && packages="$packages chromium"
missing_packages() {
    local p
    for p in $packages; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || printf ' %s' "$p"
    done
}
missing="$(missing_packages)"
if [ -n "$missing" ]; then
    log "installing:$missing"
    $sudo apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
    # An install can remove a package it conflicts with: a machine that came with a newer
    # qemu-utils (a backport) loses it to Debian's qemu-system-x86. Install what went
    # missing again, now in the version that fits.
    missing="$(missing_packages)"
    if [ -n "$missing" ]; then
        log "installing again (removed by the install above):$missing"
        DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq --no-install-recommends $missing >/dev/null
    fi
    missing="$(missing_packages)"
    [ -z "$missing" ] || die "apt-get did not install:$missing"
fi

# 2. Rust pieces.
if ! command -v cargo >/dev/null; then
    [ -x "$HOME/.cargo/bin/cargo" ] || die "cargo is not installed; install Rust with https://rustup.rs and run this again"
    export PATH="$HOME/.cargo/bin:$PATH"
fi
if command -v rustup >/dev/null; then
    (cd "$ATOLL_REPO_DIR" && rustup target add x86_64-unknown-linux-musl >/dev/null 2>&1) \
        || die "rustup could not add the x86_64-unknown-linux-musl target"
fi
if [ "$with_vsock" = 1 ] && ! command -v vhost-device-vsock >/dev/null && [ ! -x "$HOME/.cargo/bin/vhost-device-vsock" ]; then
    log "cargo install vhost-device-vsock, for hvsock:// to QEMU VMs atoll did not start (takes a few minutes, once)"
    cargo install vhost-device-vsock --version 0.3.0 --locked
fi

# 3. The static agent.
log "building the static agent and the static atoll command (one build, shared dependencies)"
(cd "$ATOLL_REPO_DIR" && cargo build --release --target x86_64-unknown-linux-musl -p atoll-agent -p atoll)
agent="$(atoll_agent_bin)"
data="$(atoll_data_dir)"
mkdir -p "$data/bin"
if ! cmp -s "$agent" "$data/bin/atoll-agent"; then
    install -m 0755 "$agent" "$data/bin/atoll-agent.tmp"
    mv "$data/bin/atoll-agent.tmp" "$data/bin/atoll-agent"
fi

# 4. Kernel and the default template (rebuilt every time: under a second).
"$ATOLL_ROOTFS_DIR/fetch-kernel.sh"
"$ATOLL_ROOTFS_DIR/build-minimal.sh"

# 5. The debian template, when asked, if missing or older than the agent or its script.
if [ "$with_debian" = 1 ]; then
    image="$data/templates/debian/rootfs.ext4"
    if [ ! -f "$image" ] || [ "$agent" -nt "$image" ] || [ "$ATOLL_ROOTFS_DIR/build-debian.sh" -nt "$image" ]; then
        if [ -n "$sudo" ]; then
            $sudo env ATOLL_DATA_DIR="$data" ATOLL_AGENT_BIN="$agent" "$ATOLL_ROOTFS_DIR/build-debian.sh"
        else
            "$ATOLL_ROOTFS_DIR/build-debian.sh"
        fi
    else
        log "template debian is up to date"
    fi
fi

# 5b. The desktop template, when asked, if missing or older than the agent or its scripts.
if [ "$with_desktop" = 1 ]; then
    image="$data/templates/desktop/rootfs.ext4"
    newest="$(ls -t "$agent" "$ATOLL_ROOTFS_DIR/build-desktop.sh" "$ATOLL_ROOTFS_DIR"/desktop/* | head -n1)"
    if [ ! -f "$image" ] || [ "$newest" -nt "$image" ]; then
        if [ -n "$sudo" ]; then
            $sudo env ATOLL_DATA_DIR="$data" ATOLL_AGENT_BIN="$agent" "$ATOLL_ROOTFS_DIR/build-desktop.sh"
        else
            "$ATOLL_ROOTFS_DIR/build-desktop.sh"
        fi
    else
        log "template desktop is up to date"
    fi
fi

# 6. Template snapshots. A snapshot records the `atoll` that made it and is used only by
# that one, so they are made by the `atoll` you run (not one built here), as you, in the
# state directory your `atoll create` uses. A failure leaves atoll working: create boots.
templates_made="minimal"
[ "$with_debian" = 1 ] && templates_made="$templates_made debian"
[ "$with_desktop" = 1 ] && templates_made="$templates_made desktop"
atoll_bin="${ATOLL_BIN:-$(command -v atoll || true)}"
if [[ "${ATOLL_TEMPLATE_SNAPSHOT:-}" =~ ^(off|0|no)$ ]]; then
    log "not making template snapshots (ATOLL_TEMPLATE_SNAPSHOT=$ATOLL_TEMPLATE_SNAPSHOT)"
elif [ -z "$atoll_bin" ]; then
    log "no \`atoll\` on PATH yet: the first \`atoll create\` of each template makes its snapshot (or run \`atoll template snapshot minimal\` once atoll is installed)"
else
    for t in $templates_made; do
        log "making the snapshot of template $t with $atoll_bin"
        memory=()
        [ "$t" = desktop ] && memory=(--memory 1024)
        if ! ATOLL_DATA_DIR="$data" "$atoll_bin" template snapshot "$t" "${memory[@]}"; then
            log "warning: could not make the snapshot of template $t (see above); \`atoll create --template $t\` boots it and makes one"
        fi
    done
fi
log "ready: templates in $data/templates; try \`atoll create\`"
