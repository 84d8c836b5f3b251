#!/usr/bin/env bash
# tests/faults/kill_daemon.sh NAME [MODE [UP ARGS...]] — kill -9 one daemon
# (meta, cs1, ...) while a workload writes and fsyncs files on the mount;
# `strata up` must bring it back (on the same address), every
# fsync-acknowledged file must be intact and the mount must answer and accept
# writes again.
# MODE "survive" (with replicas, e.g. `cs2 survive --nodes 3 --replicas 3`):
# while the daemon is still down the workload must keep making progress and
# every file acknowledged so far must read back intact.
set -euo pipefail
name=$1
mode=${2:-restart}
shift $(($# >= 2 ? 2 : 1))
. "${STRATA_SRC:-$(dirname "$0")/../..}/tests/lib/cluster.sh"
here=$(cd "$(dirname "$0")" && pwd)
cluster_require
cluster_start "$@"

work=$CLUSTER_TMP/work
mkdir -p "$work"
mkdir "$MNT/w"
ack=$work/ack
stop=$work/stop
: >"$ack"

cluster_log "workload: writing and fsyncing files on the mount"
python3 "$here/workload.py" write "$MNT/w" "$ack" "$stop" >"$work/writer.out" 2>&1 &
writer=$!
sleep 3
before=$(wc -l <"$ack")
[ "$before" -gt 0 ] || cluster_fail "the workload acknowledged no file in 3 s (see $work/writer.out)"

pid=$(cluster_pid "$name")
addr_before=$(cat "$STRATA_HOME/run/$name.addr")
cluster_log "kill -9 $name (pid $pid, $addr_before) after $before acknowledged files"
kill -9 "$pid"
sleep 2
if "$STRATA" status --home "$STRATA_HOME" >"$work/status.out" 2>&1; then
	cat "$work/status.out" >&2
	cluster_fail "strata status reports everything running after kill -9 $name"
fi
grep -q "$name .* dead" "$work/status.out" || {
	cat "$work/status.out" >&2
	cluster_fail "strata status does not report $name as dead"
}

if [ "$mode" = survive ]; then
	down_at=$(wc -l <"$ack")
	cluster_log "$name is down: the workload must go on ($down_at acknowledged so far)"
	deadline=$((SECONDS + 60))
	while [ "$(wc -l <"$ack")" -lt $((down_at + 5)) ]; do
		[ $SECONDS -lt $deadline ] || cluster_fail "fewer than 5 files acknowledged in 60 s with $name down"
		kill -0 $writer 2>/dev/null || cluster_fail "the workload died: $(cat "$work/writer.out")"
		sleep 0.2
	done
	cp "$ack" "$work/ack.down"
	cluster_log "reading every acknowledged file with $name still down"
	python3 "$here/workload.py" verify "$MNT/w" "$work/ack.down" ||
		cluster_fail "acknowledged files unreadable or damaged with $name down"
fi

cluster_log "strata up: restarting $name"
cluster_up
addr_after=$(cat "$STRATA_HOME/run/$name.addr")
[ "$addr_after" = "$addr_before" ] || cluster_log "note: $name moved from $addr_before to $addr_after"
"$STRATA" status --home "$STRATA_HOME" >&2 || cluster_fail "strata status: not everything runs after strata up"

# Let the workload run on the repaired cluster; it must make progress again.
mid=$(wc -l <"$ack")
deadline=$((SECONDS + 60))
while [ "$(wc -l <"$ack")" -le "$mid" ]; do
	[ $SECONDS -lt $deadline ] || cluster_fail "no file acknowledged within 60 s after the restart of $name"
	kill -0 $writer 2>/dev/null || cluster_fail "the workload died: $(cat "$work/writer.out")"
	sleep 0.2
done
sleep 2
touch "$stop"
if ! timeout 120 tail --pid=$writer -f /dev/null; then
	cluster_fail "the workload did not stop within 120 s (a hung call on the mount?)"
fi
wait $writer || true
cat "$work/writer.out" >&2

cluster_log "verifying $(wc -l <"$ack") acknowledged files"
python3 "$here/workload.py" verify "$MNT/w" "$ack"

if [ "$mode" = survive ]; then
	# The restarted replica must catch up (resync) and then be able to serve
	# every acknowledged file alone.
	cluster_log "waiting until every target serves again (resync of $name)"
	deadline=$((SECONDS + 90))
	until "$STRATA" admin targets --json 2>/dev/null | python3 -c '
import json, sys
t = json.load(sys.stdin)["targets"]
sys.exit(0 if t and all(x["state"] == "serving" for x in t) else 1)'; do
		[ $SECONDS -lt $deadline ] || {
			"$STRATA" admin targets >&2 || true
			cluster_fail "targets not all serving 90 s after $name came back"
		}
		sleep 0.5
	done
	for d in "$STRATA_HOME"/run/cs*.pid; do
		other=$(basename "$d" .pid)
		[ "$other" = "$name" ] && continue
		cluster_log "kill -9 $other: $name must serve alone"
		kill -9 "$(cat "$d")"
	done
	sync
	echo 3 >/proc/sys/vm/drop_caches
	python3 "$here/workload.py" verify "$MNT/w" "$ack" ||
		cluster_fail "the resynced replica $name cannot serve every acknowledged file alone"
	cluster_up
fi

cluster_log "the mount answers and accepts new writes"
cluster_wait_mount 30
echo "after $name restart" >"$MNT/after"
[ "$(cat "$MNT/after")" = "after $name restart" ] || cluster_fail "cannot read back a new file"
# Through a fresh mount too: strata-fuse restart must see the same data.
fpid=$(cluster_pid fuse)
kill -9 "$fpid"
sleep 1
cluster_up
python3 "$here/workload.py" verify "$MNT/w" "$ack"
cluster_log "PASS: kill -9 $name"
