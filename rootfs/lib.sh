# Shared helpers for the rootfs/ scripts. Source it; do not run it.
#
# The atoll data directory is $ATOLL_DATA_DIR, else $XDG_DATA_HOME/atoll, else
# $HOME/.local/share/atoll (the same rule as `atoll`).

set -euo pipefail

ATOLL_ROOTFS_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
ATOLL_REPO_DIR="$(cd "$ATOLL_ROOTFS_DIR/.." && pwd)"

atoll_data_dir() {
    if [ -n "${ATOLL_DATA_DIR:-}" ]; then
        printf '%s\n' "$ATOLL_DATA_DIR"
    elif [ -n "${XDG_DATA_HOME:-}" ]; then
        printf '%s\n' "$XDG_DATA_HOME/atoll"
    else
        printf '%s\n' "$HOME/.local/share/atoll"
    fi
}

log() { printf '%s [%ss]: %s\n' "$(basename "$0")" "$SECONDS" "$*" >&2; }
die() { log "error: $*"; exit 1; }

need() {
    local tool
    for tool in "$@"; do
        command -v "$tool" >/dev/null 2>&1 || die "\`$tool\` is not installed; run rootfs/setup.sh first"
    done
}

# Modules the `minimal` image loads, in order (Debian ships them uncompressed and
# without modules.dep, so the order is the dependency order). virtio_console carries
# the agent link of the VMs atoll starts; the vsock modules stay for VMMs that give the
# VM a vsock device instead (the agent serves vsock when there is one).
ATOLL_VSOCK_MODULES="virtio_ring virtio virtio_pci_modern_dev virtio_pci_legacy_dev virtio_pci virtio_mmio virtio_console vsock vmw_vsock_virtio_transport_common vmw_vsock_virtio_transport"
# Extra modules for images booted from an ext4 disk (ext4 softdeps on crc32c).
ATOLL_DISK_MODULES="virtio_blk crc16 mbcache jbd2 crc32c_generic ext4"
# The guest NIC (virtio-net), loaded only when the kernel command line carries `atoll.net=`
# (a sandbox with a network); virtio_net needs net_failover, which needs failover.
ATOLL_NET_MODULES="failover net_failover virtio_net"
# Host folders shared over virtio-9p (`atoll create --mount`), loaded only when the kernel
# command line carries `atoll.mount=`; 9p needs fscache and netfs.
ATOLL_SHARE_MODULES="netfs fscache 9pnet 9pnet_virtio 9p"

# The agent to bake: $ATOLL_AGENT_BIN, else the workspace's musl release build.
atoll_agent_bin() {
    local bin="${ATOLL_AGENT_BIN:-$ATOLL_REPO_DIR/target/x86_64-unknown-linux-musl/release/atoll-agent}"
    [ -x "$bin" ] || die "no agent binary at $bin; build it with \`cargo build --release --target x86_64-unknown-linux-musl -p atoll-agent -p atoll\` or set ATOLL_AGENT_BIN"
    file_is_static "$bin" || die "$bin is not a static binary; build it for x86_64-unknown-linux-musl"
    printf '%s\n' "$bin"
}

file_is_static() {
    # A dynamically linked ELF has a PT_INTERP program header.
    ! LC_ALL=C readelf -l "$1" 2>/dev/null | grep -q 'Requesting program interpreter'
}

# The kernel dir: $DATA/kernel/current, which fetch-kernel.sh creates.
atoll_kernel_dir() {
    local dir
    dir="$(atoll_data_dir)/kernel/current"
    [ -f "$dir/vmlinux" ] || die "no kernel at $dir/vmlinux; run rootfs/fetch-kernel.sh first"
    (cd "$dir" && pwd -P)
}

# write_template_json DIR NAME INITRD|null ROOTFS|null CMDLINE INIT AGENT
write_template_json() {
    local dir="$1" name="$2" initrd="$3" rootfs="$4" cmdline="$5" init="$6" version
    version="$(agent_version "$7")"
    jq_str() { if [ "$1" = null ]; then printf 'null'; else printf '"%s"' "$1"; fi; }
    cat >"$dir/template.json.tmp" <<JSON
{
  "name": "$name",
  "kernel": "vmlinux",
  "initrd": $(jq_str "$initrd"),
  "rootfs": $(jq_str "$rootfs"),
  "cmdline": "$cmdline",
  "init": "$init",
  "agent_version": "$version",
  "created_unix": $(date +%s)
}
JSON
    mv "$dir/template.json.tmp" "$dir/template.json"
}

# The baked agent's version: it is static, so `atoll-agent --version` runs here too.
agent_version() {
    "$1" --version 2>/dev/null | awk '{print $2; exit}'
}

# Copy (hardlink when possible) a file.
link_or_copy() {
    ln -f "$1" "$2" 2>/dev/null || cp -f "$1" "$2"
}

# build_initramfs OUT COMPRESS [AGENT]: a newc cpio of busybox, the kernel's modules,
# /init (rootfs/initramfs-init.sh) and, when given, AGENT as /sbin/atoll-agent.
# COMPRESS is `gzip` or `none`.
build_initramfs() {
    local out="$1" compress="$2" agent="${3:-}" kdir busybox tree applet
    need cpio find
    kdir="$(atoll_kernel_dir)"
    busybox="$(command -v busybox)" || die "busybox is not installed; run rootfs/setup.sh"
    file_is_static "$busybox" || die "$busybox is dynamically linked; install busybox-static"
    tree="$(mktemp -d)"
    # The archive's `.` entry sets the mode of the guest's / (the kernel's rootfs is
    # 1777 otherwise, a world-writable root); mktemp made it 0700.
    chmod 0755 "$tree"
    mkdir -p "$tree"/{bin,sbin,usr/bin,usr/sbin,dev,proc,sys,run,tmp,root,etc/atoll,lib/modules}
    chmod 1777 "$tree/tmp"
    chmod 0700 "$tree/root"
    cp "$busybox" "$tree/bin/busybox"
    for applet in $("$busybox" --list-full); do
        [ -e "$tree/$applet" ] || ln -s /bin/busybox "$tree/$applet"
    done
    for m in $ATOLL_VSOCK_MODULES $ATOLL_DISK_MODULES $ATOLL_NET_MODULES $ATOLL_SHARE_MODULES; do
        [ -f "$kdir/modules/$m.ko" ] || die "module $m.ko is missing from $kdir/modules (a kernel fetched before it joined the lists); run rootfs/fetch-kernel.sh, which fetches it again"
    done
    cp "$kdir"/modules/*.ko "$tree/lib/modules/"
    printf '%s\n' $ATOLL_VSOCK_MODULES >"$tree/etc/atoll/modules-vsock"
    printf '%s\n' $ATOLL_DISK_MODULES >"$tree/etc/atoll/modules-disk"
    printf '%s\n' $ATOLL_NET_MODULES >"$tree/etc/atoll/modules-net"
    printf '%s\n' $ATOLL_SHARE_MODULES >"$tree/etc/atoll/modules-share"
    install -m 0755 "$ATOLL_ROOTFS_DIR/initramfs-init.sh" "$tree/init"
    printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/nonexistent:/bin/false\n' >"$tree/etc/passwd"
    printf 'root:x:0:\nnogroup:x:65534:\n' >"$tree/etc/group"
    printf '127.0.0.1 localhost\n' >"$tree/etc/hosts"
    if [ -n "$agent" ]; then
        install -m 0755 "$agent" "$tree/sbin/atoll-agent"
    fi
    (
        cd "$tree"
        find . | LC_ALL=C sort | cpio -o -H newc -R 0:0 --reproducible --quiet
    ) | case "$compress" in
        gzip) gzip -6 -n ;;
        none) cat ;;
        *) die "unknown compression $compress" ;;
    esac >"$out.tmp"
    mv "$out.tmp" "$out"
    rm -rf "$tree"
}
