#!/usr/bin/env bash
# tests/cluster/up_nodes.sh — `strata up --nodes 3` as a sandbox cluster
# (issue 17): a sandboxd per emulated host (in its node's network namespace,
# serving TCP on the node's address, its lease with strata-meta) and one
# strata-apiserver. Checks: `strata status` shows the three node agents in
# their namespaces and the apiserver, and the sandbox nodes live;
# `strata admin nodes` lists three live nodes at their hosts' addresses;
# the SDK, given only STRATA_HOME, creates container sandboxes from the
# store's busybox image through the apiserver, spread over the nodes, each
# answering exec and routed by its id; they count in the nodes' reports;
# `strata sandbox` create/exec/ls/rm through the apiserver (home, --url);
# node 2's sandboxd killed (-9) is lost and creations go to the others;
# `strata up` brings it back in its namespace; `strata down` leaves none.
# Skips (77) without network namespaces, EROFS or the busybox sample.
set -euo pipefail
. "${STRATA_SRC:-$(dirname "$0")/../..}/tests/lib/cluster.sh"
cluster_require
command -v ip >/dev/null || cluster_skip "no ip command (iproute2)"
probe="stuprobe$$"
ip netns add "$probe" 2>/dev/null || cluster_skip "cannot create network namespaces here"
ip netns del "$probe"
grep -qw erofs /proc/filesystems || modprobe erofs 2>/dev/null || true
grep -qw erofs /proc/filesystems || cluster_skip "the kernel has no EROFS"
[ -x "$STRATA_BIN/strata-apiserver" ] || cluster_skip "strata-apiserver is not built"
SAMPLES="${STRATA_BUILD:-$STRATA_SRC/build}/sample-images"
if [ ! -f "$SAMPLES/busybox/index.json" ]; then
	"$STRATA_SRC/scripts/build-sample-images.sh" "$SAMPLES" busybox >&2 ||
		cluster_skip "cannot build the busybox sample image"
fi
PY=/usr/bin/python3
export PYTHONPATH="$STRATA_SRC/sdk/python"

cluster_prepare
trap cluster_teardown EXIT
cluster_log "strata up --nodes 3"
"$STRATA" up --home "$STRATA_HOME" --nodes 3 >"$CLUSTER_TMP/up.out"
cluster_load_env
json() { $PY -c "import json,sys; d=json.load(sys.stdin); $1"; }

wait_nodes() { # $1: a python condition on n = {node: entry}
	local i
	for i in $(seq 1 100); do
		if "$STRATA" admin --json nodes 2>/dev/null | json "
n = {x['node']: x for x in d['sandbox_nodes']}
sys.exit(0 if ($1) else 1)"; then
			return 0
		fi
		sleep 0.1
	done
	"$STRATA" admin nodes >&2 || true
	cluster_fail "sandbox nodes never matched: $1"
}

wait_nodes "sorted(n) == [1, 2, 3] and all(x['state'] == 'live' for x in n.values())"
"$STRATA" status --json | json '
ds = {x["name"]: x for x in d["daemons"]}
for i, name in enumerate(["sandboxd", "sandboxd2", "sandboxd3"], 1):
    assert ds[name]["state"] == "running", ds[name]
    assert ds[name]["netns"].endswith("-cs%d" % i), ds[name]
assert ds["apiserver"]["state"] == "running", ds["apiserver"]
assert len(d["sandbox_nodes"]) == 3 and d["ok"], d["sandbox_nodes"]
' || cluster_fail "strata status does not show the node agents and the apiserver"
# every node at its own host's address, not loopback
"$STRATA" admin --json nodes | json '
addrs = [x["addr"] for x in d["sandbox_nodes"]]
assert len(set(a.split(":")[0] for a in addrs)) == 3 and not any(a.startswith("127.") for a in addrs), addrs
' || cluster_fail "the nodes do not serve on their hosts' addresses"

cluster_log "importing busybox, creating through the apiserver (SDK with STRATA_HOME only)"
"$STRATA" image import "$SAMPLES/busybox" --name busybox:latest >/dev/null
$PY - <<'PY' || cluster_fail "sandboxes through the apiserver"
import collections, strata
sbs = [strata.Sandbox.create("busybox", "container") for _ in range(6)]
c = collections.Counter(sb.info["node"] for sb in sbs)
assert len(c) >= 2, c
for sb in sbs:
    assert sb.id.startswith("sb-%04x" % sb.info["node"]), sb.id
    assert sb.exec(["echo", "hi"]).stdout == "hi\n"
PY
wait_nodes "sum(x['sandboxes'] for x in n.values()) == 6"
# a node with the store image mounted says so (placement's cache affinity)
wait_nodes "any(i['mounted'] and i['name'] == 'busybox' for x in n.values() for i in x['images'])"
cluster_log "the CLI through the apiserver (the home's, then --url and --token)"
id=$("$STRATA" sandbox create busybox --backend container)
case "$id" in sb-000[123]*) ;; *) cluster_fail "strata sandbox create: '$id'" ;; esac
[ "$("$STRATA" sandbox exec "$id" -- echo hi)" = hi ] || cluster_fail "strata sandbox exec through the apiserver"
api=$(cat "$STRATA_HOME/run/apiserver.addr")
STRATA_HOME=/nonexistent "$STRATA" sandbox --url "http://$api" --token "$(cat "$STRATA_HOME/api.token")" ls |
	grep -q "$id" || cluster_fail "strata sandbox --url ls does not list $id"
"$STRATA" sandbox rm "$id" >/dev/null

cluster_log "node 2's sandboxd killed: lost, creations go elsewhere"
kill -9 "$(cluster_pid sandboxd2)"
wait_nodes "n[2]['state'] == 'lost'"
sleep 0.5
$PY - <<'PY' || cluster_fail "creations while node 2 is lost"
import strata
for _ in range(4):
    sb = strata.Sandbox.create("busybox", "container")
    assert sb.info["node"] in (1, 3), sb.info["node"]
    sb.kill()
PY
cluster_log "strata up brings node 2 back in its namespace"
"$STRATA" up --home "$STRATA_HOME" >/dev/null
wait_nodes "n[2]['state'] == 'live'"
"$STRATA" status --json | json 'ds = {x["name"]: x for x in d["daemons"]}; assert ds["sandboxd2"]["netns"].endswith("-cs2")' ||
	cluster_fail "node 2 did not come back in its namespace"
$PY -c "
import strata
for sb in strata.Sandbox.list():
    sb.kill()
"
cluster_log "strata down"
"$STRATA" down --home "$STRATA_HOME" >/dev/null
for n in sandboxd sandboxd2 sandboxd3 apiserver; do
	p=$(cluster_pid "$n" || true)
	[ -z "$p" ] || ! kill -0 "$p" 2>/dev/null || cluster_fail "$n still runs after down"
done
cluster_log "PASS"
