#!/usr/bin/env bash
# replay.sh — kill -9 of strata-fuse under a storm of namespace mutations:
# every create (O_EXCL), mkdir, symlink, link, rename (RENAME_NOREPLACE),
# setxattr (XATTR_CREATE), unlink and rmdir returns success exactly as POSIX
# says, across REPLAY_KILLS kill -9 + `strata up` cycles, and each worker's
# directory holds exactly what it must (fuse/README.md "Replayed requests",
# fuse/opid.c, meta/ns_opid.c).
# Fails without operation ids: the kernel resends the requests the dead
# daemon had read but not answered (FUSE_NOTIFY_RESEND), and one that had
# reached strata-meta is carried out again and answers EEXIST, ENOENT or
# ENODATA. With WORKERS processes busy there are always some in that window.
set -u
. "$(dirname "$0")/../lib/cluster.sh"
cluster_require
command -v python3 >/dev/null || cluster_skip "python3 is missing"
[ -x "$STRATA_BIN/strata-fuse-holder" ] || cluster_skip "$STRATA_BIN/strata-fuse-holder is not built"
cluster_start

WORKERS=${REPLAY_WORKERS:-12}
KILLS=${REPLAY_KILLS:-4}
STORM="$STRATA_SRC/tests/fuse/mutate_storm.py"
mkdir "$MNT/storm"
pids=()
for w in $(seq "$WORKERS"); do
	python3 "$STORM" "$MNT/storm/w$w" "$CLUSTER_TMP/stop" "$CLUSTER_TMP/w$w.out" &
	pids+=($!)
done
progress() { # the iterations all workers have done
	local w t=0 n
	for w in $(seq "$WORKERS"); do
		n=$(cat "$CLUSTER_TMP/w$w.out.n" 2>/dev/null)
		t=$((t + ${n:-0}))
	done
	echo "$t"
}
# Fails at once when a worker has stopped with an error.
check_workers() {
	local w
	for w in $(seq "$WORKERS"); do
		[ -s "$CLUSTER_TMP/w$w.out" ] && ! grep -q '^ok ' "$CLUSTER_TMP/w$w.out" &&
			cluster_fail "worker $w: $(head -1 "$CLUSTER_TMP/w$w.out") (cycle $1)"
	done
	return 0
}
wait_progress() { # MORE: until the workers did MORE iterations more (30 s at most)
	local want=$(($(progress) + $1)) i
	for i in $(seq 300); do
		[ "$(progress)" -ge "$want" ] && return 0
		check_workers "$2"
		sleep 0.1
	done
	cluster_fail "the workers stopped making progress ($(progress) iterations, want $want)"
}

wait_progress $((WORKERS * 10)) 0
for k in $(seq "$KILLS"); do
	pid=$(cluster_pid fuse)
	cluster_log "kill -9 strata-fuse ($pid) under $WORKERS mutating workers ($(progress) iterations)"
	kill -9 "$pid"
	sleep 0.3
	cluster_up
	cluster_wait_mount 30
	"$STRATA" status --home "$STRATA_HOME" | grep -q "$k takeover" ||
		cluster_fail "strata status does not count $k takeover(s)"
	wait_progress $((WORKERS * 10)) "$k"
done
touch "$CLUSTER_TMP/stop"
for i in $(seq 600); do
	alive=0
	for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
	[ "$alive" = 0 ] && break
	sleep 0.1
done
[ "$alive" = 0 ] || cluster_fail "a worker never finished (a request left unanswered)"
wait "${pids[@]}"
check_workers end
for w in $(seq "$WORKERS"); do
	[ "$(sed -n 2p "$CLUSTER_TMP/w$w.out")" = "tree ok" ] ||
		cluster_fail "worker $w: $(sed -n 2p "$CLUSTER_TMP/w$w.out")"
done
# The storm really had requests resent: strata-meta answered some from records.
for i in $(seq 30); do grep -q "answered from their records" "$STRATA_HOME/log/meta.log" && break; sleep 0.1; done
grep -q "answered from their records" "$STRATA_HOME/log/meta.log" ||
	cluster_fail "no request was answered from its record: the kills caught none in flight"
grep -q "operation id is local" "$STRATA_HOME/log/fuse.log" &&
	cluster_fail "strata-fuse could not read a request's unique (fuse/opid.c)"
cluster_log "PASS: $(progress) iterations of $WORKERS workers, every call answered as POSIX says across $KILLS kill -9 of strata-fuse"
