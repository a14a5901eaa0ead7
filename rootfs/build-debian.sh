#!/usr/bin/env bash
# Builds the `debian` template: Debian bookworm with what coding agents reach for first
# (git, curl, ca-certificates, python3 with pip and venv, nodejs with npm, gcc, make and
# libc6-dev), systemd and atoll-agent baked in as /sbin/atoll-agent, as an ext4 image made
# with `mkfs.ext4 -d` (no loop mounts), booted from virtio-blk through the shared
# initramfs, which loads virtio_blk and ext4, mounts /dev/vda and switch_roots to the
# agent (PID 1).
#
# Two steps: `debootstrap --variant=minbase --include=systemd-sysv`, then `apt-get install
# --no-install-recommends` of the rest inside the tree (chroot with /proc, /sys and
# /dev/pts mounted, a policy-rc.d that refuses service starts; all undone on every exit
# path). debootstrap alone cannot configure npm's hundreds of node-* packages, apt can.
# Documentation, man pages, info pages and translations are not unpacked (a dpkg
# path-exclude that stays in the image, so later `apt-get install`s in a sandbox skip them
# too; the copyright files are kept); apt lists and caches are dropped.
#
# Writes $DATA/templates/debian/{vmlinux,initrd.cpio,rootfs.ext4,template.json}; an
# existing template is replaced only once the new one is complete. Needs root
# (debootstrap chroots into the new tree).
#
# Usage: rootfs/build-debian.sh [--mirror URL] [--size 4G] [--packages a,b,c]
#   --mirror    default: $ATOLL_DEBIAN_MIRROR, else the first Debian mirror apt uses here
#   --size      the image's size (sparse; sandboxes write into a copy-on-write overlay)
#   --packages  extra packages, installed with the tools above
#               (systemd is not PID 1 here, the agent is; it is in the image so that the
#               tree can be re-baked with `atoll template build --init systemd`)

source "$(dirname "$0")/lib.sh"

mirror="${ATOLL_DEBIAN_MIRROR:-}"
size=4G
# What coding agents use first (#33): version control, HTTP, the two interpreters
# `sandbox_run_code` offers besides sh with their package managers, a C toolchain.
packages="git curl ca-certificates python3 python3-pip python3-venv nodejs npm gcc make libc6-dev"
while [ $# -gt 0 ]; do
    case "$1" in
        --mirror) mirror="$2"; shift ;;
        --size) size="$2"; shift ;;
        --packages) packages="$packages ${2//,/ }"; shift ;;
        -h|--help) sed -n '2,/^$/p' "$0" | sed -n '/^#/p'; exit 0 ;;
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
root="$stage/root"
# Unmounts every file system mounted at or below $root (deepest first, also one that
# debootstrap left); fails if one stays.
unmount_tree() {
    local points m i
    for i in 1 2 3 4 5; do
        points="$(awk -v d="$root" '$5 == d || index($5, d "/") == 1 {print $5}' /proc/self/mountinfo | sort -r)"
        [ -n "$points" ] || return 0
        for m in $points; do umount "$m" 2>/dev/null || umount -l "$m" 2>/dev/null || true; done
    done
    return 1
}
# Every exit path: unmount what is mounted in the tree, then remove the stage without
# crossing into a file system still mounted there.
cleanup() {
    unmount_tree || log "warning: could not unmount everything under $root"
    rm -rf --one-file-system "$stage"
}
mount_in() { # mount_in TYPE DIR [OPTIONS]: mount a fresh TYPE file system at $root/DIR
    mkdir -p "$root/$2"
    mount -t "$1" ${3:+-o "$3"} "$1" "$root/$2" || die "cannot mount $1 at $root/$2"
}
cleanup
mkdir -p "$root"
trap cleanup EXIT
trap 'exit 130' INT TERM

log "debootstrap bookworm (minbase, systemd-sysv) from $mirror"
debootstrap --variant=minbase --include=systemd-sysv bookworm "$root" "$mirror" >"$stage/debootstrap.log" 2>&1 \
    || { tail -n 30 "$stage/debootstrap.log" >&2; die "debootstrap failed (full log above)"; }

log "apt-get install $packages"
# No documentation from here on (dpkg reads this at every unpack; debootstrap's own
# packages were unpacked without it, their files go in the clean-up below).
mkdir -p "$root/etc/dpkg/dpkg.cfg.d"
cat >"$root/etc/dpkg/dpkg.cfg.d/atoll-slim" <<'EOF2'
# atoll's debian template: no documentation, man or info pages, or translations.
path-exclude=/usr/share/doc/*
path-include=/usr/share/doc/*/copyright
path-exclude=/usr/share/man/*
path-exclude=/usr/share/info/*
path-exclude=/usr/share/locale/*
path-include=/usr/share/locale/locale.alias
path-exclude=/usr/share/lintian/*
EOF2
# debootstrap made the basic /dev nodes (and may leave /proc mounted); postinst
# scripts want /proc, npm's node wants /dev/pts and /dev/shm. Nothing may start.
unmount_tree || die "cannot unmount what debootstrap left mounted under $root"
mount_in proc proc
mount_in sysfs sys
mount_in devpts dev/pts newinstance,ptmxmode=0666
mount_in tmpfs dev/shm
printf '#!/bin/sh\n# atoll build: no service starts in the chroot\nexit 101\n' >"$root/usr/sbin/policy-rc.d"
chmod 0755 "$root/usr/sbin/policy-rc.d"
printf 'force-unsafe-io\n' >"$root/etc/dpkg/dpkg.cfg.d/atoll-build-unsafe-io"
in_root() {
    chroot "$root" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
        DEBIAN_FRONTEND=noninteractive "$@"
}
apt_opts=(-o Acquire::Languages=none -o Acquire::Retries=3 -o Dpkg::Use-Pty=0)
# shellcheck disable=SC2086  # $packages is a word list
{ in_root apt-get "${apt_opts[@]}" update \
    && in_root apt-get "${apt_opts[@]}" install -y --no-install-recommends $packages; } \
    >"$stage/apt.log" 2>&1 \
    || { tail -n 30 "$stage/apt.log" >&2; die "apt-get install in the new tree failed (full log above)"; }
in_root apt-get clean >/dev/null 2>&1 || true
rm -f "$root/usr/sbin/policy-rc.d" "$root/etc/dpkg/dpkg.cfg.d/atoll-build-unsafe-io"
unmount_tree || die "cannot unmount the file systems mounted under $root"

log "baking the agent"
install -m 0755 "$agent" "$root/sbin/atoll-agent"
echo atoll >"$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 atoll\n::1 localhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
printf '/dev/vda / ext4 rw,relatime 0 1\n' >"$root/etc/fstab"
# Re-fetchable or regenerated: apt indexes and caches, logs, byte-code caches of the
# build's own Python runs, dpkg's backup files.
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/* "$root"/var/cache/debconf/*-old \
    "$root"/var/lib/dpkg/*-old "$root"/var/log/apt/* "$root"/tmp/* "$root"/root/.cache
find "$root/var/log" -type f -exec truncate -s 0 {} +
# What the path-excludes above keep out of later packages, out of debootstrap's too.
find "$root/usr/share/doc" -mindepth 1 ! -type d ! -name copyright -delete
find "$root/usr/share/doc" -mindepth 1 -type d -empty -delete
rm -rf "$root"/usr/share/man/* "$root"/usr/share/info/* "$root"/usr/share/lintian
find "$root/usr/share/locale" -mindepth 1 -maxdepth 1 ! -name locale.alias -exec rm -rf {} +
rm -f "$root"/etc/machine-id && : >"$root/etc/machine-id"

log "making the ext4 image ($size, sparse)"
mkfs.ext4 -q -F -L atoll-root -d "$root" "$stage/rootfs.ext4" "$size" \
    || die "mkfs.ext4 -d failed; it needs e2fsprogs 1.43 or later"
rm -rf --one-file-system "$root" "$stage/debootstrap.log" "$stage/apt.log"

link_or_copy "$kdir/vmlinux" "$stage/vmlinux"
[ -f "$kdir/initrd.cpio" ] || die "no shared initramfs at $kdir/initrd.cpio; run rootfs/fetch-kernel.sh"
link_or_copy "$kdir/initrd.cpio" "$stage/initrd.cpio"
write_template_json "$stage" debian initrd.cpio rootfs.ext4 "root=/dev/vda rootfstype=ext4 quiet" agent "$agent"

rm -rf "$templates/debian"
mv "$stage" "$templates/debian"
trap - EXIT INT TERM
log "template debian ready at $templates/debian ($(du -sh "$templates/debian/rootfs.ext4" | cut -f1) used)"
