#!/usr/bin/env bash
# Builds the `debian` template: Debian bookworm (debootstrap minbase, python3, nodejs,
# systemd) with atoll-agent baked in as /sbin/atoll-agent, as an ext4 image made with
# `mkfs.ext4 -d` (no loop mounts), booted from virtio-blk through the shared initramfs,
# which loads virtio_blk and ext4, mounts /dev/vda and switch_roots to the agent (PID 1).
#
# Writes $DATA/templates/debian/{vmlinux,initrd.cpio,rootfs.ext4,template.json}; an
# existing template is replaced only once the new one is complete. Needs root
# (debootstrap chroots into the new tree).
#
# Usage: rootfs/build-debian.sh [--mirror URL] [--size 4G] [--packages a,b,c]
#   --mirror    default: $ATOLL_DEBIAN_MIRROR, else the first Debian mirror apt uses here
#   --size      the image's size (sparse; sandboxes write into a copy-on-write overlay)
#   --packages  extra packages, added to python3, nodejs and systemd-sysv (the two
#               interpreters `sandbox_run_code` offers besides sh; systemd is not PID 1
#               here, the agent is; it is in the image so that the tree can be re-baked
#               with `atoll template build --init systemd`)

source "$(dirname "$0")/lib.sh"

mirror="${ATOLL_DEBIAN_MIRROR:-}"
size=4G
packages=python3,nodejs,systemd-sysv
while [ $# -gt 0 ]; do
    case "$1" in
        --mirror) mirror="$2"; shift ;;
        --size) size="$2"; shift ;;
        --packages) packages="$packages,$2"; shift ;;
        -h|--help) sed -n '2,17p' "$0"; exit 0 ;;
        *) die "unknown argument \`$1\`; see --help" ;;
    esac
    shift
done
[ "$(id -u)" = 0 ] || die "debootstrap needs root; run this script as root (e.g. with sudo)"
need debootstrap mkfs.ext4 chroot

if [ -z "$mirror" ]; then
    # deb822 sources first, then one-line sources; the first http(s) Debian archive wins.
    mirror="$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null \
        | sed -n 's/^URIs: *\(https\?:\/\/[^ ]*\/debian\/\?\)\( .*\)\?$/\1/p' | head -n1)"
    [ -n "$mirror" ] || mirror="$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
        | awk '$2 ~ /\/debian\/?$/ {print $2; exit}')"
    [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
fi

agent="$(atoll_agent_bin)"
kdir="$(atoll_kernel_dir)"
templates="$(atoll_data_dir)/templates"
mkdir -p "$templates"
stage="$templates/.debian.tmp"
rm -rf "$stage"
mkdir -p "$stage/root"
trap 'rm -rf "$stage"' EXIT

log "debootstrap bookworm (minbase, $packages) from $mirror"
debootstrap --variant=minbase --include="$packages" bookworm "$stage/root" "$mirror" >"$stage/debootstrap.log" 2>&1 \
    || { tail -n 30 "$stage/debootstrap.log" >&2; die "debootstrap failed (full log above)"; }

log "baking the agent"
root="$stage/root"
install -m 0755 "$agent" "$root/sbin/atoll-agent"
echo atoll >"$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 atoll\n::1 localhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
printf '/dev/vda / ext4 rw,relatime 0 1\n' >"$root/etc/fstab"
# The apt indexes are re-fetchable and large; the image ships without them.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
rm -f "$root"/etc/machine-id && : >"$root/etc/machine-id"

log "making the ext4 image ($size, sparse)"
mkfs.ext4 -q -F -L atoll-root -d "$root" "$stage/rootfs.ext4" "$size" \
    || die "mkfs.ext4 -d failed; it needs e2fsprogs 1.43 or later"
rm -rf "$root" "$stage/debootstrap.log"

link_or_copy "$kdir/vmlinux" "$stage/vmlinux"
[ -f "$kdir/initrd.cpio" ] || die "no shared initramfs at $kdir/initrd.cpio; run rootfs/fetch-kernel.sh"
link_or_copy "$kdir/initrd.cpio" "$stage/initrd.cpio"
write_template_json "$stage" debian initrd.cpio rootfs.ext4 "root=/dev/vda rootfstype=ext4 quiet" agent "$agent"

rm -rf "$templates/debian"
mv "$stage" "$templates/debian"
trap - EXIT
log "template debian ready at $templates/debian ($(du -sh "$templates/debian/rootfs.ext4" | cut -f1) used)"
