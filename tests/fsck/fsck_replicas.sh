#!/usr/bin/env bash
# tests/fsck/fsck_replicas.sh — a damaged replica on a two-node cluster
# (chunkservers on loopback ports, chains of two replicas): one byte
# flipped in the data of one copy of a chunk. Only `fsck --deep` sees it
# (the header's checksums are intact), names chain, target and chunk and
# the good replica; `fsck --repair --deep` has strata-meta take that target
# out of service, the chain's other replica resyncs it, and once it serves
# again a deep fsck is clean and every file reads back byte-identical.
set -euo pipefail
. "${STRATA_SRC:-$(dirname "$0")/../..}/tests/lib/cluster.sh"
cluster_require
cluster_start --nodes 2 --no-netns

REF=$CLUSTER_TMP/ref
mkdir -p "$REF"
fsck() {
	set +e
	OUT=$("$STRATA" fsck --home "$STRATA_HOME" "$@" 2>&1)
	RC=$?
	set -e
	echo "$OUT" | sed 's/^/  fsck| /' >&2
}
expect_rc() { [ "$RC" -eq "$1" ] || cluster_fail "strata fsck $2: exit $RC, expected $1"; }
chunk_files() { find "$STRATA_HOME" -path "*/chunks/*/$(printf '%016x' "$1")/*" -type f 2>/dev/null; }
all_serving() {
	"$STRATA" admin --home "$STRATA_HOME" targets --json | python3 -c '
import json, sys
t = [x for x in json.load(sys.stdin)["targets"] if x["chain"]]
sys.exit(0 if t and all(x["state"] == "serving" for x in t) else 1)'
}

for f in f1 f2 f3; do
	dd if=/dev/urandom of="$REF/$f" bs=1M count=2 status=none
	cp "$REF/$f" "$MNT/$f"
done
sync
ino=$(stat -c %i "$MNT/f1")
copies=$(chunk_files "$ino" | grep -c '/00000000$' || true)
[ "$copies" -eq 2 ] || cluster_fail "chunk 0 of f1 has $copies copies, expected 2 (chains of 2)"

fsck --deep
expect_rc 0 "--deep (healthy)"

cf=$(chunk_files "$ino" | grep '/00000000$' | grep '/cs2/' | head -1)
[ -n "$cf" ] || cluster_fail "no copy of chunk 0 of f1 on cs2"
cluster_log "one byte flipped in $cf" # data byte 9000: the data starts at 24 KiB (chunk format 2)
orig=$(dd if="$cf" bs=1 skip=$((24576 + 9000)) count=1 status=none | od -An -tu1 | tr -d ' ')
printf "\\$(printf '%03o' $(((orig + 1) % 256)))" | dd of="$cf" bs=1 seek=$((24576 + 9000)) conv=notrunc status=none

fsck
expect_rc 0 "without --deep (headers intact)"
fsck --deep --json
expect_rc 1 "--deep (damaged replica)"
tgt=$(echo "$OUT" | python3 -c '
import json, sys
d = json.load(sys.stdin)
c = [f for f in d["findings"] if f["kind"] == "corrupt-chunk"]
assert len(c) == 1 and c[0]["ino"] == int(sys.argv[1]) and c[0]["index"] == 0, c
assert "needs resync from target" in c[0]["action"], c
print(c[0]["target"])' "$ino")
grep -q "\"target\":$tgt,[^}]*\"path\":\"$(dirname "$(dirname "$(dirname "$(dirname "$cf")")")")\"" \
	< <("$STRATA" admin --home "$STRATA_HOME" targets --json) ||
	cluster_fail "fsck named target $tgt, not the one holding $cf"

cluster_log "fsck --repair --deep: target $tgt resynced from its chain"
fsck --repair --deep
expect_rc 1 "--repair --deep"
echo "$OUT" | grep -qE "REPAIRED corrupt-chunk: chain [0-9]+ target $tgt ino $ino index 0: target $tgt taken out of service" ||
	cluster_fail "the damaged replica is not listed as repaired"
grep -q "fsck (.*): repaired a damaged replica: target $tgt" "$STRATA_HOME/log/meta.log" ||
	cluster_fail "meta.log does not log the resync"
for ((i = 0; i < 300; i++)); do
	sleep 0.1
	all_serving && break
done
all_serving || cluster_fail "target $tgt does not serve again 30 s after the repair"

fsck --deep
expect_rc 0 "--deep (after the resync)"
for f in f1 f2 f3; do
	cmp "$REF/$f" "$MNT/$f" || cluster_fail "$f differs after the resync"
done
cluster_log "ok"
