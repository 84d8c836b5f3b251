# tests/lib/storm.sh — a storm of namespace mutations on the mount whose
# every call must succeed (tests/lib/storm.py: O_EXCL creates, mkdirs,
# symlinks, links, RENAME_NOREPLACE renames, XATTR_CREATE setxattrs, unlinks,
# rmdirs), for tests that kill strata-fuse under it (tests/fuse/replay.sh,
# holder_kill.sh). Source after cluster.sh.
#
#   storm_start N           N workers, each in $MNT/storm/wK
#   storm_wait_progress M   until they did M iterations more (fails on a
#                           worker's error, or after 30 s without them)
#   storm_finish            stops them; fails unless every worker answered ok
#                           and its tree is right

STORM_PY="$STRATA_SRC/tests/lib/storm.py"
STORM_N=0
STORM_PIDS=()

storm_start() {
	local w
	STORM_N=$1
	mkdir -p "$MNT/storm"
	for w in $(seq "$STORM_N"); do
		python3 "$STORM_PY" "$MNT/storm/w$w" "$CLUSTER_TMP/storm.stop" "$CLUSTER_TMP/storm$w.out" &
		STORM_PIDS+=($!)
	done
}

# Iterations all workers have done so far.
storm_progress() {
	local w t=0 n
	for w in $(seq "$STORM_N"); do
		n=$(cat "$CLUSTER_TMP/storm$w.out.n" 2>/dev/null)
		t=$((t + ${n:-0}))
	done
	echo "$t"
}

# Fails at once when a worker has stopped with an error ($1: where we are).
storm_check() {
	local w
	for w in $(seq "$STORM_N"); do
		[ -s "$CLUSTER_TMP/storm$w.out" ] && ! grep -q '^ok ' "$CLUSTER_TMP/storm$w.out" &&
			cluster_fail "storm worker $w: $(head -1 "$CLUSTER_TMP/storm$w.out") ($1)"
	done
	return 0
}

storm_wait_progress() {
	local want=$(($(storm_progress) + $1)) i
	for i in $(seq 300); do
		[ "$(storm_progress)" -ge "$want" ] && return 0
		storm_check "${2:-}"
		sleep 0.1
	done
	cluster_fail "the storm stopped making progress ($(storm_progress) iterations, want $want)"
}

storm_finish() {
	local i p alive w
	touch "$CLUSTER_TMP/storm.stop"
	for i in $(seq 600); do
		alive=0
		for p in "${STORM_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ "$alive" = 0 ] && break
		sleep 0.1
	done
	[ "$alive" = 0 ] || cluster_fail "a storm worker never finished (a request left unanswered)"
	wait "${STORM_PIDS[@]}"
	storm_check end
	for w in $(seq "$STORM_N"); do
		[ "$(sed -n 2p "$CLUSTER_TMP/storm$w.out")" = "tree ok" ] ||
			cluster_fail "storm worker $w: $(sed -n 2p "$CLUSTER_TMP/storm$w.out")"
	done
}
