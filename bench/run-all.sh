#!/usr/bin/env bash
# bench/run-all.sh BUILD_DIR — every benchmark, one after the other (make bench):
# bench/fs first, then every other executable script in bench/ and every
# bench/*/run.sh (each takes BUILD_DIR as its first argument). A failing benchmark is reported and the
# others still run; the exit status says whether all succeeded.
set -uo pipefail
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-$here/../build-release}
rc=0
run() {
	echo "===== bench/$(basename "$1")"
	"$1" "$build" || { echo "bench/$(basename "$1") failed" >&2; rc=1; }
}
run "$here/fs"
for b in "$here"/*; do
	case "$(basename "$b")" in
	fs | run-all.sh | *.c | *.md | CMakeLists.txt) continue ;;
	esac
	[ -f "$b" ] && [ -x "$b" ] && run "$b"
	[ -d "$b" ] && [ -x "$b/run.sh" ] && run "$b/run.sh"
done
exit $rc
