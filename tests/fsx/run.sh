#!/usr/bin/env bash
# tests/fsx/run.sh FSX local|strata OPS — runs fsx on a local temp dir or on the
# mount of a fresh cluster. FSX_SEED replays a given seed.
set -euo pipefail
fsx=$1
where=$2
ops=$3
. "${STRATA_SRC:-$(dirname "$0")/../..}/tests/lib/cluster.sh"
seed_args=()
[ -n "${FSX_SEED:-}" ] && seed_args=(-s "$FSX_SEED")

case "$where" in
local)
	dir=$(mktemp -d "${STRATA_BUILD:-/tmp}/fsx-local.XXXXXX")
	trap 'rm -rf "$dir"' EXIT
	"$fsx" -n "$ops" "${seed_args[@]}" "$dir"
	;;
strata)
	cluster_require
	cluster_start
	"$fsx" -n "$ops" "${seed_args[@]}" "$MNT"
	# Then two independent sequences at once (different files, same mount).
	"$fsx" -n $((ops / 4)) -l $((3 * 1024 * 1024)) "$MNT" &
	p1=$!
	"$fsx" -n $((ops / 4)) -l $((5 * 1024 * 1024)) "$MNT" &
	p2=$!
	rc=0
	wait $p1 || rc=1
	wait $p2 || rc=1
	[ $rc -eq 0 ] || cluster_fail "a concurrent fsx run failed"
	;;
*)
	echo "usage: run.sh FSX local|strata OPS" >&2
	exit 2
	;;
esac
