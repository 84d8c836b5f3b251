#!/usr/bin/env bash
# bench/opid-ab.sh [BUILD_DIR] [BASE_BUILD_DIR] — what operation ids cost
# (meta/ns_opid.c, fuse/opid.c): the metadata rates of bench/fs (create,
# stat, readdir, unlink through the mount, `BENCH_THREADS` threads) of this
# build and of a build without them, in one invocation: the two alternate
# for PASSES passes (each a fresh `strata up`), and every figure is printed
# per pass, as the mean of the passes, and as the ratio ids/base.
#
# Environment: PASSES [3], BENCH_FILES [20000], BENCH_THREADS [2],
# BENCH_DIR [/var/tmp]. The base build, release, outside the source tree
# (the commit before operation ids):
#   mkdir -p build-base/src && git archive <commit> | tar -x -C build-base/src
#   cmake -S build-base/src -B build-base/src/build-release -DCMAKE_BUILD_TYPE=Release
#   cmake --build build-base/src/build-release -j2
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
new=$(cd "${1:-$src/build-release}" && pwd)
base=$(cd "${2:-$src/build-base/src/build-release}" && pwd)
passes=${PASSES:-3}
export BENCH_FILES=${BENCH_FILES:-20000} BENCH_ONLY=meta
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
metrics="create stat readdir unlink"

for p in $(seq 1 "$passes"); do
	for m in base ids; do
		b=$base
		[ "$m" = ids ] && b=$new
		echo "===== pass $p: bench/fs meta, $m ($b)" >&2
		"$src/bench/fs" "$b" | tee "$out/$m.$p" >&2
	done
done

# The strata column of bench/fs's table, by metric.
fig() { awk -v m="$3" '$1 == m { print $2 }' "$out/$1.$2"; }
mean() { awk '{ s += $1; n++ } END { if (n) printf "%.0f", s / n; else print "-" }'; }

echo
echo "bench/opid-ab: $(basename "$new") (operation ids) vs base $base; load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  $BENCH_FILES files, ${BENCH_THREADS:-2} threads, $passes pass(es), alternating base/ids"
printf '%-10s %-8s' metric build
for p in $(seq 1 "$passes"); do printf ' %10s' "pass$p"; done
printf ' %10s %8s\n' mean ids/base
for x in $metrics; do
	for m in base ids; do
		printf '%-10s %-8s' "$x" "$m"
		for p in $(seq 1 "$passes"); do printf ' %10s' "$(fig "$m" "$p" "$x")"; done
		v=$(for p in $(seq 1 "$passes"); do fig "$m" "$p" "$x"; done | mean)
		eval "mean_$m=$v"
		if [ "$m" = ids ]; then
			# shellcheck disable=SC2154 # set by the eval above
			printf ' %10s %8s\n' "$v" "$(awk -v a="$mean_ids" -v b="$mean_base" 'BEGIN { if (b > 0) printf "%.3f", a / b; else print "-" }')"
		else
			printf ' %10s\n' "$v"
		fi
	done
done
