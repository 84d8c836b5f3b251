#!/usr/bin/env bash
# bench/sandbox/userns.sh — creations/s of the container library with user
# namespaces (sbx_config.userns) beside without, alternated in one run:
# `sandbox_bench lib` (create + exec `true` + delete, README.md), pool 8.
#
# usage: bench/sandbox/userns.sh [BUILD_DIR [ROUNDS [SECS [CONCS...]]]]
#        (default build-release, 3 rounds, 3 s, concurrency 1 and 8; root)
# prints each run's line, then per concurrency the mean ops/s of both and
# userns / without.
set -euo pipefail
[ "$(id -u)" -eq 0 ] || { echo "bench/sandbox/userns.sh: needs root" >&2; exit 77; }
BIN=$(cd "${1:-build-release}/bin" && pwd)
ROUNDS=${2:-3}
SECS=${3:-3}
shift $(($# < 3 ? $# : 3))
CONCS=${*:-"1 8"}
. "$(dirname "$0")/busybox_root.sh"
work=$(mktemp -d /var/tmp/strata-sbuns.XXXXXX)
trap 'rm -rf "$work"' EXIT
busybox_root "$work/root"
declare -A sum
for c in $CONCS; do
  for ((i = 0; i < ROUNDS; i++)); do
    for u in 0 1; do
      line=$(STRATA_BENCH_USERNS=$u "$BIN/sandbox_bench" lib "$work/root" "$BIN/strata-agent" \
        "$c" "$SECS" 8 2>/dev/null | grep -m1 '^RESULT')
      echo "userns=$u c$c $line"
      ops=$(awk '{print $3}' <<<"$line")
      sum[$u.$c]=$(awk -v a="${sum[$u.$c]:-0}" -v b="$ops" 'BEGIN{print a + b}')
    done
  done
done
for c in $CONCS; do
  awk -v a="${sum[0.$c]}" -v b="${sum[1.$c]}" -v c="$c" -v n="$ROUNDS" 'BEGIN {
    printf "c%s  without %.0f/s  userns %.0f/s  userns/without %.2f\n", c, a / n, b / n, b / a }'
done
