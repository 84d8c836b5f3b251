#!/usr/bin/env bash
# bench/auth-tls.sh [BUILD_DIR] — what authentication and TLS cost, in one
# run: bench/fs and bench/replication.sh, each three times in a row,
#   preauth  the build before authenticated RPC (commit 9f2e9b2^), built in
#            PREAUTH_BUILD (default build-preauth/build: see bench/README.md)
#   auth     BUILD_DIR (default build-release): today's authenticated RPC
#   tls      BUILD_DIR with STRATA_TLS=1 (bench/fs runs `strata up --tls`)
# then prints every figure side by side with auth/preauth (goal >= 0.95)
# and tls/auth. The same scripts (this tree's) drive all three builds.
# Without a preauth build the auth and tls columns are still measured.
#
# Environment (defaults in brackets): BENCH_SIZE [512M], BENCH_FILES
# [10000] (bench/fs), MB [256], THREADS [4], ROUNDS [3] (bench/replication.sh),
# PASSES [1]: the three modes run in turn PASSES times (on a shared machine
# load drifts: turns spread it over the modes) and each figure is the mean.
# Needs root, as both benchmarks do.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$src/build-release}" && pwd)
preauth=${PREAUTH_BUILD:-$src/build-preauth/build}
export BENCH_SIZE=${BENCH_SIZE:-512M} BENCH_FILES=${BENCH_FILES:-10000} ROUNDS=${ROUNDS:-3}
mb=${MB:-256} threads=${THREADS:-4} passes=${PASSES:-1}
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT

modes=()
[ -x "$preauth/bin/strata-meta" ] && modes+=(preauth) ||
	echo "bench/auth-tls: no preauth build in $preauth (PREAUTH_BUILD): its column is skipped" >&2
modes+=(auth tls)

build_of() { [ "$1" = preauth ] && echo "$preauth" || echo "$build"; }
tls_of() { [ "$1" = tls ] && echo 1 || echo 0; }

for p in $(seq 1 "$passes"); do
	for m in "${modes[@]}"; do
		echo "===== pass $p: bench/fs, $m ($(build_of "$m"))" >&2
		STRATA_TLS=$(tls_of "$m") "$src/bench/fs" "$(build_of "$m")" | tee "$out/fs.$m.$p" >&2
	done
	for m in "${modes[@]}"; do
		echo "===== pass $p: bench/replication.sh, $m ($(build_of "$m"))" >&2
		STRATA_TLS=$(tls_of "$m") "$src/bench/replication.sh" "$(build_of "$m")" "$mb" \
			"$threads" | tee "$out/repl.$m.$p" >&2
	done
done

# "name<TAB>value" lines of one mode's results (the fixed-width rows of
# bench/fs and bench/replication.sh: label, then the figure).
figures() {
	awk '/^(seqwrite|seqread|randread|create|stat|readdir|unlink)/ {
		l = substr($0, 1, 22); sub(/ +$/, "", l); split(substr($0, 23), v, " ")
		print "fs " l " (" v[2] ")\t" v[1] }' "$out/fs.$1.$2"
	awk 'substr($0, 1, 2) == "  " { for (i = 3; i <= NF; i++) if ($i == "MB/s" || $i == "ms") {
		l = $1; for (j = 2; j <= i - 2; j++) l = l " " $j
		print "repl " l " (" $i ")\t" $(i - 1); break } }' "$out/repl.$1.$2"
}
# the mean over the passes, in the order of the first
for m in "${modes[@]}"; do
	for p in $(seq 1 "$passes"); do figures "$m" "$p"; done | awk -F'\t' '
		!($1 in n) { order[++k] = $1 } { n[$1]++; s[$1] += $2 }
		END { for (i = 1; i <= k; i++) printf "%s\t%.1f\n", order[i], s[order[i]] / n[order[i]] }' \
		>"$out/fig.$m"
done

ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b + 0 > 0) printf "%.3f", a / b; else print "-" }'; }
echo
echo "bench/auth-tls: $(basename "$build") today (auth, tls) vs 9f2e9b2^ (preauth); load $(cut -d' ' -f1-3 /proc/loadavg)"
echo "  fs: size $BENCH_SIZE, $BENCH_FILES files; replication: $mb MiB, $threads threads, $ROUNDS rounds (medians); mean of $passes pass(es)"
printf '%-58s %10s %10s %10s %11s %9s\n' metric preauth auth tls auth/preauth tls/auth
cut -f1 "$out/fig.auth" | while IFS= read -r name; do
	get() { awk -F'\t' -v n="$name" '$1 == n { print $2 }' "$out/fig.$1" 2>/dev/null; }
	p=$(get preauth) a=$(get auth) t=$(get tls)
	printf '%-58s %10s %10s %10s %11s %9s\n' "$name" "${p:--}" "${a:--}" "${t:--}" \
		"$(ratio "${a:-0}" "${p:-0}")" "$(ratio "${t:-0}" "${a:-0}")"
done
