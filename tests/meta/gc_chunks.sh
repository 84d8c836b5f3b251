#!/usr/bin/env bash
# tests/meta/gc_chunks.sh — end-to-end garbage collection on a real cluster:
# the chunks of a removed file disappear from the chunkserver's targets
# within a few seconds (strata-meta's GC thread), while a file that is
# unlinked but still open keeps its chunks and stays readable until its last
# close.
set -euo pipefail
. "${STRATA_SRC:-$(dirname "$0")/../..}/tests/lib/cluster.sh"
cluster_require
cluster_start

# Number of chunk files of inode $1 on all targets (chunk_store.c layout).
chunks_of() {
	local hex
	hex=$(printf '%016x' "$1")
	find "$STRATA_HOME" -path "*/chunks/*/$hex/*" -type f 2>/dev/null | wc -l
}

wait_no_chunks() {
	local i
	for ((i = 0; i < 100; i++)); do
		[ "$(chunks_of "$1")" -eq 0 ] && return 0
		sleep 0.1
	done
	cluster_fail "chunks of inode $1 still there 10 s after the last link went"
}

cluster_log "removed file: chunks are collected"
dd if=/dev/urandom of="$MNT/a" bs=1M count=3 conv=fsync status=none
ino=$(stat -c %i "$MNT/a")
n=$(chunks_of "$ino")
[ "$n" -ge 1 ] || cluster_fail "no chunk files found for inode $ino after writing 3 MiB"
rm "$MNT/a"
wait_no_chunks "$ino"

cluster_log "unlinked but open: chunks stay until the last close"
dd if=/dev/urandom of="$CLUSTER_TMP/b.ref" bs=1M count=2 status=none
cp "$CLUSTER_TMP/b.ref" "$MNT/b"
sync "$MNT/b"
ino=$(stat -c %i "$MNT/b")
exec 3<"$MNT/b"
rm "$MNT/b"
sleep 2.5 # more than two GC passes
[ "$(chunks_of "$ino")" -ge 1 ] || cluster_fail "chunks of open, unlinked inode $ino were collected"
cmp - "$CLUSTER_TMP/b.ref" <&3 || cluster_fail "open, unlinked file does not read back"
exec 3<&-
wait_no_chunks "$ino"
cluster_log "ok"
