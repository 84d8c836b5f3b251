#!/usr/bin/env bash
# bench/sandbox/run.sh — the sandbox runtime benchmark: container creations
# (create + exec `true` + delete) through strata-sandboxd's API and through
# libstrata_sandbox directly, beside `crun run` of the same busybox rootfs and
# bare posix_spawn + wait of /bin/true; fncall calls per second (a command,
# Python source) beside spawning the same thing on the host; host memory per
# idle sandbox and sandboxd's RSS with N sandboxes alive; exec latency in
# live sandboxes beside posix_spawn + wait of the same command, and the time
# to the first event of exec_stream. Every baseline is measured in the same
# run. See bench/sandbox/README.md.
#
# usage: bench/sandbox/run.sh [BUILD_DIR]   (default build-release; root)
# env:   SECS (seconds per measurement, 3), CONCS ("1 8 64"), MEM_N (1000),
#        FN_CONCS ("1 4"), POOL (library pool size, 8), TTFB_N (50),
#        PARTS ("create fncall mem execs": which sections run)
set -euo pipefail

SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$SRC/build-release}" && pwd)
SECS=${SECS:-3}
CONCS=${CONCS:-"1 8 64"}
FN_CONCS=${FN_CONCS:-"1 4"}
MEM_N=${MEM_N:-1000}
POOL=${POOL:-8}
TTFB_N=${TTFB_N:-50}
PARTS=${PARTS:-"create fncall mem execs"}
part() { case " $PARTS " in *" $1 "*) return 0 ;; esac; return 1; }

[ "$(id -u)" -eq 0 ] || { echo "bench/sandbox: needs root" >&2; exit 77; }
for f in strata-sandboxd strata-agent; do
  [ -x "$BUILD/bin/$f" ] || { echo "bench/sandbox: $BUILD/bin/$f missing (make release)" >&2; exit 1; }
done

work=$(mktemp -d /var/tmp/strata-sbbench.XXXXXX)
# sandboxd's state on a tmpfs, as crun keeps its own in /run/crun: sandbox
# state cannot outlive a reboot anyway (see README.md for the cost on ext4).
state=$(mktemp -d /dev/shm/strata-sbbench.XXXXXX)
sd_pid=
cleanup() {
  if [ -n "$sd_pid" ] && kill -0 "$sd_pid" 2>/dev/null; then
    "$BENCH" purge "$work/sd.sock" || true
    kill -TERM "$sd_pid" 2>/dev/null || true
    wait "$sd_pid" 2>/dev/null || true
  fi
  rm -rf "$work" "$state"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# The driver: built by CMake (bench/sandbox/CMakeLists.txt) or, until that
# is wired in, here against the release build's library.
BENCH=$BUILD/bin/sandbox_bench
if [ ! -x "$BENCH" ]; then
  BENCH=$work/sandbox_bench
  cc -O2 -Wall -Wextra -I"$SRC/sandbox/container" "$SRC/bench/sandbox_bench.c" \
    "$BUILD/lib/libstrata_sandbox.a" -lseccomp -lpthread -o "$BENCH"
fi

# ---- root filesystems ------------------------------------------------------
. "$SRC/bench/sandbox/busybox_root.sh"
busybox_root "$work/rootfs"

# Python image: the host's python3, its libraries and its stdlib.
. "$SRC/bench/sandbox/python_root.sh"
python_root "$work/pyroot"

# crun's bundle: the same busybox rootfs, read-only, running /bin/true.
mkdir -p "$work/bundle"
(cd "$work/bundle" && crun spec)
python3 - "$work/bundle/config.json" "$work/rootfs" <<'EOF'
import json, sys
p, root = sys.argv[1], sys.argv[2]
c = json.load(open(p))
c["process"]["terminal"] = False
c["process"]["args"] = ["/bin/true"]
c["root"] = {"path": root, "readonly": True}
json.dump(c, open(p, "w"))
EOF

# ---- strata-sandboxd -------------------------------------------------------
"$BUILD/bin/strata-sandboxd" --home "$work/home" --socket "$work/sd.sock" --state-dir "$state" \
  --image "bb=$work/rootfs" --image "py=$work/pyroot" --log-level warn \
  >"$work/sandboxd.log" 2>&1 &
sd_pid=$!
for _ in $(seq 200); do [ -S "$work/sd.sock" ] && break; sleep 0.05; done
[ -S "$work/sd.sock" ] || { cat "$work/sandboxd.log" >&2; exit 1; }

# ---- measurements ----------------------------------------------------------
res=$work/results
: >"$res"
measure() { "$BENCH" "$@" | tee -a "$res" >&2; }
crun_measure() {
  unshare -m sh -c 'umount /sys/fs/cgroup/unified 2>/dev/null; exec "$0" "$@"' \
    "$BENCH" crun "$@" | tee -a "$res" >&2
}

echo "measuring (${SECS}s each; progress on stderr) ..." >&2
for c in $CONCS; do
  measure spawn "$c" "$SECS"
  if part create; then
    crun_measure "$work/bundle" "$c" "$SECS"
    measure lib "$work/rootfs" "$BUILD/bin/strata-agent" "$c" "$SECS" "$POOL"
    measure api "$work/sd.sock" bb "$c" "$SECS"
  fi
  if part execs; then # the same `true` in a live sandbox, one per thread
    measure exec "$work/sd.sock" bb "$c" "$SECS"
  fi
done
if part fncall; then
  for c in $FN_CONCS; do
    case " $CONCS " in *" $c "*) ;; *) measure spawn "$c" "$SECS" ;; esac
    measure fncall "$work/sd.sock" py cmd "$c" "$SECS"
    measure fncall "$work/sd.sock" py python "$c" "$SECS"
    "$BENCH" spawn "$c" "$SECS" /usr/bin/python3 -I -c 'x = 1' |
      sed 's/^RESULT spawn_/RESULT spawnpy_/' | tee -a "$res" >&2
  done
fi
if part mem; then
  measure mem "$work/sd.sock" bb "$MEM_N" "$sd_pid"
  measure memspawn "$MEM_N"
fi
part execs && measure ttfb "$work/sd.sock" bb "$TTFB_N"

# ---- report ----------------------------------------------------------------
get() { awk -v k="$1" -v f="$2" '$1 == "RESULT" && $2 == k { print $f; exit }' "$res"; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2fx", a / b; else print "-" }'; }
line() { # label ours-key base-label base-key
  printf '%-28s %9s/s p50 %7s p99 %7s ms | %-20s %9s/s p50 %7s p99 %7s ms | %s\n' \
    "$1" "$(get "$2" 3)" "$(get "$2" 4)" "$(get "$2" 5)" \
    "$3" "$(get "$4" 3)" "$(get "$4" 4)" "$(get "$4" 5)" "$(ratio "$(get "$2" 3)" "$(get "$4" 3)")"
}

echo
echo "== $(nproc) cores, load $(cut -d' ' -f1-3 /proc/loadavg), ${SECS}s per line"
part create && echo "== creations: create + exec true + delete (p50/p99: create only; crun: the whole 'crun run'; spawn: posix_spawn + wait)"
for c in $CONCS; do
  part create || break
  line "sandboxd API     conc $c" "api_c$c" "crun run" "crun_c$c"
  line "sandboxd API     conc $c" "api_c$c" "posix_spawn true" "spawn_c$c"
  line "library          conc $c" "lib_c$c" "crun run" "crun_c$c"
  line "library          conc $c" "lib_c$c" "posix_spawn true" "spawn_c$c"
done
if part execs; then
  echo
  echo "== exec true in live container sandboxes through the API (one keep-alive connection and"
  echo "   sandbox per client; p50/p99: the exec) beside posix_spawn + wait of /bin/true on the host"
  for c in $CONCS; do
    line "exec in sandbox  conc $c" "exec_c$c" "posix_spawn true" "spawn_c$c"
  done
  printf '%-28s p50 %7s p99 %7s ms (%s samples, %s errors): exec_stream of '"'"'sleep 3; echo x'"'"', first event\n' \
    "time to first event" "$(get ttfb 4)" "$(get ttfb 5)" "$(get ttfb 6)" "$(get ttfb 7)"
fi
part create || exit 0 # the sections below need the full run
echo
echo "== fncall calls (one keep-alive connection and fncall sandbox per client; p50/p99: the call)"
for c in $FN_CONCS; do
  line "fncall cmd true  conc $c" "fncall_cmd_c$c" "posix_spawn true" "spawn_c$c"
  line "fncall python    conc $c" "fncall_python_c$c" "spawn python3 -c" "spawnpy_c$c"
done
echo
echo "== memory with $MEM_N idle container sandboxes (cgroup: charged to their memory cgroups, exact;"
echo "   host: change of MemTotal - MemAvailable, meaningless while others build; baseline: $MEM_N idle 'sleep' processes)"
printf '%-28s %9s KiB | %-20s %9s KiB | %s\n' "memory per sandbox (cgroup)" "$(get mem_cg_per_sandbox 3)" \
  "per sleep (cgroup)" "$(get mem_cg_per_process 3)" \
  "$(ratio "$(get mem_cg_per_sandbox 3)" "$(get mem_cg_per_process 3)")"
printf '%-28s %9s KiB | %-20s %9s KiB | %s\n' "memory per sandbox (host)" "$(get mem_host_per_sandbox 3)" \
  "per sleep (host)" "$(get mem_host_per_process 3)" \
  "$(ratio "$(get mem_host_per_sandbox 3)" "$(get mem_host_per_process 3)")"
printf '%-28s %9s MiB | %-20s %9s MiB | %s\n' "sandboxd RSS" "$(get sandboxd_rss 3)" \
  "goal" "100" "$(ratio "$(get sandboxd_rss 3)" 100)"
echo
echo "== goals"
goal() { awk -v v="$2" -v g="$3" -v op="$4" -v n="$1" 'BEGIN {
  ok = (op == ">=") ? v + 0 >= g + 0 : v + 0 < g + 0
  printf "%-52s %10s %s %-10s %s\n", n, v, op, g, ok ? "MET" : "NOT MET" }'; }
for c in $CONCS; do
  goal "API creations/s conc $c >= 10x crun" "$(get "api_c$c" 3)" \
    "$(awk -v b="$(get "crun_c$c" 3)" 'BEGIN { print 10 * b }')" ">="
  goal "API creations/s conc $c >= 0.5x posix_spawn" "$(get "api_c$c" 3)" \
    "$(awk -v b="$(get "spawn_c$c" 3)" 'BEGIN { print 0.5 * b }')" ">="
done
goal "API create p50 ms (conc 1)" "$(get api_c1 4)" 5 "<"
goal "library create p50 ms (conc 1)" "$(get lib_c1 4)" 5 "<"
best_py=$(for c in $FN_CONCS; do get "fncall_python_c$c" 3; done | sort -g | tail -1)
goal "fncall python calls/s (best conc)" "$best_py" 5000 ">="
goal "sandboxd RSS MiB with $MEM_N sandboxes" "$(get sandboxd_rss 3)" 100 "<"
