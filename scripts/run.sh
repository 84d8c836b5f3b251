#!/usr/bin/env bash
# scripts/run.sh BUILD_DIR HOME — what `make run` does after building: start
# (or repair) the single-node cluster in HOME with `strata up` (strata-sandboxd
# included), show a tiny demo on its mount, build the sample images
# (scripts/build-sample-images.sh: busybox always, the realistic debian-python
# one when it can be built, unless STRATA_RUN_SAMPLE=busybox; cached under
# $STRATA_SAMPLES, default /var/tmp/strata-samples), import them, create
# sandboxes from sample:latest through the Python SDK, and say how to use and
# stop it.
set -euo pipefail
srcdir=$(cd "$(dirname "$0")/.." && pwd)
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
samples=${STRATA_SAMPLES:-/var/tmp/strata-samples}
echo "== sample images (built from Debian packages, cached in $samples)"
"$srcdir/scripts/build-sample-images.sh" "$samples" busybox
sample=$samples/busybox
if [ "${STRATA_RUN_SAMPLE:-debian-python}" = debian-python ] &&
	"$srcdir/scripts/build-sample-images.sh" "$samples" debian-python; then
	sample=$samples/debian-python
else
	echo "run.sh: the realistic debian-python sample could not be built (see above);" \
		"using busybox as sample:latest" >&2
fi
"$strata" image import "$samples/busybox" --home "$home" --name busybox:latest
t0=$(date +%s.%N)
"$strata" image import "$sample" --home "$home" --name sample:latest
t1=$(date +%s.%N)
awk -v a="$t0" -v b="$t1" -v s="$(basename "$sample")" \
	'BEGIN { printf "imported %s as sample:latest in %.1f s\n", s, b - a }'
"$strata" image ls --home "$home"

echo
echo "== sandboxes from sample:latest through the Python SDK"
STRATA_HOME=$home PYTHONPATH=$srcdir/sdk/python /usr/bin/python3 \
	"$srcdir/sdk/python/examples/demo_run.py" sample:latest
if [ "$sample" = "$samples/debian-python" ]; then
	echo "\$ python3 in a fresh sandbox of sample:latest (image mounted: warm start)"
	STRATA_HOME=$home PYTHONPATH=$srcdir/sdk/python /usr/bin/python3 - <<'PY'
import time
from strata import Sandbox
t0 = time.perf_counter()
with Sandbox.create("sample:latest", backend="container", memory_mb=256, ttl=120) as sb:
    t1 = time.perf_counter()
    r = sb.exec(["python3", "-c", "import platform, sys; print('Python', platform.python_version(), 'on', sys.platform, '- 2+2 =', 2 + 2)"], timeout=60)
    t2 = time.perf_counter()
    sb.files.write("/tmp/hello.txt", b"written through the SDK\n")
    back = sb.files.read("/tmp/hello.txt").decode().strip()
print(r.stdout.strip() if r.exit_code == 0 else "python3 failed: %r" % r)
print("sandbox created in %.1f ms, python3 started and ran in %.1f ms; file round trip: %s"
      % ((t1 - t0) * 1e3, (t2 - t1) * 1e3, back))
PY
fi

echo
cat <<EOT
== how to use it
  The cluster's mount:      $mnt        (a normal POSIX directory)
  Its state:                $strata status --home $home
  Client settings:          $home/cluster.env   (STRATA_META, STRATA_MOUNT)
  Images:                   $strata image ls --home $home
  Sandboxes (Python SDK):   STRATA_HOME=$home PYTHONPATH=$srcdir/sdk/python python3
                            >>> from strata import Sandbox
                            >>> with Sandbox.create("sample:latest") as sb: print(sb.exec("echo hi").stdout)
  Daemon logs:              $home/log/
  Stop it:                  make stop      (or: $strata down --home $home)
  Start again / repair:     make run       (idempotent; restarts dead daemons)
EOT
