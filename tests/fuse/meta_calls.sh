#!/usr/bin/env bash
# tests/fuse/meta_calls.sh (fuse_meta_calls) — the meta round trips of
# create, cold stat and unlink in one directory stay within their bounds
# (tests/fuse/meta_calls.py, counted by fuse/stats.c), and the request
# counters themselves answer: trusted.strata.stats is readable on the mount;
# a name created through a second mount is seen here within 3 s although
# this mount answered it absent from a listing.
set -euo pipefail
. "$(dirname "$0")/../lib/cluster.sh"
cluster_require
command -v python3 >/dev/null || cluster_skip "python3 is missing"
cluster_start
stats=$(python3 -c 'import os,sys; print(os.getxattr(sys.argv[1], "trusted.strata.stats").decode())' "$MNT")
grep -q '^meta\.' <<<"$stats" || cluster_fail "the counters list no meta call: $stats"
python3 "$(dirname "$0")/meta_calls.py" "$MNT" 500 || cluster_fail "a metadata operation costs more round trips than it should"
# a second mount of the same cluster (another node's view, a client id of
# its own): what it creates is seen here within the listing's window
mnt2=$CLUSTER_TMP/mnt2
mkdir -p "$mnt2"
"$STRATA_BIN/strata-fuse" --meta "$STRATA_META" --mount "$mnt2" --client-id meta-calls-second \
	2>"$CLUSTER_TMP/fuse2.log" || cluster_fail "the second mount failed: $(cat "$CLUSTER_TMP/fuse2.log")"
python3 "$(dirname "$0")/meta_calls.py" --visibility "$MNT" "$mnt2" || cluster_fail "another mount's change is seen too late"
umount "$mnt2"
echo "PASS: fuse_meta_calls"
