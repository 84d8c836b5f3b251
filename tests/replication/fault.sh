#!/bin/bash
# tests/replication/fault.sh SCENARIO — one replication fault test on a
# 3-node cluster (tests/replication/netns.sh: one network namespace per
# chunkserver), 3 replicas, with a continuous write+read workload through the
# FUSE mount (workload.py: every record is fsynced; only acknowledged
# records are checked, and none may be lost or read back wrong).
#
#   kill_head | kill_middle | kill_tail   kill -9 that replica of the chain;
#        the workload must go on within STALL_MAX seconds; the node restarts,
#        resyncs, and all replicas end byte-for-byte equal (strata admin verify)
#   partition   SIGSTOP the middle replica; writes go on after the lease; on
#        SIGCONT it answers reads routed by the old chain version with
#        -ESTALE/-EAGAIN, never data; it resyncs and rejoins
#   thaw_read   partition's probe, its window hit every time: the READ
#        routed by the old chain version is queued at the frozen replica
#        (its socket takes it), and the replica's packets to strata-meta
#        are dropped for the first 0.8 s after SIGCONT, so its heartbeat
#        cannot refetch the table before the read is placed by the old one;
#        the refetch for the read then succeeds (TCP retransmits), and the
#        read must still get -ESTALE/-EAGAIN, not data
#   rejoin      a node is down while 300 records are written, comes back:
#        resync, then equal replicas (checksums of every chunk compared)
#   two_failures  head and tail killed one after the other: the survivor
#        keeps reading and writing; both return and resync
#   all_down    every chunkserver killed: a write fails with EIO within
#        EIO_MAX seconds, no hang; all return: full service, nothing lost
#   replace     a node's disk is replaced by an empty one (new node and
#        target ids): it takes the lost replica's place in the chain and is
#        filled by resync with no command; replicas equal
#   dedup       the same WRITE_EX (client id, request id) sent twice to the
#        head is applied once (the chunk version moves once); a new request
#        id applies again; replicas stay equal
#   retry_id    a write applied by the tail whose acknowledgement never
#        reaches the head (the tail's replies to the middle dropped, the
#        middle frozen once the tail applied it) is retried by strata-fuse
#        after chunk_client's same-id window (cut to 300 ms) with the same
#        request id: applied once (the chunk's version moves once on every
#        replica), replicas equal
#   copy_rechain  the head's forward of write 2 times out after the
#        middle and the tail applied it (the middle's answers to the head
#        dropped); write 3 makes the head reconcile (it copies the middle's
#        chunk); the tail is killed (the chain changes); write 2 retried
#        with its request id is answered by the middle's dedup table at a
#        version the copy holds: not applied again (head and middle stay
#        equal, version and bytes), replicas equal after the resync
#   churn       (soak) 12 rounds: kill -9 a random node, the workload goes
#        on, the node returns and resyncs; replicas equal at the end
#   torn        the tail is killed, one of its chunk files torn (cut in half)
#        and another one's data flipped; on restart the chain repairs both
#        (strata admin verify --deep: every block of every replica checked)
set -u
HERE=$(cd "$(dirname "$0")" && pwd)
. "$HERE/netns.sh"
SCEN=${1:?scenario}
STALL_MAX=${STALL_MAX:-8}
EIO_MAX=${EIO_MAX:-40}
WL_PID=""

rc_on_teardown() {
	[ -n "$WL_PID" ] && kill -9 "$WL_PID" 2>/dev/null
	true
}

mono() { python3 -c 'import time; print("%.3f" % time.monotonic())'; }
acked() { awk '{print $1}' "$RC_DIR/wl.progress" 2>/dev/null || echo 0; }

wl_start() {
	python3 "$HERE/workload.py" "$RC_MNT" --out "$RC_DIR/wl.json" \
		--progress "$RC_DIR/wl.progress" --seconds 600 &
	WL_PID=$!
	wait_acked 20 30 || rc_fail "workload did not start"
}

# Waits until at least $1 records are acked (timeout $2 s).
wait_acked() {
	local i
	for i in $(seq 1 $(($2 * 10))); do
		[ "$(acked)" -ge "$1" ] && return 0
		kill -0 "$WL_PID" 2>/dev/null || return 1
		sleep 0.1
	done
	return 1
}

# The workload goes on: $1 more records within $2 s.
wl_progresses() {
	local base
	base=$(acked)
	wait_acked $((base + $1)) "$2" || rc_fail "workload stalled at $base records ($(cat "$RC_DIR/wl.progress"))"
	rc_log "workload progressing: $(acked) records acked"
}

wl_stop_check() {
	touch "$RC_MNT/wl.stop"
	wait "$WL_PID" || rc_fail "workload lost or corrupted acknowledged data: $(python3 -c '
import json,sys; d=json.load(open(sys.argv[1])); d.pop("acks"); print(d)' "$RC_DIR/wl.json")"
	WL_PID=""
	local stall
	stall=$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["max_stall_s"])' "$RC_DIR/wl.json")
	rc_log "workload: max stall ${stall}s"
	python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) <= float(sys.argv[2]) else 1)' \
		"$stall" "$STALL_MAX" || rc_fail "stall ${stall}s above ${STALL_MAX}s"
}

# Seconds from monotonic time $1 to the first acknowledged write after it.
first_ack_after() {
	python3 -c '
import json,sys
d=json.load(open(sys.argv[1])); t=float(sys.argv[2])
a=[x[0] for x in d["acks"] if x[0] > t]
print("%.3f" % (a[0]-t) if a else "none")' "$RC_DIR/wl.json" "$1"
}

node_at() { # position (0 head .. 2 tail) of chain 0 -> node number
	local t
	t=$(rc_chain_targets 0 | awk -v p=$(($1 + 1)) '{print $p}')
	rc_node_of_target "$t"
}

chain_version() { # of chain 0, by strata-meta
	rc_admin --json chains | python3 -c 'import json,sys; print(json.load(sys.stdin)["chains"][0]["version"])'
}

restart_and_resync() {
	local i
	for i in "$@"; do rc_start_node "$i"; done
	for i in "$@"; do rc_wait_node "$i"; done
	rc_wait_serving 90 || rc_fail "replicas did not resync"
	rc_log "all replicas serving again: $(rc_admin chains | sed -n 2p)"
}

verify_equal() {
	rc_admin verify "$@" >&2 || rc_fail "replicas differ"
}

kill_role() {
	local pos=$1 n t0
	n=$(node_at "$pos")
	rc_log "killing node $n (position $pos of $(rc_chain_targets 0))"
	t0=$(mono)
	rc_kill_node "$n"
	wl_progresses 30 "$STALL_MAX"
	rc_admin chains | sed -n 2p >&2
	restart_and_resync "$n"
	wl_progresses 20 10
	wl_stop_check
	rc_log "kill -9 to first acknowledged write: $(first_ack_after "$t0") s"
	verify_equal
}

# A read routed by the old chain version at a thawed replica is refused
# (-ESTALE or -EAGAIN); then the replica resyncs, the workload goes on, and
# the replicas end equal.
thawed_refused_then_resyncs() {
	case "$1" in
	"status -116 "* | "status -11 "*) ;;
	*) rc_fail "thawed replica answered a stale-routed read: $1" ;;
	esac
	rc_wait_serving 90 || rc_fail "thawed replica did not resync"
	wl_progresses 20 10
	wl_stop_check
	verify_equal
}

partition() {
	local n t old_ver probe_out
	n=$(node_at 1)
	t=$(rc_chain_targets 0 | awk '{print $2}')
	old_ver=$(chain_version)
	rc_log "freezing node $n (target $t, chain version $old_ver)"
	rc_stop_node "$n"
	# a frozen replica is given up on after the lease or a 5 s call timeout
	STALL_MAX=$((STALL_MAX + 3))
	wl_progresses 30 "$STALL_MAX"
	rc_admin chains | sed -n 2p >&2
	rc_cont_node "$n"
	# the frozen replica must not serve what it holds to old routing
	probe_out=$("$STRATA_BUILD/tests/repl_probe" "${RC_ADDR[$n]}" "$t" 1 "$old_ver" 2 0)
	rc_log "read at the thawed replica with chain version $old_ver: $probe_out"
	thawed_refused_then_resyncs "$probe_out"
}

thaw_read() {
	local n t old_ver probe_out probe_pid ns rule
	[ "$RC_NETNS" = 1 ] || rc_skip "needs network namespaces (drops the node's packets to strata-meta)"
	n=$(node_at 1)
	t=$(rc_chain_targets 0 | awk '{print $2}')
	old_ver=$(chain_version)
	ns="strn${RC_TAG}_$n"
	rule=(OUTPUT -p tcp -d "${RC_META%:*}" --dport "${RC_META##*:}" -j DROP)
	ip netns exec "$ns" iptables -A "${rule[@]}" || rc_skip "no iptables in $ns"
	ip netns exec "$ns" iptables -D "${rule[@]}"
	rc_log "freezing node $n (target $t, chain version $old_ver)"
	rc_stop_node "$n"
	STALL_MAX=$((STALL_MAX + 3))
	wl_progresses 30 "$STALL_MAX"
	rc_admin chains | sed -n 2p >&2
	# the read waits in the frozen node's socket
	"$STRATA_BUILD/tests/repl_probe" "${RC_ADDR[$n]}" "$t" 1 "$old_ver" 2 0 \
		>"$RC_DIR/probe.out" 2>&1 &
	probe_pid=$!
	sleep 0.5
	ip netns exec "$ns" iptables -A "${rule[@]}" || rc_fail "cannot drop packets to strata-meta"
	rc_cont_node "$n"
	sleep 0.8
	ip netns exec "$ns" iptables -D "${rule[@]}"
	wait "$probe_pid" || rc_fail "probe failed: $(cat "$RC_DIR/probe.out")"
	probe_out=$(cat "$RC_DIR/probe.out")
	rc_log "read queued at the frozen replica with chain version $old_ver: $probe_out"
	thawed_refused_then_resyncs "$probe_out"
}

rejoin() {
	local n
	n=$(node_at 2)
	rc_kill_node "$n"
	wl_progresses 300 60
	restart_and_resync "$n"
	wl_stop_check
	verify_equal
	verify_equal --deep
}

two_failures() {
	local h t
	h=$(node_at 0)
	t=$(node_at 2)
	rc_kill_node "$h"
	wl_progresses 20 "$STALL_MAX"
	rc_kill_node "$t"
	wl_progresses 30 "$STALL_MAX"
	rc_admin chains | sed -n 2p >&2
	restart_and_resync "$h" "$t"
	wl_progresses 20 10
	wl_stop_check
	verify_equal
}

all_down() {
	local t0 t1 rc
	touch "$RC_MNT/wl.stop"
	wait "$WL_PID" || rc_fail "workload failed before the fault"
	WL_PID=""
	for i in 1 2 3; do rc_kill_node "$i"; done
	t0=$(date +%s)
	timeout 120 dd if=/dev/urandom of="$RC_MNT/eio" bs=64k count=4 conv=fsync 2>"$RC_DIR/dd.err"
	rc=$?
	t1=$(date +%s)
	rc_log "write with every replica down: exit $rc after $((t1 - t0)) s: $(tail -1 "$RC_DIR/dd.err")"
	[ "$rc" -ne 0 ] && [ "$rc" -ne 124 ] || rc_fail "write with every replica down did not fail (rc $rc)"
	grep -q "Input/output error" "$RC_DIR/dd.err" || rc_fail "expected EIO"
	[ $((t1 - t0)) -le "$EIO_MAX" ] || rc_fail "EIO took $((t1 - t0)) s"
	restart_and_resync 1 2 3
	python3 "$HERE/workload.py" "$RC_MNT" --out "$RC_DIR/wl2.json" --seconds 0 --readers 0 \
		>/dev/null 2>&1 || true # re-reads every record acked before the fault
	dd if=/dev/urandom of="$RC_MNT/after" bs=1M count=4 conv=fsync 2>/dev/null ||
		rc_fail "no full service after the replicas returned"
	verify_equal
}

torn() {
	local n f g
	wait_acked 80 60 || rc_fail "workload too slow"
	touch "$RC_MNT/wl.stop"
	wait "$WL_PID" || rc_fail "workload failed before the fault"
	WL_PID=""
	n=$(node_at 2)
	rc_kill_node "$n"
	f=$(find "$RC_DIR/cs$n/t1/chunks" -type f | sort | sed -n 1p)
	g=$(find "$RC_DIR/cs$n/t1/chunks" -type f | sort | sed -n 2p)
	[ -n "$f" ] && [ -n "$g" ] || rc_fail "no chunk files on node $n"
	truncate -s $(($(stat -c %s "$f") / 2)) "$f"
	# data byte 1000 (format 2: the data starts at 24 KiB)
	printf 'XXXXXXXX' | dd of="$g" bs=1 seek=$((24576 + 1000)) conv=notrunc 2>/dev/null
	rc_log "tore $f (cut in half) and flipped bytes in $g"
	restart_and_resync "$n"
	verify_equal --deep
	python3 "$HERE/workload.py" "$RC_MNT" --out "$RC_DIR/wl2.json" --seconds 0 --readers 0 \
		>/dev/null 2>&1 || true
}

replace() {
	local n
	n=$(node_at 1)
	rc_kill_node "$n"
	wl_progresses 30 "$STALL_MAX"
	rm -rf "$RC_DIR/cs$n/t1"
	rc_log "node $n returns with an empty disk"
	restart_and_resync "$n"
	rc_admin chains >&2
	wl_progresses 20 10
	wl_stop_check
	verify_equal
	verify_equal --deep
}

dedup() {
	local t n ver a b c probe=$STRATA_BUILD/tests/repl_probe
	touch "$RC_MNT/wl.stop"
	wait "$WL_PID" || rc_fail "workload failed"
	WL_PID=""
	t=$(rc_chain_targets 0 | awk '{print $1}')
	n=$(rc_node_of_target "$t")
	ver=$(chain_version)
	a=$("$probe" "${RC_ADDR[$n]}" "$t" 1 "$ver" 999999 0 4242 7)
	b=$("$probe" "${RC_ADDR[$n]}" "$t" 1 "$ver" 999999 0 4242 7)
	c=$("$probe" "${RC_ADDR[$n]}" "$t" 1 "$ver" 999999 0 4242 8)
	rc_log "write req 7: $a; again: $b; req 8: $c"
	[ "$a" = "status 0 version 1" ] && [ "$b" = "$a" ] && [ "$c" = "status 0 version 2" ] ||
		rc_fail "retried write not applied exactly once"
	verify_equal
}

# The file of chunk 0 of inode $2 on node $1.
chunk_file() { printf '%s/cs%s/t1/chunks/%02x/%016x/00000000' "$RC_DIR" "$1" $(($2 & 255)) "$2"; }

# The version of chunk 0 of inode $2 on node $1 (read from its current
# header by tests/chunk_tool; 0: none).
chunk_version() {
	local out
	out=$("$STRATA_BUILD/tests/chunk_tool" stat "$(chunk_file "$1" "$2")" 2>/dev/null) || out=""
	set -- $out
	echo "${2:-0}"
}

# Chunk 0 of inode $3 is the same on nodes $1 and $2: version, length and
# checksum (XXH3 of every block's checksum) of the current headers.
chunk_same() {
	local a b
	a=$("$STRATA_BUILD/tests/chunk_tool" stat "$(chunk_file "$1" "$3")") || return 1
	b=$("$STRATA_BUILD/tests/chunk_tool" stat "$(chunk_file "$2" "$3")") || return 1
	[ "$a" = "$b" ]
}

retry_id() {
	local h m t ns ino v0 v i dd_pid rule
	[ "$RC_NETNS" = 1 ] || { rc_log "SKIP: needs network namespaces"; exit 77; }
	touch "$RC_MNT/wl.stop"
	wait "$WL_PID" || rc_fail "workload failed"
	WL_PID=""
	h=$(node_at 0) m=$(node_at 1) t=$(node_at 2)
	head -c 65536 /dev/urandom >"$RC_DIR/once.1"
	dd if="$RC_DIR/once.1" of="$RC_MNT/once" bs=64k conv=fsync status=none || rc_fail "write"
	ino=$(stat -c %i "$RC_MNT/once")
	v0=$(chunk_version "$t" "$ino")
	[ "$v0" -ge 1 ] || rc_fail "no chunk of ino $ino on node $t"
	# the tail's answers to the middle are lost (its packets with data: bare
	# ACKs pass, so the middle's frame gets through): the middle waits, the
	# write is applied at the tail only
	ns="strn${RC_TAG}_$t"
	rule=(OUTPUT -p tcp --sport "${RC_ADDR[$t]##*:}" -d "${RC_ADDR[$m]%:*}"
		-m length --length 100:65535 -j DROP)
	ip netns exec "$ns" iptables -A "${rule[@]}" || { rc_log "SKIP: no iptables in $ns"; exit 77; }
	head -c 65536 /dev/urandom >"$RC_DIR/once.2"
	dd if="$RC_DIR/once.2" of="$RC_MNT/once" bs=64k conv=notrunc,fsync status=none \
		2>"$RC_DIR/dd.err" &
	dd_pid=$!
	for i in $(seq 1 100); do
		v=$(chunk_version "$t" "$ino")
		[ "$v" -gt "$v0" ] && break
		sleep 0.02
	done
	[ "$v" -gt "$v0" ] || rc_fail "the tail did not apply the write"
	rc_stop_node "$m" # taken out when the head's forward to it times out
	rc_log "tail (node $t) at version $v; middle (node $m) frozen"
	wait "$dd_pid" || rc_fail "write failed: $(cat "$RC_DIR/dd.err")"
	ip netns exec "$ns" iptables -D "${rule[@]}"
	rc_cont_node "$m"
	rc_wait_serving 90 || rc_fail "the middle did not resync"
	cmp "$RC_DIR/once.2" "$RC_MNT/once" || rc_fail "read back differs"
	verify_equal
	for i in "$h" "$m" "$t"; do
		v=$(chunk_version "$i" "$ino")
		rc_log "node $i: chunk version $v (before the write: $v0)"
		[ "$v" = $((v0 + 1)) ] || rc_fail "the write was applied $((v - v0)) times on node $i"
	done
}

# copy_rechain: the head copies its successor's chunk (the reconcile after
# a forward whose answer was lost), the chain changes, and the lost write is
# retried with its request id: the successor answers it from its dedup
# table at a version the copy holds, so the head must not apply it again.
# Writes go straight to the head (repl_probe), each 4 KiB at offset 0 of
# its own fill byte, so the chunk's bytes tell which write it holds.
copy_rechain() {
	local h m t th ns ver ver2 a i n rule ino=999998
	[ "$RC_NETNS" = 1 ] || rc_skip "needs network namespaces (drops the middle's answers to the head)"
	touch "$RC_MNT/wl.stop"
	wait "$WL_PID" || rc_fail "workload failed"
	WL_PID=""
	h=$(node_at 0) m=$(node_at 1) t=$(node_at 2)
	th=$(rc_chain_targets 0 | awk '{print $1}')
	ver=$(chain_version)
	# put CHAIN_VER REQ_ID FILL: a write of client 4343 at the head
	put() { "$STRATA_BUILD/tests/repl_probe" "${RC_ADDR[$h]}" "$th" 1 "$1" "$ino" 0 4343 "$2" "$3"; }
	versions() { for n in "$h" "$m" "$t"; do printf '%s ' "$(chunk_version "$n" "$ino")"; done; }
	a=$(put "$ver" 1 0x11)
	[ "$a" = "status 0 version 1" ] || rc_fail "first write: $a"
	# write 2: applied by the tail and the middle, the middle's answer to
	# the head lost (its packets with data; bare ACKs pass): the head's
	# forward times out, it marks the chunk unsure and answers -EAGAIN
	ns="strn${RC_TAG}_$m"
	rule=(OUTPUT -p tcp --sport "${RC_ADDR[$m]##*:}" -d "${RC_ADDR[$h]%:*}"
		-m length --length 100:65535 -j DROP)
	ip netns exec "$ns" iptables -A "${rule[@]}" || rc_skip "no iptables in $ns"
	a=$(put "$ver" 2 0x22)
	ip netns exec "$ns" iptables -D "${rule[@]}"
	rc_log "write 2, the middle's answer lost: $a; versions head middle tail: $(versions)"
	case "$a" in "status -11 "*) ;; *) rc_fail "write 2 with its answer lost: $a" ;; esac
	[ "$(versions)" = "1 2 2 " ] || rc_fail "write 2 not applied below the head only: $(versions)"
	# the head reported the middle; strata-meta's probe found it alive
	[ "$(chain_version)" = "$ver" ] || rc_fail "the chain changed after write 2 ($(rc_admin chains | sed -n 2p))"
	# write 3: the head reconciles (copies the middle's version 2), then applies it
	a=$(put "$ver" 3 0x33)
	[ "$a" = "status 0 version 3" ] && [ "$(versions)" = "3 3 3 " ] ||
		rc_fail "write 3 after the reconcile: $a; versions $(versions)"
	grep -q "was behind target .*copied its version 2" "$RC_DIR/log/cs$h.log" ||
		rc_fail "the head did not copy its successor's chunk"
	# the chain changes: the tail is killed and taken out
	rc_kill_node "$t"
	for i in $(seq 1 150); do
		ver2=$(chain_version)
		[ "$ver2" != "$ver" ] && break
		sleep 0.2
	done
	[ "$ver2" != "$ver" ] || rc_fail "the chain did not change after the tail was killed"
	# write 2 again with its request id, by the new chain: the middle
	# answers it from its dedup table at version 2, which the copy holds
	a=$(put "$ver2" 2 0x22)
	rc_log "chain v$ver -> v$ver2; write 2 retried: $a; versions head middle tail (killed): $(versions)"
	[ "$a" = "status 0 version 3" ] || rc_fail "the retried write 2 was applied again at the head: $a"
	[ "$(chunk_version "$h" "$ino")" = 3 ] && chunk_same "$h" "$m" "$ino" ||
		rc_fail "head and middle differ after the retry: versions $(versions)"
	restart_and_resync "$t"
	[ "$(versions)" = "3 3 3 " ] && chunk_same "$h" "$t" "$ino" ||
		rc_fail "replicas differ after the resync: versions $(versions)"
	verify_equal
}

churn() {
	local k n
	for k in $(seq 1 12); do
		n=$(((RANDOM % 3) + 1))
		rc_log "round $k: killing node $n"
		rc_kill_node "$n"
		wl_progresses 20 "$STALL_MAX"
		restart_and_resync "$n"
		wl_progresses 20 10
	done
	wl_stop_check
	verify_equal
	verify_equal --deep
}

rc_require
# retry_id: chunk_client gives up a write after 300 ms, strata-fuse retries
[ "$SCEN" = retry_id ] && export STRATA_TEST_CHUNK_RETRY_MS=300
rc_start 3 1 3
wl_start
case "$SCEN" in
kill_head) kill_role 0 ;;
kill_middle) kill_role 1 ;;
kill_tail) kill_role 2 ;;
partition) partition ;;
thaw_read) thaw_read ;;
rejoin) rejoin ;;
two_failures) two_failures ;;
all_down) all_down ;;
torn) torn ;;
churn) churn ;;
dedup) dedup ;;
retry_id) retry_id ;;
replace) replace ;;
copy_rechain) copy_rechain ;;
*) rc_fail "unknown scenario $SCEN" ;;
esac
rc_log "PASS: $SCEN"
