#!/usr/bin/env bash
# tests/posix/run.sh SUITE local|strata — runs the POSIX suite against a local
# directory (on the build tree's filesystem, ext4 here) or against the mount
# of a fresh cluster started with `strata up`.
set -euo pipefail
suite=$1
where=$2
. "${STRATA_SRC:-$(dirname "$0")/../..}/tests/lib/cluster.sh"

case "$where" in
local)
	[ "$(id -u)" -eq 0 ] || cluster_skip "the POSIX suite needs root"
	base=${STRATA_BUILD:-/tmp}
	dir=$(mktemp -d "$base/posix-local.XXXXXX")
	trap 'rm -rf "$dir"' EXIT
	chmod 755 "$dir"
	# uid 65534 must reach the dir: every parent needs o+x.
	p=$dir
	while [ "$p" != / ]; do
		p=$(dirname "$p")
		if [ "$(( $(stat -c %a "$p") % 10 & 1 ))" -eq 0 ]; then
			dir2=$(mktemp -d /tmp/posix-local.XXXXXX)
			rm -rf "$dir"
			dir=$dir2
			chmod 755 "$dir"
			break
		fi
	done
	echo "local filesystem: $(stat -f -c %T "$dir") at $dir"
	"$suite" "$dir"
	;;
strata)
	cluster_require
	cluster_start
	"$suite" "$MNT"
	;;
*)
	echo "usage: run.sh SUITE local|strata" >&2
	exit 2
	;;
esac
