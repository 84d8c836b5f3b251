#!/usr/bin/env bash
# bench/sandbox/ab.sh — A/B of the container library between two builds:
# `sandbox_bench lib` (create + exec `true` + delete, see README.md) of an
# old and a new build, alternated in the same minutes (the machine is shared
# and its load moves), each in a private cpuacct cgroup so that the CPU time
# of the bench and of every sandbox it makes gives the CPU per creation
# (kernel workers, e.g. cleanup_net and RCU callbacks, are not in it).
#
# usage: bench/sandbox/ab.sh OLD_BIN_DIR NEW_BIN_DIR [ROUNDS [SECS [CONCS...]]]
#        (BIN_DIRs hold sandbox_bench and strata-agent; defaults 2 rounds,
#        3 s, concurrency 1 and 8; root). Keep a copy of the old build's
#        bin/ before rebuilding: cp -a build-release/bin /var/tmp/old-bin
# prints per run: OLD|NEW cCONC RESULT lib_cN ops/s p50 p99 ops errors  cpu/op MS
set -euo pipefail

[ $# -ge 2 ] || { sed -n '2,13p' "$0" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "bench/sandbox/ab.sh: needs root" >&2; exit 77; }
OLD=$(cd "$1" && pwd)
NEW=$(cd "$2" && pwd)
ROUNDS=${3:-2}
SECS=${4:-3}
shift $(($# < 4 ? $# : 4))
CONCS=${*:-"1 8"}
for d in "$OLD" "$NEW"; do
  for f in sandbox_bench strata-agent; do
    [ -x "$d/$f" ] || { echo "bench/sandbox/ab.sh: $d/$f missing" >&2; exit 1; }
  done
done
acct=$(awk '$3 == "cgroup" && $4 ~ /(^|,)cpuacct(,|$)/ { print $2; exit }' /proc/mounts)
[ -n "$acct" ] || { echo "bench/sandbox/ab.sh: no cgroup v1 cpuacct hierarchy" >&2; exit 77; }

work=$(mktemp -d /var/tmp/strata-sbab.XXXXXX)
cg=$acct/strata-sbab-$$
cleanup() {
  if [ -d "$cg" ]; then
    while read -r p; do echo "$p" >"$acct/cgroup.procs" 2>/dev/null || true; done <"$cg/cgroup.procs"
    rmdir "$cg" 2>/dev/null || true
  fi
  rm -rf "$work"
}
trap cleanup EXIT
trap 'exit 130' INT TERM
mkdir "$cg"

r=$work/rootfs
mkdir -p "$r"/{bin,sbin,etc,tmp,proc,dev,sys,root,usr/bin}
cp "$(command -v busybox || echo /bin/busybox)" "$r/bin/busybox"
for a in sh true sleep echo cat ls; do ln -s busybox "$r/bin/$a"; done
printf 'root:x:0:0:root:/root:/bin/sh\n' >"$r/etc/passwd"

echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
for _ in $(seq "$ROUNDS"); do
  for c in $CONCS; do
    for v in OLD NEW; do
      d=${!v}
      u0=$(cat "$cg/cpuacct.usage")
      out=$(sh -c 'echo $$ >"$0/cgroup.procs"; exec "$@"' "$cg" \
        "$d/sandbox_bench" lib "$r" "$d/strata-agent" "$c" "$SECS" 8 2>&1 | grep RESULT || true)
      u1=$(cat "$cg/cpuacct.usage")
      ops=$(echo "$out" | awk '{ print $6 }')
      printf '%s c%s %s  cpu/op %s ms\n' "$v" "$c" "${out:-failed}" \
        "$(awk -v a="$u0" -v b="$u1" -v n="${ops:-0}" 'BEGIN { if (n > 0) printf "%.3f", (b - a) / 1e6 / n; else print "-" }')"
    done
  done
done
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
