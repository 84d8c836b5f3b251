#!/usr/bin/env bash
# tests/meta/gc_rate.sh — GC throughput on a real cluster: create N one-chunk
# files (default 2000; GC_RATE_FILES overrides), remove them all, and time how
# long their chunk files take to vanish from the targets. Fails if that takes
# longer than GC_RATE_MAX_S after `rm -rf` returned (default 15 s; the old
# GC, 64 inodes per second, needed ~31 s for 2000). Prints a "gc_rate:" line.
set -euo pipefail
. "${STRATA_SRC:-$(dirname "$0")/../..}/tests/lib/cluster.sh"
cluster_require
cluster_start

N=${GC_RATE_FILES:-2000}
MAX_S=${GC_RATE_MAX_S:-15}

nchunks() { find "$STRATA_HOME" -path '*/chunks/*' -type f 2>/dev/null | wc -l; }

cluster_log "creating $N one-chunk files"
mkdir "$MNT/d"
for ((i = 0; i < N; i++)); do
	printf 'x%d\n' "$i" >"$MNT/d/$i"
done
sync -f "$MNT"
before=$(nchunks)
[ "$before" -ge "$N" ] || cluster_fail "expected >= $N chunk files, found $before"
cluster_log "$before chunk files; removing the files"
t0=$(date +%s.%N)
rm -rf "$MNT/d"
trm=$(date +%s.%N)
deadline=$(($(date +%s) + MAX_S))
while [ "$(nchunks)" -gt 0 ]; do
	if [ "$(date +%s)" -ge "$deadline" ]; then
		cluster_fail "$(nchunks) of $before chunk files left ${MAX_S} s after the removal"
	fi
	sleep 0.2
done
t1=$(date +%s.%N)
awk -v n="$N" -v a="$t0" -v r="$trm" -v b="$t1" 'BEGIN {
	printf "gc_rate: %d files: rm took %.1f s, chunks gone %.1f s after rm returned, " \
		"%.1f s after it started (%.0f files/s)\n", n, r - a, b - r, b - a, n / (b - a) }' >&2
cluster_log "ok"
