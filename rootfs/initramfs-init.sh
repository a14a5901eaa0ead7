#!/bin/busybox sh
# /init of every sbx initramfs (busybox sh).
#
# Loads the virtio and vsock modules (and virtio_net when `sbx.net=` asks for a NIC), then:
# - no `root=` on the kernel command line (template `minimal`): execs the agent baked
#   into the initramfs, so sbx-agent is PID 1;
# - `root=DEV` (disk templates): loads virtio_blk and ext4, mounts DEV and switch_roots
#   to `sbx.init=` (default /sbin/sbx-agent; /sbin/init for systemd templates).
# Any failure prints one line on the console and powers the VM off, so the host sees
# QEMU exit instead of a hang.

export PATH=/usr/sbin:/usr/bin:/sbin:/bin

fail() {
    echo "sbx-init: $*; powering off" >&2
    busybox poweroff -f
}

busybox mount -t devtmpfs devtmpfs /dev || fail "cannot mount /dev"
exec </dev/console >/dev/console 2>&1
busybox mount -t proc proc /proc || fail "cannot mount /proc"

root=""
rootfstype=ext4
rootflags=""
init=/sbin/sbx-agent
net=""
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        root=*) root="${arg#root=}" ;;
        rootfstype=*) rootfstype="${arg#rootfstype=}" ;;
        rootflags=*) rootflags="${arg#rootflags=}" ;;
        sbx.init=*) init="${arg#sbx.init=}" ;;
        sbx.net=*) net=1 ;;
    esac
done

load() {
    for m in "$@"; do
        insmod "/lib/modules/$m.ko" || fail "could not load module $m"
    done
}
load $(cat /etc/sbx/modules-vsock)
# The agent configures the NIC (guest-agent/src/net.rs); it needs the driver first.
[ -n "$net" ] && load $(cat /etc/sbx/modules-net)

if [ -z "$root" ]; then
    [ -x /sbin/sbx-agent ] || fail "no /sbin/sbx-agent in this initramfs and no root= to boot from"
    busybox umount /proc
    exec /sbin/sbx-agent
fi

load $(cat /etc/sbx/modules-disk)
tries=0
while [ ! -b "$root" ]; do
    tries=$((tries + 1))
    [ "$tries" -le 100 ] || fail "root device $root did not appear within 10 s"
    busybox usleep 100000
done
mkdir -p /newroot
busybox mount -t "$rootfstype" ${rootflags:+-o "$rootflags"} "$root" /newroot \
    || fail "cannot mount $root ($rootfstype) on /newroot"
# $init is not checked here: absolute symlinks on its path (/sbin -> /usr/sbin,
# /sbin/init -> /lib/systemd/systemd) resolve only after the switch. If it is missing,
# switch_root says so on the console and the kernel panics (panic=-1: QEMU exits).
for d in dev proc; do
    if [ -d "/newroot/$d" ]; then
        busybox mount --move "/$d" "/newroot/$d" || fail "cannot move /$d into the new root"
    else
        busybox umount "/$d"
    fi
done
exec busybox switch_root /newroot "$init"
