#!/usr/bin/env bash
# bench/sandbox/fncall_ab.sh — fncall Python calls of two builds side by side,
# with the floors of a fresh process per call measured in the same run: each
# build's strata-sandboxd runs as its own daemon (state on /dev/shm, image
# "py": a busybox root with the host's python3, as run.sh makes it), and
# `sandbox_bench fncall SOCK py python C SECS` alternates between the two,
# the order swapped every round; between them, on the host, `sandbox_bench
# spawn` of `python3 -I -c 'x = 1'` (a new interpreter per call) and
# pyfork.py (a warm python3 forking a child that exits at once: the least a
# fresh process per call costs on this machine).
#
# usage: bench/sandbox/fncall_ab.sh OLD_BIN_DIR NEW_BIN_DIR [ROUNDS [SECS [CONCS...]]]
#        (BIN_DIRs hold strata-sandboxd and strata-agent; OLD's sandbox_bench
#        drives both; defaults 2 rounds, 3 s, concurrency 1 and 4; root)
# prints per run: NAME cCONC calls/s p50 p99 ms, then per round the ratios
set -euo pipefail

NAME=bench/sandbox/fncall_ab.sh DEF_CONCS="1 4"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
. "$SRC/bench/sandbox/ab_daemons.sh"

. "$SRC/bench/sandbox/busybox_root.sh"
. "$SRC/bench/sandbox/python_root.sh"
python_root "$work/pyroot"
ab_start --image "py=$work/pyroot"
for v in OLD NEW; do # the pools' first interpreters
  "$BENCH" fncall "$work/$v.sock" py python 1 1 >/dev/null 2>&1 || true
done

get() { echo "$1" | awk '$1 == "RESULT" { print $3; exit }'; }
row() { echo "$2" | awk -v n="$1" '$1 == "RESULT" { printf "%-7s %9.1f/s p50 %8.3f p99 %8.3f ms (%d, %d errors)\n", n, $3, $4, $5, $6, $7 }'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }'; }
echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), ${SECS}s per line"
for i in $(seq "$ROUNDS"); do
  for c in $CONCS; do
    order="OLD NEW"
    [ $((i % 2)) -eq 0 ] && order="NEW OLD"
    declare -A res=()
    for v in $order; do
      res[$v]=$("$BENCH" fncall "$work/$v.sock" py python "$c" "$SECS" 2>/dev/null | grep RESULT || true)
    done
    res[SPAWN]=$("$BENCH" spawn "$c" "$SECS" /usr/bin/python3 -I -c 'x = 1' 2>/dev/null | grep RESULT || true)
    res[FORK]=$(/usr/bin/python3 -I "$SRC/bench/sandbox/pyfork.py" "$c" "$SECS")
    echo "-- round $i, concurrency $c, load $(cut -d' ' -f1 /proc/loadavg)"
    row OLD "${res[OLD]}"
    row NEW "${res[NEW]}"
    row spawn "${res[SPAWN]}"
    row fork "${res[FORK]}"
    n=$(get "${res[NEW]}")
    echo "NEW/OLD $(ratio "$n" "$(get "${res[OLD]}")")  NEW/spawn $(ratio "$n" "$(get "${res[SPAWN]}")")  NEW/fork $(ratio "$n" "$(get "${res[FORK]}")")"
  done
done
