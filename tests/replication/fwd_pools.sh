#!/bin/bash
# tests/replication/fwd_pools.sh — forwards do not wait on each other across
# nodes (chunkserver/README.md "Worker pools").
#
# A 3-node cluster (netns.sh) with 2 replicas, whose chains run in every
# direction between the nodes (n1 -> n2, n2 -> n3, n3 -> n1, ...), and
# chunkservers with 2 workers for clients' requests (--workers 2). 24
# threads write a file of 1 MiB chunks striped over every chain (repl_bench,
# chunk_client directly, several rounds), so every node has more client
# writes than workers, each forwarding to a node that is as busy. With one
# pool for everything (the code before the pools: `fwd_pools.sh single`,
# --fwd-workers 0) each node's workers all wait on forwards that no worker
# of the successor reads, until the 2.5 s forward timeout reports the
# healthy successor to strata-meta, whose probe may find no worker either
# and take the node out. With a pool per chain position (the default) a
# forward always finds a worker: no forward fails (chunkserver logs), no
# writer's call fails and no chain changes.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/netns.sh"
MODE=${1:-pools}
ROUNDS=${ROUNDS:-3}
BENCH="${STRATA_BUILD:-$STRATA_SRC/build}/tests/repl_bench"

rc_require
[ -x "$BENCH" ] || rc_skip "$BENCH is not built"
RC_CS_ARGS="--workers 2"
[ "$MODE" = single ] && RC_CS_ARGS="--workers 2 --fwd-workers 0"
export RC_CS_ARGS
rc_start 3 4 2

chains() { rc_admin --json chains | python3 -c '
import json,sys
d=json.load(sys.stdin)
for c in d["chains"]:
    print(c["chain"] if "chain" in c else "", c.get("version", ""),
          " ".join("%s:%s" % (x["target"], x["state"]) for x in c["targets"]))'; }
before=$(chains) || rc_fail "cannot list the chains"
rc_log "chains:"$'\n'"$before"

fail=0
for r in $(seq 1 "$ROUNDS"); do
	out=$(REPL_BENCH_REPLICAS=2 "$BENCH" write "$RC_META" 96 24 2>&1)
	rc=$?
	max=$(echo "$out" | awk '/^max_ms/{print $2}')
	rc_log "round $r: rc $rc, $(echo "$out" | awk '/^MB\/s/{print $2}') MB/s, slowest chunk ${max:-?} ms"
	if [ "$rc" != 0 ]; then
		echo "$out" >&2
		fail=1
	fi
done

after=$(chains) || rc_fail "cannot list the chains"
if [ "$before" != "$after" ]; then
	rc_log "chains changed (a healthy successor was reported):"$'\n'"$after"
	fail=1
fi
if grep -h "reporting it to strata-meta" "$RC_DIR"/log/cs*.log >&2; then
	fail=1
fi
if grep -h "did not answer a probe" "$RC_DIR/log/meta.log" >&2; then
	fail=1
fi
[ "$fail" = 0 ] || { rc_dump_logs; rc_fail "forwards waited on each other ($MODE)"; }
rc_log "ok: $ROUNDS rounds, no failed forward, chains unchanged ($MODE)"
exit 0
