#!/usr/bin/env bash
# scripts/run.sh BUILD_DIR HOME — what `make run` does after building: start
# (or repair) the single-node cluster in HOME with `strata up`, show a tiny
# demo on its mount, and say how to use and stop it.
set -euo pipefail
build=$(cd "${1:?usage: run.sh BUILD_DIR HOME}" && pwd)
home=${2:?usage: run.sh BUILD_DIR HOME}
strata=$build/bin/strata

[ -x "$strata" ] || { echo "run.sh: $strata is missing (make release)" >&2; exit 1; }
[ -c /dev/fuse ] || { echo "run.sh: /dev/fuse is missing: strata needs FUSE" >&2; exit 1; }

echo "== strata up --home $home"
"$strata" up --home "$home"
mnt=$(sed -n 's/^STRATA_MOUNT=//p' "$home/cluster.env")

echo
echo "== a tiny demo on $mnt"
demo=$mnt/demo
mkdir -p "$demo"
src=$(mktemp "${TMPDIR:-/tmp}/strata-demo.XXXXXX")
trap 'rm -f "$src"' EXIT
head -c $((8 * 1024 * 1024)) /dev/urandom >"$src"
t0=$(date +%s.%N)
echo "hello from strata, $(date -u)" >"$demo/hello.txt"
cat "$src" >"$demo/random-8MiB.bin"
t1=$(date +%s.%N)
sum_local=$(sha256sum <"$src" | cut -c1-16)
sum_mnt=$(sha256sum <"$demo/random-8MiB.bin" | cut -c1-16)
[ "$sum_local" = "$sum_mnt" ] || { echo "run.sh: the 8 MiB file reads back different!" >&2; exit 1; }
echo "\$ cat $demo/hello.txt"
cat "$demo/hello.txt"
echo "\$ ls -l $demo"
ls -l "$demo"
echo "\$ df -h $mnt"
df -h "$mnt"
awk -v a="$t0" -v b="$t1" -v s="$sum_local" \
	'BEGIN { printf "wrote 8 MiB + a text file in %.2f s; read back identical (sha256 %s...)\n", b - a, s }'

echo
cat <<EOT
== how to use it
  The cluster's mount:      $mnt        (a normal POSIX directory)
  Its state:                $strata status --home $home
  Client settings:          $home/cluster.env   (STRATA_META, STRATA_MOUNT)
  Daemon logs:              $home/log/
  Stop it:                  make stop      (or: $strata down --home $home)
  Start again / repair:     make run       (idempotent; restarts dead daemons)
EOT
