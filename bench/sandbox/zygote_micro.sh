#!/usr/bin/env bash
# bench/sandbox/zygote_micro.sh — CPU per staging of clone + exec of the
# agent against a fork server (zygote_micro.c says what each does), each
# alternated ROUNDS times, unpinned and on one CPU (taskset -c 0: no
# cross-CPU wake-ups or exec migrations).
#
# usage: bench/sandbox/zygote_micro.sh AGENT [N [ROUNDS]]   (root; musl-gcc)
#        AGENT: a strata-agent binary (build-release/bin/strata-agent)
set -euo pipefail
[ $# -ge 1 ] || { sed -n '2,9p' "$0" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "zygote_micro.sh: needs root" >&2; exit 77; }
command -v musl-gcc >/dev/null || { echo "zygote_micro.sh: needs musl-gcc" >&2; exit 77; }
agent=$(realpath "$1")
n=${2:-3000}
rounds=${3:-3}
src=$(dirname "$0")/zygote_micro.c
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
musl-gcc -static -Os -DZYGOTE -o "$tmp/zygote" "$src"
cc -O2 -o "$tmp/driver" "$src"
echo "load $(cut -d' ' -f1-3 /proc/loadavg); $n iterations per line"
for _ in $(seq "$rounds"); do
  for pin in "" "taskset -c 0"; do
    echo "-- ${pin:-unpinned}"
    $pin "$tmp/driver" exec "$n" "$agent" "$tmp/zygote"
    $pin "$tmp/driver" zygote "$n" "$agent" "$tmp/zygote"
    $pin "$tmp/zygote" fork "$n"
  done
done
