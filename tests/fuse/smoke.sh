#!/usr/bin/env bash
# tests/fuse/smoke.sh — end-to-end smoke test of strata-fuse. Starts
# strata-meta, two strata-chunkservers (three targets) and strata-fuse by hand
# in a temp dir, runs a handful of POSIX operations through the mount
# (create, read, append, rename, hard and symbolic links, chmod, truncate,
# xattrs, readdir), writes 20 MiB and reads it back by checksum (through the
# page cache, with O_DIRECT, and again after a remount), then tears down —
# unmount, kill the daemons, remove the dir — even on failure (trap).
# Exits 77 with a reason when FUSE, root or a binary is missing.
set -euo pipefail

: "${STRATA_SRC:=$(cd "$(dirname "$0")/../.." && pwd)}"
: "${STRATA_BIN:=$STRATA_SRC/build/bin}"

skip() { echo "SKIP: $*" >&2; exit 77; }
fail() { echo "FAIL: $*" >&2; exit 1; }
log() { echo "[smoke $(date -u +%H:%M:%S)] $*" >&2; }

[ -c /dev/fuse ] || skip "/dev/fuse is missing (no FUSE in this environment)"
[ "$(id -u)" -eq 0 ] || skip "the smoke test needs root (allow_other, chown)"
for b in strata-meta strata-chunkserver strata-fuse; do
	[ -x "$STRATA_BIN/$b" ] || skip "$STRATA_BIN/$b is not built"
done
command -v python3 >/dev/null || skip "python3 is missing"

T=$(mktemp -d /tmp/strata-fuse-smoke.XXXXXX)
MNT=$T/mnt
PIDS=()
FUSE_PID=

teardown() {
	local rc=$? p
	trap - EXIT INT TERM
	set +e
	if grep -qs " $MNT " /proc/self/mounts; then
		fusermount3 -u "$MNT" 2>/dev/null || umount -l "$MNT" 2>/dev/null
	fi
	[ -n "$FUSE_PID" ] && kill "$FUSE_PID" 2>/dev/null
	for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null; done
	sleep 0.2
	[ -n "$FUSE_PID" ] && kill -9 "$FUSE_PID" 2>/dev/null
	for p in "${PIDS[@]}"; do kill -9 "$p" 2>/dev/null; done
	wait 2>/dev/null
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
		for f in "$T"/*.log; do
			echo "----- last lines of $f -----" >&2
			tail -n 30 "$f" >&2
		done
	fi
	if grep -qs " $MNT " /proc/self/mounts; then
		umount -l "$MNT" 2>/dev/null
	fi
	grep -qs " $MNT " /proc/self/mounts || rm -rf --one-file-system "$T"
	exit "$rc"
}
trap teardown EXIT
trap 'exit 130' INT TERM

wait_file() { # path seconds
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		[ -s "$1" ] && return 0
		sleep 0.1
	done
	fail "$1 did not appear within $2 s"
}

wait_mount() {
	local i
	for ((i = 0; i < 300; i++)); do
		if grep -qs " $MNT fuse" /proc/self/mounts && timeout 5 ls "$MNT" >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.1
	done
	fail "the mount at $MNT did not come up"
}

start_fuse() {
	"$STRATA_BIN/strata-fuse" --meta "$META" --mount "$MNT" --foreground \
		--client-id smoke >>"$T/fuse.log" 2>&1 &
	FUSE_PID=$!
	wait_mount
}

stop_fuse() {
	kill -TERM "$FUSE_PID"
	local i
	for ((i = 0; i < 100; i++)); do
		kill -0 "$FUSE_PID" 2>/dev/null || break
		sleep 0.1
	done
	kill -0 "$FUSE_PID" 2>/dev/null && fail "strata-fuse did not exit on SIGTERM"
	wait "$FUSE_PID" || fail "strata-fuse exited with status $? on SIGTERM"
	FUSE_PID=
	grep -qs " $MNT " /proc/self/mounts && fail "mount still present after SIGTERM"
	return 0
}

mkdir -p "$T/meta" "$T/cs1/t1" "$T/cs1/t2" "$T/cs2/t1" "$MNT"
log "starting daemons in $T"
"$STRATA_BIN/strata-meta" --listen 127.0.0.1:0 --db "$T/meta/db" \
	--addr-file "$T/meta.addr" 2>"$T/meta.log" &
PIDS+=($!)
wait_file "$T/meta.addr" 30
META=$(cat "$T/meta.addr")
"$STRATA_BIN/strata-chunkserver" --listen 127.0.0.1:0 --meta "$META" \
	--target "$T/cs1/t1" --target "$T/cs1/t2" --addr-file "$T/cs1.addr" 2>"$T/cs1.log" &
PIDS+=($!)
"$STRATA_BIN/strata-chunkserver" --listen 127.0.0.1:0 --meta "$META" \
	--target "$T/cs2/t1" --addr-file "$T/cs2.addr" 2>"$T/cs2.log" &
PIDS+=($!)
wait_file "$T/cs1.addr" 30
wait_file "$T/cs2.addr" 30
start_fuse
log "mounted at $MNT (meta $META)"

# --- namespace ---------------------------------------------------------------
cd "$MNT"
mkdir d
echo hello >d/a
[ "$(cat d/a)" = hello ] || fail "read back of d/a"
echo world >>d/a
[ "$(cat d/a)" = "$(printf 'hello\nworld')" ] || fail "append"
[ "$(stat -c %s d/a)" = 12 ] || fail "size after append: $(stat -c %s d/a)"
mv d/a d/b
[ ! -e d/a ] && [ -f d/b ] || fail "rename"
ln d/b d/hard
[ "$(stat -c %h d/b)" = 2 ] || fail "link count after ln"
ln -s b d/sym
[ "$(readlink d/sym)" = b ] || fail "readlink"
[ "$(cat d/sym)" = "$(cat d/b)" ] || fail "read through symlink"
chmod 640 d/b
[ "$(stat -c %a d/hard)" = 640 ] || fail "chmod seen through the other link"
chown 65534:65534 d/b
[ "$(stat -c %u:%g d/b)" = 65534:65534 ] || fail "chown"
touch -d @1000000000 d/b
[ "$(stat -c %Y d/b)" = 1000000000 ] || fail "utimens"
truncate -s 3 d/b
[ "$(cat d/b)" = hel ] || fail "shrinking truncate"
truncate -s 10 d/b
[ "$(od -An -c d/b | tr -d ' \n')" = 'hel\0\0\0\0\0\0\0' ] || fail "hole after growing truncate"
rm d/hard d/sym
for i in $(seq 1 300); do : >"d/f$i"; done
[ "$(ls d | wc -l)" = 301 ] || fail "readdir count: $(ls d | wc -l)"
[ "$(ls -l d | grep -c '^-')" = 301 ] || fail "readdirplus (ls -l)"
python3 - "$MNT/d/b" <<'EOF' || fail "xattrs"
import os, sys, errno
p = sys.argv[1]
os.setxattr(p, "user.k", b"v1")
assert os.getxattr(p, "user.k") == b"v1"
assert "user.k" in os.listxattr(p)
try:
    os.setxattr(p, "user.k", b"v2", os.XATTR_CREATE)
    raise SystemExit("XATTR_CREATE on an existing name succeeded")
except OSError as e:
    assert e.errno == errno.EEXIST, e
os.removexattr(p, "user.k")
try:
    os.getxattr(p, "user.k")
    raise SystemExit("removed xattr still readable")
except OSError as e:
    assert e.errno == errno.ENODATA, e
EOF
mv -T d d2 && [ -d d2 ] || fail "directory rename"
rm -r d2
[ -z "$(ls -A "$MNT")" ] || fail "mount not empty after rm -r: $(ls -A "$MNT")"

# --- data: 20 MiB, unaligned edges, read back by checksum ----------------------
head -c $((20 * 1024 * 1024 + 12345)) /dev/urandom >"$T/src"
want=$(sha256sum <"$T/src" | cut -d' ' -f1)
cp "$T/src" "$MNT/big"
sync "$MNT/big"
[ "$(stat -c %s "$MNT/big")" = $((20 * 1024 * 1024 + 12345)) ] || fail "size of big"
[ "$(sha256sum <"$MNT/big" | cut -d' ' -f1)" = "$want" ] || fail "checksum (cached)"
got=$(dd if="$MNT/big" iflag=direct bs=1M 2>/dev/null | sha256sum | cut -d' ' -f1)
[ "$got" = "$want" ] || fail "checksum (O_DIRECT)"
# a write in the middle, across a chunk boundary
printf 'XYZXYZ' | dd of="$MNT/big" bs=1 seek=$((1024 * 1024 - 3)) conv=notrunc 2>/dev/null
printf 'XYZXYZ' | dd of="$T/src" bs=1 seek=$((1024 * 1024 - 3)) conv=notrunc 2>/dev/null
want=$(sha256sum <"$T/src" | cut -d' ' -f1)
cd /
log "remounting"
stop_fuse
start_fuse
[ "$(stat -c %s "$MNT/big")" = $((20 * 1024 * 1024 + 12345)) ] || fail "size after remount"
[ "$(sha256sum <"$MNT/big" | cut -d' ' -f1)" = "$want" ] || fail "checksum after remount"
df -h "$MNT" >/dev/null || fail "statfs"
rm "$MNT/big"
stop_fuse
log "PASS"
