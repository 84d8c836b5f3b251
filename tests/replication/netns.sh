#!/bin/bash
# tests/replication/netns.sh — a multi-node strata cluster on one machine:
# every chunkserver is a separate "host" in its own network namespace with its
# own address on a veth pair to a bridge; strata-meta and strata-fuse stay in
# the root namespace, on the bridge. Addresses come from 10.77.X.0/24 (X picked
# per run so that parallel runs do not collide), used only inside this
# machine: nothing is routed anywhere else. Where namespaces cannot be made
# (no CAP_NET_ADMIN, no `ip`), chunkservers listen on 127.0.0.1 ports instead.
#
# The emulated network behaves like a switch between hosts, not like this
# VM's root namespace (chunkserver/README.md "What a replicated write
# costs" has the figures), with nothing changed outside our namespaces:
#  - each node's namespace uses TCP congestion control RC_NODE_CC (default
#    reno: no pacing; this VM's default, bbr, paces every send with an
#    hrtimer, about a quarter of a forwarding chunkserver's CPU here; a
#    namespace may only pick from tcp_allowed_congestion_control, "reno bbr"
#    here). RC_NODE_CC= (empty) keeps the machine's default;
#  - RC_BRIDGE_NS=1 (not the default: it measured within the noise) puts the
#    bridge in a namespace of its own (strb<X>) with br_netfilter's
#    bridge-nf-call-* sysctls off there (a switch runs no iptables; in the
#    root namespace they are on, and the hooks run for every bridged packet,
#    ~3 % of a forwarding chunkserver's CPU); the root namespace reaches it
#    by a veth strv<X>h holding 10.77.X.1.
#
# As a library (the tests, and `strata up --nodes N` later, can call it):
#   . tests/replication/netns.sh
#   rc_start N [TARGETS_PER_NODE] [REPLICAS]   # meta + N chunkservers + FUSE
#   rc_kill_node I / rc_stop_node I / rc_cont_node I / rc_start_node I
#   rc_node_of_target T ; rc_chain_json ; rc_wait_serving [TIMEOUT_S]
#   rc_teardown                                 # (installed as the EXIT trap)
# Exposes RC_DIR (all state), RC_META (host:port), RC_MNT (the mount),
# RC_NODES, RC_PID[i] (chunkserver pids), RC_NETNS (1 if namespaces are used).
# Options (environment): RC_LEASE_MS (default 3000), RC_LOG_LEVEL (info),
# RC_CS_ARGS (more options for every strata-chunkserver, e.g. "--workers 2"),
# RC_FUSE_ARGS (more options for strata-fuse, e.g. "--retry-ms 120000").
#
# As a script:
#   netns.sh up DIR N [TARGETS] [REPLICAS]   start and leave running (prints env)
#   netns.sh down DIR                        stop what `up` started in DIR

set -u
: "${STRATA_SRC:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
: "${STRATA_BIN:=$STRATA_SRC/build/bin}"
RC_DIR=""
RC_NETNS=0
RC_NODES=0
RC_SUBNET=""
RC_TAG=""
RC_META=""
RC_MNT=""
declare -a RC_PID RC_ADDR

rc_log() { echo "[$(date -u +%H:%M:%S.%N | cut -c1-12)] $*" >&2; }
rc_fail() {
	echo "FAIL: $*" >&2
	exit 1
}
rc_skip() {
	echo "SKIP: $*" >&2
	exit 77
}

rc_require() {
	[ "$(id -u)" -eq 0 ] || rc_skip "needs root (namespaces, mounts)"
	[ -c /dev/fuse ] || rc_skip "/dev/fuse is missing"
	local b
	for b in strata strata-meta strata-chunkserver strata-fuse; do
		[ -x "$STRATA_BIN/$b" ] || rc_skip "$STRATA_BIN/$b is not built"
	done
}

# ---- network ---------------------------------------------------------------

# Picks X so that 10.77.X.0/24 is not on any interface yet.
_rc_pick_subnet() {
	local x tries
	for tries in $(seq 1 50); do
		x=$(((RANDOM % 200) + 20))
		ip -o addr 2>/dev/null | grep -q "10\.77\.$x\." || {
			RC_SUBNET="10.77.$x"
			RC_TAG="$x"
			return 0
		}
	done
	return 1
}

RC_BNS="" # the bridge's namespace; empty: the root namespace

# Runs "$@" in the bridge's namespace (or here).
_rc_in_bns() { if [ -n "$RC_BNS" ]; then ip netns exec "$RC_BNS" "$@"; else "$@"; fi; }

_rc_net_up() {
	[ "${RC_FORCE_LOOPBACK:-0}" = 1 ] && return 1
	command -v ip >/dev/null || return 1
	_rc_pick_subnet || return 1
	local br="strbr$RC_TAG" bns="strb$RC_TAG" h="strv${RC_TAG}h"
	if [ "${RC_BRIDGE_NS:-0}" = 1 ] && ip netns add "$bns" 2>/dev/null; then
		echo "$bns" >>"$RC_DIR/netns"
		RC_BNS=$bns
		ip netns exec "$bns" sh -c 'for f in /proc/sys/net/bridge/bridge-nf-call-*; do
			[ -w "$f" ] && echo 0 >"$f"; done; true'
		ip -n "$bns" link add "$br" type bridge || return 1
		ip -n "$bns" link set lo up && ip -n "$bns" link set "$br" up || return 1
		ip link add "$h" type veth peer name "${h}p" || return 1
		ip link set "${h}p" netns "$bns" || return 1
		ip -n "$bns" link set "${h}p" master "$br" && ip -n "$bns" link set "${h}p" up ||
			return 1
		echo "$h" >"$RC_DIR/bridge" # deleting the host end deletes the pair
		ip addr add "$RC_SUBNET.1/24" dev "$h" && ip link set "$h" up || return 1
	else
		ip link add "$br" type bridge 2>/dev/null || return 1
		echo "$br" >"$RC_DIR/bridge"
		ip addr add "$RC_SUBNET.1/24" dev "$br" && ip link set "$br" up || return 1
	fi
	RC_NETNS=1
}

# Namespace of node i with its veth to the bridge; address $RC_SUBNET.(10+i).
_rc_node_net() {
	local i=$1 ns="strn${RC_TAG}_$1" v="strv${RC_TAG}n$1" cc=${RC_NODE_CC-reno}
	ip netns add "$ns" || return 1
	echo "$ns" >>"$RC_DIR/netns"
	ip link add "$v" type veth peer name "${v}p" || return 1
	ip link set "${v}p" netns "$ns" || return 1
	if [ -n "$RC_BNS" ]; then
		ip link set "$v" netns "$RC_BNS" || return 1
	fi
	_rc_in_bns ip link set "$v" master "strbr$RC_TAG" && _rc_in_bns ip link set "$v" up ||
		return 1
	ip -n "$ns" link set lo up
	ip -n "$ns" link set "${v}p" name eth0
	ip -n "$ns" addr add "$RC_SUBNET.$((10 + i))/24" dev eth0
	ip -n "$ns" link set eth0 up || return 1
	if [ -n "$cc" ]; then
		ip netns exec "$ns" sh -c "echo $cc >/proc/sys/net/ipv4/tcp_congestion_control" ||
			rc_log "node $i: cannot set congestion control $cc (keeping $(cat /proc/sys/net/ipv4/tcp_congestion_control))"
	fi
	return 0
}

_rc_net_down() {
	local ns br
	[ -f "$RC_DIR/netns" ] && while read -r ns; do
		ip netns pids "$ns" 2>/dev/null | xargs -r kill -9 2>/dev/null
		ip netns del "$ns" 2>/dev/null
	done <"$RC_DIR/netns"
	[ -f "$RC_DIR/bridge" ] && br=$(cat "$RC_DIR/bridge") && ip link del "$br" 2>/dev/null
	rm -f "$RC_DIR/netns" "$RC_DIR/bridge"
}

# ---- daemons -----------------------------------------------------------------

_rc_wait_file() { # file timeout_s
	local i
	for i in $(seq 1 $(($2 * 10))); do
		[ -s "$1" ] && return 0
		sleep 0.1
	done
	return 1
}

_rc_start_meta() {
	local listen=127.0.0.1:0
	[ "$RC_NETNS" = 1 ] && listen="$RC_SUBNET.1:0"
	"$STRATA_BIN/strata-meta" --listen "$listen" --db "$RC_DIR/meta" \
		--addr-file "$RC_DIR/meta.addr" --lease-ms "${RC_LEASE_MS:-3000}" \
		--replicas "$RC_REPLICAS" --expect-nodes "$RC_NODES" \
		--log-level "${RC_LOG_LEVEL:-info}" >>"$RC_DIR/log/meta.log" 2>&1 &
	echo $! >"$RC_DIR/meta.pid"
	_rc_wait_file "$RC_DIR/meta.addr" 30 || rc_fail "strata-meta did not start"
	RC_META=$(cat "$RC_DIR/meta.addr")
}

# Starts chunkserver i (again, on the same targets).
rc_start_node() {
	local i=$1 t args=() listen=127.0.0.1:0 pre=()
	for t in $(seq 1 "$RC_TPN"); do
		mkdir -p "$RC_DIR/cs$i/t$t"
		args+=(--target "$RC_DIR/cs$i/t$t")
	done
	if [ "$RC_NETNS" = 1 ]; then
		listen="$RC_SUBNET.$((10 + i)):7000"
		pre=(ip netns exec "strn${RC_TAG}_$i")
	elif [ -s "$RC_DIR/cs$i.addr" ]; then
		listen=$(cat "$RC_DIR/cs$i.addr") # same loopback port after a restart
	fi
	rm -f "$RC_DIR/cs$i.addr.new"
	"${pre[@]}" "$STRATA_BIN/strata-chunkserver" --listen "$listen" --meta "$RC_META" \
		"${args[@]}" --addr-file "$RC_DIR/cs$i.addr.new" \
		--log-level "${RC_LOG_LEVEL:-info}" ${RC_CS_ARGS:-} >>"$RC_DIR/log/cs$i.log" 2>&1 &
	RC_PID[$i]=$!
	echo "${RC_PID[$i]}" >"$RC_DIR/cs$i.pid"
}

rc_wait_node() {
	local i=$1
	_rc_wait_file "$RC_DIR/cs$i.addr.new" 40 || rc_fail "chunkserver $i did not start"
	mv "$RC_DIR/cs$i.addr.new" "$RC_DIR/cs$i.addr"
	RC_ADDR[$i]=$(cat "$RC_DIR/cs$i.addr")
}

_rc_start_fuse() {
	RC_MNT="$RC_DIR/mnt"
	mkdir -p "$RC_MNT"
	"$STRATA_BIN/strata-fuse" --meta "$RC_META" --mount "$RC_MNT" --client-id "rc-$RC_TAG" \
		--foreground --log-level "${RC_LOG_LEVEL:-info}" ${RC_FUSE_ARGS:-} \
		>>"$RC_DIR/log/fuse.log" 2>&1 &
	echo $! >"$RC_DIR/fuse.pid"
	local i
	for i in $(seq 1 300); do
		mountpoint -q "$RC_MNT" && return 0
		sleep 0.1
	done
	rc_fail "strata-fuse did not mount"
}

rc_kill_node() { kill -9 "${RC_PID[$1]}" 2>/dev/null; wait "${RC_PID[$1]}" 2>/dev/null; true; }
rc_stop_node() { kill -STOP "${RC_PID[$1]}"; }
rc_cont_node() { kill -CONT "${RC_PID[$1]}"; }

# ---- the cluster map -----------------------------------------------------------

rc_admin() { "$STRATA_BIN/strata" admin --meta "$RC_META" "$@"; }

# Node (chunkserver number 1..N) holding target id T: target.id files are
# per target directory; ask strata-meta and map its address back.
rc_node_of_target() {
	local addr i
	addr=$(rc_admin --json chains | python3 -c '
import json,sys
t=int(sys.argv[1])
for c in json.load(sys.stdin)["chains"]:
    for x in c["targets"]:
        if x["target"]==t: print(x["addr"])' "$1")
	for i in $(seq 1 "$RC_NODES"); do
		[ "${RC_ADDR[$i]:-}" = "$addr" ] && echo "$i" && return 0
	done
	return 1
}

# Prints "t1 t2 t3" (head first) of chain number $1 (0-based index in the map).
rc_chain_targets() {
	rc_admin --json chains | python3 -c '
import json,sys
c=json.load(sys.stdin)["chains"][int(sys.argv[1])]
print(" ".join(str(x["target"]) for x in c["targets"]))' "${1:-0}"
}

# Waits until every target of every chain serves (resyncs done).
rc_wait_serving() {
	local t=${1:-60} i
	for i in $(seq 1 $((t * 5))); do
		if rc_admin --json chains 2>/dev/null | python3 -c '
import json,sys
d=json.load(sys.stdin)
ok=d["chains"] and all(x["state"]=="serving" for c in d["chains"] for x in c["targets"])
sys.exit(0 if ok else 1)'; then
			return 0
		fi
		sleep 0.2
	done
	rc_admin chains >&2
	return 1
}

# ---- start / stop -----------------------------------------------------------------

rc_start() {
	RC_NODES=$1
	RC_TPN=${2:-1}
	RC_REPLICAS=${3:-3}
	RC_DIR=$(mktemp -d "${TMPDIR:-/tmp}/strata-repl.XXXXXX")
	mkdir -p "$RC_DIR/log"
	# the cluster key every daemon and client proves (fs/rpc_auth.h): the
	# suite's ($STRATA_KEY from ctest), else one made for this cluster
	if [ -z "${STRATA_KEY:-}" ]; then
		(umask 077 && head -c 32 /dev/urandom >"$RC_DIR/cluster.key")
		export STRATA_KEY=$RC_DIR/cluster.key
	fi
	trap rc_teardown EXIT
	trap 'exit 130' INT TERM
	if _rc_net_up; then
		local i
		for i in $(seq 1 "$RC_NODES"); do
			_rc_node_net "$i" || rc_fail "cannot set up namespace of node $i"
		done
		rc_log "network: bridge strbr$RC_TAG${RC_BNS:+ in netns $RC_BNS} $RC_SUBNET.0/24, $RC_NODES namespaces, tcp ${RC_NODE_CC-reno}"
	else
		_rc_net_down
		RC_NETNS=0
		rc_log "network: namespaces unavailable, loopback ports"
	fi
	_rc_start_meta
	local i
	for i in $(seq 1 "$RC_NODES"); do rc_start_node "$i"; done
	for i in $(seq 1 "$RC_NODES"); do rc_wait_node "$i"; done
	rc_wait_serving 30 || rc_fail "chains did not form"
	_rc_start_fuse
	rc_log "cluster up: meta $RC_META, $RC_NODES node(s), mount $RC_MNT"
}

rc_dump_logs() {
	local f
	for f in "$RC_DIR"/log/*.log; do
		[ -f "$f" ] || continue
		echo "----- last lines of $f -----" >&2
		tail -n 30 "$f" >&2
	done
}

rc_teardown() {
	local rc=$? p i
	trap - EXIT INT TERM
	[ -n "$RC_DIR" ] && [ -d "$RC_DIR" ] || exit $rc
	[ "$rc" -ne 0 ] && [ "$rc" -ne 77 ] && rc_dump_logs
	declare -F rc_on_teardown >/dev/null && rc_on_teardown
	for i in $(seq 1 "$RC_NODES"); do
		[ -n "${RC_PID[$i]:-}" ] && kill -CONT "${RC_PID[$i]}" 2>/dev/null
	done
	[ -n "$RC_MNT" ] && { umount "$RC_MNT" 2>/dev/null || umount -l "$RC_MNT" 2>/dev/null; }
	for p in "$RC_DIR"/*.pid; do
		[ -f "$p" ] && kill -9 "$(cat "$p")" 2>/dev/null
	done
	wait 2>/dev/null # reap them quietly (no "Killed" lines)
	_rc_net_down
	if [ "${KEEP_HOME:-0}" = 1 ]; then
		echo "KEEP_HOME: kept $RC_DIR" >&2
	elif ! grep -q " $RC_DIR" /proc/self/mounts; then
		rm -rf --one-file-system "$RC_DIR"
	fi
	exit $rc
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
	case "${1:-}" in
	up)
		[ $# -ge 3 ] || { echo "usage: $0 up DIR N [TARGETS] [REPLICAS]" >&2; exit 2; }
		rc_require
		rc_start "$3" "${4:-1}" "${5:-3}"
		trap - EXIT INT TERM
		rm -rf "$2" && ln -s "$RC_DIR" "$2"
		echo "RC_DIR=$RC_DIR"
		echo "STRATA_META=$RC_META"
		echo "STRATA_MOUNT=$RC_MNT"
		;;
	down)
		[ $# -ge 2 ] || { echo "usage: $0 down DIR" >&2; exit 2; }
		RC_DIR=$(readlink -f "$2")
		RC_MNT="$RC_DIR/mnt"
		RC_NODES=0
		rc_teardown
		;;
	*)
		echo "usage: $0 up DIR N [TARGETS] [REPLICAS] | down DIR" >&2
		exit 2
		;;
	esac
fi
