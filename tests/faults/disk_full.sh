#!/usr/bin/env bash
# tests/faults/disk_full.sh — the only target lives on a 64 MiB tmpfs. Writing
# 4 MiB files until a write fails must end in ENOSPC (not EIO, not a hang);
# every file completed before must be intact; after deleting files the space
# comes back and writes succeed again.
set -euo pipefail
. "${STRATA_SRC:-$(dirname "$0")/../..}/tests/lib/cluster.sh"
here=$(cd "$(dirname "$0")" && pwd)
cluster_require
cluster_prepare
target=$STRATA_HOME/cs1/t1
mkdir -p "$target"
mount -t tmpfs -o size=64m strata-test-target "$target" ||
	cluster_skip "cannot mount a tmpfs (not allowed in this environment)"
cluster_start --nodes 1 --targets 1

work=$CLUSTER_TMP/work
mkdir -p "$work" "$MNT/fill"
cluster_log "filling the 64 MiB target with 4 MiB files"
timeout 180 python3 "$here/workload.py" fill "$MNT/fill" "$work/filled" ||
	cluster_fail "filling did not end in ENOSPC (exit $?)"
n=$(wc -l <"$work/filled")
[ "$n" -ge 5 ] || cluster_fail "only $n files fit on a 64 MiB target before ENOSPC"
df -h "$target" >&2

cluster_log "verifying the $n files written before ENOSPC"
echo 3 >/proc/sys/vm/drop_caches
python3 "$here/workload.py" verify-fill "$MNT/fill" "$work/filled"

cluster_log "the namespace still works while the target is full"
mkdir "$MNT/still-works"
touch "$MNT/still-works/empty"
ls "$MNT/still-works" >/dev/null

cluster_log "deleting half the files gives the space back"
for i in $(seq 1 2 "$n"); do rm "$MNT/fill/f$i"; done
sleep 1
head -c $((8 * 1024 * 1024)) /dev/urandom >"$work/after"
cp "$work/after" "$MNT/after-delete" || cluster_fail "write after freeing space failed"
sync -f "$MNT/after-delete" 2>/dev/null || true
echo 3 >/proc/sys/vm/drop_caches
cmp "$work/after" "$MNT/after-delete" || cluster_fail "file written after freeing space reads back wrong"
cluster_log "PASS: disk full gives ENOSPC, older data intact, space reusable"
