#!/usr/bin/env bash
# bench/sandbox/vm_fetch.sh — bytes fetched from the cluster for a cold VM
# sandbox start, against the image's size, beside a cold container start of
# the same image in the same run (issue 16's goal: <= 15 %, as for
# containers).
#
# A one-node cluster (tests/lib/cluster.sh); the realistic sample
# (scripts/build-sample-images.sh debian-python; BENCH_IMAGE=busybox for a
# quick run) imported into its store; the node's strata-sandboxd without
# warm starts (STRATA_VM_SNAPSHOTS=0: every VM boots). Each case
# starts from an empty node: the node chunk cache emptied, the local
# metadata copies removed, page caches dropped; then one sandbox is created
# and runs the image's command once (python3 -c 'print(1)', or busybox true),
# and strata-fuse's chunk cache counter says how many bytes came from the
# chunkservers. A VM reads its image through the same lazy, verified path
# (its read-only disks are the metadata copy and the blobs on the mount).
#
# usage: bench/sandbox/vm_fetch.sh [BUILD_DIR]   (default build-release; root)
set -euo pipefail
src=$(cd "$(dirname "$0")/../.." && pwd)
build=$(cd "${1:-$src/build-release}" && pwd)
image=${BENCH_IMAGE:-debian-python}
samples=${BENCH_SAMPLES:-$build/sample-images}
[ -d "$samples/$image" ] || samples=$src/build/sample-images
export STRATA_BIN=$build/bin STRATA_SRC=$src TMPDIR=${BENCH_DIR:-/var/tmp}
if [ ! -f "$samples/$image/index.json" ]; then
	echo "bench/sandbox/vm_fetch.sh: building the $image sample image (minutes, once)" >&2
	"$src/scripts/build-sample-images.sh" "$samples" "$image" >&2
fi
[ -s "$build/guest/initrd.img" ] || { echo "no guest in $build/guest (sandbox/vm/guest.sh)" >&2; exit 77; }

. "$src/tests/lib/cluster.sh"
cluster_require
[ -w /proc/sys/vm/drop_caches ] || cluster_skip "vm_fetch.sh needs root (drop_caches)"
# `strata up` runs the node's sandboxd (it inherits these); else one is
# started below
export STRATA_VM_GUEST=$build/guest STRATA_VM_SNAPSHOTS=0 STRATA_SANDBOXD_IMAGE_LINGER_S=1
cluster_start >/dev/null 2>&1
SBD_PID=""
trap 'rc=$?; set +e; [ -n "$SBD_PID" ] && kill -TERM "$SBD_PID" && wait "$SBD_PID"; (exit $rc); cluster_teardown' EXIT
S="$STRATA_BIN/strata"
counter() { awk '$1 == "fetched_bytes" { print $2 }' "$STRATA_HOME/cache/blobcache/stats" 2>/dev/null | grep . || echo 0; }
cold() { # after the node let go of the image (its mount lingers a second)
	for _ in $(seq 300); do
		grep -q " $STRATA_HOME/cache/images/" /proc/self/mounts || break
		sleep 0.1
	done
	find "$STRATA_HOME/cache/blobcache/chunks" -type f -delete 2>/dev/null || true
	rm -f "$STRATA_HOME"/cache/images/*/meta.img
	sync
	echo 3 >/proc/sys/vm/drop_caches
}

cp -r "$samples/$image" "$MNT/registry-$image"
bytes=$("$S" image import "$MNT/registry-$image" --name bench:1 --json |
	python3 -c 'import json,sys; print(json.load(sys.stdin)["bytes"])')
case $("$S" status --json) in
*'"name":"sandboxd"'*) ;;
*)
	"$STRATA_BIN/strata-sandboxd" --home "$STRATA_HOME" --log-level warn \
		>"$STRATA_HOME/log/sandboxd-bench.log" 2>&1 &
	SBD_PID=$!
	;;
esac
for _ in $(seq 300); do [ -S "$STRATA_HOME/run/sandboxd.sock" ] && break; sleep 0.1; done
[ -S "$STRATA_HOME/run/sandboxd.sock" ] || { echo "no sandboxd socket" >&2; exit 1; }
if [ "$image" = busybox ]; then cmd='["/bin/busybox", "true"]'; else cmd='["/usr/bin/python3", "-c", "print(1)"]'; fi

run() { # BACKEND: prints seconds and bytes fetched
	cold
	local f0
	f0=$(counter)
	local t
	t=$(STRATA_HOME=$STRATA_HOME PYTHONPATH=$src/sdk/python /usr/bin/python3 - "$1" "$cmd" <<'PY'
import json, sys, time
from strata import Sandbox
t0 = time.monotonic()
with Sandbox.create("bench:1", backend=sys.argv[1], memory_mb=256, ttl=600, timeout=300) as sb:
    r = sb.exec(json.loads(sys.argv[2]), timeout=300)
    assert r.exit_code == 0, r
    print("%.3f" % (time.monotonic() - t0))
PY
)
	echo "$t $(($(counter) - f0))"
}
read -r t_ct b_ct < <(run container)
read -r t_vm b_vm < <(run qemu)

pct() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.1f", 100 * a / b }'; }
printf '\nvm_fetch.sh: %s (%s bytes of files); load %s\n' "$image" "$bytes" "$(cut -d' ' -f1-3 /proc/loadavg)"
printf '%-40s %10s %14s %8s\n' "cold start + one command" "seconds" "bytes fetched" "share"
printf '%-40s %10s %14s %7s%%\n' "container sandbox (baseline)" "$t_ct" "$b_ct" "$(pct "$b_ct" "$bytes")"
printf '%-40s %10s %14s %7s%%\n' "qemu sandbox" "$t_vm" "$b_vm" "$(pct "$b_vm" "$bytes")"
printf '\nqemu / container bytes: %s; qemu fetched %s%% of the image (goal <= 15%%)\n' \
	"$(awk -v a="$b_vm" -v b="$b_ct" 'BEGIN { printf "%.2f", b ? a / b : 0 }')" "$(pct "$b_vm" "$bytes")"
