#!/usr/bin/env bash
# fsync_takeover.sh — a WRITE answered by a strata-fuse that is then killed,
# and the fsync that follows answered by its successor: the fsync must find
# the length the WRITE raised (fuse/README.md "fsync across kill -9 of
# strata-fuse"). The write is O_DIRECT, so it is one WRITE answered before
# write(2) returns, deterministically before the kill; the fsync and the
# close go to the successor. Checked cold: after `strata restart fuse` and
# dropped caches the size and the bytes are meta's and the chunkservers'.
# Fails on the code before WRITEs recorded their length with a holder: the
# successor has no pending length, the file is 0 bytes long.
set -u
. "$(dirname "$0")/../lib/cluster.sh"
cluster_require
command -v python3 >/dev/null || cluster_skip "python3 is missing"
[ -x "$STRATA_BIN/strata-fuse-holder" ] || cluster_skip "$STRATA_BIN/strata-fuse-holder is not built"
cluster_start

cat >"$CLUSTER_TMP/writer.py" <<'PY'
import mmap, os, sys, time
path, go, out, size = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
data = bytes((k * 7 + 3) % 251 for k in range(size))
buf = mmap.mmap(-1, size)  # page-aligned, for O_DIRECT
buf[:] = data
fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_DIRECT, 0o644)
if os.writev(fd, [buf]) != size:
    raise SystemExit("short write")
open(path + ".want", "wb").write(data)
open(out, "w").write("ready\n")
while not os.path.exists(go):
    time.sleep(0.05)
try:
    os.fsync(fd)
    os.close(fd)
    open(out, "a").write("ok\n")
except OSError as e:
    open(out, "a").write("ERR %s\n" % e)
PY
# one file within a chunk, one across chunks (several WRITEs of 1 MiB)
sizes="65536 3145728"
writers=()
for s in $sizes; do
	python3 "$CLUSTER_TMP/writer.py" "$MNT/f$s" "$CLUSTER_TMP/go" "$CLUSTER_TMP/f$s.out" "$s" &
	writers+=($!)
done
for s in $sizes; do
	for i in $(seq 100); do grep -q ready "$CLUSTER_TMP/f$s.out" 2>/dev/null && break; sleep 0.1; done
	grep -q ready "$CLUSTER_TMP/f$s.out" 2>/dev/null || cluster_fail "the writer of $s bytes did not write"
done
pid=$(cluster_pid fuse)
cluster_log "kill -9 strata-fuse ($pid) after answered O_DIRECT writes, before their fsync"
kill -9 "$pid"
sleep 0.3
cluster_up
cluster_wait_mount 30
touch "$CLUSTER_TMP/go"
wait "${writers[@]}" # not a bare wait: cluster.sh's guard lives as long as we do
for s in $sizes; do
	grep -q '^ok$' "$CLUSTER_TMP/f$s.out" || cluster_fail "fsync of f$s: $(tail -1 "$CLUSTER_TMP/f$s.out")"
done
strata_cli restart fuse >/dev/null
cluster_wait_mount 30
echo 3 >/proc/sys/vm/drop_caches
for s in $sizes; do
	got=$(stat -c %s "$MNT/f$s")
	[ "$got" = "$s" ] || cluster_fail "f$s: $got bytes after the fsync the successor answered, $s written"
	cmp -s "$MNT/f$s" "$MNT/f$s.want" || cluster_fail "f$s: other bytes than written"
done
cluster_log "PASS: lengths of WRITEs answered before kill -9 of strata-fuse kept by the successor's fsync"
