#!/usr/bin/env bash
# Fetches Debian's kernel (not installed: `apt-get download` + `dpkg -x`), extracts the
# uncompressed ELF vmlinux from the bzImage payload (QEMU boots it through the PVH
# entry, 8-10 s faster than the xz bzImage under software emulation) and copies the
# modules the images load.
#
# Writes $DATA/kernel/<version>/{vmlinux,modules/*.ko,initrd.cpio} and
# $DATA/kernel/current; initrd.cpio is the shared initramfs of disk templates.
# Idempotent: an existing <version> is kept unless --force is given.
#
# Usage: rootfs/fetch-kernel.sh [--force] [--package linux-image-6.1.0-N-amd64]

source "$(dirname "$0")/lib.sh"

force=0
package=""
while [ $# -gt 0 ]; do
    case "$1" in
        --force) force=1 ;;
        --package) package="$2"; shift ;;
        -h|--help) sed -n '2,12p' "$0"; exit 0 ;;
        *) die "unknown argument \`$1\`; see --help" ;;
    esac
    shift
done
need apt-get apt-cache dpkg xz od dd busybox cpio

if [ -z "$package" ]; then
    package="$(apt-cache depends linux-image-amd64 2>/dev/null \
        | sed -n 's/^ *Depends: \(linux-image-[0-9][^ ]*-amd64\)$/\1/p' | head -n1)"
    [ -n "$package" ] || die "apt-cache found no linux-image-*-amd64 behind linux-image-amd64; run \`apt-get update\` or pass --package"
fi
version="${package#linux-image-}"
data="$(atoll_data_dir)"
dest="$data/kernel/$version"

# Every module the images load must be there: a kernel fetched before a module joined
# the lists is fetched again.
have_all_modules() {
    local m
    for m in $ATOLL_VSOCK_MODULES $ATOLL_DISK_MODULES $ATOLL_NET_MODULES $ATOLL_SHARE_MODULES; do
        [ -f "$dest/modules/$m.ko" ] || return 1
    done
}
if [ "$force" = 0 ] && [ -f "$dest/vmlinux" ] && [ -f "$dest/modules/.complete" ] && have_all_modules; then
    log "kernel $version already at $dest"
else
    work="$(mktemp -d)"
    trap 'rm -rf "$work"' EXIT
    log "downloading $package"
    (cd "$work" && apt-get download "$package" >/dev/null 2>"$work/apt.err") \
        || { cat "$work/apt.err" >&2; die "apt-get download $package failed"; }
    dpkg -x "$work"/"$package"_*.deb "$work/x"
    bzimage="$(ls "$work"/x/boot/vmlinuz-*)"

    # bzImage: setup_sects (1 byte) at 0x1f1; payload_offset and payload_length (u32
    # little-endian) at 0x248/0x24c, relative to the end of the setup sectors.
    u8() { od -An -tu1 -j "$1" -N1 "$bzimage" | tr -d ' '; }
    u32() { od -An -tu4 --endian=little -j "$1" -N4 "$bzimage" | tr -d ' '; }
    setup_sects="$(u8 $((0x1f1)))"
    [ "$setup_sects" = 0 ] && setup_sects=4
    payload_offset="$(u32 $((0x248)))"
    payload_length="$(u32 $((0x24c)))"
    start=$(( (setup_sects + 1) * 512 + payload_offset ))
    log "extracting vmlinux (payload $payload_length bytes at $start)"
    mkdir -p "$work/out/modules"
    dd if="$bzimage" of="$work/payload" bs=64K iflag=skip_bytes,count_bytes \
        skip="$start" count="$payload_length" status=none
    xz -dc --single-stream "$work/payload" >"$work/out/vmlinux" \
        || die "the payload of $bzimage is not xz; this script knows Debian's xz bzImage only"
    [ "$(head -c4 "$work/out/vmlinux" | od -An -tx1 | tr -d ' ')" = 7f454c46 ] \
        || die "extracted vmlinux is not an ELF file"

    moddir="$(ls -d "$work"/x/lib/modules/*)"
    for m in $ATOLL_VSOCK_MODULES $ATOLL_DISK_MODULES $ATOLL_NET_MODULES $ATOLL_SHARE_MODULES; do
        ko="$(find "$moddir/kernel" -name "$m.ko" -print -quit)"
        [ -n "$ko" ] || die "module $m.ko is not in $package"
        cp "$ko" "$work/out/modules/"
    done
    touch "$work/out/modules/.complete"
    mkdir -p "$data/kernel"
    rm -rf "$dest.tmp" "$dest"
    mv "$work/out" "$dest"
fi
ln -sfn "$version" "$data/kernel/current"
# The shared initramfs of disk templates (no agent inside; it switch_roots to the
# disk's). Rebuilt every time: it is cheap and follows initramfs-init.sh.
build_initramfs "$dest/initrd.cpio" none
log "kernel ready: $data/kernel/current -> $version (with the shared initrd.cpio)"
