#!/usr/bin/env bash
# tests/meta/gc_chunks.sh — end-to-end garbage collection on a real cluster:
# the chunks of a removed file disappear from the chunkserver's targets
# within a few seconds (strata-meta's GC thread), while a file that is
# unlinked but still open keeps its chunks and stays readable until its last
# close, and a file removed while its chunkserver is down stays queued and is
# collected (with backoff) once the chunkserver is back.
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

cluster_log "chunkserver down: the file stays queued, collected once it is back"
dd if=/dev/urandom of="$MNT/c" bs=1M count=1 conv=fsync status=none
ino=$(stat -c %i "$MNT/c")
[ "$(chunks_of "$ino")" -ge 1 ] || cluster_fail "no chunk files found for inode $ino"
kill -9 "$(cluster_pid cs1)"
rm "$MNT/c"
sleep 2 # a few failing GC sweeps
[ "$(chunks_of "$ino")" -ge 1 ] || cluster_fail "chunks of inode $ino vanished with cs1 down"
cluster_up
# the collector backs off (1, 2, 4 ... 16 s) while removals fail
for ((i = 0; i < 300; i++)); do
	[ "$(chunks_of "$ino")" -eq 0 ] && break
	sleep 0.1
done
[ "$(chunks_of "$ino")" -eq 0 ] || cluster_fail "chunks of inode $ino still there 30 s after cs1 returned"
grep -q "gc: .* could not be collected yet" "$STRATA_HOME/log/meta.log" ||
	cluster_fail "no GC warning in meta.log while cs1 was down"
cluster_log "ok"
