#!/usr/bin/env bash
# bench/sandbox/vm.sh — the qemu backend: create to first exec output, cold
# (a sandboxd without warm starts) and restored from a snapshot (another
# one with them), beside a plain `qemu-system-x86_64 -kernel` boot of the
# same kernel and initramfs to its first userspace line (vm_boot.py says
# what each measures), p50 of ROUNDS alternating rounds and the ratios.
# TCG here (no usable KVM).
#
# usage: bench/sandbox/vm.sh [BUILD_DIR [ROUNDS]]   (default build-release, 5; root)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$SRC/build-release}" && pwd)
ROUNDS=${2:-5}
die() { echo "bench/sandbox/vm.sh: $1" >&2; exit "${2:-1}"; }
[ "$(id -u)" -eq 0 ] || die "needs root" 77
[ -s "$BUILD/guest/initrd.img" ] || die "no guest in $BUILD/guest (sandbox/vm/guest.sh)" 77
work=$(mktemp -d /var/tmp/strata-sbvm.XXXXXX) pids=()
stop_all() {
  for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null && wait "$p" || true; done
  # the daemons' state dirs (a tmpfs, linked from their homes) keep the
  # snapshots and image conversions after them: ~90 MiB a run
  for l in "$work"/*/sandboxd; do
    [ -L "$l" ] && rm -rf "$(readlink -f "$l")"
  done
  rm -rf "$work"
}
trap stop_all EXIT
trap 'exit 130' INT TERM
. "$(dirname "$0")/busybox_root.sh"
busybox_root "$work/rootfs"
start() { # NAME SNAPSHOTS
  STRATA_VM_GUEST=$BUILD/guest STRATA_VM_SNAPSHOTS=$2 "$BUILD/bin/strata-sandboxd" \
    --home "$work/$1" --socket "$work/$1.sock" --image "bb=$work/rootfs" --log-level warn \
    >"$work/$1.log" 2>&1 &
  pids+=($!)
  for _ in $(seq 200); do [ -S "$work/$1.sock" ] && break; sleep 0.05; done
  [ -S "$work/$1.sock" ] || { cat "$work/$1.log" >&2; exit 1; }
}
start cold 0
start warm 1
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
/usr/bin/python3 "$SRC/bench/sandbox/vm_boot.py" "$work/cold.sock" "$work/warm.sock" bb \
  "$BUILD/guest" "$ROUNDS"
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
