#!/usr/bin/env bash
# bench/chunk_writes.sh [BUILD_DIR] [BASE_BUILD_DIR] — what a chunk write costs
# with this tree's chunk engine (in place, chunkserver/README.md "In-place
# writes") beside a baseline build (main's, copy-on-write) and the local
# disk, measured in the same run by the same helper (bench/fsbench.c):
#
#   append N MiB    a 1 KiB append + fsync to a file whose (64 MiB) chunk
#                   already holds N MiB, median of BENCH_APPENDS (100) appends:
#                   flat in N when a write costs the bytes it writes (fsync is
#                   syncfs of the targets: it also waits for whatever else
#                   the machine has dirty on that filesystem)
#   direct N MiB    the same with O_DIRECT writes and no fsync: each append
#                   is one chunk write, the engine's cost without syncfs
#   seqwrite 64M    BENCH_SIZE (512M) in 1 MiB writes into 64 MiB chunks
#   seqwrite 1M     the same into the default 1 MiB chunks
#
# Each build gets its own single-node cluster (`strata up`, 1 chunkserver x 2
# targets) in a temporary home under BENCH_DIR (/var/tmp); the local
# baseline is a directory on the same disk. BENCH_ROUNDS (1) rounds, builds
# alternating; each figure is the median over the rounds. Columns: strata
# (BUILD_DIR, default build-release), base (BASE_BUILD_DIR; skipped when
# empty), local, and the ratios strata/base and strata/local (for append
# times, lower is better).
#
#   git -C /work/main archive main | tar -x -C /tmp/base/src
#   cmake -S /tmp/base/src -B /tmp/base/build -DCMAKE_BUILD_TYPE=Release && cmake --build /tmp/base/build
#   bench/chunk_writes.sh build-release /tmp/base/build
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
one=""
if [ "${1:-}" = --one ]; then # an inner run: --one BUILD OUT, one cluster
	one=$3
	shift
fi
build=$(cd "${1:-$src/build-release}" && pwd)
base=${2:-}
[ -n "$base" ] && [ -z "$one" ] && base=$(cd "$base" && pwd)
appends=${BENCH_APPENDS:-100}
size=${BENCH_SIZE:-512M}
rounds=${BENCH_ROUNDS:-1}
fills=(0 1 16 63)
# this tree's fsbench for every build (the baseline's may not know append)
fsbench=${FSBENCH:-$build/bin/fsbench}
[ -x "$fsbench" ] || { echo "bench/chunk_writes: $fsbench is missing" >&2; exit 1; }
export FSBENCH=$fsbench
export TMPDIR=${BENCH_DIR:-/var/tmp}

drop_caches() {
	sync
	[ -w /proc/sys/vm/drop_caches ] && echo 3 >/proc/sys/vm/drop_caches || true
}

# The workloads in directory $1 (its c64/ has 64 MiB chunks), lines
# "metric value" on stdout.
workloads() {
	local dir=$1 n line
	for n in "${fills[@]}"; do
		line=$("$fsbench" append "$dir/c64/a$n" "${n}M" "$appends")
		echo "append_$n ${line#append }" | awk '{print $1, $2}'
		line=$("$fsbench" append "$dir/c64/d$n" "${n}M" "$appends" direct)
		echo "direct_$n ${line#append }" | awk '{print $1, $2}'
		rm -f "$dir/c64/a$n" "$dir/c64/d$n"
	done
	drop_caches
	line=$("$fsbench" seqwrite "$dir/c64/big" "$size")
	echo "seq64 $(echo "${line#seqwrite }" | awk '{print $1}')"
	rm -f "$dir/c64/big"
	drop_caches
	line=$("$fsbench" seqwrite "$dir/big" "$size")
	echo "seq1 $(echo "${line#seqwrite }" | awk '{print $1}')"
	rm -f "$dir/big"
}

# One cluster of build $1: its figures into file $2.
one_cluster() {
	export STRATA_BIN=$1/bin STRATA_SRC=$src
	. "$src/tests/lib/cluster.sh"
	cluster_require
	cluster_start
	mkdir -p "$MNT/c64"
	strata_cli admin layout set /c64 --chunk-size 64M >/dev/null
	workloads "$MNT" >"$2"
}

if [ -n "$one" ]; then
	one_cluster "$build" "$one"
	exit 0
fi

out=$(mktemp -d)
trap 'rm -rf "$out" "$TMPDIR/chunk_writes.local.$$"' EXIT
local_dir=$TMPDIR/chunk_writes.local.$$
mkdir -p "$local_dir/c64"
for r in $(seq 1 "$rounds"); do
	echo "round $r: strata ($build)" >&2
	bash "$0" --one "$build" "$out/strata.$r"
	if [ -n "$base" ]; then
		echo "round $r: base ($base)" >&2
		bash "$0" --one "$base" "$out/base.$r"
	fi
	echo "round $r: local ($TMPDIR)" >&2
	workloads "$local_dir" >"$out/local.$r"
done

# median of metric $2 over the rounds of $1
med() {
	cat "$out/$1".* 2>/dev/null | awk -v m="$2" '$1 == m {print $2}' | sort -g |
		awk '{v[NR] = $1} END {if (NR) print v[int((NR + 1) / 2)]; else print "-"}'
}
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 > 0 && a != "-") printf "%.2f", a / b; else print "-" }'; }

echo
echo "bench/chunk_writes: $(basename "$build") vs ${base:-(no base)} vs local $(findmnt -n -o FSTYPE -T "$TMPDIR" 2>/dev/null) in $TMPDIR; $rounds round(s); load $(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-48s %9s %9s %9s %11s %12s\n' metric strata base local strata/base strata/local
for m in "${fills[@]/#/append_}" "${fills[@]/#/direct_}" seq64 seq1; do
	case $m in
	append_*) label="1 KiB append+fsync, chunk at ${m#append_} MiB (us)" ;;
	direct_*) label="1 KiB O_DIRECT append, chunk at ${m#direct_} MiB (us)" ;;
	seq64) label="seq write 1 MiB, 64 MiB chunks (MiB/s)" ;;
	seq1) label="seq write 1 MiB, 1 MiB chunks (MiB/s)" ;;
	esac
	s=$(med strata "$m") b=$(med base "$m") l=$(med local "$m")
	printf '%-48s %9s %9s %9s %11s %12s\n' "$label" "$s" "$b" "$l" "$(ratio "$s" "$b")" "$(ratio "$s" "$l")"
done
