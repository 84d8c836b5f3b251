# tests/imagesvc/lib.sh — helpers shared by the image integration tests (source
# after tests/lib/cluster.sh). Exposes IMG_WORK (a scratch dir inside the
# cluster's temp dir, so the cluster trap removes it) after image_setup.

IMG_SRC_DIR="$STRATA_SRC/tests/imagesvc"
PY=/usr/bin/python3 # Debian's, as tests/CMakeLists.txt uses

# Starts a cluster and builds (or reuses) the busybox sample image.
image_setup() {
	cluster_require
	command -v $PY >/dev/null || cluster_skip "python3 is missing"
	grep -qw erofs /proc/filesystems || modprobe erofs 2>/dev/null || true
	grep -qw erofs /proc/filesystems || cluster_skip "the kernel has no EROFS"
	SAMPLES="${STRATA_BUILD:-$STRATA_SRC/build}/sample-images"
	if [ ! -f "$SAMPLES/busybox/index.json" ]; then
		"$STRATA_SRC/scripts/build-sample-images.sh" "$SAMPLES" busybox >&2 ||
			cluster_skip "cannot build the busybox sample image"
	fi
	BUSYBOX="$SAMPLES/busybox"
	cluster_start
	IMG_WORK="$CLUSTER_TMP/work"
	mkdir -p "$IMG_WORK"
	# Image mounts first (they hold files of the FUSE mount open), then the
	# cluster; set +e so that a failing step cannot skip the teardown.
	trap 'rc=$?; set +e; image_cleanup_mounts; (exit $rc); cluster_teardown' EXIT
}

# True when strata-fuse has the node chunk cache (verified blob reads).
image_have_blobcache() {
	"$STRATA_BIN/strata-fuse" --help 2>&1 | grep -q -- --cache-size
}

# Copies the layers of OCI layout $1 to $2/l<N>.tar[.gz|.zst]; prints the paths.
image_layers_of() {
	$PY - "$1" "$2" <<'PY'
import json, os, shutil, sys
src, out = sys.argv[1], sys.argv[2]
os.makedirs(out, exist_ok=True)
def blob(d): return os.path.join(src, "blobs", *d.split(":"))
idx = json.load(open(os.path.join(src, "index.json")))
man = json.load(open(blob(idx["manifests"][0]["digest"])))
for i, l in enumerate(man["layers"]):
    ext = ".tar.gz" if "gzip" in l["mediaType"] else ".tar.zst" if "zstd" in l["mediaType"] else ".tar"
    p = os.path.join(out, "l%d%s" % (i, ext))
    shutil.copyfile(blob(l["digest"]), p)
    print(p)
PY
}

# JSON field $2 of the object $1 (python3).
json_get() {
	$PY -c 'import json,sys; v=json.loads(sys.argv[1]); print(v[sys.argv[2]] if not isinstance(v[sys.argv[2]], bool) else str(v[sys.argv[2]]).lower())' "$1" "$2"
}

# Unmounts everything strata image mounted under the test's dir (trap aid).
image_cleanup_mounts() {
	local m
	for m in $(_cluster_mounts_under "$CLUSTER_TMP" | grep -v "/mnt$"); do
		umount -l "$m" 2>/dev/null || true
	done
}

# Fuse's chunk cache counter $1 (0 when absent).
cache_stat() {
	awk -v k="$1" '$1 == k { print $2 }' "$STRATA_HOME/cache/blobcache/stats" 2>/dev/null | grep . || echo 0
}

# Stops strata-fuse and starts it again (by strata up, or by hand with the
# extra strata-fuse options given), so that it holds no digest table in
# memory; waits for the mount.
image_restart_fuse() { # [extra strata-fuse options]
	local pid
	pid=$(cluster_pid fuse)
	kill -TERM "$pid"
	for _ in $(seq 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
	if [ $# -eq 0 ]; then
		cluster_up >/dev/null 2>&1
	else
		"$STRATA_BIN/strata-fuse" --meta "$STRATA_META" --mount "$MNT" \
			--cache-dir "$STRATA_HOME/cache" "$@" 2>>"$STRATA_HOME/log/fuse.log"
	fi
	cluster_wait_mount 30
}
