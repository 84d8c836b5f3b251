#!/usr/bin/env bash
# bench/sandbox/ab_store.sh — A/B of two builds' strata-sandboxd creating
# sandboxes from an image of the cluster's image store, the path whose look-ups
# (the name, the config, the node reference and its lock) run on a worker
# thread since the store calls left the loop (sandbox/sandboxd/store_call.h).
#
# A single-node cluster (tests/lib/cluster.sh, NEW's binaries) with the busybox
# sample imported as busybox:latest; each build's strata-sandboxd runs against
# its home (its own socket and state dir, one node cache and one image mount
# for both), with the same busybox rootfs also registered as a directory "bb"
# (no store at all: the baseline of the hop). `sandbox_bench api SOCK IMAGE C
# SECS` (create + exec `true` + delete; p50/p99 of the create step alone)
# alternates between the builds, the order swapped every round (the machine is
# shared and its load moves). CPU per creation from /proc, as ab_api.sh: the
# daemon's threads (utime + stime) and its loop (main) thread alone. The
# summary gives the median p50 per build, image and concurrency and NEW/OLD.
#
# usage: bench/sandbox/ab_store.sh OLD_BIN_DIR NEW_BIN_DIR [ROUNDS [SECS [CONCS...]]]
#        (BIN_DIRs hold strata-sandboxd and strata-agent; OLD's sandbox_bench
#        drives both; NEW's strata, strata-meta, ... run the cluster; defaults
#        3 rounds, 3 s, concurrency 1 and 8; root, FUSE, EROFS)
# prints per run: OLD|NEW IMAGE cCONC RESULT api_cN ops/s p50 p99 ops errors
#                 threads/op US loop/op US load L
set -euo pipefail

[ $# -ge 2 ] || { sed -n '2,21p' "$0" >&2; exit 2; }
OLD=$(cd "$1" && pwd)
NEW=$(cd "$2" && pwd)
ROUNDS=${3:-3}
SECS=${4:-3}
shift $(($# < 4 ? $# : 4))
CONCS=${*:-"1 8"}
BENCH=${BENCH:-$OLD/sandbox_bench}
for d in "$OLD" "$NEW"; do
  for f in strata-sandboxd strata-agent; do
    [ -x "$d/$f" ] || { echo "ab_store.sh: $d/$f missing" >&2; exit 1; }
  done
done
[ -x "$BENCH" ] || { echo "ab_store.sh: $BENCH missing" >&2; exit 1; }

export STRATA_SRC=${STRATA_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
export STRATA_BIN=$NEW
export STRATA_BUILD=${STRATA_BUILD:-$(dirname "$NEW")}
. "$STRATA_SRC/tests/lib/cluster.sh"
. "$STRATA_SRC/tests/imagesvc/lib.sh"
. "$(dirname "$0")/busybox_root.sh"

declare -A pid
state=""
stop_daemons() {
  for v in OLD NEW; do
    if [ -n "${pid[$v]:-}" ] && kill -0 "${pid[$v]}" 2>/dev/null; then
      "$BENCH" purge "$IMG_WORK/$v.sock" >/dev/null 2>&1 || true
      kill -TERM "${pid[$v]}" 2>/dev/null || true
      wait "${pid[$v]}" 2>/dev/null || true
    fi
  done
  [ -z "$state" ] || rm -rf "$state"
}

image_setup # a cluster, its trap (mounts, then the cluster)
trap 'rc=$?; set +e; stop_daemons; image_cleanup_mounts; (exit $rc); cluster_teardown' EXIT
strata_cli image import "$BUSYBOX" --name busybox:latest >/dev/null
# `strata up` may run a sandboxd of its own on the home: not in the way.
p=$(cluster_pid sandboxd || true)
[ -z "$p" ] || kill -TERM "$p" 2>/dev/null || true

busybox_root "$IMG_WORK/rootfs"
state=$(mktemp -d /dev/shm/strata-sbst.XXXXXX)
for v in OLD NEW; do
  d=${!v}
  mkdir -p "$state/$v"
  "$d/strata-sandboxd" --home "$STRATA_HOME" --socket "$IMG_WORK/$v.sock" \
    --state-dir "$state/$v" --image "bb=$IMG_WORK/rootfs" --log-level warn \
    >"$IMG_WORK/$v.log" 2>&1 &
  pid[$v]=$!
  for _ in $(seq 200); do [ -S "$IMG_WORK/$v.sock" ] && break; sleep 0.05; done
  [ -S "$IMG_WORK/$v.sock" ] || { cat "$IMG_WORK/$v.log" >&2; exit 1; }
  # The first create mounts the image (once for both: one node cache).
  "$BENCH" api "$IMG_WORK/$v.sock" busybox:latest 1 0.5 >/dev/null 2>&1 || true
done

tck=$(getconf CLK_TCK)
own() { awk '{ print $14 + $15 }' "/proc/$1/stat"; }
loop() { awk '{ print $14 + $15 }' "/proc/$1/task/$1/stat"; }
out=$IMG_WORK/results
: >"$out"
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$ROUNDS"); do
  for c in $CONCS; do
    for img in busybox:latest bb; do
      order="OLD NEW"
      [ $((i % 2)) -eq 0 ] && order="NEW OLD"
      for v in $order; do
        p=${pid[$v]}
        o0=$(own "$p") l0=$(loop "$p")
        r=$("$BENCH" api "$IMG_WORK/$v.sock" "$img" "$c" "$SECS" 2>&1 | grep RESULT || true)
        o1=$(own "$p") l1=$(loop "$p")
        awk -v h="$v $img c$c ${r:-failed}" -v n="$(echo "$r" | awk '{ print $5 }')" \
          -v o="$((o1 - o0))" -v l="$((l1 - l0))" -v t="$tck" -v ld="$(cut -d' ' -f1 /proc/loadavg)" \
          'BEGIN { printf "%s  threads/op %.0f us  loop/op %.0f us  load %s\n", h,
                   n ? o * 1e6 / t / n : 0, n ? l * 1e6 / t / n : 0, ld }' | tee -a "$out"
      done
    done
  done
done
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
# Medians of the p50s (column 7) and of creations/s (column 6), NEW/OLD.
echo "summary: median over $ROUNDS rounds (create p50 ms, creations/s), NEW/OLD"
for c in $CONCS; do
  for img in busybox:latest bb; do
    med() {
      grep "^$1 $img c$c RESULT" "$out" | awk -v k="$2" '{ print $k }' | sort -g |
        awk '{ v[NR] = $1 } END { if (NR) print (NR % 2 ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2); else print 0 }'
    }
    op=$(med OLD 7) np=$(med NEW 7) oo=$(med OLD 6) no=$(med NEW 6)
    ot=$(med OLD 12) nt=$(med NEW 12) ol=$(med OLD 15) nl=$(med NEW 15)
    awk -v img="$img" -v c="$c" -v op="$op" -v np="$np" -v oo="$oo" -v no="$no" \
      -v ot="$ot" -v nt="$nt" -v ol="$ol" -v nl="$nl" \
      'BEGIN { printf "%-15s c%-3s p50 OLD %.3f NEW %.3f ms (%.2fx)  creations/s OLD %.1f NEW %.1f (%.2fx)  threads/op %d -> %d us  loop/op %d -> %d us\n",
               img, c, op, np, (op > 0 ? np / op : 0), oo, no, (oo > 0 ? no / oo : 0), ot, nt, ol, nl }'
  done
done
