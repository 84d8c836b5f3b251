#!/usr/bin/env bash
# tests/sandbox/sandboxd/test_image_store.sh — strata-sandboxd on images of the
# cluster's image store, end to end: a single-node cluster
# (tests/lib/cluster.sh), the busybox sample imported as busybox:latest,
# strata-sandboxd started against the cluster's home (--home), then the
# Python checks of test_image_store.py through the SDK (container sandboxes
# from store references, one shared image mount, an upper dir each, the image
# config as defaults, ImageNotFound, the node reference dropped after use,
# re-adoption by a restarted sandboxd, a VM's warm-start snapshot saved on
# the strata mount and restored by a second sandboxd of another state dir,
# a stopped strata-fuse: the daemon
# serves on and store look-ups answer 503 store_unavailable), an image built
# by umoci seen from inside a VM sandbox (test_umoci_tree.py), and a SIGTERM
# of sandboxd while a look-up is stuck in a stopped strata-fuse (it ends
# within a bound).
#
# The trap deletes every sandbox through the API, stops sandboxd, kills any
# agent left (by the pids in the state files), unmounts image mounts and then
# tears the cluster down.
set -euo pipefail
: "${STRATA_SRC:=$(cd "$(dirname "$0")/../.." && pwd)}"
. "$STRATA_SRC/tests/lib/cluster.sh"
. "$STRATA_SRC/tests/imagesvc/lib.sh"

export STRATA_BIN
[ -x "$STRATA_BIN/strata-sandboxd" ] || cluster_skip "strata-sandboxd is not built"
SBD_PID=""
LINGER_S=2
export STRATA_SANDBOXD_IMAGE_LINGER_S=$LINGER_S

# Deletes every sandbox through the API (quietly; sandboxd may be gone).
sandboxd_delete_all() {
	[ -S "$STRATA_HOME/run/sandboxd.sock" ] || return 0
	PYTHONPATH="$STRATA_SRC/sdk/python" timeout 60 $PY -c '
import strata
for sb in strata.Sandbox.list():
    try:
        sb.kill()
    except Exception as e:
        print("cleanup: %s: %s" % (sb.id, e))
' >&2 2>&1 || true
}

sandboxd_stop() {
	[ -n "$SBD_PID" ] || return 0
	kill -TERM "$SBD_PID" 2>/dev/null || true
	for _ in $(seq 100); do kill -0 "$SBD_PID" 2>/dev/null || break; sleep 0.1; done
	kill -KILL "$SBD_PID" 2>/dev/null || true
	wait "$SBD_PID" 2>/dev/null || true
	SBD_PID=""
}

# Agents of sandboxes no sandboxd deleted (state files name their pids).
kill_left_agents() {
	local f pid
	for f in "$STRATA_HOME"/sandboxd/sandboxes/*/state.json; do
		[ -f "$f" ] || continue
		pid=$(grep -o '"agent_pid":[0-9]*' "$f" | cut -d: -f2) || continue
		[ -n "$pid" ] && kill -KILL "$pid" 2>/dev/null || true
	done
}

cleanup() {
	local rc=$?
	set +e
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ] && [ -f "$STRATA_HOME/log/sandboxd-test.log" ]; then
		echo "----- last lines of sandboxd-test.log -----" >&2
		tail -n 40 "$STRATA_HOME/log/sandboxd-test.log" >&2
	fi
	sandboxd_delete_all
	sandboxd_stop
	kill_left_agents
	image_cleanup_mounts
	(exit $rc)
	cluster_teardown
}

# True when `strata up` runs strata-sandboxd itself (status lists it).
cli_runs_sandboxd() {
	local st
	st=$(strata_cli status --json 2>/dev/null) || true
	case "$st" in *'"name":"sandboxd"'*) return 0 ;; esac
	return 1
}

wait_socket() {
	for _ in $(seq 300); do
		$PY -c 'import socket,sys; s=socket.socket(socket.AF_UNIX); s.connect(sys.argv[1])' \
			"$STRATA_HOME/run/sandboxd.sock" 2>/dev/null && return 0
		kill -0 "$SBD_PID" 2>/dev/null || cluster_fail "strata-sandboxd exited at start"
		sleep 0.1
	done
	cluster_fail "strata-sandboxd did not accept on its socket in 30 s"
}

# Starts sandboxd: through `strata up` when the CLI manages it, else here.
sandboxd_start() {
	mkdir -p "$STRATA_HOME/log"
	if cli_runs_sandboxd; then
		strata_cli up >/dev/null
		SBD_PID=$(cluster_pid sandboxd)
	else
		rm -f "$STRATA_HOME/run/sandboxd.sock"
		"$STRATA_BIN/strata-sandboxd" --home "$STRATA_HOME" \
			>>"$STRATA_HOME/log/sandboxd-test.log" 2>&1 &
		SBD_PID=$!
	fi
	wait_socket
}

image_setup
trap cleanup EXIT

cluster_log "importing the busybox sample as busybox:latest"
out=$(strata_cli image import "$BUSYBOX" --name busybox:latest --json)
HEX=$(json_get "$out" digest)
HEX=${HEX#sha256:}
[ ${#HEX} -eq 64 ] || cluster_fail "import printed no digest: $out"

sandboxd_start
cluster_log "strata-sandboxd up (pid $SBD_PID)"

export STRATA_IMAGE_TEST=1 STRATA_IMAGE_HEX="$HEX" STRATA_HOME
export PYTHONPATH="$STRATA_SRC/sdk/python"
$PY -m pytest -q -p no:cacheprovider -rs -k "not readopts" "$STRATA_SRC/tests/sandbox/sandboxd/test_image_store.py" \
	"$STRATA_SRC/tests/sandbox/sandboxd/test_umoci_tree.py"

# Restart: a sandbox on a store image survives a sandboxd restart with its
# node reference (no second mount), and the reference of one that died
# while sandboxd was down is given back (no leak).
cluster_log "restarting strata-sandboxd with a live sandbox and one that dies meanwhile"
sbid=$($PY "$STRATA_SRC/tests/sandbox/sandboxd/test_image_store.py" --create busybox)
gone=$($PY "$STRATA_SRC/tests/sandbox/sandboxd/test_image_store.py" --create busybox)
sandboxd_stop
pid=$(grep -o '"agent_pid":[0-9]*' "$STRATA_HOME/sandboxd/sandboxes/$gone/state.json" | cut -d: -f2)
kill -KILL "$pid"
sandboxd_start
STRATA_SANDBOX_ID=$sbid $PY -m pytest -q -p no:cacheprovider -rs -k "readopts" \
	"$STRATA_SRC/tests/sandbox/sandboxd/test_image_store.py"

# True when process $1 is gone (or a zombie: it ended, nobody reaped it yet).
pid_gone() {
	local st
	st=$(awk '{print $3}' "/proc/$1/stat" 2>/dev/null) || return 0
	[ -z "$st" ] || [ "$st" = Z ]
}

# SIGTERM while a create's look-up waits in a stopped strata-fuse: the stuck
# worker is abandoned, not joined, so sandboxd ends within its 2 s drain
# (a sandboxd that looked up on its loop never even read the signal).
cluster_log "SIGTERM of strata-sandboxd with a look-up stuck in a stopped strata-fuse"
FUSE_PID=$(cat "$STRATA_HOME/run/fuse.pid")
kill -STOP "$FUSE_PID"
$PY -c 'import strata, sys
try:
    strata.Sandbox.create(sys.argv[1], backend="container", timeout=60).kill()
except strata.StrataError as e:
    print(e)' "sha256:$HEX" >/dev/null 2>&1 &
CREATE_PID=$!
sleep 1.5
t0=$(date +%s%N)
kill -TERM "$SBD_PID"
for _ in $(seq 150); do pid_gone "$SBD_PID" && break; sleep 0.1; done
ms=$((($(date +%s%N) - t0) / 1000000))
gone=0
pid_gone "$SBD_PID" && gone=1
kill -CONT "$FUSE_PID"
wait "$CREATE_PID" 2>/dev/null || true
[ "$gone" = 1 ] || cluster_fail "strata-sandboxd still runs 15 s after SIGTERM with a look-up stuck in the store"
cluster_log "strata-sandboxd ended $ms ms after SIGTERM"
[ "$ms" -lt 6000 ] || cluster_fail "strata-sandboxd took $ms ms to end (a stuck look-up must not be waited for)"
grep -q "image store calls are stuck" "$STRATA_HOME"/log/sandboxd*.log ||
	cluster_fail "sandboxd did not say that a store call was stuck"
wait "$SBD_PID" 2>/dev/null || true
SBD_PID=""
sandboxd_start
sbid=$($PY "$STRATA_SRC/tests/sandbox/sandboxd/test_image_store.py" --create busybox)
$PY -c 'import strata, sys; strata.Sandbox.connect(sys.argv[1]).kill()' "$sbid"

if cli_runs_sandboxd; then
	cluster_log "strata down with a live sandbox and image mounts: nothing left"
	sbid=$($PY "$STRATA_SRC/tests/sandbox/sandboxd/test_image_store.py" --create busybox)
	pid=$(grep -o '"agent_pid":[0-9]*' "$STRATA_HOME/sandboxd/sandboxes/$sbid/state.json" | cut -d: -f2)
	mkdir -p "$IMG_WORK/ro" "$IMG_WORK/rw"
	strata_cli image mount busybox "$IMG_WORK/ro" --record-after 0 >/dev/null
	strata_cli image mount busybox "$IMG_WORK/rw" --writable --record-after 0 >/dev/null
	strata_cli down >/dev/null
	SBD_PID=""
	left=$(_cluster_mounts_under "$CLUSTER_TMP")
	[ -z "$left" ] || cluster_fail "mounts left after strata down: $left"
	for _ in $(seq 50); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	kill -0 "$pid" 2>/dev/null && cluster_fail "the sandbox's agent (pid $pid) outlived strata down"
	ls "$STRATA_HOME"/mnt/.strata 2>/dev/null && cluster_fail "the cluster's mount is still there"
	strata_cli up >/dev/null
	cluster_load_env
	leases=$(ls "$MNT/.strata/images/leases")
	[ -z "$leases" ] || cluster_fail "leases left after strata down: $leases"
fi
cluster_log "OK"
