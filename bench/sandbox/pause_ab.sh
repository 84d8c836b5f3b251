#!/usr/bin/env bash
# bench/sandbox/pause_ab.sh — pause + resume latency of two builds'
# strata-sandboxd (container backend): each build's daemon runs (state on
# /dev/shm, image "bb" a busybox rootfs) and `sandbox_bench pause SOCK bb C
# SECS` (CONC live sandboxes, a `sleep` in each; POST pause then POST resume,
# the latency of the pair) alternates between the two, the order swapped
# every round (the machine is shared and its load moves). The last lines
# give NEW/OLD of the pairs' p50 and p99, per concurrency, over the rounds.
#
# usage: bench/sandbox/pause_ab.sh OLD_BIN_DIR NEW_BIN_DIR [ROUNDS [SECS [CONCS...]]]
#        (BIN_DIRs hold strata-sandboxd and strata-agent; NEW's sandbox_bench,
#        which has the pause mode, drives both; defaults 3 rounds, 3 s,
#        concurrency 1 and 8; root)
# prints per run: OLD|NEW cCONC RESULT pause_cN pairs/s p50 p99 pairs errors  load L
set -euo pipefail

NAME=bench/sandbox/pause_ab.sh DEF_CONCS="1 8"
if [ $# -ge 2 ]; then
  BENCH=${BENCH:-$(cd "$2" && pwd)/sandbox_bench}
  [ $# -ge 3 ] || set -- "$1" "$2" 3
fi
. "$(dirname "$0")/ab_daemons.sh"

. "$(dirname "$0")/busybox_root.sh"
r=$work/rootfs
busybox_root "$r"
ab_start --image "bb=$r"

out=$work/results
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$ROUNDS"); do
  for c in $CONCS; do
    order="OLD NEW"
    [ $((i % 2)) -eq 0 ] && order="NEW OLD"
    for v in $order; do
      res=$("$BENCH" pause "$work/$v.sock" bb "$c" "$SECS" 2>&1 | grep RESULT || true)
      line="$v c$c ${res:-failed}  load $(cut -d' ' -f1 /proc/loadavg)"
      echo "$line"
      echo "$line" >>"$out"
    done
  done
done
# NEW/OLD per concurrency: the medians over the rounds of p50 and p99
for c in $CONCS; do
  awk -v c="c$c" '
    function median(a, n,   i, j, t) {
      for (i = 2; i <= n; i++) for (j = i; j > 1 && a[j - 1] > a[j]; j--) { t = a[j]; a[j] = a[j - 1]; a[j - 1] = t }
      return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
    }
    $2 == c && $3 == "RESULT" { n[$1]++; p50[$1, n[$1]] = $6; p99[$1, n[$1]] = $7 }
    END {
      if (!n["OLD"] || !n["NEW"]) { print c ": no result"; exit }
      for (v in n) { for (i = 1; i <= n[v]; i++) { a[i] = p50[v, i]; b[i] = p99[v, i] } m50[v] = median(a, n[v]); m99[v] = median(b, n[v]) }
      printf "%s pause+resume p50 OLD %.3f ms NEW %.3f ms NEW/OLD %.2f   p99 OLD %.3f NEW %.3f NEW/OLD %.2f\n",
        c, m50["OLD"], m50["NEW"], m50["NEW"] / m50["OLD"], m99["OLD"], m99["NEW"], m99["NEW"] / m99["OLD"]
    }' "$out"
done
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
