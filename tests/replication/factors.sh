#!/bin/bash
# tests/replication/factors.sh — replication factor per directory on a real
# 3-node cluster (netns.sh: one network namespace per chunkserver), two
# targets per node, --replicas 3:
#   1. strata-meta has a chain table of each factor 1, 2, 3
#      (`strata admin --json chains`);
#   2. `strata admin layout set /A --replicas 1` and `/B --replicas 3`
#      (and the errors: a factor without a table, a file, a bad value);
#      `layout get` through a path under the mount;
#   3. files written through the FUSE mount under A have each chunk on one
#      target (the factor-1 chain's), under B on three targets on three
#      nodes; `strata admin verify` finds the replicas equal;
#   4. the node holding A's chain is killed: B's files still read back right
#      and take writes; reading an A file fails with EIO (never other bytes);
#   5. the node returns: A's files read back right, every chain serves again
#      and the replicas are equal.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/netns.sh"
EIO_MAX=${EIO_MAX:-60} # strata-fuse retries a failing read for 15 s, the kernel may ask twice

rc_require
rc_start 3 2 3

# Reads a file (its first $2 bytes if given) past the page cache; prints the
# sha256, or "ERR <errno name>".
read_sum() {
	python3 - "$1" "${2:-0}" <<'EOF'
import errno, hashlib, os, sys
try:
    fd = os.open(sys.argv[1], os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    h, want = hashlib.sha256(), int(sys.argv[2])
    while True:
        b = os.read(fd, want or (1 << 20))
        h.update(b)
        if not b or want:
            break
    os.close(fd)
    print(h.hexdigest())
except OSError as e:
    print("ERR", errno.errorcode.get(e.errno, e.errno))
EOF
}

jget() { # python expression over the JSON on stdin as d
	python3 -c 'import json,sys; d=json.load(sys.stdin); print('"$1"')'
}

# ---- 1. a table per factor ------------------------------------------------------

factors=$(rc_admin --json chains | jget '" ".join(str(t["replicas"]) for t in sorted(d["tables"], key=lambda t: t["replicas"]))')
[ "$factors" = "1 2 3" ] || rc_fail "tables by factor: '$factors', want '1 2 3'"
rc_admin --json chains | python3 -c '
import json,sys
d=json.load(sys.stdin)
for c in d["chains"]:
    nodes={t["node"] for t in c["targets"]}
    assert c["want"]==c["replicas"]==len(nodes), c
' || rc_fail "a chain is not on as many nodes as its factor"
rc_log "tables: factors $factors"

# ---- 2. directory factors ------------------------------------------------------------

mkdir "$RC_MNT/A" "$RC_MNT/B" || rc_fail "mkdir"
rc_admin layout set /A --replicas 1 >/dev/null || rc_fail "layout set /A --replicas 1"
rc_admin layout set /B --replicas 3 --chunk-size 1M >/dev/null || rc_fail "layout set /B"
got=$(STRATA_MOUNT=$RC_MNT rc_admin --json layout get "$RC_MNT/A" | jget 'd["replicas"]')
[ "$got" = 1 ] || rc_fail "layout get $RC_MNT/A: replicas $got"
got=$(rc_admin --json layout get /B | jget 'd["replicas"]')
[ "$got" = 3 ] || rc_fail "layout get /B: replicas $got"
err=$(rc_admin layout set /A --replicas 4 2>&1) && rc_fail "replicas 4 on 3 nodes accepted"
echo "$err" | grep -q "no chain table with 4 replicas" || rc_fail "unclear error: $err"
rc_admin layout set /A --replicas 9 2>/dev/null && rc_fail "replicas 9 accepted"
rc_admin layout set /A --chunk-size 3K 2>/dev/null && rc_fail "chunk size 3K accepted"
rc_log "layouts: A replicas 1, B replicas 3; errors are clear"

# ---- 3. files land on chains of their factor --------------------------------------------

for d in A B; do
	for i in 1 2 3; do
		head -c $((2 * 1024 * 1024 + 4096 * i)) /dev/urandom >"$RC_DIR/$d$i.src"
		cp "$RC_DIR/$d$i.src" "$RC_MNT/$d/f$i" || rc_fail "write $d/f$i"
	done
done
sync "$RC_MNT/A/f1" "$RC_MNT/B/f1"
sync

# Prints the number of targets holding each chunk of /$1 (one line per chunk).
copies() {
	local ino
	ino=$(rc_admin --json layout get "/$1" | jget 'd["ino"]')
	python3 - "$RC_DIR" "$ino" <<'EOF'
import glob, os, sys
base, ino = sys.argv[1], int(sys.argv[2])
count = {}
for d in glob.glob(os.path.join(base, "cs*", "t*", "chunks", "%02x" % (ino & 0xff), "%016x" % ino)):
    for idx in os.listdir(d):
        count[idx] = count.get(idx, 0) + 1
for idx in sorted(count):
    print(count[idx])
EOF
}
for i in 1 2 3; do
	[ "$(copies A/f$i | sort -u)" = 1 ] || rc_fail "A/f$i: copies per chunk $(copies A/f$i | xargs)"
	[ "$(copies A/f$i | wc -l)" = 3 ] || rc_fail "A/f$i: not 3 chunks"
	[ "$(copies B/f$i | sort -u)" = 3 ] || rc_fail "B/f$i: copies per chunk $(copies B/f$i | xargs)"
	[ "$(rc_admin --json layout get /A/f$i | jget 'd["replicas"]')" = 1 ] || rc_fail "A/f$i factor"
done
rc_admin verify >/dev/null || rc_fail "replicas differ after the writes"
rc_log "chunks: one copy under A, three under B; replicas equal"

# ---- 4. the node of A's chain dies ----------------------------------------------------------

solo=$(rc_admin --json chains | jget '[c for c in d["chains"] if c["want"]==1][0]["targets"][0]["target"]')
n=$(rc_node_of_target "$solo") || rc_fail "no node for target $solo"
rc_log "killing node $n (holds target $solo, the factor-1 chain)"
rc_kill_node "$n"
for _ in $(seq 1 100); do
	st=$(rc_admin --json chains | jget '[t["state"] for c in d["chains"] for t in c["targets"] if t["target"]=='"$solo"'][0]')
	[ "$st" = offline ] && break
	sleep 0.2
done
[ "$st" = offline ] || rc_fail "target $solo still $st"
for i in 1 2 3; do
	[ "$(read_sum "$RC_MNT/B/f$i")" = "$(sha256sum <"$RC_DIR/B$i.src" | cut -d' ' -f1)" ] ||
		rc_fail "B/f$i reads wrong with node $n down"
done
head -c 300000 /dev/urandom >"$RC_DIR/B4.src"
cp "$RC_DIR/B4.src" "$RC_MNT/B/f4" && sync "$RC_MNT/B/f4" || rc_fail "write to B with node $n down"
[ "$(read_sum "$RC_MNT/B/f4")" = "$(sha256sum <"$RC_DIR/B4.src" | cut -d' ' -f1)" ] ||
	rc_fail "B/f4 reads wrong"
t0=$SECONDS
got=$(timeout $((EIO_MAX + 20)) bash -c "$(declare -f read_sum); read_sum '$RC_MNT/A/f1' 4096")
[ "$got" = "ERR EIO" ] || rc_fail "A/f1 with its only replica down: '$got', want EIO"
[ $((SECONDS - t0)) -le "$EIO_MAX" ] || rc_fail "EIO after $((SECONDS - t0)) s"
rc_log "node $n down: B reads and writes, A gives EIO after $((SECONDS - t0)) s"

# ---- 5. it returns ------------------------------------------------------------------------------

rc_start_node "$n"
rc_wait_node "$n"
rc_wait_serving 90 || rc_fail "chains did not all serve again"
for d in A B; do
	for i in 1 2 3; do
		[ "$(read_sum "$RC_MNT/$d/f$i")" = "$(sha256sum <"$RC_DIR/$d$i.src" | cut -d' ' -f1)" ] ||
			rc_fail "$d/f$i reads wrong after node $n returned"
	done
done
rc_admin verify >/dev/null || rc_fail "replicas differ after the return"
rc_log "node $n back: A reads again, all chains serve, replicas equal"
echo "PASS: replication factor per directory"
