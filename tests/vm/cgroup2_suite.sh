#!/bin/bash
# tests/vm/cgroup2_suite.sh BUILD_DIR — inside the test VM (scripts/testvm.sh,
# Debian 12's kernel, cgroup2 alone with every controller, mounted with
# nsdelegate as systemd does): the container runtime's tests, sandboxd's API
# tests (container and fncall backends), sandboxd in a systemd-like
# service cgroup (service_cgroup.py) and the SDK's, which on the
# development machine run on cgroup v1. Every one of them must run here: a
# skip is a failure (except the image-store test, which needs a cluster and
# has its own ctest entry).
#
# usage: cgroup2_suite.sh BUILD_DIR [core|sdk]   core (default): the library,
#        sandboxd and the service cgroup (ctest cgroup2_vm, make test);
#        sdk: the SDK's tests and sandboxd's slowest (ctest cgroup2_vm_sdk,
#        make soak)
set -uo pipefail
BUILD=${1:?usage: cgroup2_suite.sh BUILD_DIR [core|sdk]}
PART=${2:-core}
SRC=$(cd "$(dirname "$0")/../.." && pwd)
export STRATA_BIN=$BUILD/bin STRATA_SRC=$SRC STRATA_BUILD=$BUILD
# sbx_test.c fails a test whose runtime chose another version.
export STRATA_TEST_CGROUP_VERSION=2
# The guest has loop devices, XFS with quotas and a scratch disk: the
# sandboxes' writable layers must be on disk there (test_sandbox_disk.c).
export STRATA_TEST_DISK_QUOTA=1
failed=0

if grep -q ' cgroup ' /proc/mounts || ! grep -q ' /sys/fs/cgroup cgroup2 ' /proc/mounts; then
	echo "cgroup2_suite: not a cgroup2-only machine (run it through scripts/testvm.sh)"
	exit 1
fi

run_library_tests() {
	local t rc
	for t in sandbox_basic sandbox_contain sandbox_adopt sandbox_reuse sandbox_disk sandbox_userns \
		sandbox_pause sandbox_worker; do
		echo "== $t"
		(cd "$BUILD/tests" && ASAN_OPTIONS=detect_leaks=1:abort_on_error=0 "./$t")
		rc=$?
		echo "== $t: exit $rc"
		[ "$rc" -eq 0 ] || failed=1
	done
}

# sandboxd's slowest tests under TCG (over 100 s of the core part's 300 s
# together): they test no cgroup code of their own, so make test leaves them
# to the sdk part (make soak).
SLOW_SANDBOXD="test_one_gib_both_ways_in_bounded_memory or test_kept_output_is_bounded or test_agent_that_stops_answering"

# pytest DIR [PYTEST_ARGS...], with every skip listed (-rs): only the known
# one may skip.
run_pytest() {
	local dir=$1 log
	shift
	log=$(mktemp)
	echo "== pytest $dir $*"
	(cd "$SRC/$dir" && ASAN_OPTIONS=detect_leaks=0 /usr/bin/python3 -m pytest -q -rs \
		-p no:cacheprovider "$@" .) 2>&1 | tee "$log"
	local rc=${PIPESTATUS[0]}
	if [ "$rc" -ne 0 ]; then
		failed=1
	elif grep '^SKIPPED' "$log" | grep -v 'run by test_image_store.sh' >/dev/null; then
		echo "== pytest $dir: skipped tests on cgroup v2 (above)"
		failed=1
	fi
	rm -f "$log"
}

case $PART in
core)
	run_library_tests
	run_pytest tests/sandbox/sandboxd -k "not ($SLOW_SANDBOXD)"
	# Last (it leaves system.slice behind): sandboxd alone in a service's
	# cgroup below the root, as systemd runs it.
	echo "== service cgroup"
	ASAN_OPTIONS=detect_leaks=0 /usr/bin/python3 "$SRC/tests/vm/service_cgroup.py" || failed=1
	;;
sdk)
	run_pytest tests/sandbox/sandboxd -k "$SLOW_SANDBOXD"
	run_pytest tests/sdk
	;;
*) echo "cgroup2_suite: unknown part $PART"; exit 2 ;;
esac

exit $failed
