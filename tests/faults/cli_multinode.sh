#!/usr/bin/env bash
# tests/faults/cli_multinode.sh — `strata up --nodes 3` runs every chunkserver
# as a separate host: its own network namespace and 10.x address on a veth to
# a bridge, strata-meta on the bridge's address. Checks: three nodes with
# distinct addresses, chains of three replicas, data through the mount; a
# chunkserver killed with -9 comes back in its namespace at its address; a
# reboot-like loss of the namespaces and bridge is repaired by `up`; `down`
# leaves no namespace, bridge, veth, mount or process. Then the --no-netns
# path: the same cluster on loopback ports, nothing of the network made.
# Skips (77) where network namespaces cannot be made.
set -euo pipefail
. "${STRATA_SRC:-$(dirname "$0")/../..}/tests/lib/cluster.sh"
cluster_require
command -v ip >/dev/null || cluster_skip "no ip command (iproute2)"
probe="stuprobe$$"
if ! ip netns add "$probe" 2>/dev/null; then
	cluster_skip "cannot create network namespaces here"
fi
ip netns del "$probe"
if ! ip link add "$probe" type bridge 2>/dev/null; then
	cluster_skip "cannot create a bridge here"
fi
ip link del "$probe"

cluster_prepare
# What H/run/net lists (bridge=, netns=, veth=): our network's names.
net_names() { grep -E '^(bridge|netns|veth)=' "$STRATA_HOME/run/net" 2>/dev/null | cut -d= -f2; }
NAMES=""
# `strata down` deletes the network; should it not, delete what it listed
# (names seen while the cluster ran) before the usual teardown.
multinode_teardown() {
	local rc=$? n
	trap - EXIT
	timeout 60 "$STRATA" down --home "$STRATA_HOME" --timeout 10 >/dev/null 2>&1 || true
	for n in $NAMES; do
		ip netns del "$n" 2>/dev/null || true
		ip link del "$n" 2>/dev/null || true
	done
	(exit $rc)
	cluster_teardown
}
trap multinode_teardown EXIT

json() { python3 -c "import json,sys; d=json.load(sys.stdin); $1"; }

# Every chain has three targets on distinct nodes, all serving.
wait_serving() {
	local i
	for i in $(seq 1 150); do
		if "$STRATA" admin --json chains 2>/dev/null | json '
ch = d["chains"]
ok = ch and all(len(c["targets"]) == 3 and len({t["node"] for t in c["targets"]}) == 3
                and all(t["state"] == "serving" for t in c["targets"]) for c in ch)
sys.exit(0 if ok else 1)'; then
			return 0
		fi
		sleep 0.2
	done
	"$STRATA" admin chains >&2
	cluster_fail "chains of 3 serving replicas did not form"
}

# Node i's chunkserver runs in namespace $1 (same network namespace inode).
in_netns() {
	[ "$(stat -Lc %i "/proc/$(cluster_pid "cs$1")/ns/net")" = "$(stat -Lc %i "/run/netns/$2")" ]
}

cluster_log "strata up --nodes 3: chunkservers as hosts"
out=$("$STRATA" up --home "$STRATA_HOME" --nodes 3 --targets 1 2>&1) || {
	echo "$out" >&2
	cluster_fail "strata up --nodes 3 failed"
}
echo "$out" | sed 's/^/  | /' >&2
echo "$out" | grep -q notice && cluster_fail "up fell back to loopback: $out"
cluster_load_env
NAMES=$(net_names)
bridge=$(sed -n 's/^bridge=//p' "$STRATA_HOME/run/net")
[ -n "$bridge" ] || cluster_fail "no bridge recorded in run/net"
case "$STRATA_META" in 10.*) ;; *) cluster_fail "STRATA_META $STRATA_META is not on the bridge" ;; esac

"$STRATA" admin --json nodes | json '
addrs = [n["addr"] for n in d["nodes"]]
hosts = {a.rsplit(":", 1)[0] for a in addrs}
assert len(addrs) == 3 and len(hosts) == 3, addrs
assert all(h.startswith("10.") for h in hosts), addrs
' || cluster_fail "admin nodes: want 3 nodes on distinct 10.x addresses: $("$STRATA" admin nodes)"
wait_serving

"$STRATA" status --json >"$CLUSTER_TMP/st.json" || cluster_fail "strata status: not all running"
json '
assert d["network"]["mode"] == "netns", d["network"]
cs = [x for x in d["daemons"] if x["name"].startswith("cs")]
assert len(cs) == 3 and all(x["netns"] and x["addr"].startswith("10.") for x in cs), cs
assert len({x["netns"] for x in cs}) == 3, cs
' <"$CLUSTER_TMP/st.json" || cluster_fail "status --json: $(cat "$CLUSTER_TMP/st.json")"
for i in 1 2 3; do
	ns=$(json "print([x for x in d['daemons'] if x['name'] == 'cs$i'][0]['netns'])" <"$CLUSTER_TMP/st.json")
	ip netns list | grep -q "^$ns\b" || cluster_fail "namespace $ns of cs$i not in ip netns list"
	in_netns "$i" "$ns" || cluster_fail "cs$i does not run in $ns"
done

# `strata status --json` exits 3 (something down) and network.mode is $1.
status_down_with_net() {
	local rc=0
	"$STRATA" status --json >"$CLUSTER_TMP/st.json" 2>/dev/null || rc=$?
	[ $rc -eq 3 ] || cluster_fail "status exit $rc $2, expected 3"
	json "assert d['network']['mode'] == '$1', d['network']" <"$CLUSTER_TMP/st.json" ||
		cluster_fail "status $2: network $(cat "$CLUSTER_TMP/st.json")"
}

cluster_log "write and read a file through the mount"
head -c 3000000 /dev/urandom >"$CLUSTER_TMP/data"
cp "$CLUSTER_TMP/data" "$MNT/data"
sync "$MNT/data"
cmp "$CLUSTER_TMP/data" "$MNT/data" || cluster_fail "read back differs"

cluster_log "admin usage: the cluster's space and inodes, each node's targets"
"$STRATA" admin --json usage | json '
assert d["total_bytes"] > 0 and 0 < d["used_bytes"] <= d["total_bytes"], d
assert d["avail_bytes"] <= d["total_bytes"] - d["used_bytes"] + 1, d
assert d["used_inodes"] >= 2, d  # the root and data
assert len(d["nodes"]) == 3, d
assert all(n["targets"] == 1 and 0 < n["used_bytes"] <= n["total_bytes"] for n in d["nodes"]), d
' || cluster_fail "admin usage: $("$STRATA" admin usage 2>&1)"
"$STRATA" admin usage | grep -q "^cluster: .* MiB used of" || cluster_fail "admin usage: no summary"

cluster_log "kill -9 cs2: up restarts it in its namespace at its address"
ns2=$(json "print([x for x in d['daemons'] if x['name'] == 'cs2'][0]['netns'])" <"$CLUSTER_TMP/st.json")
addr2=$(cat "$STRATA_HOME/run/cs2.addr")
kill -9 "$(cluster_pid cs2)"
sleep 0.5
set +e
"$STRATA" status >/dev/null 2>&1
rc=$?
set -e
[ $rc -eq 3 ] || cluster_fail "status exit $rc with cs2 dead, expected 3"
out=$("$STRATA" up 2>&1) || cluster_fail "strata up (repair): $out"
echo "$out" | grep -q "restarted 1 daemon" || cluster_fail "repair restarted more than cs2: $out"
in_netns 2 "$ns2" || cluster_fail "cs2 restarted outside $ns2"
[ "$(cat "$STRATA_HOME/run/cs2.addr")" = "$addr2" ] || cluster_fail "cs2 moved: $addr2 -> $(cat "$STRATA_HOME/run/cs2.addr")"
wait_serving
cmp "$CLUSTER_TMP/data" "$MNT/data" || cluster_fail "data differs after the restart of cs2"

cluster_log "reboot-like: daemons killed, namespaces and bridge gone; up remakes them"
for n in sandboxd fuse cs1 cs2 cs3 meta; do kill -9 "$(cluster_pid $n)" 2>/dev/null || true; done
sleep 0.5
umount -l "$MNT"
for n in $NAMES; do
	ip netns del "$n" 2>/dev/null || true
done
ip link del "$bridge"
status_down_with_net missing "with the network gone"
cluster_up
for i in 1 2 3; do
	in_netns "$i" "$(sed -n "s/^netns=\(.*cs$i\)$/\1/p" "$STRATA_HOME/run/net")" ||
		cluster_fail "cs$i not in its namespace after the repair"
done
[ "$(cat "$STRATA_HOME/run/cs2.addr")" = "$addr2" ] || cluster_fail "cs2 moved across the repair"
wait_serving
cmp "$CLUSTER_TMP/data" "$MNT/data" || cluster_fail "data differs after the reboot-like repair"

# None of our namespaces and links exists.
check_no_net() {
	local n
	for n in $NAMES; do
		! ip netns list | grep -q "^$n\b" || cluster_fail "$1: namespace $n left"
		! ip link show "$n" >/dev/null 2>&1 || cluster_fail "$1: link $n left"
	done
}

# Nothing of the cluster left: processes, mounts, namespaces, links.
check_gone() {
	local left
	left=$(ps -eo pid=,args= | grep -E "strata-(meta|chunkserver|fuse|sandboxd) .*$STRATA_HOME" | grep -v grep || true)
	[ -z "$left" ] || cluster_fail "$1: daemons left: $left"
	[ -z "$(_cluster_mounts_under "$MNT")" ] || cluster_fail "$1: mount left"
	check_no_net "$1"
}

cluster_log "strata down removes namespaces, veths, bridge, mount, daemons"
"$STRATA" down
check_gone "after down"
status_down_with_net none "after down"

cluster_log "--no-netns: the same cluster on loopback ports"
cluster_up --no-netns
case "$STRATA_META" in 127.0.0.1:*) ;; *) cluster_fail "--no-netns: meta at $STRATA_META" ;; esac
"$STRATA" admin --json nodes | json '
addrs = [n["addr"] for n in d["nodes"] if n["alive"]]
assert len(addrs) == 3 and all(a.startswith("127.0.0.1:") for a in addrs), addrs
' || cluster_fail "--no-netns: nodes not on loopback: $("$STRATA" admin nodes)"
check_no_net "with --no-netns" # nothing of the network made
wait_serving
cmp "$CLUSTER_TMP/data" "$MNT/data" || cluster_fail "data differs on loopback ports"
"$STRATA" status --json | json 'assert d["network"]["mode"] == "loopback", d' ||
	cluster_fail "--no-netns: status does not say loopback"
"$STRATA" down
check_gone "after the last down"
cluster_log "PASS: strata up --nodes 3 as separate hosts"
