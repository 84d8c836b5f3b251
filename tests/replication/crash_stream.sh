#!/bin/bash
# tests/replication/crash_stream.sh [ROUNDS] — crash atomicity of chunk
# writes on every replica of a chain: a 3-node cluster, 3 replicas
# (tests/replication/netns.sh), a stream of appends, sequential writes (with
# truncates) and overwrites through the FUSE mount, every op fsynced
# (crash_stream.py run: 64 MiB chunks for the appended and sequential files,
# 4 MiB for the overwritten one).
#
# Each of ROUNDS (default 5) rounds kills one chunkserver with kill -9 at a
# random moment of the stream and, before it restarts, opens its target as
# the chunkserver would and checks it: every block of every chunk matches its
# checksum (tests/chunk_tool verify: no torn block), and every op the client
# saw acknowledged before the kill is there byte for byte, where an op in
# flight may have landed or not (crash_stream.py check). Then the node
# restarts and resyncs. A last round kills all three at once and checks each.
# At the end every file reads back through the mount as the writers wrote it
# and the replicas are equal (strata admin verify --deep).
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/netns.sh"
ROUNDS=${1:-5}
TOOL=$STRATA_BUILD/tests/chunk_tool
WL_PID=""

rc_on_teardown() {
	[ -n "$WL_PID" ] && kill -9 "$WL_PID" 2>/dev/null
	true
}

log_size() { stat -c %s "$RC_DIR/stream.log"; }
acked() {
	local n
	n=$(grep -c '^A ' "$RC_DIR/stream.log" 2>/dev/null) || true
	echo "${n:-0}"
}

# Waits until $1 more ops are acknowledged (timeout $2 s).
progress() {
	local base i
	base=$(acked)
	for i in $(seq 1 $(($2 * 10))); do
		[ "$(acked)" -ge $((base + $1)) ] && return 0
		kill -0 "$WL_PID" 2>/dev/null || rc_fail "the write stream ended"
		sleep 0.1
	done
	rc_fail "the write stream stalled at $(acked) ops"
}

# Checks node $1's stopped target against the log cut at $2 (acknowledged)
# and $3 (issued).
check_node() {
	local t=$RC_DIR/cs$1/t1 out
	out=$("$TOOL" verify "$t" 2>&1) || rc_fail "node $1: a chunk fails its checks after kill -9: $out"
	rc_log "node $1 after kill -9: $out"
	python3 "$HERE/crash_stream.py" check "$RC_DIR/stream.log" "$2" "$3" "$TOOL" "$t" >&2 ||
		rc_fail "node $1 lost acknowledged bytes or holds a torn write"
}

[ -x "$TOOL" ] || rc_skip "$TOOL is not built"
rc_require
rc_start 3 1 3
mkdir -p "$RC_MNT/big" "$RC_MNT/cs"
rc_admin layout set /big --chunk-size 64M >/dev/null || rc_fail "layout set /big"
rc_admin layout set /cs --chunk-size 4M >/dev/null || rc_fail "layout set /cs"
python3 "$HERE/crash_stream.py" run "$RC_MNT" "$RC_DIR/stream.log" >"$RC_DIR/stream.out" 2>&1 &
WL_PID=$!
progress 100 60

for r in $(seq 1 "$ROUNDS"); do
	n=$(((RANDOM % 3) + 1))
	sleep "0.$((RANDOM % 10))$((RANDOM % 10))"
	a=$(log_size)
	rc_kill_node "$n"
	i=$(log_size)
	rc_log "round $r: node $n killed after $(acked) acknowledged ops"
	check_node "$n" "$a" "$i"
	restart_and_resync() { rc_start_node "$n" && rc_wait_node "$n" && rc_wait_serving 90; }
	restart_and_resync || rc_fail "node $n did not return"
	progress 30 30
done

rc_log "last round: every node killed at once"
a=$(log_size)
for n in 1 2 3; do kill -9 "${RC_PID[$n]}" 2>/dev/null; done
for n in 1 2 3; do rc_kill_node "$n"; done
i=$(log_size)
for n in 1 2 3; do check_node "$n" "$a" "$i"; done
for n in 1 2 3; do rc_start_node "$n"; done
for n in 1 2 3; do rc_wait_node "$n"; done
rc_wait_serving 90 || rc_fail "the chains did not come back"
progress 30 60

touch "$RC_MNT/cs.stop"
wait "$WL_PID" || rc_fail "the files do not read back: $(cat "$RC_DIR/stream.out")"
WL_PID=""
rc_log "$(cat "$RC_DIR/stream.out")"
rc_admin verify --deep >&2 || rc_fail "replicas differ"
rc_log "PASS: crash_stream, $ROUNDS rounds and every node at once"
