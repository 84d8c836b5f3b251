#!/usr/bin/env bash
# restart.sh — a planned restart of strata-fuse keeps the mount: a reader
# hashing a file with O_DIRECT reads (every read a FUSE request, so one is
# in flight or queued at the restart) and a file held open go on with the
# right bytes and no error across `strata restart fuse`, then across a bare
# SIGUSR2 and `strata up`; the mount is the same mount throughout (its id in
# /proc/self/mountinfo), and the longest wait a read saw is printed
# (fuse/README.md "Restarting without unmounting", fuse/restart.c).
# Fails on a strata-fuse whose restart unmounts (SIGTERM): the reader gets
# ENOTCONN and the mount id changes.
set -u
. "$(dirname "$0")/../lib/cluster.sh"
. "$(dirname "$0")/../lib/fuse_io.sh"
cluster_require
command -v python3 >/dev/null || cluster_skip "python3 is missing"
cluster_start

mount_id() { awk -v m="$MNT" '$5 == m { print $1 }' /proc/self/mountinfo; }
holder_pid() {
	"$STRATA" status --home "$STRATA_HOME" --json |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["fuse_holder"]["pid"])'
}
id0=$(mount_id)
[ -n "$id0" ] && [ "$(echo "$id0" | wc -l)" -eq 1 ] || cluster_fail "no single mount at $MNT: '$id0'"
hpid=$(holder_pid)
[ "$hpid" -gt 0 ] || cluster_fail "no holder keeps the connection"

# A reader (its pauses measured) and a file held open across both restarts,
# read at the end (tests/lib/fuse_io.py).
fuse_io_start 16 2

# The longest pause in the passes after line $1 of the reader's log, up to $2.
pause() { sed -n "$(($1 + 1)),${2}p" "$CLUSTER_TMP/reads" | awk '$1 == "ok" && $2 > m { m = $2 } END { print m + 0 }'; }
lines() { wc -l <"$CLUSTER_TMP/reads"; }

pid=$(cluster_pid fuse)
n1=$(lines)
cluster_log "strata restart fuse (pid $pid) under the reader"
out=$(timeout 60 "$STRATA" restart --home "$STRATA_HOME" fuse 2>&1) || cluster_fail "strata restart fuse failed: $out"
echo "$out" | sed 's/^/  | /' >&2
pid2=$(cluster_pid fuse)
[ "$pid2" != "$pid" ] && fuse_io_alive "$pid2" || cluster_fail "no new strata-fuse after the restart"
fuse_io_alive "$pid" && cluster_fail "the old strata-fuse $pid still runs"
grep -q "Handed the FUSE connection" "$STRATA_HOME/log/fuse.log" ||
	cluster_fail "the old strata-fuse did not hand the connection over"
before=$(fuse_io_passes)
fuse_io_wait_passes $((before + 2))

# A bare SIGUSR2, and `strata up` starting the successor.
n2=$(lines)
cluster_log "kill -USR2 strata-fuse ($pid2), then strata up"
kill -USR2 "$pid2"
for i in $(seq 100); do fuse_io_alive "$pid2" || break; sleep 0.05; done
fuse_io_alive "$pid2" && cluster_fail "strata-fuse did not exit on SIGUSR2"
cluster_up
before=$(fuse_io_passes)
fuse_io_wait_passes $((before + 2))

touch "$CLUSTER_TMP/stop" "$CLUSTER_TMP/go"
for i in $(seq 300); do kill -0 "$reader" 2>/dev/null || kill -0 "$held" 2>/dev/null || break; sleep 0.1; done
kill -0 "$reader" 2>/dev/null || kill -0 "$held" 2>/dev/null &&
	cluster_fail "a read across the restarts never completed"
wait "$reader" "$held"
cut -d' ' -f1 "$CLUSTER_TMP/reads" | sort | uniq -c | sed 's/^/  reads: /' >&2
grep -v '^ok ' "$CLUSTER_TMP/reads" &&
	cluster_fail "a read across the restarts failed or returned wrong bytes"
cluster_log "the longest a read waited: $(pause 0 "$n1") ms before the restarts," \
	"$(pause "$n1" "$n2") ms across strata restart fuse, $(pause "$n2" '$') ms across SIGUSR2 + strata up"

[ "$(tail -1 "$CLUSTER_TMP/held")" = "$want" ] || cluster_fail "a file open across the restarts reads wrong bytes"
[ "$(mount_id)" = "$id0" ] || cluster_fail "the mount changed: id $id0 before, '$(mount_id)' after"
grep -q "Unmounting" "$STRATA_HOME/log/fuse.log" && cluster_fail "a strata-fuse unmounted during the restarts"
[ "$(holder_pid)" = "$hpid" ] || cluster_fail "the holder changed"
"$STRATA" status --home "$STRATA_HOME" | grep -q "holding (2 takeover" ||
	cluster_fail "strata status does not count two takeovers: $("$STRATA" status --home "$STRATA_HOME" | grep holder)"
cluster_log "PASS: the mount and its readers survived two planned restarts of strata-fuse"
