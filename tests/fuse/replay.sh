#!/usr/bin/env bash
# replay.sh — kill -9 of strata-fuse under a storm of namespace mutations:
# every create (O_EXCL), mkdir, symlink, link, rename (RENAME_NOREPLACE),
# setxattr (XATTR_CREATE), unlink and rmdir returns success exactly as POSIX
# says, across REPLAY_KILLS kill -9 + `strata up` cycles, and each worker's
# directory holds exactly what it must (fuse/README.md "Replayed requests",
# fuse/opid.c, meta/ns_opid.c; the storm is tests/lib/storm.sh).
# Fails without operation ids: the kernel resends the requests the dead
# daemon had read but not answered (FUSE_NOTIFY_RESEND), and one that had
# reached strata-meta is carried out again and answers EEXIST, ENOENT or
# ENODATA. With REPLAY_WORKERS processes busy there are always some in that
# window; strata-meta's log must say it answered some from their records.
set -u
. "$(dirname "$0")/../lib/cluster.sh"
. "$(dirname "$0")/../lib/storm.sh"
cluster_require
command -v python3 >/dev/null || cluster_skip "python3 is missing"
[ -x "$STRATA_BIN/strata-fuse-holder" ] || cluster_skip "$STRATA_BIN/strata-fuse-holder is not built"
cluster_start

WORKERS=${REPLAY_WORKERS:-12}
KILLS=${REPLAY_KILLS:-4}
storm_start "$WORKERS"
storm_wait_progress $((WORKERS * 10)) "before the first kill"
for k in $(seq "$KILLS"); do
	pid=$(cluster_pid fuse)
	cluster_log "kill -9 strata-fuse ($pid) under $WORKERS mutating workers ($(storm_progress) iterations)"
	kill -9 "$pid"
	sleep 0.3
	cluster_up
	cluster_wait_mount 30
	"$STRATA" status --home "$STRATA_HOME" | grep -q "$k takeover" ||
		cluster_fail "strata status does not count $k takeover(s)"
	storm_wait_progress $((WORKERS * 10)) "after kill $k"
done
storm_finish
# The storm really had requests resent: strata-meta answered some from records.
for i in $(seq 30); do grep -q "answered from their records" "$STRATA_HOME/log/meta.log" && break; sleep 0.1; done
grep -q "answered from their records" "$STRATA_HOME/log/meta.log" ||
	cluster_fail "no request was answered from its record: the kills caught none in flight"
grep -q "operation id is local" "$STRATA_HOME/log/fuse.log" &&
	cluster_fail "strata-fuse could not read a request's unique (fuse/opid.c)"
cluster_log "PASS: $(storm_progress) iterations of $WORKERS workers, every call answered as POSIX says across $KILLS kill -9 of strata-fuse"
