#!/usr/bin/env bash
# takeover.sh — strata-fuse survives kill -9: a file held open across the
# kill and `strata up` still reads and writes correctly through the same
# descriptor, a loop of uncached reads (O_DIRECT: every read is a FUSE
# request, so one is in flight when the daemon dies) goes on with the right
# bytes and no error, and writes still in the page cache at the kill reach
# the chunkservers through the successor (fuse/README.md "Surviving a
# crash", fuse/takeover.c).
# Fails on a strata-fuse without the holder: the kernel aborts the
# connection and every open file answers ENOTCONN.
set -u
. "$(dirname "$0")/../lib/cluster.sh"
. "$(dirname "$0")/../lib/fuse_io.sh" # the reader of O_DIRECT passes
cluster_require
command -v python3 >/dev/null || cluster_skip "python3 is missing"
cluster_start

"$STRATA" status --home "$STRATA_HOME" | grep -q "holder strata-fuse-holder pid .*: holding" ||
	cluster_fail "strata status does not show the holder holding the connection"

# A 24 MiB file to read in a loop, and its hash.
head -c $((24 << 20)) /dev/urandom >"$CLUSTER_TMP/big"
cp "$CLUSTER_TMP/big" "$MNT/big"
want=$(sha256sum <"$CLUSTER_TMP/big" | cut -d' ' -f1)

# The holder of an open file: writes, waits, then writes and reads again
# through the same descriptor.
cat >"$CLUSTER_TMP/openfile.py" <<'PY'
import os, sys, time
path, go, out = sys.argv[1:4]
a, b = os.urandom(3 << 20), os.urandom(1 << 20)
fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
os.pwrite(fd, a, 0)
os.fsync(fd)
rfd = os.open(path, os.O_RDONLY)  # a second handle, used only after the restart
open(out, "w").write("ready\n")
while not os.path.exists(go):
    time.sleep(0.05)
try:
    os.pwrite(fd, b, len(a))
    back = os.pread(fd, len(a) + len(b), 0)
    again = os.pread(rfd, len(a) + len(b), 0)
    os.fsync(fd)
    os.close(fd)
    os.close(rfd)
    ok = back == a + b and again == a + b
    open(out, "a").write("ok\n" if ok else "BAD bytes\n")
    open(path + ".want", "wb").write(a + b)
except OSError as e:
    open(out, "a").write("ERR %s\n" % e)
PY
# Writes left in the page cache (writeback cache, no fsync) when strata-fuse
# dies: the kernel keeps the dirty pages, the successor receives them at the
# fsync after `strata up`, and an O_DIRECT read (served by strata-fuse from
# the chunkservers, not from the page cache) returns them.
cat >"$CLUSTER_TMP/dirty.py" <<'PY'
import mmap, os, sys, time
path, go, out = sys.argv[1:4]
data = os.urandom(4 << 20)
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
os.write(fd, data)  # in the page cache, not sent to strata-fuse yet
open(out, "w").write("ready\n")
while not os.path.exists(go):
    time.sleep(0.05)
try:
    os.fsync(fd)
    os.close(fd)
    buf = mmap.mmap(-1, len(data) + (1 << 20))
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    n = os.readv(fd, [buf])
    os.close(fd)
    open(out, "a").write("ok\n" if buf[:n] == data else "BAD %d bytes back\n" % n)
except OSError as e:
    open(out, "a").write("ERR %s\n" % e)
PY
python3 "$CLUSTER_TMP/openfile.py" "$MNT/open" "$CLUSTER_TMP/go" "$CLUSTER_TMP/open.out" &
opener=$!
python3 "$FUSE_IO" reader "$MNT/big" "$want" "$CLUSTER_TMP/stop" "$CLUSTER_TMP/reads" &
reader=$!
for i in $(seq 100); do grep -q ready "$CLUSTER_TMP/open.out" 2>/dev/null && break; sleep 0.1; done
for i in $(seq 100); do [ -s "$CLUSTER_TMP/reads" ] && break; sleep 0.1; done
[ -s "$CLUSTER_TMP/reads" ] || cluster_fail "the reader did not finish a pass before the kill"

python3 "$CLUSTER_TMP/dirty.py" "$MNT/dirty" "$CLUSTER_TMP/go" "$CLUSTER_TMP/dirty.out" &
dirty=$!
for i in $(seq 100); do grep -q ready "$CLUSTER_TMP/dirty.out" 2>/dev/null && break; sleep 0.1; done

pid=$(cluster_pid fuse)
cluster_log "kill -9 strata-fuse ($pid) under a reader, an open file and unsynced writes"
kill -9 "$pid"
sleep 1
before=$(wc -l <"$CLUSTER_TMP/reads")
cluster_up
cluster_wait_mount 30
"$STRATA" status --home "$STRATA_HOME" | grep -q "1 takeover" ||
	cluster_fail "strata status does not count the takeover"
# Let the reader make a few passes through the new strata-fuse.
for i in $(seq 300); do [ "$(wc -l <"$CLUSTER_TMP/reads")" -ge $((before + 3)) ] && break; sleep 0.1; done
touch "$CLUSTER_TMP/go" "$CLUSTER_TMP/stop"
# A read left unanswered across the restart would hang its process: bounded.
for i in $(seq 300); do
	kill -0 "$opener" 2>/dev/null || kill -0 "$reader" 2>/dev/null || kill -0 "$dirty" 2>/dev/null || break
	sleep 0.1
done
kill -0 "$opener" 2>/dev/null || kill -0 "$reader" 2>/dev/null || kill -0 "$dirty" 2>/dev/null &&
	cluster_fail "a read or write across the restart never completed"
wait "$opener" "$reader" "$dirty"
grep -q '^ok$' "$CLUSTER_TMP/dirty.out" ||
	cluster_fail "writes not yet written back at the kill: $(tail -1 "$CLUSTER_TMP/dirty.out")"
cut -d' ' -f1 "$CLUSTER_TMP/reads" | sort | uniq -c | sed 's/^/  reads: /' >&2
grep -v '^ok ' "$CLUSTER_TMP/reads" && cluster_fail "a read across the restart failed or returned wrong bytes"
[ "$(wc -l <"$CLUSTER_TMP/reads")" -ge $((before + 3)) ] || cluster_fail "the reader stopped making progress"
grep -q '^ok$' "$CLUSTER_TMP/open.out" || cluster_fail "the open file: $(tail -1 "$CLUSTER_TMP/open.out")"
cmp -s "$MNT/open" "$MNT/open.want" || cluster_fail "the file written across the restart differs"
cluster_log "PASS: reads in flight and an open file survived kill -9 of strata-fuse"
