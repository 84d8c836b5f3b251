#!/bin/bash
# bench/replication.sh — chain replication figures, side by side in one run:
#   1. sequential write throughput, 3 replicas beside 1 replica (goal: the
#      3-replica figure at least 0.7 of the 1-replica one: writes pipeline
#      down the chain, different chunks in flight at once);
#   2. read throughput of the same file, reads spread over the replicas
#      beside reads from the tail only;
#   3. time from kill -9 of the chain's head to the first write that
#      succeeds again (goal: under 2 s with the default 3 s lease: the
#      client reports the dead head, strata-meta probes it and moves it out).
# Each cluster is 3 chunkservers, each in its own network namespace
# (tests/replication/netns.sh), one target each; the helper is
# tests/replication/repl_bench.c driving chunk_client directly.
# On the 2-core VM both write runs are CPU bound (3 nodes and the client
# share the cores), so the ratio is about 1-replica CPU per byte over
# 3-replica CPU per byte: see chunkserver/README.md, "What a replicated
# write costs".
#
#   bench/replication.sh [BUILD_DIR (build-release)] [MB (256)] [THREADS (4)]
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$SRC/build-release}
MB=${2:-256}
THREADS=${3:-4}
export STRATA_BIN="$BUILD/bin" STRATA_SRC="$SRC"
BENCH="$BUILD/tests/repl_bench"
[ -x "$BENCH" ] || { echo "build $BENCH first (make release)" >&2; exit 1; }
OUT=$(mktemp -d)
trap 'rm -rf "$OUT"' EXIT

# One cluster with $1 replicas: write, read any, read tail (and failover).
one() (
	. "$SRC/tests/replication/netns.sh"
	rc_require
	RC_LOG_LEVEL=warn rc_start 3 1 "$1" 2>/dev/null
	local f
	f=$("$BENCH" write "$RC_META" "$MB" "$THREADS" 2>&1 >"$OUT/w$1" | awk '/^file/{print $2}')
	REPL_BENCH_FILE=$f "$BENCH" read "$RC_META" "$MB" "$THREADS" any >"$OUT/ra$1" 2>/dev/null
	REPL_BENCH_FILE=$f "$BENCH" read "$RC_META" "$MB" "$THREADS" tail >"$OUT/rt$1" 2>/dev/null
	if [ "$1" = 3 ]; then
		local head node
		head=$(rc_chain_targets 0 | awk '{print $1}')
		node=$(rc_node_of_target "$head")
		"$BENCH" failover "$RC_META" "${RC_PID[$node]}" >"$OUT/fo" 2>/dev/null
	fi
)

fig() { awk '{print $2}' "$OUT/$1" 2>/dev/null; }
one 1 2>>"$OUT/log" || { cat "$OUT/log" >&2; exit 1; }
one 3 2>>"$OUT/log" || { cat "$OUT/log" >&2; exit 1; }
w1=$(fig w1) w3=$(fig w3) ra=$(fig ra3) rt=$(fig rt3) fo=$(fig fo)
echo "chain replication, $MB MiB, $THREADS threads, 3 nodes (one netns each), 1 MiB chunks"
printf "  %-44s %10s MB/s\n" "sequential write, 1 replica" "$w1"
printf "  %-44s %10s MB/s   (ratio %s, goal >= 0.7)\n" "sequential write, 3 replicas" "$w3" \
	"$(awk -v a="$w3" -v b="$w1" 'BEGIN{printf "%.2f", a/b}')"
printf "  %-44s %10s MB/s\n" "read, 3 replicas, spread over replicas" "$ra"
printf "  %-44s %10s MB/s   (spread/tail %s)\n" "read, 3 replicas, tail only" "$rt" \
	"$(awk -v a="$ra" -v b="$rt" 'BEGIN{printf "%.2f", a/b}')"
printf "  %-44s %10s ms     (goal < 2000)\n" "kill -9 head -> first successful write" "$fo"
