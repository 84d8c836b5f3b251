#!/usr/bin/env bash
# bench/sandbox/ab_api.sh — A/B of two builds through strata-sandboxd's API:
# each build's strata-sandboxd (with the strata-agent beside it) runs as its
# own daemon (state on /dev/shm, image "bb" a busybox rootfs), and
# `sandbox_bench api SOCK bb C SECS` (create + exec `true` + delete)
# alternates between the two, the order swapped every round (the machine is
# shared and its load moves). CPU per creation from /proc: the daemon's
# utime + stime + cutime + cstime (its threads, and the agents and commands
# it reaped), its threads alone, and its loop (main) thread.
#
# usage: bench/sandbox/ab_api.sh OLD_BIN_DIR NEW_BIN_DIR [ROUNDS [SECS [CONCS...]]]
#        (BIN_DIRs hold strata-sandboxd and strata-agent; OLD's sandbox_bench
#        drives both; defaults 2 rounds, 3 s, concurrency 1 and 8; root)
# prints per run: OLD|NEW cCONC RESULT api_cN ops/s p50 p99 ops errors
#                 cpu/op MS threads/op US loop/op US load L
set -euo pipefail

NAME=bench/sandbox/ab_api.sh DEF_CONCS="1 8"
. "$(dirname "$0")/ab_daemons.sh"

. "$(dirname "$0")/busybox_root.sh"
r=$work/rootfs
busybox_root "$r"
ab_start --image "bb=$r"

tck=$(getconf CLK_TCK)
cpu() { awk '{ print $14 + $15 + $16 + $17 }' "/proc/$1/stat"; }
own() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
loop() { awk '{ print $14 + $15 }' "/proc/$1/task/$1/stat"; }
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$ROUNDS"); do
  for c in $CONCS; do
    order="OLD NEW"
    [ $((i % 2)) -eq 0 ] && order="NEW OLD"
    for v in $order; do
      p=${pid[$v]}
      a0=$(cpu "$p") o0=$(own "$p") l0=$(loop "$p")
      out=$("$BENCH" api "$work/$v.sock" bb "$c" "$SECS" 2>&1 | grep RESULT || true)
      a1=$(cpu "$p") o1=$(own "$p") l1=$(loop "$p")
      ops=$(echo "$out" | awk '{ print $6 }')
      awk -v v="$v" -v c="$c" -v out="$out" -v a="$((a1 - a0))" -v o="$((o1 - o0))" \
        -v l="$((l1 - l0))" -v n="${ops:-0}" -v t="$tck" -v ld="$(cut -d' ' -f1 /proc/loadavg)" \
        'BEGIN { printf "%s c%s %s  cpu/op %.3f ms  threads/op %.0f us  loop/op %.0f us  load %s\n",
                 v, c, out, n ? a * 1000 / t / n : 0, n ? o * 1e6 / t / n : 0,
                 n ? l * 1e6 / t / n : 0, ld }'
    done
  done
done
