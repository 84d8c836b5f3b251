#!/usr/bin/env bash
# bench/chunk_reads.sh [BUILD_DIR] — runs bench/chunk_reads.c's helper (the
# chunk engine's small reads with and without its open-file cache) for
# bench/run-all.sh; BENCH_DIR (/var/tmp), BENCH_SECONDS (5).
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${1:-$src/build-release}" && pwd)
for len in 4096 65536; do
	"$build/bin/chunk_reads" "${BENCH_DIR:-/var/tmp}" 2 "${BENCH_SECONDS:-5}" "$len"
done
