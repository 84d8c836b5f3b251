#!/usr/bin/env bash
# tests/fs/raw_client.sh RAW_CLIENT — issue 14's item 2 on a real cluster:
# a client linked against libstrata_fs (tests/fs/raw_client.c), run as
# nobody, cannot load the home's cluster key (0600) and with a key of its
# own is refused by strata-meta and the chunkserver: nothing of a root-only
# 0600 file (its attributes, its data) comes back. With the cluster's key
# (as root) the same program is served: the refusals are the key's doing.
set -euo pipefail
prog=$1
. "${STRATA_SRC:-$(dirname "$0")/../..}/tests/lib/cluster.sh"
cluster_require
command -v setpriv >/dev/null || cluster_skip "setpriv is missing (util-linux)"
cluster_start
echo "sk-live-secret" >"$MNT/secret"
chmod 600 "$MNT/secret"
meta=$(cat "$STRATA_HOME/run/meta.addr")
cs=$(cat "$STRATA_HOME/run/cs1.addr")
key=$STRATA_HOME/cluster.key
[ "$(stat -c %a "$key")" = 600 ] || cluster_fail "the cluster key is not mode 0600"
cp "$prog" "$CLUSTER_TMP/raw_client" && chmod 755 "$CLUSTER_TMP/raw_client"
as_nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }

cluster_log "as nobody with the home's key file: unreadable"
set +e
out=$(as_nobody "$CLUSTER_TMP/raw_client" "$meta" "$cs" secret "$key" 2>&1)
rc=$?
set -e
echo "$out" >&2
[ "$rc" = 3 ] || cluster_fail "nobody loaded the cluster key (exit $rc)"
grep -q "Permission denied" <<<"$out" || cluster_fail "no clear error for the unreadable key"

cluster_log "as nobody with a made-up key: refused by meta and the chunkserver"
set +e
out=$(as_nobody "$CLUSTER_TMP/raw_client" "$meta" "$cs" secret 2>&1)
rc=$?
set -e
echo "$out" >&2
[ "$rc" = 0 ] || cluster_fail "a client without the key was served (exit $rc)"
grep -q "Key was rejected" <<<"$out" || cluster_fail "the refusal does not say the key was rejected"
if grep -q "sk-live" <<<"$out"; then cluster_fail "secret data came back"; fi

cluster_log "with the cluster key (root): served, so the refusals above are the key's"
set +e
out=$("$CLUSTER_TMP/raw_client" "$meta" "$cs" secret "$key" 2>&1)
rc=$?
set -e
echo "$out" >&2
[ "$rc" = 1 ] || cluster_fail "the cluster's key was not served (exit $rc)"
grep -q "meta lookup secret: served" <<<"$out" || cluster_fail "lookup with the key failed"
[ "$(cat "$MNT/secret")" = sk-live-secret ] || cluster_fail "the file changed"
cluster_log "PASS: no key, no data"
