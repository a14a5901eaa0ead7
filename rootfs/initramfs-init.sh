#!/bin/busybox sh
# /init of every atoll initramfs (busybox sh).
#
# Loads the virtio modules, virtio_console (the agent link) and vsock (virtio_net when
# `atoll.net=` asks for a NIC, 9p when `atoll.mount=` shares host folders; the agent
# mounts them), then:
# - no `root=` on the kernel command line (template `minimal`): execs the agent baked
#   into the initramfs, so atoll-agent is PID 1; with `atoll.disk=BYTES` (`atoll create
#   --disk`) it first copies the initramfs into a tmpfs of that size and switch_roots
#   to it, so that the root has the size asked for and `df` lists it (the kernel's
#   initial rootfs cannot be moved, and busybox `df` hides it);
# - `root=DEV` (disk templates): loads virtio_blk and ext4, mounts DEV and switch_roots
#   to `atoll.init=` (default /sbin/atoll-agent; /sbin/init for systemd templates).
# Any failure prints one line on the console and powers the VM off, so the host sees
# QEMU exit instead of a hang.

export PATH=/usr/sbin:/usr/bin:/sbin:/bin

fail() {
    echo "atoll-init: $*; powering off" >&2
    busybox poweroff -f
}

busybox mount -t devtmpfs devtmpfs /dev || fail "cannot mount /dev"
exec </dev/console >/dev/console 2>&1
busybox mount -t proc proc /proc || fail "cannot mount /proc"

root=""
rootfstype=ext4
rootflags=""
init=/sbin/atoll-agent
net=""
share=""
disk=""
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        root=*) root="${arg#root=}" ;;
        rootfstype=*) rootfstype="${arg#rootfstype=}" ;;
        rootflags=*) rootflags="${arg#rootflags=}" ;;
        atoll.init=*) init="${arg#atoll.init=}" ;;
        atoll.net=*) net=1 ;;
        atoll.mount=*) share=1 ;;
        atoll.disk=*) disk="${arg#atoll.disk=}" ;;
    esac
done

load() {
    for m in "$@"; do
        insmod "/lib/modules/$m.ko" || fail "could not load module $m"
    done
}
load $(cat /etc/atoll/modules-vsock)
# The agent configures the NIC (guest-agent/src/net.rs); it needs the driver first.
[ -n "$net" ] && load $(cat /etc/atoll/modules-net)
# The agent mounts the host folders (guest-agent/src/storage.rs); 9p must be loaded first.
[ -n "$share" ] && load $(cat /etc/atoll/modules-share)

if [ -z "$root" ]; then
    [ -x /sbin/atoll-agent ] || fail "no /sbin/atoll-agent in this initramfs and no root= to boot from"
    if [ -z "$disk" ]; then
        busybox umount /proc
        exec /sbin/atoll-agent
    fi
    mkdir -p /newroot
    busybox mount -t tmpfs -o "size=$disk,mode=0755" tmpfs /newroot || fail "cannot mount a $disk-byte tmpfs root"
    for entry in /*; do
        case "$entry" in
            /newroot) ;;
            /dev|/proc) mkdir -p "/newroot$entry" ;;
            *) busybox cp -a "$entry" /newroot/ || fail "cannot copy $entry into the new root (is atoll.disk=$disk too small?)" ;;
        esac
    done
else
    load $(cat /etc/atoll/modules-disk)
    tries=0
    while [ ! -b "$root" ]; do
        tries=$((tries + 1))
        [ "$tries" -le 100 ] || fail "root device $root did not appear within 10 s"
        busybox usleep 100000
    done
    mkdir -p /newroot
    busybox mount -t "$rootfstype" ${rootflags:+-o "$rootflags"} "$root" /newroot \
        || fail "cannot mount $root ($rootfstype) on /newroot"
fi

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
