#!/usr/bin/env bash
# tests/fuse/release_takeover.sh (fuse_release_takeover) — RELEASEs queued
# for a batched close (fuse/closer.c) across kill -9 of strata-fuse: with
# strata-meta stopped (SIGSTOP) the closes of 300 files and of an unlinked
# file still open pile up unanswered; strata-fuse is killed, meta resumed,
# `strata up` starts a successor that takes the connection over. The kernel
# resends the unanswered RELEASEs to it, so no session is left open and the
# unlinked file is collected: `strata fsck` counts 0 sessions and 0 open
# orphans, and finds nothing wrong.
set -euo pipefail
. "$(dirname "$0")/../lib/cluster.sh"
cluster_require
command -v python3 >/dev/null || cluster_skip "python3 is missing"
cluster_start
mkdir "$MNT/rel"
meta=$(cluster_pid meta)
fuse=$(cluster_pid fuse)
# creates first (they need meta), then the closes with meta stopped
python3 - "$MNT/rel" "$meta" "$fuse" <<'PY'
import os, signal, sys, time
d, meta, fuse = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
fds = [os.open(os.path.join(d, "f%03d" % i), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
       for i in range(300)]
orph = os.open(os.path.join(d, "orph"), os.O_CREAT | os.O_EXCL | os.O_RDWR, 0o644)
os.unlink(os.path.join(d, "orph"))
os.kill(meta, signal.SIGSTOP)
try:
    for fd in fds + [orph]:
        os.close(fd)  # FLUSH is answered here; RELEASE waits for meta
    time.sleep(0.5)
    os.kill(fuse, signal.SIGKILL)
finally:
    os.kill(meta, signal.SIGCONT)
PY
cluster_log "strata-fuse killed with its batched closes unanswered; strata up"
sleep 1
cluster_up
cluster_wait_mount 30
[ "$(ls "$MNT/rel" | wc -l)" -eq 300 ] || cluster_fail "the directory lost files: $(ls "$MNT/rel" | wc -l)"
# the successor was sent the RELEASEs its predecessor had not answered
resent=$(python3 -c 'import os,sys; print(os.getxattr(sys.argv[1], "trusted.strata.stats").decode())' "$MNT" |
	awk '$1 == "fuse.RELEASE" { print $2 }')
[ "${resent:-0}" -ge 1 ] || cluster_fail "the successor got no RELEASE: nothing was queued at the kill"
cluster_log "the successor closed ${resent} resent RELEASEs"
for i in $(seq 50); do
	out=$("$STRATA" fsck --home "$STRATA_HOME" 2>&1) || true
	grep -q " 0 sessions, 0 open orphans" <<<"$out" && break
	sleep 0.2
done
grep -q " 0 sessions, 0 open orphans" <<<"$out" ||
	cluster_fail "sessions are left open after the takeover: $(grep sessions <<<"$out")"
"$STRATA" fsck --home "$STRATA_HOME" >/dev/null || cluster_fail "fsck finds the namespace damaged: $out"
cluster_log "PASS: batched closes across kill -9 of strata-fuse leave no session open"
