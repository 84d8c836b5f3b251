#!/usr/bin/env bash
# tests/meta/statfs_shared.sh — statfs on a real cluster whose targets share
# one filesystem (`strata up`: one chunkserver, two target directories under
# the same home): `df` on the mount must report that filesystem's size once,
# not once per target (it used to show twice the disk).
set -euo pipefail
. "${STRATA_SRC:-$(dirname "$0")/../..}/tests/lib/cluster.sh"
cluster_require
cluster_start --targets 2

size_of() { df -B1 --output=size "$1" | tail -n 1 | tr -d ' '; }

disk=$(size_of "$STRATA_HOME")
[ "$disk" -gt 0 ] || cluster_fail "cannot read the size of $STRATA_HOME's filesystem"
# heartbeats (every 500 ms) carry the targets' filesystem ids
for ((i = 0; i < 50; i++)); do
	mnt=$(size_of "$MNT")
	# equal up to FUSE's rounding to whole blocks (1 %)
	if [ $((mnt * 100 / disk)) -ge 99 ] && [ $((mnt * 100 / disk)) -le 101 ]; then
		cluster_log "ok: mount $mnt bytes, disk $disk bytes"
		exit 0
	fi
	sleep 0.2
done
cluster_fail "df on the mount shows $mnt bytes for a $disk-byte disk holding 2 targets"
