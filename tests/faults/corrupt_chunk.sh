#!/usr/bin/env bash
# tests/faults/corrupt_chunk.sh — flip one byte in the data part of a stored
# chunk. Reading the damaged range through the mount must fail with EIO
# (never return wrong bytes), undamaged ranges must still read correctly, and
# the chunkserver log must name the chunk.
set -euo pipefail
. "${STRATA_SRC:-$(dirname "$0")/../..}/tests/lib/cluster.sh"
cluster_require
cluster_start

work=$CLUSTER_TMP/work
mkdir -p "$work"
head -c $((3 * 1024 * 1024)) /dev/urandom >"$work/orig"
cp "$work/orig" "$MNT/victim"
sync -f "$MNT/victim" 2>/dev/null || sync
cmp "$work/orig" "$MNT/victim" || cluster_fail "the file does not read back before corruption"

ino=$(stat -c %i "$MNT/victim")
hex=$(printf %016x "$ino")
cluster_log "victim inode $ino ($hex)"
chunk=$(find "$STRATA_HOME"/cs*/t*/chunks -type f -path "*/$hex/00000001" 2>/dev/null | head -1)
if [ -z "$chunk" ]; then
	echo "chunk files under the targets:" >&2
	find "$STRATA_HOME"/cs*/t* -type f | head -20 >&2
	cluster_fail "no chunk file for inode $hex index 1 (expected <target>/chunks/<xx>/$hex/00000001)"
fi
size=$(stat -c %s "$chunk")
[ "$size" -gt $((1024 * 1024)) ] || cluster_fail "chunk file $chunk is only $size bytes"
# The data part ends the file: flip a byte 100 bytes before the end, which is
# in the last 64 KiB block of chunk 1 (file offset 2 MiB - 100).
pos=$((size - 100))
cluster_log "flipping the byte at $pos of $chunk ($size bytes)"
python3 - "$chunk" "$pos" <<'PY'
import os, sys
fd = os.open(sys.argv[1], os.O_RDWR)
pos = int(sys.argv[2])
b = os.pread(fd, 1, pos)
os.pwrite(fd, bytes([b[0] ^ 0xFF]), pos)
os.fsync(fd)
os.close(fd)
PY

check_reads() {
	python3 - "$MNT/victim" "$work/orig" <<'PY'
import errno, os, sys
MiB = 1 << 20
orig = open(sys.argv[2], "rb").read()
fd = os.open(sys.argv[1], os.O_RDONLY)
def read(off, n):
    return os.pread(fd, n, off)
# The damaged byte: file offset 2 MiB - 100.
bad = 2 * MiB - 100
for off, n in ((bad - 10, 20), (2 * MiB - 64 * 1024, 64 * 1024), (MiB, MiB)):
    # Short reads are fine (the kernel returns what it got before the bad
    # block), as long as every byte returned is right and reading on towards
    # the damaged byte ends in EIO before reaching it.
    pos = off
    while True:
        try:
            got = read(pos, off + n - pos)
        except OSError as e:
            if e.errno != errno.EIO:
                print("FAIL: read(%d, %d) over the damaged byte: expected EIO, got %s" % (pos, off + n - pos, e))
                sys.exit(1)
            break
        if got != orig[pos:pos + len(got)]:
            print("FAIL: read(%d, %d) over the damaged byte returned WRONG BYTES" % (pos, off + n - pos))
            sys.exit(1)
        if pos + len(got) > bad or len(got) == 0:
            print("FAIL: read(%d, %d) over the damaged byte succeeded (expected EIO)" % (off, n))
            sys.exit(1)
        pos += len(got)
# Undamaged ranges still read: chunk 0, chunk 2, and chunk 1's first block.
for off, n in ((0, MiB), (2 * MiB, MiB), (MiB, 64 * 1024)):
    try:
        got = read(off, n)
    except OSError as e:
        print("FAIL: read(%d, %d) of an undamaged range: %s" % (off, n, e))
        sys.exit(1)
    if got != orig[off:off + n]:
        print("FAIL: read(%d, %d) of an undamaged range returned wrong bytes" % (off, n))
        sys.exit(1)
print("reads: EIO over the damaged block, correct bytes elsewhere")
PY
}

cluster_log "reading after dropping the page cache"
sync
echo 3 >/proc/sys/vm/drop_caches
check_reads || cluster_fail "reads after corruption"
if cat "$MNT/victim" >/dev/null 2>"$work/cat.err"; then
	cluster_fail "cat of the whole file succeeded despite the damaged chunk"
fi
grep -q "Input/output error" "$work/cat.err" || cluster_fail "cat failed, but not with EIO: $(cat "$work/cat.err")"

cluster_log "reading after restarting the chunkserver"
kill -9 "$(cluster_pid cs1)"
cluster_up
echo 3 >/proc/sys/vm/drop_caches
check_reads || cluster_fail "reads after corruption and a chunkserver restart"

# The chunkserver log names the chunk (inode in decimal or hex, and index 1).
logs=$(cat "$STRATA_HOME"/log/cs*.log)
if ! echo "$logs" | grep -iE "corrupt|checksum" | grep -qiE "(\b$ino\b|$hex|0x0*$(printf %x "$ino")\b)"; then
	echo "$logs" | grep -iE "corrupt|checksum|error" | tail -5 >&2 || true
	cluster_fail "no chunkserver log line about a corrupt chunk naming inode $ino / $hex"
fi
echo "$logs" | grep -iE "corrupt|checksum" | head -3 >&2
cluster_log "PASS: corrupt chunk detected, EIO returned, chunk named in the log"
