#!/usr/bin/env bash
# bench/meta_cpu.sh [BUILD_DIR] [BASE_BUILD_DIR] — what a metadata operation
# in one directory costs in CPU: strata-meta's and strata-fuse's CPU time
# (utime + stime from /proc, 10 ms ticks) over BENCH_ONEDIR_FILES (20000)
# creates, cold stats and unlinks by 2 processes (fsbench onedir), per
# operation, beside the rate. With BASE_BUILD_DIR the same run is made with
# that build's daemons first (this build's fsbench drives both), so the two
# are compared in one invocation; CPU per operation moves less with the
# machine's load than the rates do.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$src/build-release}" && pwd)
base=${2:-}
files=${BENCH_ONEDIR_FILES:-20000}
fsbench=$build/bin/fsbench
[ -x "$fsbench" ] || { echo "bench/meta_cpu.sh: $fsbench is missing (make release)" >&2; exit 1; }

one_build() { # one_build BUILD LABEL: a cluster of BUILD's daemons, 3 phases
	(
		export STRATA_BIN=$1/bin STRATA_SRC=$src TMPDIR=${BENCH_DIR:-/var/tmp}
		. "$src/tests/lib/cluster.sh"
		cluster_require
		cluster_start >/dev/null 2>&1
		local mp fp d=$MNT/one ph m0 f0 out
		mp=$(cluster_pid meta)
		fp=$(cluster_pid fuse)
		cpu() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
		mkdir -p "$d"
		for ph in create stat unlink; do
			if [ "$ph" != create ]; then
				sync
				echo 3 >/proc/sys/vm/drop_caches
			fi
			m0=$(cpu "$mp")
			f0=$(cpu "$fp")
			out=$("$fsbench" onedir "$d" "$files" 2 "$ph")
			printf '%-6s %-7s %10s ops/s  meta %4d us/op  fuse %4d us/op\n' "$2" "$ph" \
				"$(awk '{ print $2 }' <<<"$out")" \
				$((($(cpu "$mp") - m0) * 10000 / files)) $((($(cpu "$fp") - f0) * 10000 / files))
		done
	)
}

echo "bench/meta_cpu.sh: $files files in one directory, 2 processes, $(date -u '+%Y-%m-%d %H:%M UTC'), load $(cut -d' ' -f1-3 /proc/loadavg)"
[ -n "$base" ] && one_build "$(cd "$base" && pwd)" base
one_build "$build" this
