#!/usr/bin/env bash
# Builds the `desktop` template: Debian bookworm with an X server on the VM's display
# (QEMU's bochs-display, driven by the kernel's bochs DRM driver and Xorg's modesetting
# driver), openbox, xterm, pcmanfm, chromium, python3-tk, xdotool and fonts, with
# atoll-agent baked in. The screen, mouse and keyboard are QEMU's (see docs/desktop.md):
# the host takes screenshots with QMP `screendump` and sends input with QMP
# `input-send-event` to a virtio tablet and keyboard, so nothing in the guest serves them.
#
# The kernel is the shared one (rootfs/fetch-kernel.sh); the modules the desktop needs
# (bochs DRM, virtio-input, evdev, with their dependencies) are copied from the same
# Debian kernel package into /lib/modules, and udev loads them at boot.
# /usr/local/sbin/atoll-desktop-init runs first (atoll.init=): it mounts the pseudo
# filesystems, starts udev, starts the session (Xorg :0 as root, openbox and an xterm as
# user `user`) in the background and execs the agent, which stays PID 1.
#
# Writes $DATA/templates/desktop/{vmlinux,initrd.cpio,rootfs.ext4,template.json}; an
# existing template is replaced only once the new one is complete. Needs root.
#
# Usage: rootfs/build-desktop.sh [--mirror URL] [--size 6G] [--display 1280x800]
#   --display  the template's default screen size (`atoll create --display` overrides it)

source "$(dirname "$0")/lib.sh"

mirror="${ATOLL_DEBIAN_MIRROR:-}"
size=6G
display=1280x800
packages=python3,python3-tk,systemd-sysv,udev,kmod,procps,xserver-xorg-core,xserver-xorg-input-libinput,x11-xserver-utils,x11-utils,openbox,xterm,pcmanfm,chromium,fonts-dejavu-core,xdotool,dbus-x11,ca-certificates
while [ $# -gt 0 ]; do
    case "$1" in
        --mirror) mirror="$2"; shift ;;
        --size) size="$2"; shift ;;
        --display) display="$2"; shift ;;
        -h|--help) sed -n '2,20p' "$0"; exit 0 ;;
        *) die "unknown argument \`$1\`; see --help" ;;
    esac
    shift
done
[[ "$display" =~ ^[0-9]{3,4}x[0-9]{3,4}$ ]] || die "--display must be WIDTHxHEIGHT, such as 1280x800"
[ "$(id -u)" = 0 ] || die "debootstrap needs root; run this script as root (e.g. with sudo)"
need debootstrap mkfs.ext4 chroot apt-get dpkg

if [ -z "$mirror" ]; then
    mirror="$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null \
        | sed -n 's/^URIs: *\(https\?:\/\/[^ ]*\/debian\/\?\)\( .*\)\?$/\1/p' | head -n1)"
    [ -n "$mirror" ] || mirror="$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list \
        | awk '$2 ~ /\/debian\/?$/ {print $2; exit}')"
    [ -n "$mirror" ] || mirror=http://deb.debian.org/debian
fi

agent="$(atoll_agent_bin)"
kdir="$(atoll_kernel_dir)"
kversion="$(basename "$kdir")"
templates="$(atoll_data_dir)/templates"
mkdir -p "$templates"
stage="$templates/.desktop.tmp"
rm -rf "$stage"
mkdir -p "$stage/root"
trap 'rm -rf "$stage"' EXIT

log "debootstrap bookworm (minbase, $packages) from $mirror"
debootstrap --variant=minbase --include="$packages" bookworm "$stage/root" "$mirror" >"$stage/debootstrap.log" 2>&1 \
    || { tail -n 30 "$stage/debootstrap.log" >&2; die "debootstrap failed (full log above)"; }
root="$stage/root"

log "copying the display and input modules of linux-image-$kversion"
# The image's own kmod (depmod, modprobe) works out the modules' dependencies.
kx="$root/tmp/kx"
mkdir -p "$kx"
(cd "$stage" && apt-get download "linux-image-$kversion" >/dev/null 2>"$stage/apt.err") \
    || { cat "$stage/apt.err" >&2; die "apt-get download linux-image-$kversion failed"; }
dpkg -x "$stage"/linux-image-*.deb "$kx"
rm -f "$stage"/linux-image-*.deb
chroot "$root" depmod -b /tmp/kx "$kversion"
for m in bochs virtio_input evdev; do
    # `insmod PATH` lines, dependencies first; built-in modules print `builtin NAME`.
    chroot "$root" modprobe -d /tmp/kx -S "$kversion" --show-depends "$m" | awk '$1 == "insmod" {print $2}'
done | sort -u | while read -r ko; do
    rel="${ko#"/tmp/kx/lib/modules/$kversion/"}"
    mkdir -p "$root/lib/modules/$kversion/$(dirname "$rel")"
    cp "$root$ko" "$root/lib/modules/$kversion/$rel"
done
cp "$kx/lib/modules/$kversion"/modules.builtin* "$kx/lib/modules/$kversion/modules.order" "$root/lib/modules/$kversion/"
rm -rf "$kx"
chroot "$root" depmod "$kversion"
log "modules: $(cd "$root/lib/modules/$kversion" && find . -name '*.ko' | sed 's|.*/||' | tr '\n' ' ')"

log "configuring the session and baking the agent"
install -m 0755 "$agent" "$root/sbin/atoll-agent"
echo atoll >"$root/etc/hostname"
printf '127.0.0.1 localhost\n127.0.1.1 atoll\n::1 localhost ip6-localhost ip6-loopback\n' >"$root/etc/hosts"
printf '/dev/vda / ext4 rw,relatime 0 1\n' >"$root/etc/fstab"
chroot "$root" useradd -m -s /bin/bash -u 1000 user
install -m 0755 "$ATOLL_ROOTFS_DIR/desktop/atoll-desktop-init" "$root/usr/local/sbin/atoll-desktop-init"
install -m 0755 "$ATOLL_ROOTFS_DIR/desktop/atoll-desktop-session" "$root/usr/local/bin/atoll-desktop-session"
mkdir -p "$root/etc/X11/xorg.conf.d"
install -m 0644 "$ATOLL_ROOTFS_DIR/desktop/10-atoll.conf" "$root/etc/X11/xorg.conf.d/10-atoll.conf"
# Chromium's flags for a VM without a GPU (software rendering, no first-run dialogs).
printf 'export CHROMIUM_FLAGS="$CHROMIUM_FLAGS --disable-gpu --no-first-run --disable-dev-shm-usage --password-store=basic"\n' \
    >"$root/etc/chromium.d/atoll"
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/*.bin "$root"/var/cache/apt/archives/*.deb
rm -f "$root"/etc/machine-id && : >"$root/etc/machine-id"

log "making the ext4 image ($size, sparse)"
mkfs.ext4 -q -F -L atoll-root -d "$root" "$stage/rootfs.ext4" "$size" \
    || die "mkfs.ext4 -d failed; it needs e2fsprogs 1.43 or later"
rm -rf "$root" "$stage/debootstrap.log" "$stage/apt.err"

link_or_copy "$kdir/vmlinux" "$stage/vmlinux"
[ -f "$kdir/initrd.cpio" ] || die "no shared initramfs at $kdir/initrd.cpio; run rootfs/fetch-kernel.sh"
link_or_copy "$kdir/initrd.cpio" "$stage/initrd.cpio"
write_template_json "$stage" desktop initrd.cpio rootfs.ext4 \
    "root=/dev/vda rootfstype=ext4 quiet atoll.init=/usr/local/sbin/atoll-desktop-init" agent "$agent"
# The screen: a template with a `display` gets QEMU's display and input devices.
sed -i "s/^  \"init\": /  \"display\": \"$display\",\n  \"init\": /" "$stage/template.json"

rm -rf "$templates/desktop"
mv "$stage" "$templates/desktop"
trap - EXIT
log "template desktop ready at $templates/desktop ($(du -sh "$templates/desktop/rootfs.ext4" | cut -f1) used)"
