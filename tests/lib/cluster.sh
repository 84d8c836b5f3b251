# tests/lib/cluster.sh — shell helpers for integration tests that run a real
# single-node cluster. Source it from a bash test script:
#
#   . "$STRATA_SRC/tests/lib/cluster.sh"
#   cluster_require            # exit 77 (skip) with a reason if we cannot run
#   cluster_start [ARGS...]    # `strata up` in a fresh temp home (ARGS go to up)
#   ... use $MNT, $STRATA_HOME, $STRATA_META, $CLUSTER_TMP, strata_cli ...
#
# A trap installed by cluster_start always tears down: `strata down`, a lazy
# unmount of anything still mounted under the temp dir, SIGKILL for any
# leftover process whose command line names the temp home, then removal of
# the temp dir. On failure the tail of every daemon log is printed first.
# KEEP_HOME=1 keeps the temp dir for a post-mortem.
#
# Exposes: STRATA_HOME (exported, so `strata` finds the cluster), MNT (the
# mount), STRATA_META (meta's host:port), STRATA_KEY (exported: the home's
# cluster key, for daemons a test starts by hand), STRATA_TLS (exported, if
# the home was made with --tls), CLUSTER_TMP (the temp dir holding
# the home), STRATA (path of the strata binary).

set -u

: "${STRATA_SRC:=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}"
: "${STRATA_BIN:=$STRATA_SRC/build/bin}"
STRATA="$STRATA_BIN/strata"
CLUSTER_TMP=""
MNT=""

cluster_log() { echo "[$(date -u +%H:%M:%S)] $*" >&2; }

cluster_skip() {
	echo "SKIP: $*" >&2
	exit 77
}

cluster_fail() {
	echo "FAIL: $*" >&2
	exit 1
}

# Skips unless FUSE, root and every binary are available.
cluster_require() {
	[ -c /dev/fuse ] || cluster_skip "/dev/fuse is missing (no FUSE in this environment)"
	[ "$(id -u)" -eq 0 ] || cluster_skip "integration tests need root (mounts, chown)"
	local b
	for b in strata strata-meta strata-chunkserver strata-fuse; do
		[ -x "$STRATA_BIN/$b" ] || cluster_skip "$STRATA_BIN/$b is not built"
	done
}

strata_cli() { "$STRATA" "$@"; }

# Mount points under dir, deepest first.
_cluster_mounts_under() {
	awk -v d="$1" '{ mp=$5; gsub(/\\040/, " ", mp); if (mp == d || index(mp, d "/") == 1) print mp }' \
		/proc/self/mountinfo | sort -r
}

# Pids of processes whose command line mentions dir (our daemons only: the
# dir is a fresh mktemp name).
_cluster_pids_of() {
	local p cmd
	for p in /proc/[0-9]*; do
		[ "${p#/proc/}" = "$$" ] && continue
		cmd=$({ tr '\0' ' ' <"$p/cmdline"; } 2>/dev/null) || continue
		case "$cmd" in
		*"$1"*) echo "${p#/proc/}" ;;
		esac
	done
}

cluster_dump_logs() {
	local f
	[ -n "$CLUSTER_TMP" ] || return 0
	for f in "$STRATA_HOME"/log/*.log; do
		[ -f "$f" ] || continue
		echo "----- last lines of $f -----" >&2
		tail -n 40 "$f" >&2
	done
}

# Stops and removes everything of the cluster in $CLUSTER_TMP: `strata down`,
# lazy unmount of whatever is mounted below, SIGKILL for processes naming the
# dir, then the dir itself (unless KEEP_HOME=1).
_cluster_cleanup() {
	local m p
	timeout 60 "$STRATA" down --home "$STRATA_HOME" --timeout 10 >/dev/null 2>&1 || true
	for m in $(_cluster_mounts_under "$CLUSTER_TMP"); do
		umount -l "$m" 2>/dev/null || true
	done
	for p in $(_cluster_pids_of "$CLUSTER_TMP"); do
		kill -9 "$p" 2>/dev/null || true
	done
	if [ "${KEEP_HOME:-0}" = 1 ]; then
		echo "KEEP_HOME: cluster home kept at $STRATA_HOME" >&2
	elif [ -z "$(_cluster_mounts_under "$CLUSTER_TMP")" ]; then
		rm -rf --one-file-system "$CLUSTER_TMP"
	else
		echo "warning: mounts remain under $CLUSTER_TMP, not removing it" >&2
	fi
}

cluster_teardown() {
	local rc=$?
	trap - EXIT INT TERM
	[ -n "$CLUSTER_TMP" ] || exit $rc
	if [ "$rc" -ne 0 ] && [ "$rc" -ne 77 ]; then
		cluster_dump_logs
	fi
	_cluster_cleanup
	exit $rc
}

# A detached guard that cleans up if the test shell dies without running its
# EXIT trap (SIGKILL, e.g. a ctest timeout): the daemons run in their own
# sessions and would otherwise outlive it, mounted. The normal teardown kills
# the guard (its command line names the temp dir).
_cluster_start_guard() {
	[ "${KEEP_HOME:-0}" = 1 ] && return 0
	setsid bash -c '
		. "$1"
		parent=$2 CLUSTER_TMP=$3 STRATA_HOME=$4 STRATA=$5
		while kill -0 "$parent" 2>/dev/null; do sleep 1; done
		[ -d "$CLUSTER_TMP" ] && _cluster_cleanup
	' strata-test-guard "${BASH_SOURCE[0]}" "$$" "$CLUSTER_TMP" "$STRATA_HOME" "$STRATA" \
		</dev/null >/dev/null 2>&1 &
}

# Creates the temp dir and the trap; does not start anything.
cluster_prepare() {
	CLUSTER_TMP=$(mktemp -d "${TMPDIR:-/tmp}/strata-test.XXXXXX")
	chmod 755 "$CLUSTER_TMP" # the POSIX suite drops to uid 65534 inside the mount
	export STRATA_HOME="$CLUSTER_TMP/home"
	MNT="$STRATA_HOME/mnt"
	trap cluster_teardown EXIT
	trap 'exit 130' INT TERM
	_cluster_start_guard
}

# Reads cluster.env into STRATA_META / MNT.
cluster_load_env() {
	local line
	while IFS= read -r line; do
		case "$line" in
		STRATA_META=*) STRATA_META=${line#STRATA_META=} ;;
		STRATA_MOUNT=*) MNT=${line#STRATA_MOUNT=} ;;
		STRATA_KEY=*) STRATA_KEY=${line#STRATA_KEY=} ;;
		STRATA_TLS=*) export STRATA_TLS=${line#STRATA_TLS=} ;;
		esac
	done <"$STRATA_HOME/cluster.env"
	# daemons a test starts by hand prove the home's key (fs/rpc_auth.h),
	# and speak TLS if the home does (fs/rpc_tls.h)
	export STRATA_META STRATA_KEY
}

# `strata up` (again) on the test's home; ARGS go to strata up.
cluster_up() {
	local out
	if ! out=$("$STRATA" up --home "$STRATA_HOME" --timeout "${CLUSTER_UP_TIMEOUT:-60}" "$@" 2>&1); then
		echo "$out" >&2
		cluster_fail "strata up failed"
	fi
	echo "$out" | sed 's/^/  | /' >&2
	cluster_load_env
	chmod 755 "$STRATA_HOME"
}

cluster_start() {
	[ -n "$CLUSTER_TMP" ] || cluster_prepare
	mkdir -p "$STRATA_HOME"
	chmod 755 "$STRATA_HOME"
	cluster_log "starting a cluster in $STRATA_HOME"
	cluster_up "$@"
	cluster_log "cluster up: meta $STRATA_META, mount $MNT"
}

# Waits until the mount answers (after a restart); fails after $1 seconds.
cluster_wait_mount() {
	local t=${1:-30} i
	for ((i = 0; i < t * 10; i++)); do
		if timeout 5 stat -f -c %T "$MNT" 2>/dev/null | grep -q fuse && timeout 5 ls "$MNT" >/dev/null 2>&1; then
			return 0
		fi
		sleep 0.1
	done
	cluster_fail "the mount $MNT does not answer after $t s"
}

# Pid of daemon NAME (meta, cs1, fuse) from its pid file.
cluster_pid() { cat "$STRATA_HOME/run/$1.pid" 2>/dev/null; }
