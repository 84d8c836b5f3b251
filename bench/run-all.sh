#!/usr/bin/env bash
# bench/run-all.sh BUILD_DIR — every benchmark, one after the other (make bench).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build-release}
"$here/fs" "$build"
