#!/usr/bin/env bash
# tests/fsck/fsck_online.sh — `strata fsck --repair` while the cluster is
# busy: a writer keeps creating files (several chunks each, some still open
# while fsck runs), hard links, renames, directories, and removes older
# ones (their chunks queued for and removed by the GC). Every fsck run must
# find nothing and repair nothing (exit 0), and every file the writer kept
# must read back with the checksum it was written with. With two nodes the
# replicas of every chain are compared too, while writes are in flight.
set -euo pipefail
# usage: fsck_online.sh [STRATA UP ARGS...]  (e.g. --nodes 2 --no-netns:
# chains of two replicas, compared while the writes land)
. "${STRATA_SRC:-$(dirname "$0")/../..}/tests/lib/cluster.sh"
cluster_require
cluster_start "$@"

W=$MNT/w
SUMS=$CLUSTER_TMP/sums
STOP=$CLUSTER_TMP/stop
mkdir -p "$W" "$SUMS"

writer() {
	local i=0 n f
	while [ ! -e "$STOP" ]; do
		i=$((i + 1))
		n=$((RANDOM % 5 + 1))
		f=$W/f$i
		# written in pieces with a pause: the file is open during fsck runs
		{
			head -c $((n * 300000)) /dev/urandom
			sleep 0.$((RANDOM % 3))
			head -c $((RANDOM * 7)) /dev/urandom
		} >"$f.tmp"
		mv "$f.tmp" "$f"
		sha256sum <"$f" | cut -d' ' -f1 >"$SUMS/f$i"
		if [ $((i % 4)) -eq 0 ]; then
			ln "$f" "$W/l$i"
			cp "$SUMS/f$i" "$SUMS/l$i"
		fi
		if [ $((i % 5)) -eq 0 ]; then
			mkdir -p "$W/d$i/sub"
			echo "$i" >"$W/d$i/sub/x"
			echo "$i" | sha256sum | cut -d' ' -f1 >"$SUMS/d$i"
		fi
		if [ $i -gt 3 ]; then # remove an older file and directory
			rm -f "$W/f$((i - 3))" "$SUMS/f$((i - 3))"
			if [ -d "$W/d$((i - 10))" ]; then
				rm -rf "$W/d$((i - 10))"
				rm -f "$SUMS/d$((i - 10))"
			fi
		fi
	done
}

# many one-chunk files created and removed at once: GC churn under fsck
churn() {
	local j=0
	mkdir -p "$W/churn"
	while [ ! -e "$STOP" ]; do
		j=$((j + 1))
		head -c 200000 /dev/urandom >"$W/churn/c$j"
		[ $j -gt 2 ] && rm -f "$W/churn/c$((j - 2))"
	done
	return 0
}

cluster_log "writers started"
writer &
wpid=$!
churn &
cpid=$!
sleep 2

runs=0
for args in "--repair" "--repair --json" "--deep --repair" "" "--repair" "--deep" \
	"--repair" "--repair --json" "--deep --repair" "--repair"; do
	set +e
	# shellcheck disable=SC2086
	out=$("$STRATA" fsck --home "$STRATA_HOME" $args 2>&1)
	rc=$?
	set -e
	runs=$((runs + 1))
	echo "$out" | sed 's/^/  fsck| /' >&2
	[ "$rc" -eq 0 ] || { touch "$STOP"; wait || true; cluster_fail "fsck $args during writes: exit $rc (false findings or repairs)"; }
	echo "$out" | grep -qE "REPAIRED|FOUND" && { touch "$STOP"; wait || true; cluster_fail "fsck $args reported during writes"; }
	kill -0 "$wpid" 2>/dev/null || cluster_fail "the writer died"
	sleep 0.5
done
touch "$STOP"
wait "$wpid" || cluster_fail "the writer failed"
wait "$cpid" || cluster_fail "the churn writer failed"
cluster_log "$runs fsck runs during writes: all clean"

cluster_log "every kept file reads back"
kept=0
for s in "$SUMS"/*; do
	name=$(basename "$s")
	case "$name" in
	d*) p=$W/$name/sub/x ;;
	*) p=$W/$name ;;
	esac
	[ -e "$p" ] || continue # removed by the writer's last round after its sum was kept
	got=$(sha256sum <"$p" | cut -d' ' -f1)
	[ "$got" = "$(cat "$s")" ] || cluster_fail "$p does not read back as written"
	kept=$((kept + 1))
done
[ "$kept" -ge 3 ] || cluster_fail "only $kept files kept: the writer did not run"
cluster_log "$kept files intact"

out=$("$STRATA" fsck --home "$STRATA_HOME" --deep) || cluster_fail "final fsck --deep: $out"
cluster_log "ok"
