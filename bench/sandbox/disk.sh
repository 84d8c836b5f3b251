#!/usr/bin/env bash
# bench/sandbox/disk.sh — what the disk limit costs a creation: sandboxes
# made through libstrata_sandbox (create + exec `true` + destroy, as
# run.sh's "lib" line) with the writable layer on tmpfs (no disk limit)
# and on the XFS image with a project quota per sandbox (the real limit,
# sandbox/container/layer.c), interleaved in one run beside posix_spawn of
# /bin/true, each with the ratio quota / tmpfs.
#
#   bench/sandbox/disk.sh [BUILD_DIR] [SECS] [CONCS]   root; in the test VM:
#   scripts/testvm.sh run -- bench/sandbox/disk.sh build-release 3 "1 8"
#
# The quota path needs a kernel with XFS quotas and loop devices (this
# host's lacks them: it prints why and measures tmpfs alone; Debian's
# kernel in scripts/testvm.sh has them).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$SRC/build-release}" && pwd)
SECS=${2:-3}
CONCS=${3:-1 8}
POOL=${POOL:-8}
. "$SRC/bench/sandbox/busybox_root.sh"
work=$(mktemp -d "${TMPDIR:-/var/tmp}/strata-diskbench-XXXXXX")
trap 'rm -rf "$work"' EXIT
busybox_root "$work/rootfs"
B=$BUILD/bin/sandbox_bench
rate() { awk '$1 == "RESULT" { print $3; exit }'; }
for c in $CONCS; do
  "$B" spawn "$c" "$SECS" | tee "$work/spawn"
  STRATA_BENCH_DISK=tmpfs "$B" lib "$work/rootfs" "$BUILD/bin/strata-agent" "$c" "$SECS" "$POOL" \
    | tee "$work/tmpfs"
  STRATA_BENCH_DISK=quota "$B" lib "$work/rootfs" "$BUILD/bin/strata-agent" "$c" "$SECS" "$POOL" \
    2>"$work/quota.err" | tee "$work/quota" || true
  grep -h "writable layers" "$work/quota.err" || cat "$work/quota.err"
  t=$(rate <"$work/tmpfs"); q=$(rate <"$work/quota")
  if [ -n "$t" ] && [ -n "$q" ]; then
    awk -v c="$c" -v t="$t" -v q="$q" \
      'BEGIN { printf "disk_quota_vs_tmpfs_c%s  quota %.0f/s  tmpfs %.0f/s  ratio %.2f\n", c, q, t, q / t }'
  else
    echo "disk_quota_vs_tmpfs_c$c  no quota figure (see above)"
  fi
done
