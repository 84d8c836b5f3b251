#!/usr/bin/env bash
# tests/faults/rpc_garbage.sh PROG — malformed frames against strata-meta and
# a chunkserver (tests/faults/rpc_garbage.c); both must keep serving, stay
# alive, and the mount must still answer.
set -euo pipefail
prog=$1
. "${STRATA_SRC:-$(dirname "$0")/../..}/tests/lib/cluster.sh"
cluster_require
cluster_start
echo before >"$MNT/before"
meta_pid=$(cluster_pid meta)
cs_pid=$(cluster_pid cs1)
"$prog" "$(cat "$STRATA_HOME/run/meta.addr")" meta
"$prog" "$(cat "$STRATA_HOME/run/cs1.addr")" chunk
kill -0 "$meta_pid" || cluster_fail "strata-meta died"
kill -0 "$cs_pid" || cluster_fail "strata-chunkserver died"
"$STRATA" status --home "$STRATA_HOME" >&2 || cluster_fail "strata status: something is down"
[ "$(cat "$MNT/before")" = before ] || cluster_fail "the mount lost a file"
echo after >"$MNT/after"
[ "$(cat "$MNT/after")" = after ] || cluster_fail "the mount does not take new files"
grep -ciE "reject|malformed|bad magic|checksum|major" "$STRATA_HOME/log/meta.log" >/dev/null ||
	cluster_log "note: the meta log does not mention rejected frames"
cluster_log "PASS: malformed frames did not hurt the servers"
