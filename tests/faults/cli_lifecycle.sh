#!/usr/bin/env bash
# tests/faults/cli_lifecycle.sh — the `strata` CLI around daemon failures:
# up is idempotent, status reports dead daemons and a stale mount, up repairs
# (same addresses, data still there), down leaves no process or mount behind,
# and every verb has --help and one-line errors.
set -euo pipefail
. "${STRATA_SRC:-$(dirname "$0")/../..}/tests/lib/cluster.sh"
cluster_require

cluster_log "--help and usage errors"
for v in up down status; do
	"$STRATA" "$v" --help | grep -q "^Usage: strata $v" || cluster_fail "strata $v --help"
done
"$STRATA" --help | grep -q "^Usage: strata" || cluster_fail "strata --help"
for bad in "bogus" "up --nodes 0" "up --frobnicate" "status extra-arg"; do
	# shellcheck disable=SC2086
	if err=$("$STRATA" $bad 2>&1 >/dev/null); then
		cluster_fail "strata $bad succeeded"
	fi
	[ "$(printf '%s\n' "$err" | wc -l)" -eq 1 ] || cluster_fail "strata $bad: expected one line on stderr, got: $err"
done

cluster_start
addrs() { cat "$STRATA_HOME"/run/meta.addr "$STRATA_HOME"/run/cs1.addr; }
a0=$(addrs)
echo "survivor" >"$MNT/survivor"

cluster_log "strata up on a running cluster says so"
out=$("$STRATA" up) # STRATA_HOME is exported: no --home
echo "$out" | grep -q "already up" || cluster_fail "second strata up: $out"
"$STRATA" status >/dev/null || cluster_fail "strata status: not all running"
"$STRATA" status --json | python3 -c '
import json, sys
s = json.load(sys.stdin)
assert s["ok"] is True, s
assert {d["name"] for d in s["daemons"]} == {"meta", "cs1", "fuse", "sandboxd"}, s
assert all(d["state"] == "running" and d["pid"] > 0 for d in s["daemons"]), s
assert s["mount"]["state"] == "mounted", s
' || cluster_fail "strata status --json"

cluster_log "kill -9 strata-fuse: status reports it dead and the mount held by its holder; up takes over"
kill -9 "$(cluster_pid fuse)"
sleep 0.5
set +e
"$STRATA" status >"$CLUSTER_TMP/st" 2>&1
rc=$?
set -e
[ $rc -eq 3 ] || cluster_fail "strata status exit $rc with a dead fuse, expected 3"
grep -q "fuse .*dead" "$CLUSTER_TMP/st" || cluster_fail "status: fuse not dead: $(cat "$CLUSTER_TMP/st")"
grep -q "mount .*: held" "$CLUSTER_TMP/st" || cluster_fail "status: mount not held: $(cat "$CLUSTER_TMP/st")"
grep -q "holder strata-fuse-holder pid .*: waiting" "$CLUSTER_TMP/st" ||
	cluster_fail "status: the holder does not wait for a successor: $(cat "$CLUSTER_TMP/st")"
cluster_up
[ "$(cat "$MNT/survivor")" = survivor ] || cluster_fail "file lost across a fuse restart"

cluster_log "kill -9 every daemon: up brings all back on the same addresses"
for n in sandboxd fuse cs1 meta; do kill -9 "$(cluster_pid $n)"; done
sleep 0.5
cluster_up
[ "$(addrs)" = "$a0" ] || cluster_fail "addresses changed: $a0 -> $(addrs)"
[ "$(cat "$MNT/survivor")" = survivor ] || cluster_fail "file lost across a full restart"

cluster_log "strata down leaves no daemon, pid file or mount"
"$STRATA" down
left=$(ps -eo pid=,args= | grep -E "strata-(meta|chunkserver|fuse|fuse-holder|sandboxd) .*$STRATA_HOME" | grep -v grep || true)
[ -z "$left" ] || cluster_fail "daemons left after down: $left"
[ -z "$(_cluster_mounts_under "$MNT")" ] || cluster_fail "mount left after down"
ls "$STRATA_HOME"/run/*.pid >/dev/null 2>&1 && cluster_fail "pid files left after down"
set +e
"$STRATA" status >"$CLUSTER_TMP/st" 2>&1
rc=$?
set -e
[ $rc -eq 3 ] || cluster_fail "strata status exit $rc after down, expected 3"
out=$("$STRATA" down)
echo "$out" | grep -q "nothing was running" || cluster_fail "second down: $out"

cluster_log "up after down: same addresses, data kept"
cluster_up
[ "$(addrs)" = "$a0" ] || cluster_fail "addresses changed after down/up: $a0 -> $(addrs)"
[ "$(cat "$MNT/survivor")" = survivor ] || cluster_fail "file lost across down/up"
cluster_log "PASS: strata CLI lifecycle"
