#!/usr/bin/env bash
# bench/sandbox/files.sh — file transfer MB/s of a large file into and out of
# a container sandbox through strata-sandboxd (SDK and curl), beside `cp` of
# the same file into and out of the sandbox's writable directory on the host,
# measured in the same run (bench/sandbox/files_bench.py; README.md).
#
# usage: bench/sandbox/files.sh [BUILD_DIR]   (default build-release; root)
# env:   SIZE_MB (1024), ROUNDS (3)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BUILD=$(cd "${1:-$SRC/build-release}" && pwd)
[ "$(id -u)" -eq 0 ] || { echo "bench/sandbox/files: needs root" >&2; exit 77; }
for f in strata-sandboxd strata-agent; do
  [ -x "$BUILD/bin/$f" ] || { echo "bench/sandbox/files: $BUILD/bin/$f missing (make release)" >&2; exit 1; }
done
command -v curl >/dev/null || { echo "bench/sandbox/files: needs curl" >&2; exit 77; }
exec /usr/bin/python3 "$SRC/bench/sandbox/files_bench.py" "$BUILD" "${SIZE_MB:-1024}" "${ROUNDS:-3}"
