#!/usr/bin/env bash
# tests/usrbio/usrbio.sh — the native client against the same data as FUSE
# reads: `strata up`, then usrbio_check (usrbio_check.c says what it does)
# on the mount and its <home>/run/usrbio.sock, then the Python binding
# (usrbio_py.py); afterwards strata-fuse must
# still be the same live process, with no sanitizer report in its log, and
# still serve the mount.
set -euo pipefail
. "$STRATA_SRC/tests/lib/cluster.sh"
cluster_require
check=${STRATA_BUILD:-$STRATA_SRC/build}/tests/usrbio_check
[ -x "$check" ] || cluster_skip "$check is not built"
cluster_start
sock=$STRATA_HOME/run/usrbio.sock
[ -S "$sock" ] || cluster_fail "strata-fuse serves no native client at $sock"
pid=$(cluster_pid fuse)
cluster_log "usrbio_check on $MNT"
"$check" "$MNT" "$sock" || cluster_fail "usrbio_check failed"
STRATA_USRBIO_LIB=${STRATA_BUILD:-$STRATA_SRC/build}/lib/libstrata_usrbio.so \
	/usr/bin/python3 "$STRATA_SRC/tests/usrbio/usrbio_py.py" "$MNT" "$sock" ||
	cluster_fail "the Python binding failed"
# The ring's reads went to the chunkserver in batches (fuse/usrbio.c,
# chunk_read_many): more ranges than READ_MANY requests, none read again.
stats=$(/usr/bin/python3 -c 'import os,sys; print(os.getxattr(sys.argv[1], "trusted.strata.stats").decode())' "$MNT")
batches=$(awk '$1 == "chunk.read_many" {print $2}' <<<"$stats")
ranges=$(awk '$1 == "chunk.read_many_ranges" {print $2}' <<<"$stats")
retried=$(awk '$1 == "chunk.read_many_retried" {print $2}' <<<"$stats")
cluster_log "READ_MANY: ${batches:-0} requests for ${ranges:-0} ranges, ${retried:-0} read again"
[ "${batches:-0}" -gt 0 ] || cluster_fail "no READ_MANY was sent"
[ "${ranges:-0}" -ge $((2 * batches)) ] || cluster_fail "READ_MANY carried under 2 ranges per request"
[ "${retried:-0}" -eq 0 ] || cluster_fail "$retried ranges of READ_MANY had to be read again"
kill -0 "$pid" 2>/dev/null || cluster_fail "strata-fuse died"
[ "$(cluster_pid fuse)" = "$pid" ] || cluster_fail "strata-fuse was restarted"
log=$STRATA_HOME/log/fuse.log
if grep -E "AddressSanitizer|runtime error|LeakSanitizer" "$log"; then
	cluster_fail "sanitizer report in $log"
fi
echo hello >"$MNT/after" && [ "$(cat "$MNT/after")" = hello ] || cluster_fail "the mount stopped working"
grep -c "usrbio" "$log" >&2 || true
cluster_log "PASS"
