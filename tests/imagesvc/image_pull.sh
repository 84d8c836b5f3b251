#!/usr/bin/env bash
# image_pull.sh — `strata image import` of a docker-save tarball (written by
# skopeo from a gzip-only copy of the busybox sample) and `strata image pull`
# from Debian's docker-registry on
# 127.0.0.1 (the busybox sample pushed with skopeo, digests preserved): the
# pulled image has the layout's manifest digest, is named repo:tag, mounts
# and runs busybox; an unknown tag fails with one clear line and leaves
# nothing behind. Skips without docker-registry or skopeo.
set -euo pipefail
. "$STRATA_SRC/tests/lib/cluster.sh"
. "$STRATA_SRC/tests/imagesvc/lib.sh"
for t in docker-registry skopeo; do
	command -v $t >/dev/null || cluster_skip "$t is missing (scripts/install-deps.sh)"
done
image_setup
S=strata_cli
STORE="$MNT/.strata/images"

cluster_log "import a docker-save tarball"
mapfile -t layers < <(image_layers_of "$BUSYBOX" "$IMG_WORK/layers")
gz=()
for l in "${layers[@]}"; do
	case "$l" in
	*.zst) zstd -qdc "$l" | gzip >"${l%.zst}.gz"; gz+=("${l%.zst}.gz") ;;
	*) gz+=("$l") ;;
	esac
done
$PY "$IMG_SRC_DIR/mkoci.py" "$IMG_WORK/oci-gz" "${gz[@]}" >/dev/null
skopeo copy --quiet "oci:$IMG_WORK/oci-gz:latest" "docker-archive:$IMG_WORK/save.tar:bb:v1"
$S image import "$IMG_WORK/save.tar" --name saved:1
mkdir -p "$IMG_WORK/r"
$S image mount saved:1 "$IMG_WORK/r" --writable --record-after 0
chroot "$IMG_WORK/r" /bin/busybox echo saved | grep -q saved || cluster_fail "busybox from docker-save"
$S image umount "$IMG_WORK/r"

cluster_log "pull from a registry"
port=$($PY -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
mkdir -p "$IMG_WORK/reg/data"
cat >"$IMG_WORK/reg/config.yml" <<YML
version: 0.1
log:
  level: error
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: $IMG_WORK/reg/data
http:
  addr: 127.0.0.1:$port
  secret: strata-test
YML
# The command line names the cluster's temp dir: the cluster trap kills it.
docker-registry serve "$IMG_WORK/reg/config.yml" >"$IMG_WORK/reg/log" 2>&1 &
for _ in $(seq 100); do
	(exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null && break
	sleep 0.1
done
skopeo copy --quiet --dest-tls-verify=false --preserve-digests \
	"oci:$BUSYBOX:latest" "docker://127.0.0.1:$port/test/busybox:1.0"

want=$($PY -c 'import json,sys; print(json.load(open(sys.argv[1]))["manifests"][0]["digest"])' "$BUSYBOX/index.json")
out=$($S image pull "127.0.0.1:$port/test/busybox:1.0" --insecure --json)
echo "$out"
[ "$(json_get "$out" digest)" = "$want" ] || cluster_fail "pulled digest differs from the layout's"
[ "$(json_get "$out" name)" = "test/busybox:1.0" ] || cluster_fail "unexpected name"
$S image ls | grep -q "test/busybox:1.0" || cluster_fail "ls does not show the pulled image"
$S image mount test/busybox:1.0 "$IMG_WORK/r" --writable --record-after 0
chroot "$IMG_WORK/r" /bin/busybox echo pulled | grep -q pulled || cluster_fail "busybox did not run"
$S image umount "$IMG_WORK/r"

n=$(find "$STORE" -mindepth 2 | wc -l)
if $S image pull "127.0.0.1:$port/test/busybox:nope" --insecure 2>"$IMG_WORK/err"; then
	cluster_fail "an unknown tag was pulled"
fi
cat "$IMG_WORK/err"
[ "$(wc -l <"$IMG_WORK/err")" = 1 ] || cluster_fail "expected one error line"
[ "$(find "$STORE" -mindepth 2 | wc -l)" = "$n" ] || cluster_fail "a failed pull changed the store"
[ -z "$(find "$STRATA_HOME/cache" -maxdepth 1 -name 'stage-*')" ] || cluster_fail "staging debris left"
cluster_log "PASS"
