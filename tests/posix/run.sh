#!/usr/bin/env bash
# tests/posix/run.sh SUITE local|strata — runs the POSIX suite against a local
# directory (on the build tree's filesystem, ext4 here) or against the mount
# of a fresh cluster started with `strata up`.
set -euo pipefail
suite=$1
where=$2
. "${STRATA_SRC:-$(dirname "$0")/../..}/tests/lib/cluster.sh"

# The suite on a plain local directory (proves the suite expects what Linux
# does). uid 65534 must reach the dir: every parent needs o+x.
run_local() {
	local base=${STRATA_BUILD:-/tmp} dir p
	dir=$(mktemp -d "$base/posix-local.XXXXXX")
	p=$dir
	while [ "$p" != / ]; do
		p=$(dirname "$p")
		if [ $(($(stat -c %a "$p") % 10 & 1)) -eq 0 ]; then
			rm -rf "$dir"
			dir=$(mktemp -d /tmp/posix-local.XXXXXX)
			break
		fi
	done
	chmod 755 "$dir"
	echo "local filesystem: $(findmnt -n -o FSTYPE -T "$dir" 2>/dev/null) at $dir"
	local rc=0
	"$suite" "$dir" || rc=$?
	rm -rf "$dir"
	return $rc
}

case "$where" in
local)
	[ "$(id -u)" -eq 0 ] || cluster_skip "the POSIX suite needs root"
	run_local
	;;
strata)
	cluster_require
	# Same binary, same run: first the local baseline, then the mount.
	run_local || cluster_fail "the suite fails on the local filesystem: the suite is wrong"
	cluster_start
	"$suite" "$MNT"
	;;
*)
	echo "usage: run.sh SUITE local|strata" >&2
	exit 2
	;;
esac
