#!/usr/bin/env bash
# image_lifecycle.sh — `strata image` end to end on a real single-node
# cluster: import the busybox sample (OCI layout), ls / inspect, mount it
# read-only and as a writable overlay root, run busybox in a chroot of the
# root and check what it sees; a second image sharing the layers stores no
# new chunk (dedup); rm refuses a mounted image and keeps blobs another image
# still uses; umount + rm leave an empty store. Verified reads (when the
# FUSE client has the node chunk cache): what was read is in the cache.
set -euo pipefail
. "$STRATA_SRC/tests/lib/cluster.sh"
. "$STRATA_SRC/tests/imagesvc/lib.sh"
image_setup
S=strata_cli
STORE="$MNT/.strata/images"

cluster_log "import the busybox sample"
out=$($S image import "$BUSYBOX" --name busybox:1 --json)
echo "$out"
d1=$(json_get "$out" digest)
[ "$(json_get "$out" layers)" = 3 ] || cluster_fail "expected 3 layers"
$S image ls | grep -q "busybox:1" || cluster_fail "ls does not show busybox:1"
$S image inspect busybox:1 --json | $PY -c 'import json,sys; d=json.load(sys.stdin); assert len(d["layers"])==3 and d["blobs"], d'
again=$($S image import "$BUSYBOX" --name busybox:again --json)
[ "$(json_get "$again" existed)" = true ] || cluster_fail "a second import of the same image converted it again"
if $S image inspect nosuch:tag 2>"$IMG_WORK/err"; then cluster_fail "inspect of a missing image succeeded"; fi
grep -q "no image named" "$IMG_WORK/err" || cluster_fail "unclear error: $(cat "$IMG_WORK/err")"

cluster_log "mount read-only and writable; run busybox in the overlay root"
mkdir -p "$IMG_WORK/ro" "$IMG_WORK/root1" "$IMG_WORK/root2"
$S image mount busybox:1 "$IMG_WORK/ro" --record-after 0
$S image mount busybox:1 "$IMG_WORK/root1" --writable --record-after 0
$S image mount busybox:1 "$IMG_WORK/root2" --writable --record-after 0
# (only this test's mounts: other tests may run at the same time)
erofs_here() { grep " - erofs " /proc/self/mountinfo | awk -v d="$CLUSTER_TMP/" 'index($5, d) == 1' || true; }
[ -n "$(erofs_here)" ] || cluster_fail "no EROFS mount"
shared=$(erofs_here | awk '$5 ~ /cache\/images/ { n++ } END { print n+0 }')
[ "$shared" = 1 ] || cluster_fail "expected one shared EROFS mount for the image, saw $shared"
out=$(chroot "$IMG_WORK/root1" /bin/busybox sh -c 'echo hello; ls /bin | wc -l; ls /etc')
echo "$out"
echo "$out" | grep -q hello || cluster_fail "busybox did not run in the root"
if touch "$IMG_WORK/ro/x" 2>/dev/null; then cluster_fail "the read-only mount is writable"; fi
chroot "$IMG_WORK/root1" /bin/busybox sh -c 'echo mine > /tmp/f && echo changed > /etc/motd'
[ ! -e "$IMG_WORK/root2/tmp/f" ] || cluster_fail "roots share their upper layer"
[ "$(cat "$IMG_WORK/root1/tmp/f")" = mine ] || cluster_fail "the overlay root lost a write"
# The image's files are what the layers say (busybox is the same binary).
cmp "$IMG_WORK/ro/bin/busybox" "$IMG_WORK/root2/bin/busybox"
$PY - "$BUSYBOX" "$IMG_WORK/ro" <<'PY'
import hashlib, io, json, os, subprocess, sys, tarfile
src, root = sys.argv[1], sys.argv[2]
blob = lambda d: os.path.join(src, "blobs", *d.split(":"))
man = json.load(open(blob(json.load(open(os.path.join(src, "index.json")))["manifests"][0]["digest"])))
files = {}
for n, l in enumerate(man["layers"]):
    data = open(blob(l["digest"]), "rb").read()
    if "zstd" in l["mediaType"]:
        data = subprocess.run(["zstd", "-dc"], input=data, capture_output=True, check=True).stdout
    with tarfile.open(fileobj=io.BytesIO(data)) as t:
        for m in t:
            name = m.name.lstrip("./")
            base = os.path.basename(name)
            if base == ".wh..wh..opq":
                d = os.path.dirname(name) + "/"
                files = {k: v for k, v in files.items() if not (k.startswith(d) and v[1] < n)}
                continue
            if base.startswith(".wh."):
                gone = os.path.join(os.path.dirname(name), base[4:])
                files = {k: v for k, v in files.items() if k != gone and not k.startswith(gone + "/")}
                continue
            if m.isfile():
                files[name] = (hashlib.sha256(t.extractfile(m).read()).hexdigest(), n)
            elif name in files:
                del files[name]
for name, (h, _) in files.items():
    got = hashlib.sha256(open(os.path.join(root, name), "rb").read()).hexdigest()
    assert got == h, name
print("contents: %d files match the layers" % len(files))
PY
if image_have_blobcache; then
	f=$(cache_stat fetched_bytes)
	[ "$f" -gt 0 ] || cluster_fail "the node chunk cache fetched nothing"
	[ "$(cache_stat bad)" = 0 ] || cluster_fail "digest mismatches on a clean image"
fi

cluster_log "a second image sharing the layers stores no new chunk"
mapfile -t layers < <(image_layers_of "$BUSYBOX" "$IMG_WORK/layers")
mkdir -p "$IMG_WORK/extra/opt"
head -c 300000 /dev/urandom >"$IMG_WORK/extra/opt/data.bin"
tar -C "$IMG_WORK/extra" -cf "$IMG_WORK/extra.tar" opt
$PY "$IMG_SRC_DIR/mkoci.py" "$IMG_WORK/oci2" "${layers[@]}" "$IMG_WORK/extra.tar" >/dev/null
out=$($S image import "$IMG_WORK/oci2" --name app:2 --json)
echo "$out"
[ "$(json_get "$out" chunks_new)" = 1 ] || cluster_fail "dedup: expected only the new file's chunk to be stored"
[ "$(json_get "$out" chunks_dedup)" -ge 2 ] || cluster_fail "dedup: the busybox chunks were not found"
mkdir -p "$IMG_WORK/root3"
$S image mount app:2 "$IMG_WORK/root3" --writable --record-after 0
cmp "$IMG_WORK/root3/opt/data.bin" "$IMG_WORK/extra/opt/data.bin"
chroot "$IMG_WORK/root3" /bin/busybox true

cluster_log "rm refuses a mounted image; shared blobs survive the removal of one image"
$S image rm busybox:again
if $S image rm busybox:1 2>"$IMG_WORK/err"; then cluster_fail "rm removed a mounted image"; fi
grep -q "mounted" "$IMG_WORK/err" || cluster_fail "unclear rm error: $(cat "$IMG_WORK/err")"
$S image umount "$IMG_WORK/ro"
$S image umount "$IMG_WORK/root1"
$S image umount "$IMG_WORK/root2"
[ -z "$(grep " - overlay " /proc/self/mountinfo | awk -v d="$CLUSTER_TMP/" 'index($5, d) == 1 && $5 ~ /root[12]$/')" ] || cluster_fail "overlay left mounted"
$S image rm busybox:1
nblobs=$(ls "$STORE/blobs" | wc -l)
[ "$nblobs" -ge 2 ] || cluster_fail "rm of busybox removed blobs app:2 still uses"
chroot "$IMG_WORK/root3" /bin/busybox true || cluster_fail "app:2 broke after rm busybox"
$S image umount "$IMG_WORK/root3"
$S image rm app:2
[ -z "$(find "$STORE" -mindepth 2)" ] ||
	cluster_fail "the store is not empty after removing every image: $(ls -R "$STORE")"
[ -z "$(erofs_here)" ] || cluster_fail "an EROFS mount is left"
cluster_log "PASS"
