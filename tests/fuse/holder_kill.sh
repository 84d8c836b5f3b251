#!/usr/bin/env bash
# holder_kill.sh — strata-fuse-holder dies while strata-fuse lives. First
# plainly: strata-fuse starts a new holder at once and hands it the
# connection and its operation-id connection id (fuse/opid.c). Then with no
# holder binary: the mount goes on working (a reader's O_DIRECT passes and new files), `strata
# status` says it is unprotected and `strata restart fuse` refuses (that
# restart would end the mount) while no new holder can be started; once one
# can, strata-fuse hands it the connection by itself, and a kill -9 of
# strata-fuse is survived again (fuse/README.md "Surviving a crash",
# fuse/takeover.c's watcher), with a storm of mutations under it
# (tests/lib/storm.sh) whose every call succeeds across that kill, and the
# successor serves the connection under the id the first mount made. The
# cluster runs from a directory of links to the build's binaries, so that
# the holder's binary can be taken away.
set -u
. "$(dirname "$0")/../lib/cluster.sh"
. "$(dirname "$0")/../lib/fuse_io.sh"
. "$(dirname "$0")/../lib/storm.sh"
cluster_require
command -v python3 >/dev/null || cluster_skip "python3 is missing"
[ -x "$STRATA_BIN/strata-fuse-holder" ] || cluster_skip "$STRATA_BIN/strata-fuse-holder is not built"
cluster_prepare
mkdir "$CLUSTER_TMP/bin"
for b in strata strata-meta strata-chunkserver strata-fuse strata-fuse-holder; do
	ln "$STRATA_BIN/$b" "$CLUSTER_TMP/bin/$b" 2>/dev/null || cp "$STRATA_BIN/$b" "$CLUSTER_TMP/bin/$b" ||
		cluster_fail "cannot copy $b"
done
export STRATA_BIN="$CLUSTER_TMP/bin"
STRATA="$STRATA_BIN/strata"
HOLDER_BIN="$STRATA_BIN/strata-fuse-holder"
cluster_start

status_json() { "$STRATA" status --home "$STRATA_HOME" --json; }
field() { # python expression on the status document d
	status_json | python3 -c "import json,sys; d = json.load(sys.stdin); print($1)"
}
wait_for() { # EXPR VALUE SECONDS
	local i
	for ((i = 0; i < $3 * 10; i++)); do [ "$(field "$1")" = "$2" ] && return 0; sleep 0.1; done
	return 1
}
[ "$(field 'd["mount"]["protected"]')" = True ] || cluster_fail "the fresh mount is not protected"

fuse_io_start 8 1
storm_start 12
storm_wait_progress 60 "at the start"
conn=$(sed -n 's/.*Mounted strata .*, connection \([0-9a-f]*\)$/\1/p' "$STRATA_HOME/log/fuse.log" | tail -1)
[ -n "$conn" ] || cluster_fail "strata-fuse did not log its connection id"

# The holder dies: strata-fuse starts a new one at once.
hpid0=$(field 'd["fuse_holder"]["pid"]')
[ "$hpid0" -gt 0 ] || cluster_fail "no holder pid in strata status --json"
cluster_log "kill -9 strata-fuse-holder ($hpid0): strata-fuse replaces it"
kill -9 "$hpid0"
for i in $(seq 100); do
	[ "$(field 'd["fuse_holder"]["pid"]')" != "$hpid0" ] && [ "$(field 'd["mount"]["protected"]')" = True ] && break
	sleep 0.1
done
[ "$(field 'd["fuse_holder"]["pid"]')" != "$hpid0" ] || cluster_fail "no new holder 10 s after the kill"
[ "$(field 'd["mount"]["protected"]')" = True ] || cluster_fail "the new holder does not protect the mount"
grep -q "went away: starting a new one" "$STRATA_HOME/log/fuse.log" ||
	cluster_fail "strata-fuse did not log the holder's death"
storm_wait_progress 30 "after the holder's kill"

# The holder dies and no new one can start.
hpid=$(field 'd["fuse_holder"]["pid"]')
[ "$hpid" -gt 0 ] || cluster_fail "no holder pid in strata status --json"
mv "$HOLDER_BIN" "$HOLDER_BIN.away"
cluster_log "kill -9 strata-fuse-holder ($hpid), its binary taken away"
kill -9 "$hpid"
wait_for 'd["mount"]["protected"]' False 10 || cluster_fail "strata status still says the mount is protected"
sleep 1.5 # strata-fuse's attempts to start a new holder fail meanwhile
"$STRATA" status --home "$STRATA_HOME" | grep -q "mount .*: mounted, unprotected" ||
	cluster_fail "strata status does not say the mount is unprotected: $("$STRATA" status --home "$STRATA_HOME" | grep mount)"
[ "$(field 'd["fuse_holder"]["state"]')" = none ] || cluster_fail "a holder answers without its binary"
grep -q "is unprotected" "$STRATA_HOME/log/fuse.log" || cluster_fail "strata-fuse did not log that the mount is unprotected"
before=$(fuse_io_passes)
fuse_io_wait_passes $((before + 2))
echo written >"$MNT/new" && [ "$(cat "$MNT/new")" = written ] || cluster_fail "the mount does not work without the holder"
out=$("$STRATA" restart --home "$STRATA_HOME" fuse 2>&1) && cluster_fail "strata restart fuse went on without a holder: $out"
echo "$out" | grep -q "a restart would end the mount" || cluster_fail "strata restart fuse: $out"
# A bare SIGUSR2 is refused by strata-fuse itself.
pid=$(cluster_pid fuse)
kill -USR2 "$pid"
sleep 0.5
fuse_io_alive "$pid" || cluster_fail "strata-fuse exited on SIGUSR2 with nobody to keep its connection"
grep -q "SIGUSR2 ignored" "$STRATA_HOME/log/fuse.log" || cluster_fail "strata-fuse did not log the refused SIGUSR2"

# The binary is back: strata-fuse starts a holder by itself.
mv "$HOLDER_BIN.away" "$HOLDER_BIN"
wait_for 'd["mount"]["protected"]' True 10 || cluster_fail "no new holder once its binary was back"
hpid2=$(field 'd["fuse_holder"]["pid"]')
[ "$hpid2" != "$hpid" ] || cluster_fail "the holder pid did not change"
cluster_log "a new holder ($hpid2) keeps the connection; kill -9 strata-fuse ($pid)"
kill -9 "$pid"
sleep 0.5
cluster_up
cluster_wait_mount 30
"$STRATA" status --home "$STRATA_HOME" | grep -q "1 takeover" || cluster_fail "strata status does not count the takeover"
grep -q "Serving strata .*, connection $conn\$" "$STRATA_HOME/log/fuse.log" ||
	cluster_fail "the successor does not serve under connection $conn (the replacement holder lost it)"
storm_wait_progress 60 "after the kill of strata-fuse"
storm_finish
before=$(fuse_io_passes)
fuse_io_wait_passes $((before + 2))
touch "$CLUSTER_TMP/stop" "$CLUSTER_TMP/go"
for i in $(seq 300); do kill -0 "$reader" 2>/dev/null || kill -0 "$held" 2>/dev/null || break; sleep 0.1; done
kill -0 "$reader" 2>/dev/null || kill -0 "$held" 2>/dev/null && cluster_fail "a read never completed"
wait "$reader" "$held"
cut -d' ' -f1 "$CLUSTER_TMP/reads" | sort | uniq -c | sed 's/^/  reads: /' >&2
grep -v '^ok ' "$CLUSTER_TMP/reads" && cluster_fail "a read failed or returned wrong bytes"
[ "$(tail -1 "$CLUSTER_TMP/held")" = "$want" ] || cluster_fail "the file held open reads wrong bytes"
[ "$(cat "$MNT/new")" = written ] || cluster_fail "the file written without a holder is lost"
cluster_log "PASS: the mount outlived its holder twice, and with a new one a kill -9 of strata-fuse under $(storm_progress) storm iterations"
