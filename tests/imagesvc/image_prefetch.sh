#!/usr/bin/env bash
# image_prefetch.sh — prefetch lists: a first use records what was read
# (`strata image prefetch REF --record`, what `mount` does by itself after
# --record-after seconds), a later cold mount fetches that list in bulk (so
# the same reads then fetch nothing), and `prefetch --eager` fetches every
# chunk of the image. Needs the node chunk cache (skips otherwise).
set -euo pipefail
. "$STRATA_SRC/tests/lib/cluster.sh"
. "$STRATA_SRC/tests/imagesvc/lib.sh"
image_have_blobcache || cluster_skip "strata-fuse has no node chunk cache (--cache-size)"
image_setup
S=strata_cli
mkdir -p "$IMG_WORK/r" "$IMG_WORK/big/data"
for i in 1 2 3 4 5 6; do head -c 1048576 /dev/urandom >"$IMG_WORK/big/data/f$i"; done
mapfile -t layers < <(image_layers_of "$BUSYBOX" "$IMG_WORK/layers")
tar -C "$IMG_WORK/big" -cf "$IMG_WORK/big.tar" data
$PY "$IMG_SRC_DIR/mkoci.py" "$IMG_WORK/oci" "${layers[@]}" "$IMG_WORK/big.tar" >/dev/null
$S image import "$IMG_WORK/oci" --name pf >/dev/null

forget() { # empties the node cache (the image is unmounted: no page cache)
	find "$STRATA_HOME/cache/blobcache/chunks" -type f -delete
}
first_use() {
	chroot "$IMG_WORK/r" /bin/busybox true
	cat "$IMG_WORK/r/data/f2" >/dev/null
}

cluster_log "record: mount with a 1 s window, use the root, wait for the list"
$S image mount pf "$IMG_WORK/r" --writable --record-after 1
first_use
for _ in $(seq 50); do $S image inspect pf --json | grep -q '"prefetch":true' && break; sleep 0.2; done
$S image inspect pf --json | grep -q '"prefetch":true' || cluster_fail "no prefetch list recorded"
$S image umount "$IMG_WORK/r"
if $S image prefetch pf --record 2>/dev/null; then cluster_fail "recorded an unmounted image"; fi

cluster_log "a cold mount fetches the list in bulk; the same use then fetches nothing"
forget
out=$($S image mount pf "$IMG_WORK/r" --writable --json)
echo "$out"
pf=$(json_get "$out" prefetched_bytes)
[ "$pf" -gt 1000000 ] || cluster_fail "the cold mount prefetched only $pf bytes"
[ "$pf" -lt $((6 << 20)) ] || cluster_fail "the list holds more than the first use read ($pf)"
f0=$(cache_stat fetched_bytes)
first_use
[ "$(cache_stat fetched_bytes)" = "$f0" ] || cluster_fail "the recorded use fetched more after the prefetch"
$S image umount "$IMG_WORK/r"

cluster_log "prefetch --eager fetches everything"
forget
$S image mount pf "$IMG_WORK/r" --no-prefetch
out=$($S image prefetch pf --eager --json)
echo "$out"
[ "$(json_get "$out" bytes)" -ge $((6 << 20)) ] || cluster_fail "eager prefetch fetched too little"
f0=$(cache_stat fetched_bytes)
cat "$IMG_WORK/r"/data/* "$IMG_WORK/r/bin/busybox" >/dev/null
[ "$(cache_stat fetched_bytes)" = "$f0" ] || cluster_fail "reads after an eager prefetch fetched"
$S image umount "$IMG_WORK/r"
cluster_log "PASS"
