#!/usr/bin/env bash
# bench/sandbox/sdk.sh — creations/s through the Python SDK against the C
# driver through the same API, in the same run: one strata-sandboxd (state on
# /dev/shm, image "bb" a busybox rootfs), and per round, alternating,
# `sandbox_bench api SOCK bb 1 SECS` beside `sdk_create.py sync` (strata.Sandbox,
# serial), and `sandbox_bench api SOCK bb 64 SECS` beside `sdk_create.py
# async ... 64` (strata.AsyncSandbox, 64 in flight on one event loop). A
# creation is create + exec `true` + delete. Prints each RESULT line and,
# per round, SDK / C (the goal of issue 13: >= 0.7).
#
# usage: bench/sandbox/sdk.sh [BIN_DIR [ROUNDS [SECS]]]
#        (default build-release/bin, 3 rounds, 3 s; root)
set -euo pipefail

SRC=$(cd "$(dirname "$0")/../.." && pwd)
BIN=$(cd "${1:-$SRC/build-release/bin}" && pwd)
ROUNDS=${2:-3}
SECS=${3:-3}
PY=${PYTHON:-/usr/bin/python3}
die() { echo "bench/sandbox/sdk.sh: $1" >&2; exit "${2:-1}"; }
[ "$(id -u)" -eq 0 ] || die "needs root" 77
[ -x "$BIN/strata-sandboxd" ] && [ -x "$BIN/strata-agent" ] && [ -x "$BIN/sandbox_bench" ] ||
  die "$BIN lacks strata-sandboxd, strata-agent or sandbox_bench (make release)"
work=$(mktemp -d /var/tmp/strata-sbsdk.XXXXXX) sd_pid=
state=$(mktemp -d /dev/shm/strata-sbsdk.XXXXXX)
# The sandboxes (purged), the daemon, the temp dirs: also on failure.
stop_all() {
  [ -n "$sd_pid" ] && kill -0 "$sd_pid" 2>/dev/null &&
    { "$BIN/sandbox_bench" purge "$work/sd.sock" >/dev/null 2>&1; kill -TERM "$sd_pid"; wait "$sd_pid"; }
  rm -rf "$work" "$state"
}
trap 'stop_all || true' EXIT
trap 'exit 130' INT TERM

. "$(dirname "$0")/busybox_root.sh"
r=$work/rootfs
busybox_root "$r"

"$BIN/strata-sandboxd" --home "$work/home" --socket "$work/sd.sock" --state-dir "$state" \
  --image "bb=$r" --log-level warn >"$work/sd.log" 2>&1 &
sd_pid=$!
for _ in $(seq 200); do [ -S "$work/sd.sock" ] && break; sleep 0.05; done
[ -S "$work/sd.sock" ] || { cat "$work/sd.log" >&2; exit 1; }

c_api() { "$BIN/sandbox_bench" api "$work/sd.sock" bb "$1" "$SECS" 2>&1 | grep RESULT; }
sdk() { "$PY" "$SRC/bench/sandbox/sdk_create.py" "$@" 2>&1 | grep RESULT; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", (b > 0 ? a / b : 0) }'; }
echo "load $(cut -d' ' -f1-3 /proc/loadavg)"
for i in $(seq "$ROUNDS"); do
  if [ $((i % 2)) -eq 1 ]; then
    c1=$(c_api 1); s1=$(sdk sync "$work/sd.sock" bb "$SECS")
    c64=$(c_api 64); s64=$(sdk async "$work/sd.sock" bb 64 "$SECS")
  else
    s1=$(sdk sync "$work/sd.sock" bb "$SECS"); c1=$(c_api 1)
    s64=$(sdk async "$work/sd.sock" bb 64 "$SECS"); c64=$(c_api 64)
  fi
  printf '%s\n%s\n%s\n%s\n' "$c1" "$s1" "$c64" "$s64"
  echo "round $i: sync/C(c1) $(ratio "$(echo "$s1" | awk '{print $3}')" "$(echo "$c1" | awk '{print $3}')")" \
    " async64/C(c64) $(ratio "$(echo "$s64" | awk '{print $3}')" "$(echo "$c64" | awk '{print $3}')")" \
    " load $(cut -d' ' -f1 /proc/loadavg)"
done
