#!/usr/bin/env bash
# Builds the `minimal` template: the kernel plus an initramfs holding busybox, the
# virtio/vsock modules and atoll-agent, which becomes PID 1 (see initramfs-init.sh).
#
# Writes $DATA/templates/minimal/{vmlinux,initrd.cpio[.gz],template.json}; an existing
# template is replaced only once the new one is complete.
#
# Usage: rootfs/build-minimal.sh [--compress none|gzip]
#   The agent comes from $ATOLL_AGENT_BIN or target/x86_64-unknown-linux-musl/release/.
#   An uncompressed initramfs boots faster under software emulation (no gunzip in TCG).

source "$(dirname "$0")/lib.sh"

compress=none
while [ $# -gt 0 ]; do
    case "$1" in
        --compress) compress="$2"; shift ;;
        -h|--help) sed -n '2,10p' "$0"; exit 0 ;;
        *) die "unknown argument \`$1\`; see --help" ;;
    esac
    shift
done
case "$compress" in
    none) initrd=initrd.cpio ;;
    gzip) initrd=initrd.cpio.gz ;;
    *) die "--compress takes none or gzip, not \`$compress\`" ;;
esac

agent="$(atoll_agent_bin)"
kdir="$(atoll_kernel_dir)"
templates="$(atoll_data_dir)/templates"
mkdir -p "$templates"
stage="$templates/.minimal.tmp"
rm -rf "$stage"
mkdir -p "$stage"
trap 'rm -rf "$stage"' EXIT

link_or_copy "$kdir/vmlinux" "$stage/vmlinux"
build_initramfs "$stage/$initrd" "$compress" "$agent"
write_template_json "$stage" minimal "$initrd" null "quiet" agent "$agent"

rm -rf "$templates/minimal"
mv "$stage" "$templates/minimal"
trap - EXIT
log "template minimal ready at $templates/minimal ($(du -sh --apparent-size "$templates/minimal/$initrd" | cut -f1) initramfs)"
