#!/usr/bin/env bash
# Bring-your-own-image timings against their floors, in one run (real microVMs):
# - image not yet cached: `atoll image prune`, then `atoll template build --image oci:DIR`,
#   `atoll create --template` and the first `exec` answering;
# - image cached: the same again with the layers already in the blob cache;
#   floor of both: `skopeo copy` of the same image plus making the filesystem by hand
#   (`tar -x` of each layer, `mkfs.ext4 -d`), plus `atoll create` of the built template
#   until the first exec (the same boot atoll's figure includes);
# - a Dockerfile (FROM that image, WORKDIR, COPY, three RUNs) built cold and rebuilt
#   unchanged (every step from the step cache); floor: the cold build.
# The image is busybox plus a tree of real files ($TREE, default /usr/lib/python3*), one
# gzip layer, made here as an OCI layout (no registry: both sides read the same local
# layout, so the figures are atoll's work, not a network's). Everything lives in a data
# dir of its own sharing the installed kernel. Templates are built with --no-snapshot, so
# every create boots.
#
# Usage: bench/image.sh [path/to/atoll]   (default: target/debug/atoll)
set -euo pipefail
atoll="$(realpath "${1:-$(dirname "$0")/../target/debug/atoll}")"
tree="${TREE:-$(ls -d /usr/lib/python3.* | head -1)}"
work="$(mktemp -d /tmp/atoll-bench-image-XXXX)"
export ATOLL_DATA_DIR="$work/data" ATOLL_STATE_DIR="$work/state"
installed="${XDG_DATA_HOME:-$HOME/.local/share}/atoll"
mkdir -p "$ATOLL_DATA_DIR/kernel"
ln -s "$(realpath "$installed/kernel/current")" "$ATOLL_DATA_DIR/kernel/current"
# The agent baked into the images: $ATOLL_AGENT_BIN, else the installed one.
if [[ -z "${ATOLL_AGENT_BIN:-}" && -x "$installed/bin/atoll-agent" ]]; then
    export ATOLL_AGENT_BIN="$installed/bin/atoll-agent"
fi
trap '"$atoll" kill --all --force >/dev/null 2>&1; rm -rf "$work"' EXIT
now() { date +%s.%N; }
secs() { echo "$2 - $1" | bc; }
ratio() { echo "scale=2; $1 / $2" | bc | sed 's/^\./0./'; }

# The image: an OCI layout with one gzip layer.
mkdir -p "$work/root/bin" "$work/root/etc" "$work/root/opt"
cp /bin/busybox "$work/root/bin/"
for a in sh cat ls echo sync mkdir test; do ln -s busybox "$work/root/bin/$a"; done
printf 'root:x:0:0::/root:/bin/sh\n' >"$work/root/etc/passwd"
cp -a "$tree" "$work/root/opt/tree"
python3 - "$work/root" "$work/layout" <<'PY'
import hashlib, json, os, sys, tarfile, io, gzip
root, out = sys.argv[1], sys.argv[2]
os.makedirs(f"{out}/blobs/sha256")
def blob(b):
    d = hashlib.sha256(b).hexdigest()
    open(f"{out}/blobs/sha256/{d}", "wb").write(b)
    return "sha256:" + d, len(b)
raw = io.BytesIO()
with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as t:
    for name in sorted(os.listdir(root)):
        t.add(f"{root}/{name}", arcname=name)
diff = "sha256:" + hashlib.sha256(raw.getvalue()).hexdigest()
layer, lsize = blob(gzip.compress(raw.getvalue(), 6))
config, csize = blob(json.dumps({"architecture": "amd64", "os": "linux",
    "config": {"Env": ["PATH=/bin"], "WorkingDir": "/"},
    "rootfs": {"type": "layers", "diff_ids": [diff]}}).encode())
manifest, msize = blob(json.dumps({"schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": config, "size": csize},
    "layers": [{"mediaType": "application/vnd.oci.image.layer.v1.tar+gzip", "digest": layer, "size": lsize}]}).encode())
json.dump({"schemaVersion": 2, "manifests": [{"mediaType": "application/vnd.oci.image.manifest.v1+json",
    "digest": manifest, "size": msize, "annotations": {"org.opencontainers.image.ref.name": "1"}}]},
    open(f"{out}/index.json", "w"))
open(f"{out}/oci-layout", "w").write('{"imageLayoutVersion": "1.0.0"}')
PY
image="oci:$work/layout:1"
size_mib=$(du -sm "$work/root" | cut -f1)

first_exec() { # build args... ; prints build+create+first-exec seconds, and create+exec seconds
    local name="$1"; shift
    local t0 t1 t2
    t0=$(now)
    "$atoll" template build "$@" --name "$name" --no-snapshot --force >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
    t1=$(now)
    "$atoll" create --name "$name-vm" --template "$name" --timeout 300s >/dev/null
    "$atoll" -s "$name-vm" --connect-timeout 60s exec -- echo ok >/dev/null
    t2=$(now)
    "$atoll" kill -f "$name-vm" >/dev/null
    echo "$(secs "$t0" "$t2") $(secs "$t1" "$t2")"
}

# The floor: skopeo copy + the filesystem by hand.
t0=$(now)
skopeo copy --quiet "$image" "oci:$work/pulled:1"
mkdir "$work/fs"
for l in $(python3 -c 'import json,sys; m=json.load(open(sys.argv[1]+"/index.json"))["manifests"][0]["digest"].split(":")[1]; print(" ".join(x["digest"].split(":")[1] for x in json.load(open(sys.argv[1]+"/blobs/sha256/"+m))["layers"]))' "$work/pulled"); do
    tar -xzf "$work/pulled/blobs/sha256/$l" -C "$work/fs"
done
mkfs.ext4 -q -F -d "$work/fs" "$work/floor.ext4" "$(( size_mib * 2 + 256 ))M"
floor=$(secs "$t0" "$(now)")
rm -rf "$work/fs" "$work/floor.ext4" "$work/pulled"

"$atoll" image prune >/dev/null
read -r uncached boot1 < <(first_exec img "--image" "$image")
read -r cached boot2 < <(first_exec img "--image" "$image")
boot=$(echo "scale=3; ($boot1 + $boot2) / 2" | bc)

mkdir "$work/ctx"
echo data >"$work/ctx/data.txt"
cat >"$work/ctx/Dockerfile" <<DF
FROM $image
WORKDIR /w
COPY data.txt ./
RUN cat data.txt > a
RUN ls /opt/tree > b
RUN cat a b > c
DF
t0=$(now)
"$atoll" template build --dockerfile "$work/ctx/Dockerfile" --name df --no-snapshot --force >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
cold=$(secs "$t0" "$(now)")
t0=$(now)
"$atoll" template build --dockerfile "$work/ctx/Dockerfile" --name df --no-snapshot --force >/dev/null 2>"$work/err" || { cat "$work/err" >&2; exit 1; }
warm=$(secs "$t0" "$(now)")
grep -q "booting the build VM" "$work/err" && { echo "the cached rebuild booted a VM" >&2; exit 1; }

floor_boot=$(echo "$floor + $boot" | bc)
echo "image: ${size_mib} MiB of files ($tree + busybox), one gzip layer; floor: skopeo copy + tar + mkfs.ext4 = ${floor} s; create to first exec of the built template ${boot} s"
echo
echo "| figure | time | against its floor |"
echo "|---|---|---|"
printf '| first exec from an image not yet cached (build, create, exec) | %.2f s | %sx of skopeo copy + filesystem by hand + the same boot (%.2f s) |\n' "$uncached" "$(ratio "$uncached" "$floor_boot")" "$floor_boot"
printf '| first exec from the cached image | %.2f s | %sx |\n' "$cached" "$(ratio "$cached" "$floor_boot")"
printf '| Dockerfile rebuild, every step cached | %.2f s | %sx of its cold build (%.2f s) |\n' "$warm" "$(ratio "$warm" "$cold")" "$cold"
