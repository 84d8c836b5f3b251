#!/usr/bin/env bash
# image_cache.sh — verified lazy reads and the node chunk cache of
# strata-fuse (fuse/blobcache.c) through real mounts:
#  1. a chunk altered in the store after import reads as EIO (and a log
#     line), never as wrong bytes;
#  2. what was read stays in the cache across a restart of strata-fuse (the
#     second run fetches nothing), and an image mounted across the restart
#     is mounted afresh by its next user;
#  3. with a 2 MiB limit, reading 8 MiB of chunks evicts (LRU), the cache stays
#     within the limit and every byte read is still right.
# Skips when strata-fuse has no chunk cache.
set -euo pipefail
. "$STRATA_SRC/tests/lib/cluster.sh"
. "$STRATA_SRC/tests/imagesvc/lib.sh"
image_have_blobcache || cluster_skip "strata-fuse has no node chunk cache (--cache-size)"
image_setup
S=strata_cli
STORE="$MNT/.strata/images"
mkdir -p "$IMG_WORK/r"

cluster_log "1. a chunk altered in the store is EIO at read"
$S image import "$BUSYBOX" --name busybox >/dev/null
blob=$(find "$STORE/blobs" -name '*.data' | head -1)
$PY - "$blob" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
b = os.pread(fd, 1, 5000)
os.pwrite(fd, bytes([b[0] ^ 0xff]), 5000)
os.fsync(fd)
os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
os.close(fd)
PY
# The pread above went through the cache (verified, original bytes): drop it.
find "$STRATA_HOME/cache/blobcache/chunks" -type f -delete
$S image mount busybox "$IMG_WORK/r" --record-after 0
if cat "$IMG_WORK/r/bin/busybox" >/dev/null 2>"$IMG_WORK/err"; then
	cluster_fail "an altered chunk was served"
fi
grep -q "Input/output error" "$IMG_WORK/err" || cluster_fail "expected EIO: $(cat "$IMG_WORK/err")"
grep -q "fails its SHA-256 check" "$STRATA_HOME/log/fuse.log" || cluster_fail "no log line"
[ "$(cache_stat bad)" -ge 1 ] || cluster_fail "bad chunk not counted"
$S image umount "$IMG_WORK/r"
$S image rm busybox

cluster_log "2. the cache survives a restart of strata-fuse"
mapfile -t layers < <(image_layers_of "$BUSYBOX" "$IMG_WORK/layers")
mkdir -p "$IMG_WORK/big/data"
for i in 1 2 3 4 5 6 7 8; do head -c 1048576 /dev/urandom >"$IMG_WORK/big/data/f$i"; done
tar -C "$IMG_WORK/big" -cf "$IMG_WORK/big.tar" data
$PY "$IMG_SRC_DIR/mkoci.py" "$IMG_WORK/oci-big" "${layers[@]}" "$IMG_WORK/big.tar" >/dev/null
$S image import "$IMG_WORK/oci-big" --name big >/dev/null
$S image mount big "$IMG_WORK/r" --record-after 0
diff -r "$IMG_WORK/r/data" "$IMG_WORK/big/data"
cat "$IMG_WORK/r/bin/busybox" >/dev/null
chroot "$IMG_WORK/r" /bin/busybox true
before=$(cache_stat entries)
[ "$before" -ge 10 ] || cluster_fail "expected cached chunks, have $before"
# Restart with the image still mounted: its EROFS mount reads through the old
# FUSE connection and goes stale; the next mount of the image replaces it.
image_restart_fuse
[ "$(cache_stat fetches)" = 0 ] || cluster_fail "stats not reset by the restart"
mkdir -p "$IMG_WORK/r2"
$S image mount big "$IMG_WORK/r2" --record-after 0
diff -r "$IMG_WORK/r2/data" "$IMG_WORK/big/data"
chroot "$IMG_WORK/r2" /bin/busybox true
[ "$(cache_stat fetches)" = 0 ] || cluster_fail "chunks cached before the restart were fetched again"
[ "$(cache_stat hits)" -ge 2 ] || cluster_fail "no cache hits after the restart"
$S image umount "$IMG_WORK/r2"
$S image umount "$IMG_WORK/r"

cluster_log "3. eviction under a 2 MiB limit"
image_restart_fuse --cache-size 2
$S image mount big "$IMG_WORK/r" --record-after 0
for i in 1 2 3 4 5 6 7 8 1 2 3; do
	cmp "$IMG_WORK/r/data/f$i" "$IMG_WORK/big/data/f$i" || cluster_fail "f$i differs"
	# drop the file's pages so that the next read of it reaches strata-fuse
	$PY -c 'import os,sys; os.posix_fadvise(os.open(sys.argv[1], os.O_RDONLY), 0, 0, os.POSIX_FADV_DONTNEED)' \
		"$IMG_WORK/r/data/f$i"
done
[ "$(cache_stat bytes)" -le 2097152 ] || cluster_fail "cache above its limit: $(cache_stat bytes)"
[ "$(cache_stat evicted)" -ge 4 ] || cluster_fail "nothing evicted"
du -sb "$STRATA_HOME/cache/blobcache/chunks" | awk '{ exit !($1 <= 2097152 + 65536 * 4096) }'
$S image umount "$IMG_WORK/r"
cluster_log "PASS"
