#!/usr/bin/env bash
# image_import_fail.sh — a half-failed import leaves nothing behind: an OCI
# layout whose second layer is a truncated gzip stream (its digest matches
# the manifest, so only the conversion finds the damage) fails with one clear
# line after the first layer already produced chunks, and the store holds no
# blob, image, name, lease or staging debris afterwards; a good import then
# works and a layer refused by the OCI reader (digest mismatch) stages nothing.
set -euo pipefail
. "$STRATA_SRC/tests/lib/cluster.sh"
. "$STRATA_SRC/tests/imagesvc/lib.sh"
image_setup
S=strata_cli
STORE="$MNT/.strata/images"

mapfile -t layers < <(image_layers_of "$BUSYBOX" "$IMG_WORK/layers")
bad="$IMG_WORK/bad.tar.gz"
size=$(stat -c %s "${layers[0]}")
head -c $((size / 2)) "${layers[0]}" >"$bad"
$PY "$IMG_SRC_DIR/mkoci.py" "$IMG_WORK/oci-bad" "${layers[0]}" "$bad" >/dev/null
if $S image import "$IMG_WORK/oci-bad" --name broken 2>"$IMG_WORK/err"; then
	cluster_fail "a corrupt layer was imported"
fi
cat "$IMG_WORK/err"
[ "$(wc -l <"$IMG_WORK/err")" = 1 ] || cluster_fail "expected one error line"
grep -q "layer 1" "$IMG_WORK/err" || cluster_fail "the error does not name the layer"
left=$(find "$STORE" -mindepth 2)
[ -z "$left" ] || cluster_fail "a failed import left: $left"
$S image ls | grep -q broken && cluster_fail "the failed image is listed"

# A layout whose layer does not match its digest is refused before staging.
$PY "$IMG_SRC_DIR/mkoci.py" "$IMG_WORK/oci-mm" "${layers[@]}" >/dev/null
victim=$(find "$IMG_WORK/oci-mm/blobs/sha256" -size +100k | head -1)
printf 'X' | dd of="$victim" bs=1 seek=1000 conv=notrunc 2>/dev/null
if $S image import "$IMG_WORK/oci-mm" 2>"$IMG_WORK/err"; then cluster_fail "digest mismatch imported"; fi
cat "$IMG_WORK/err"
[ -z "$(find "$STORE" -mindepth 2)" ] || cluster_fail "a refused import left something"
[ -z "$(find "$STRATA_HOME/cache" -maxdepth 1 -name 'stage-*')" ] || cluster_fail "staging debris left"

$S image import "$BUSYBOX" --name busybox >/dev/null
[ "$(find "$STORE/blobs" -type f | wc -l)" = 2 ] || cluster_fail "expected one blob and its table"
cluster_log "PASS"
