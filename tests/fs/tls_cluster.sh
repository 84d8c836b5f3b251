#!/usr/bin/env bash
# tests/fs/tls_cluster.sh — a cluster made with `strata up --tls`
# (fs/rpc_tls.h): the home records it (strata.conf tls=1, cluster.env
# STRATA_TLS=1), every daemon says its connections use TLS, the mount reads
# back what it wrote (a 24 MiB file over several chunks, 200 small files),
# admin tools work, and a plain client of the same cluster, holding the
# right key, gets the clear error (the server requires TLS) at once rather
# than a hang or "connection reset", while strata-meta logs who it was.
set -euo pipefail
. "${STRATA_SRC:-$(dirname "$0")/../..}/tests/lib/cluster.sh"
cluster_require
cluster_start --tls

grep -qx "tls=1" "$STRATA_HOME/strata.conf" || cluster_fail "strata.conf does not record tls=1"
grep -qx "STRATA_TLS=1" "$STRATA_HOME/cluster.env" || cluster_fail "cluster.env lacks STRATA_TLS=1"
for d in meta cs1 fuse; do
	grep -q "connections use TLS" "$STRATA_HOME/log/$d.log" || cluster_fail "$d does not use TLS"
done

cluster_log "I/O through the mount"
head -c $((24 << 20)) /dev/urandom >"$CLUSTER_TMP/big"
cp "$CLUSTER_TMP/big" "$MNT/big"
for i in $(seq 1 200); do echo "file $i" >"$MNT/f$i"; done
sync
echo 3 >/proc/sys/vm/drop_caches 2>/dev/null || true
cmp "$CLUSTER_TMP/big" "$MNT/big" || cluster_fail "the big file reads back different"
[ "$(cat "$MNT/f137")" = "file 137" ] || cluster_fail "a small file reads back different"
[ "$(ls "$MNT" | wc -l)" -ge 201 ] || cluster_fail "files missing from the listing"

cluster_log "admin tools of the home use TLS"
strata_cli admin nodes >"$CLUSTER_TMP/nodes" || cluster_fail "strata admin nodes failed over TLS"
strata_cli fsck >"$CLUSTER_TMP/fsck" 2>&1 || { cat "$CLUSTER_TMP/fsck" >&2; cluster_fail "strata fsck failed over TLS"; }

cluster_log "a plain client with the right key: a clear refusal, at once"
start=$(date +%s%N)
set +e
out=$(cd "$CLUSTER_TMP" && env -u STRATA_HOME STRATA_TLS=0 "$STRATA" admin nodes \
	--meta "$STRATA_META" --key "$STRATA_HOME/cluster.key" 2>&1)
rc=$?
set -e
ms=$((($(date +%s%N) - start) / 1000000))
echo "  | $out (exit $rc, $ms ms)" >&2
[ "$rc" != 0 ] || cluster_fail "a plain client was served by a TLS cluster"
grep -q "requires TLS" <<<"$out" || cluster_fail "the plain client's error does not say TLS is required"
[ "$ms" -lt 3000 ] || cluster_fail "the plain client waited $ms ms for its refusal"
grep -q "peer speaks plain frames, this server requires TLS" "$STRATA_HOME/log/meta.log" ||
	cluster_fail "strata-meta did not log the plain peer"
[ "$(cat "$MNT/f1")" = "file 1" ] || cluster_fail "the mount stopped working"
cluster_log "ok"
