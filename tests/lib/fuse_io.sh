# tests/lib/fuse_io.sh — shell helpers of the strata-fuse survival tests
# (tests/fuse/restart.sh, holder_kill.sh) over tests/lib/fuse_io.py's
# reader, whose log is $CLUSTER_TMP/reads. Source after cluster.sh.

FUSE_IO="$STRATA_SRC/tests/lib/fuse_io.py"

# Good passes the reader has made so far.
fuse_io_passes() {
	local n
	n=$(grep -c '^ok ' "$CLUSTER_TMP/reads" 2>/dev/null)
	echo "${n:-0}"
}

# Waits (up to 30 s) until the reader has made N good passes, else fails.
fuse_io_wait_passes() {
	local i
	for i in $(seq 300); do [ "$(fuse_io_passes)" -ge "$1" ] && return 0; sleep 0.1; done
	cluster_fail "the reader stopped making progress ($(fuse_io_passes) passes, want $1)"
}

# True if pid $1 is alive and not a zombie (a daemon is reaped by whoever
# adopted it, maybe not yet).
fuse_io_alive() { [ -r "/proc/$1/stat" ] && ! sed 's/.*) //' "/proc/$1/stat" 2>/dev/null | grep -q '^Z'; }

# Writes a random file of $1 MiB to $MNT/big and starts, on it, a file held
# open (pid $held; read at the end) and the verifying reader (pid $reader);
# returns once the reader made $2 good passes and the held file is open.
# Sets want (the file's sha256).
fuse_io_start() {
	local i
	head -c $(($1 << 20)) /dev/urandom >"$CLUSTER_TMP/big"
	cp "$CLUSTER_TMP/big" "$MNT/big"
	want=$(sha256sum <"$CLUSTER_TMP/big" | cut -d' ' -f1)
	python3 "$FUSE_IO" held "$MNT/big" "$CLUSTER_TMP/go" "$CLUSTER_TMP/held" &
	held=$!
	python3 "$FUSE_IO" reader "$MNT/big" "$want" "$CLUSTER_TMP/stop" "$CLUSTER_TMP/reads" &
	reader=$!
	fuse_io_wait_passes "$2"
	for i in $(seq 100); do grep -q ready "$CLUSTER_TMP/held" 2>/dev/null && break; sleep 0.1; done
}
