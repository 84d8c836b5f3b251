#!/usr/bin/env bash
# tests/fuse/meta_calls.sh (fuse_meta_calls) — the meta round trips of
# create, cold stat and unlink in one directory stay within their bounds
# (tests/fuse/meta_calls.py, counted by fuse/stats.c), and the request
# counters themselves answer: trusted.strata.stats is readable on the mount.
set -euo pipefail
. "$(dirname "$0")/../lib/cluster.sh"
cluster_require
command -v python3 >/dev/null || cluster_skip "python3 is missing"
cluster_start
stats=$(python3 -c 'import os,sys; print(os.getxattr(sys.argv[1], "trusted.strata.stats").decode())' "$MNT")
grep -q '^meta\.' <<<"$stats" || cluster_fail "the counters list no meta call: $stats"
python3 "$(dirname "$0")/meta_calls.py" "$MNT" 500 || cluster_fail "a metadata operation costs more round trips than it should"
echo "PASS: fuse_meta_calls"
