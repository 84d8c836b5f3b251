#!/usr/bin/env bash
# create_storm.sh DAEMON [KILLS [WRITERS [DOWN [GAP]]]] — kill -9 of DAEMON
# (meta, fuse, or both at once) during a create storm in one directory,
# KILLS times (default 5), each followed by `strata up` (which restarts
# strata-meta on its address, or starts a strata-fuse that takes the held
# connection over). WRITERS processes (default 3,
# tests/fuse/create_storm.py) create files with O_CREAT|O_EXCL in the same
# directory, two of three with a few KiB written and fsynced (half of those
# in two appends, each fsynced), and log every call that returned, after it
# returned, to a local file. They ride the kills out: strata-fuse retries
# meta calls across a restart of strata-meta, the kernel resends what a dead
# strata-fuse had not answered, and operation ids (fuse/README.md "Replayed
# requests") make a create carried out before the kill answer success, not
# EEXIST. Then, cold (after `strata restart fuse` and dropped caches, data
# read with O_DIRECT): every acknowledged create exists, every fsynced file
# has exactly its length and bytes, every empty file is empty, no name is
# listed twice, nothing is there that no writer made; and `strata fsck`
# finds nothing. An EIO (retries ran out) is not acknowledged, not a
# failure, when strata-meta stays down past strata-fuse's --retry-ms (15 s);
# with shorter outages every call must succeed; any other error of a writer
# is a failure. DOWN (s) keeps the daemon dead that long before `strata up`
# (default 0.3-0.9 s, and then at least one call per kill must have waited
# 250 ms: the kills hit the storm). GAP: names tried between an `up` and the
# next kill (default 60; a few kill the successor while it is new,
# fuse/README.md "A WRITE failed by the kernel at kill -9").
set -u
. "$(dirname "$0")/../lib/cluster.sh"
DAEMON=${1:?usage: create_storm.sh meta|fuse|both [KILLS [WRITERS [DOWN [GAP]]]]}
KILLS=${2:-5}
WRITERS=${3:-3}
DOWN=${4:-}
GAP=${5:-60}
case "$DAEMON" in
meta | fuse | both) ;;
*) cluster_fail "create_storm.sh: kill meta, fuse or both, not '$DAEMON'" ;;
esac
cluster_require
command -v python3 >/dev/null || cluster_skip "python3 is missing"
[ -x "$STRATA_BIN/strata-fuse-holder" ] || cluster_skip "$STRATA_BIN/strata-fuse-holder is not built"
cluster_start

PY=$(dirname "$0")/create_storm.py
D=$MNT/storm
STOP=$CLUSTER_TMP/stop
mkdir "$D"
pids=()
for w in $(seq "$WRITERS"); do
	python3 "$PY" write "$D" "$w" "$CLUSTER_TMP/w$w.log" "$STOP" 2>"$CLUSTER_TMP/w$w.err" &
	pids+=($!)
done

# Names tried by all writers so far.
tried() {
	local w t=0 n
	for w in $(seq "$WRITERS"); do
		n=$(cat "$CLUSTER_TMP/w$w.log.n" 2>/dev/null)
		t=$((t + ${n:-0}))
	done
	echo "$t"
}

# Fails at once if a writer logged a failure or died ($1: where we are).
writers_ok() {
	local w
	for w in $(seq "$WRITERS"); do
		grep -h '^FAIL' "$CLUSTER_TMP/w$w.log" 2>/dev/null | head -1 | grep . >&2 &&
			cluster_fail "writer $w failed ($1)"
		kill -0 "${pids[$((w - 1))]}" 2>/dev/null ||
			cluster_fail "writer $w died ($1): $(tail -3 "$CLUSTER_TMP/w$w.err")"
	done
	return 0
}

# Until the writers tried $1 names more (fails after 30 s without them).
wait_tried() {
	local want=$(($(tried) + $1))
	for _ in $(seq 300); do
		[ "$(tried)" -ge "$want" ] && return 0
		writers_ok "$2"
		sleep 0.1
	done
	cluster_fail "the storm stopped: $(tried) names tried, want $want ($2)"
}

wait_tried 60 "before the first kill"
for k in $(seq "$KILLS"); do
	if [ "$DAEMON" = both ]; then
		pid="$(cluster_pid meta) $(cluster_pid fuse)"
	else
		pid=$(cluster_pid "$DAEMON")
	fi
	cluster_log "kill -9 of $DAEMON ($pid) after $(tried) names"
	# shellcheck disable=SC2086 # one pid or two
	kill -9 $pid
	# let requests pile up behind the dead daemon, a little longer each time
	sleep "${DOWN:-0.$((k * 3 % 10))}"
	cluster_up
	cluster_wait_mount 30
	[ "$DAEMON" != meta ] && { "$STRATA" status --home "$STRATA_HOME" | grep -q "$k takeover" ||
		cluster_fail "strata status does not count $k takeover(s)"; }
	wait_tried "$GAP" "after kill $k"
done
touch "$STOP"
for p in "${pids[@]}"; do
	timeout 60 tail --pid="$p" -f /dev/null || cluster_fail "a writer did not stop in 60 s (a call left unanswered)"
done
for w in $(seq "$WRITERS"); do
	wait "${pids[$((w - 1))]}" || cluster_fail "writer $w: exit $?: $(grep -h '^FAIL' "$CLUSTER_TMP/w$w.log") $(tail -3 "$CLUSTER_TMP/w$w.err")"
done

# Cold: a fresh strata-fuse (no attribute cache, no pending lengths of its
# own) and no kernel caches, so sizes are meta's and bytes the chunkservers'.
strata_cli restart fuse >/dev/null || cluster_fail "strata restart fuse"
cluster_wait_mount 30
echo 3 >/proc/sys/vm/drop_caches
logs=()
for w in $(seq "$WRITERS"); do logs+=("$CLUSTER_TMP/w$w.log"); done
out=$(python3 "$PY" check "$D" "${logs[@]}") || cluster_fail "after $KILLS kill -9 of $DAEMON: see above"
cluster_log "$out"
# The kills hit the storm: calls were waiting for the dead daemon's successor.
slow=$(cat "${logs[@]}" | grep -c '^s ')
[ -n "$DOWN" ] || [ "$slow" -ge "$KILLS" ] ||
	cluster_fail "only $slow calls waited >= 250 ms across $KILLS kills: the kills missed the storm"
# Outages shorter than the retries: no call may fail, EIO included.
eio=$(cat "${logs[@]}" | grep '^e ' | head -3 | tr '\n' ' ')
[ -z "$eio" ] || [ "${DOWN%.*}" -ge 15 ] 2>/dev/null ||
	cluster_fail "calls failed with EIO although the daemon was down ${DOWN:-< 1} s: $eio"
if ! out=$("$STRATA" fsck --home "$STRATA_HOME" 2>&1); then
	echo "$out" | sed 's/^/  fsck| /' >&2
	cluster_fail "strata fsck after the storm is not clean"
fi
cluster_log "PASS: every acknowledged create and fsynced length across $KILLS kill -9 of $DAEMON"
