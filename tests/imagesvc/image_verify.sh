#!/usr/bin/env bash
# image_verify.sh — the image store's signatures on a real cluster
# (imagesvc/image_auth.h), the hostile case of issue 14: a client that can
# write the store rewrites what a name means.
#  1. refs/busybox:latest rewritten through the mount to name another
#     image (unsigned, then with another name's signed ref copied over it):
#     `strata image mount busybox` fails with the reason and mounts nothing;
#     importing busybox again makes the name good;
#  2. a digest table rewritten through the mount (strata-fuse restarted so
#     that it holds no table in memory): the mount fails, strata-fuse logs
#     the refused table; importing again replaces the image and it mounts;
#  3. a store from before signatures (format 1 record, unsigned ref):
#     refused with "run strata image resign"; resign signs it, it mounts.
# Skips when strata-fuse has no chunk cache (it is what checks tables).
set -euo pipefail
. "$STRATA_SRC/tests/lib/cluster.sh"
. "$STRATA_SRC/tests/imagesvc/lib.sh"
image_have_blobcache || cluster_skip "strata-fuse checks digest tables only with its chunk cache"
S=strata_cli
image_setup
R="$IMG_WORK/r"
STORE="$MNT/.strata/images"
mkdir -p "$R"

# mount_fails REF WORD: strata image mount REF fails, says WORD, mounts nothing.
mount_fails() {
	if $S image mount "$1" "$R" --record-after 0 2>"$IMG_WORK/err"; then
		cluster_fail "image mount $1 worked on a rewritten store"
	fi
	cat "$IMG_WORK/err" >&2
	grep -q "$2" "$IMG_WORK/err" || cluster_fail "expected '$2' in: $(cat "$IMG_WORK/err")"
	[ "$(wc -l <"$IMG_WORK/err")" = 1 ] || cluster_fail "expected one error line"
	! mountpoint -q "$R" || cluster_fail "something was mounted at $R"
}

# mount_is_busybox REF: mounts REF, checks it is busybox (not app:2), unmounts.
mount_is_busybox() {
	$S image mount "$1" "$R" --record-after 0
	chroot "$R" /bin/busybox true || cluster_fail "busybox does not run from $1"
	[ ! -e "$R/opt/data.bin" ] || cluster_fail "$1 mounted the other image"
	$S image umount "$R"
}

cluster_log "two images: busybox and app:2 (busybox's layers and one more)"
$S image import "$BUSYBOX" --name busybox >/dev/null
mapfile -t layers < <(image_layers_of "$BUSYBOX" "$IMG_WORK/layers")
mkdir -p "$IMG_WORK/extra/opt"
head -c 300000 /dev/urandom >"$IMG_WORK/extra/opt/data.bin"
tar -C "$IMG_WORK/extra" -cf "$IMG_WORK/extra.tar" opt
$PY "$IMG_SRC_DIR/mkoci.py" "$IMG_WORK/oci2" "${layers[@]}" "$IMG_WORK/extra.tar" >/dev/null
$S image import "$IMG_WORK/oci2" --name app:2 >/dev/null
app=$($S image inspect app:2 --json | $PY -c 'import json,sys; print(json.load(sys.stdin)["digest"])')
mount_is_busybox busybox

cluster_log "1. refs/busybox:latest rewritten to name app:2"
REF="$STORE/refs/busybox:latest"
good=$(cat "$REF")
grep -q '^hmac-sha256:' "$REF" || cluster_fail "the ref is not signed: $good"
echo "$app" >"$REF"
mount_fails busybox "unsigned.*strata image resign"
cp "$STORE/refs/app:2" "$REF" # a signed ref, of another name
mount_fails busybox "does not carry a valid signature"
$S image import "$BUSYBOX" --name busybox >/dev/null
mount_is_busybox busybox

cluster_log "2. a digest table of busybox rewritten through the mount"
blobs=$($S image inspect busybox --json | $PY -c 'import json,sys; print(json.load(sys.stdin)["blobs"][0]["path"])')
table=${blobs%.data}.idx
$PY - "$table" <<'PY'
import os, sys
p = sys.argv[1]
os.chmod(p, 0o644)
with open(p, "r+b") as f:
    f.seek(16)  # the first chunk's digest
    d = f.read(32)
    f.seek(16)
    f.write(bytes(b ^ 0xff for b in d))
PY
image_restart_fuse # it held the good table in memory
mount_fails busybox "digest table does not match"
grep -q "Digest table of blob inode .* does not have the SHA-256" "$STRATA_HOME/log/fuse.log" ||
	cluster_fail "strata-fuse did not log the refused table"
$S image import "$BUSYBOX" --name busybox --json >"$IMG_WORK/out"
[ "$(json_get "$(cat "$IMG_WORK/out")" existed)" = false ] ||
	cluster_fail "the damaged image was kept instead of converted again"
mount_is_busybox busybox
# app:2 lists the rewritten table too (it shares busybox's layers): refused
mount_fails app:2 "digest table does not match"

cluster_log "3. a store from before signatures: refused until strata image resign"
hex=$($S image inspect busybox --json | $PY -c 'import json,sys; print(json.load(sys.stdin)["digest"][7:])')
$PY - "$STORE/images/$hex/image" <<'PY'
import struct, sys
p = sys.argv[1]
v2 = open(p, "rb").read()
nb, nl = struct.unpack_from("<II", v2, 16 + 128 + 40)
# format 1: header, manifest and meta digests, the fixed fields and blob
# ids, the layers; no document or table digests, no MAC
v1 = bytearray(v2[:16 + 64] + v2[16 + 128:16 + 176 + 4 * nb] + v2[16 + 176 + 36 * nb:16 + 176 + 36 * nb + 32 * nl])
struct.pack_into("<HHII", v1, 4, 1, 16, len(v1), 0)
open(p, "wb").write(bytes(v1))
PY
head -1 "$REF" >"$IMG_WORK/ref" && cp "$IMG_WORK/ref" "$REF"
mount_fails busybox "unsigned.*strata image resign"
mount_fails "sha256:$hex" "record is unsigned.*strata image resign"
$S image resign | tee "$IMG_WORK/out"
grep -q "signed 1 image(s) and 1 name(s)" "$IMG_WORK/out" || cluster_fail "resign: $(cat "$IMG_WORK/out")"
mount_is_busybox busybox
cluster_log "ok"
