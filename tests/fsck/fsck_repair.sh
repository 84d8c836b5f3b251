#!/usr/bin/env bash
# tests/fsck/fsck_repair.sh — `strata fsck` on a real cluster with real damage:
#   - strata-meta stopped, its RocksDB edited (fsck_tool db): a file's dentry
#     deleted (unreachable inode), a directory's dentry deleted (unreachable
#     directory, its parent's nlink off), an nlink bumped, a dangling dentry
#     added, next_ino set below the inodes in use;
#   - orphan chunks written through chunk_client: one for an inode that does
#     not exist, one past the end of a live file;
#   - one byte flipped in a chunk file on disk (only --deep finds it).
# fsck reports each (exit 1, text and --json), --repair fixes them (logged by
# strata-meta, listed in the output), a second fsck is clean (exit 0), the
# unreachable file reads back from /lost+found and every intact file reads
# back byte-identical.
set -euo pipefail
TOOL=${1:?usage: fsck_repair.sh FSCK_TOOL}
. "${STRATA_SRC:-$(dirname "$0")/../..}/tests/lib/cluster.sh"
cluster_require
cluster_start

REF=$CLUSTER_TMP/ref
mkdir -p "$REF"
DB=$STRATA_HOME/meta/db

fsck() { # fsck ARGS... ; sets OUT and RC
	set +e
	OUT=$("$STRATA" fsck --home "$STRATA_HOME" "$@" 2>&1)
	RC=$?
	set -e
	echo "$OUT" | sed 's/^/  fsck| /' >&2
}
expect_rc() { [ "$RC" -eq "$1" ] || cluster_fail "strata fsck $2: exit $RC, expected $1"; }
expect_out() { echo "$OUT" | grep -qE "$1" || cluster_fail "fsck output lacks /$1/"; }
chunk_files() { find "$STRATA_HOME" -path "*/chunks/*/$(printf '%016x' "$1")/*" -type f 2>/dev/null; }

cluster_log "writing files"
mkdir -p "$MNT/d1/d2" "$MNT/gone"
for f in a d1/b d1/d2/c lostfile gone/x corrupt; do
	n=$((RANDOM % 3 + 1))
	dd if=/dev/urandom of="$REF/${f//\//_}" bs=700K count=$n status=none
	cp "$REF/${f//\//_}" "$MNT/$f"
done
ln "$MNT/a" "$MNT/d1/a-link"
sync
ino_lost=$(stat -c %i "$MNT/lostfile")
ino_gone=$(stat -c %i "$MNT/gone")
ino_b=$(stat -c %i "$MNT/d1/b")
ino_d1=$(stat -c %i "$MNT/d1")
ino_corrupt=$(stat -c %i "$MNT/corrupt")

cluster_log "a healthy cluster is clean"
fsck
expect_rc 0 "(healthy)"
expect_out "clean"
fsck --deep --json
expect_rc 0 "--deep --json (healthy)"
echo "$OUT" | python3 -c 'import json,sys; d=json.load(sys.stdin); assert d["clean"] and d["chunks"]["chunks"] > 0, d'

cluster_log "orphan chunks through chunk_client: no inode, and past the end of /a"
"$TOOL" chunk "$STRATA_META" 987654 0 >/dev/null
ino_a=$("$TOOL" chunk-path "$STRATA_META" /a 40)
[ -n "$(chunk_files 987654)" ] || cluster_fail "the orphan chunk of inode 987654 is not on disk"

cluster_log "a byte flipped in the first chunk of /corrupt" # data byte 5000 (format 2: data at 24 KiB)
cf=$(chunk_files "$ino_corrupt" | grep '/00000000$' | head -1)
[ -n "$cf" ] || cluster_fail "no chunk file for /corrupt"
orig=$(dd if="$cf" bs=1 skip=$((24576 + 5000)) count=1 status=none | od -An -tu1 | tr -d ' ')
printf "\\$(printf '%03o' $(((orig + 1) % 256)))" | dd of="$cf" bs=1 seek=$((24576 + 5000)) conv=notrunc status=none

cluster_log "strata-meta stopped, its store edited"
kill -TERM "$(cluster_pid meta)"
for ((i = 0; i < 100; i++)); do kill -0 "$(cluster_pid meta)" 2>/dev/null || break; sleep 0.1; done
"$TOOL" db "$DB" del-dentry 1 lostfile
"$TOOL" db "$DB" del-dentry 1 gone
"$TOOL" db "$DB" set-nlink "$ino_b" 3
"$TOOL" db "$DB" add-dentry "$ino_d1" ghost 777777
"$TOOL" db "$DB" set-counter next_ino 3
cluster_up
cluster_wait_mount 30

cluster_log "fsck finds every kind of damage"
fsck
expect_rc 1 "(damaged)"
for k in "unreachable: ino $ino_lost" "unreachable: ino $ino_gone" "nlink: ino $ino_b .*expected 1 was 3" \
	"dangling-dentry: ino 777777 parent $ino_d1 name 'ghost'" "nlink: ino 1 .*expected [0-9]+ was" \
	"counter: .*name 'next_ino'" "orphan-chunk: ino 987654" "orphan-chunk: ino $ino_a, 1 chunk\(s\) from index [0-9]+"; do
	expect_out "FOUND $k"
done
echo "$OUT" | grep -q corrupt-chunk && cluster_fail "corrupt chunk reported without --deep"
fsck --deep --json
expect_rc 1 "--deep --json (damaged)"
echo "$OUT" | python3 -c '
import json, sys
d = json.load(sys.stdin)
kinds = {f["kind"] for f in d["findings"]}
want = {"unreachable", "nlink", "dangling-dentry", "counter", "orphan-chunk", "corrupt-chunk"}
assert want <= kinds, (want - kinds, d)
c = [f for f in d["findings"] if f["kind"] == "corrupt-chunk"]
assert len(c) == 1 and c[0]["ino"] == int(sys.argv[1]) and c[0]["index"] == 0 and c[0]["chain"] > 0 and c[0]["target"] > 0, c
assert not d["repairs"] and not d["clean"], d
' "$ino_corrupt"

cluster_log "fsck --repair fixes what it can"
fsck --repair --deep
expect_rc 1 "--repair"
for k in "unreachable: ino $ino_lost" "unreachable: ino $ino_gone" "nlink: ino $ino_b" \
	"dangling-dentry: ino 777777" "counter: " "orphan-chunk: ino 987654" "orphan-chunk: ino $ino_a"; do
	expect_out "REPAIRED $k"
done
expect_out "FOUND corrupt-chunk: chain [0-9]+ target [0-9]+ ino $ino_corrupt index 0: no good replica"
grep -q "fsck (.*): repaired unreachable: ino $ino_lost" "$STRATA_HOME/log/meta.log" ||
	cluster_fail "meta.log does not log the repairs"
grep -q "fsck (.*): orphan chunks of inode 987654 .*removed" "$STRATA_HOME/log/meta.log" ||
	cluster_fail "meta.log does not log the orphan chunk removal"
[ -z "$(chunk_files 987654)" ] || cluster_fail "the orphan chunk of inode 987654 is still on disk"
chunk_files "$ino_a" | grep -q '/00000028$' && cluster_fail "the chunk past the end of /a is still on disk"

cluster_log "the damaged chunk is left alone (its only replica); put the byte back"
[ -f "$cf" ] || cluster_fail "fsck --repair removed the damaged chunk of a live file"
printf "\\$(printf '%03o' "$orig")" | dd of="$cf" bs=1 seek=$((24576 + 5000)) conv=notrunc status=none

cluster_log "a second fsck is clean"
fsck --deep
expect_rc 0 "(after --repair)"
fsck --json
expect_rc 0 "--json (after --repair)"

cluster_log "files read back: intact ones byte-identical, unreachable ones from /lost+found"
for f in a d1/b d1/d2/c corrupt; do
	cmp "$REF/${f//\//_}" "$MNT/$f" || cluster_fail "$f differs after fsck --repair"
done
cmp "$REF/a" "$MNT/d1/a-link" || cluster_fail "d1/a-link differs"
cmp "$REF/lostfile" "$MNT/lost+found/#$ino_lost" || cluster_fail "lostfile not in /lost+found"
cmp "$REF/gone_x" "$MNT/lost+found/#$ino_gone/x" || cluster_fail "gone/x not in /lost+found"
[ "$(stat -c %h "$MNT/d1/b")" -eq 1 ] || cluster_fail "nlink of d1/b is $(stat -c %h "$MNT/d1/b")"
[ ! -e "$MNT/d1/ghost" ] || cluster_fail "the dangling dentry is still there"
# the counter was repaired: new files get fresh inode numbers
echo new >"$MNT/new"
[ "$(stat -c %i "$MNT/new")" -gt "$ino_corrupt" ] || cluster_fail "a new file reused an inode number"
fsck
expect_rc 0 "(after new writes)"
cluster_log "ok"
