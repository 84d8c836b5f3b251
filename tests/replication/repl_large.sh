#!/bin/bash
# tests/replication/repl_large.sh [receiver|sender] — resync of chunks larger
# than one message
# (CHUNK_IO_MAX, 4 MiB): a returning node is filled in pieces
# (MSG_CHUNK_PUT_PART, chunkserver/README.md "Resync of large chunks").
# A 3-node cluster (netns.sh), 3 replicas, directories of chunk size 16 MiB
# and 64 MiB:
#   1. files written through the FUSE mount (several chunks each, partial
#      last chunks);
#   2. one node killed; meanwhile a new file, parts of large chunks
#      overwritten, a file truncated (a chunk cut, one dropped) and one
#      removed;
#   3. the node returns; as soon as its first staging file (tmp/*.put)
#      appears, a transfer is cut off:
#        receiver  the returning node is killed again, then returns for good
#                  (its start-up drops the partial staging file) while
#                  64 KiB writes into the large chunks go on (a chunk
#                  written during its transfer is sent again);
#        sender    the tail sending to it is killed: the next tail resyncs
#                  it (its first piece of the cut-off chunk replaces the
#                  partial staging file), then the killed node returns;
#   4. the resync finishes: the tail logged the copies and no stop, no
#      staging file is left, `strata admin verify` and `verify --deep` find
#      the replicas equal;
#   5. the other two nodes are killed and every file, read back from the
#      returned replica alone, is byte-identical to what was written.
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/netns.sh"
SCEN=${1:-receiver}
WRITER=""
rc_on_teardown() {
	[ -n "$WRITER" ] && kill "$WRITER" 2>/dev/null
	true
}

rc_require
# Every write rewrites its whole chunk on each replica (copy-on-write,
# chunkserver/chunk_store.c): the 1 MiB writes into a 64 MiB chunk queue
# behind each other, and on a loaded 2-core VM with a slow disk some waited
# past strata-fuse's default 15 s and failed with EIO (CI, 2026-11-30). This
# test is about resync, not write latency: let the writes wait.
export RC_FUSE_ARGS="--retry-ms 120000"
rc_start 3 1 3
SRC="$RC_DIR/src"
mkdir -p "$SRC"

# Reads a file past the page cache; prints its sha256 or "ERR <errno>".
read_sum() {
	python3 - "$1" <<'EOF'
import errno, hashlib, os, sys
try:
    fd = os.open(sys.argv[1], os.O_RDONLY)
    os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
    h = hashlib.sha256()
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            break
        h.update(b)
    os.close(fd)
    print(h.hexdigest())
except OSError as e:
    print("ERR", errno.errorcode.get(e.errno, e.errno))
EOF
}

# new_file REL MiB: random contents into the source copy and the mount.
new_file() {
	head -c "$(($2 << 20))" /dev/urandom >"$SRC/${1//\//_}"
	dd if="$SRC/${1//\//_}" of="$RC_MNT/$1" bs=4M conv=fsync status=none ||
		rc_fail "write $1"
}

# patch_file REL OFFSET_KiB KiB: overwrite a range in place (both copies).
patch_file() {
	head -c "$(($3 << 10))" /dev/urandom >"$RC_DIR/patch"
	dd if="$RC_DIR/patch" of="$SRC/${1//\//_}" bs=1K seek="$2" conv=notrunc status=none
	dd if="$RC_DIR/patch" of="$RC_MNT/$1" bs=1K seek="$2" conv=notrunc,fsync status=none ||
		rc_fail "overwrite $1"
}

node_at() { # position (0 head .. 2 tail) of chain 0 -> node number
	rc_node_of_target "$(rc_chain_targets 0 | awk -v p=$(($1 + 1)) '{print $p}')"
}

all_serving() {
	rc_admin --json chains 2>/dev/null | python3 -c '
import json,sys
d=json.load(sys.stdin)
sys.exit(0 if d["chains"] and all(x["state"]=="serving" for c in d["chains"] for x in c["targets"]) else 1)'
}

staging() { ls "$RC_DIR/cs$1/t1/tmp/" 2>/dev/null | grep -c '\.put$'; }

# ---- 1. large chunks ---------------------------------------------------------------

mkdir "$RC_MNT/L16" "$RC_MNT/L64" || rc_fail "mkdir"
rc_admin layout set /L16 --chunk-size 16M >/dev/null || rc_fail "layout set /L16"
rc_admin layout set /L64 --chunk-size 64M >/dev/null || rc_fail "layout set /L64"
new_file L16/a 40 # chunks of 16, 16, 8 MiB
new_file L16/b 20
new_file L16/e 6  # one chunk of 6 MiB
new_file L64/c 72 # 64 + 8 MiB
rc_log "written: L16/a 40M, L16/b 20M, L16/e 6M, L64/c 72M"

# ---- 2. a node down while the files change ---------------------------------------------

T=$(rc_chain_targets 0 | awk '{print $2}')
N=$(rc_node_of_target "$T")
rc_log "killing node $N (chain $(rc_chain_targets 0))"
KILLED_AT=$(date -u +%Y-%m-%dT%H:%M:%S)
rc_kill_node "$N"
new_file L16/d 24
patch_file L16/a $((5 * 1024 + 3)) 1500          # inside chunk 0
patch_file L16/a $((16 * 1024 - 100)) 300        # across chunks 0 and 1
patch_file L64/c $((30 * 1024)) 3072             # inside the 64 MiB chunk
patch_file L64/c $((64 * 1024 + 7)) 100          # the 8 MiB chunk
truncate -s 10M "$SRC/L16_b" && truncate -s 10M "$RC_MNT/L16/b" || rc_fail "truncate"
rm -f "$SRC/L16_e" "$RC_MNT/L16/e" || rc_fail "rm"
rc_log "while node $N was down: L16/d written, a and c overwritten in parts, b cut to 10M, e removed"

# ---- 3. it returns; a transfer is interrupted --------------------------------------------

# Restarts node N and, as soon as a staging file shows a transfer to it in
# flight, kills node $1 (up to 3 rounds: a resync too quick to catch is made
# to copy again).
start_and_cut() {
	local round i
	for round in 1 2 3; do
		rc_start_node "$N"
		rc_wait_node "$N"
		for i in $(seq 1 3000); do
			[ "$(staging "$N")" -gt 0 ] && { rc_kill_node "$1"; return 0; }
			[ $((i % 25)) = 0 ] && all_serving && break
			sleep 0.01
		done
		rc_log "round $round: resync finished before a staging file was seen; again"
		rc_kill_node "$N"
		patch_file L64/c $((40 * 1024)) 1024
	done
	rc_fail "could not catch a transfer in 3 rounds"
}

# The target sending to T: the last serving one before it in chain 0.
sender_target() {
	rc_admin --json chains | python3 -c '
import json,sys
c=json.load(sys.stdin)["chains"][0]["targets"]
prev=None
for x in c:
    if x["target"]==int(sys.argv[1]): print(prev); break
    if x["state"]=="serving": prev=x["target"]' "$T"
}

target_serving() {
	rc_admin --json chains 2>/dev/null | python3 -c '
import json,sys
c=json.load(sys.stdin)["chains"][0]["targets"]
sys.exit(0 if any(x["target"]==int(sys.argv[1]) and x["state"]=="serving" for x in c) else 1)' "$1"
}

case "$SCEN" in
receiver)
	start_and_cut "$N"
	rc_log "node $N (the receiver) killed during a transfer ($(staging "$N") staging file(s) left in its tmp/)"
	sleep 0.5
	# writes to the large chunks go on while it resyncs: a chunk written
	# during its transfer is sent again (the data checks below cover it)
	(
		k=0
		while [ ! -e "$RC_DIR/writer.stop" ] && [ $k -lt 200 ]; do
			patch_file L64/c $(((k * 7919) % (60 * 1024))) 64
			patch_file L16/a $(((k * 104729) % (40 * 1024 - 64))) 64
			k=$((k + 1))
		done
		echo "$k" >"$RC_DIR/writer.done"
	) &
	WRITER=$!
	rc_start_node "$N"
	rc_wait_node "$N"
	;;
sender)
	ST=$(sender_target)
	S=$(rc_node_of_target "$ST") || rc_fail "no sender for target $T"
	start_and_cut "$S"
	rc_log "node $S (the sender, target $ST) killed during a transfer to node $N ($(staging "$N") staging file(s))"
	for i in $(seq 1 300); do target_serving "$T" && break; sleep 0.2; done
	target_serving "$T" || rc_fail "target $T did not finish its resync from the new tail"
	# the new tail's first piece of the cut-off chunk replaced the staging file
	[ "$(staging "$N")" = 0 ] || rc_fail "staging files left on node $N: $(ls "$RC_DIR/cs$N/t1/tmp")"
	rc_log "target $T synced from the new tail: $(rc_admin chains | sed -n 2p)"
	rc_start_node "$S"
	rc_wait_node "$S"
	;;
*) rc_fail "unknown scenario $SCEN" ;;
esac
rc_wait_serving 60 || rc_fail "the replicas did not resync"
rc_log "all replicas serving: $(rc_admin chains | sed -n 2p)"
if [ -n "$WRITER" ]; then
	touch "$RC_DIR/writer.stop"
	wait "$WRITER" || { WRITER=""; rc_fail "a write during the resync failed"; }
	WRITER=""
	rc_log "$(cat "$RC_DIR/writer.done") pairs of 64 KiB writes during the resync;" \
		"$(grep -hc "written during its transfer" "$RC_DIR"/log/cs*.log | awk '{s += $1} END {print s + 0}')" \
		"transfers sent again"
fi

# ---- 4. the resync and the replicas ---------------------------------------------------------

grep -h "resync: .*target $T\b" "$RC_DIR"/log/cs*.log | sort | tail -n 6 >&2
# the syncs of target T since the kill copied chunks (7 changed; the data
# checks below are the proof)
copied=$(grep -h "resync: chain [0-9]* target $T done:" "$RC_DIR"/log/cs*.log |
	awk -v t="$KILLED_AT" '$1 >= t' | sed -n 's/.* \([0-9]*\) copied.*/\1/p' |
	awk '{s += $1} END {print s + 0}')
[ "$copied" -ge 1 ] || rc_fail "no resync of target $T since the kill copied a chunk"
if grep -h "File too large\|EFBIG\|PUT_PART unknown" "$RC_DIR"/log/cs*.log >&2; then
	rc_fail "a resync stopped on a large chunk"
fi
[ "$(staging "$N")" = 0 ] || rc_fail "staging files left on node $N: $(ls "$RC_DIR/cs$N/t1/tmp")"
rc_admin verify >&2 || rc_fail "replicas differ"
rc_admin verify --deep >&2 || rc_fail "replicas differ (deep)"

# ---- 5. the returned replica alone ----------------------------------------------------------

for i in 1 2 3; do [ "$i" = "$N" ] || rc_kill_node "$i"; done
rc_log "nodes other than $N killed; reading back from node $N alone"
for f in L16/a L16/b L16/d L64/c; do
	want=$(sha256sum <"$SRC/${f//\//_}" | awk '{print $1}')
	got=$(read_sum "$RC_MNT/$f")
	[ "$got" = "$want" ] || rc_fail "$f read from node $N: $got, want $want"
	rc_log "$f: identical ($(stat -c %s "$SRC/${f//\//_}") bytes)"
done
[ -e "$RC_MNT/L16/e" ] && rc_fail "removed file L16/e is back"
rc_log "PASS: large chunks resync ($SCEN)"
