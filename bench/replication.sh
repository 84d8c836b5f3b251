#!/bin/bash
# bench/replication.sh — chain replication figures, side by side in one run:
#   1. sequential write throughput into a 3-replica chain beside a 1-replica
#      chain of the same cluster (goal: the 3-replica figure at least 0.7 of
#      the 1-replica one: writes pipeline down the chain). One cluster of 3
#      nodes with 2 targets each holds chain tables of factor 3, 2 and 1
#      (meta/README.md), one chain each; the files live in /r3 and /r1, made
#      with those factors (repl_bench, REPL_BENCH_REPLICAS). Rounds alternate
#      the two and the median of each is printed, because the machine is
#      shared. Measured twice:
#        a. "shared CPUs": every daemon and the client on this machine's
#           cores as they are — on a 2-core VM the 3 chunkservers of a chain
#           and the client compete for the same 2 cores, so 3 replicas cost
#           ~3x the CPU of 1 and the ratio says more about CPU than about
#           pipelining;
#        b. "one CPU share per host": each chunkserver and the client in
#           its own cgroup limited to HOST_CPU cores (cgroup v1 cpu or v2
#           cpu.max), as if each were its own machine: the figure the goal
#           is about (a 3-replica write costs each host about what a
#           1-replica write costs its one host, when the chain pipelines).
#           The default share fits the four emulated hosts into 70 % of
#           this machine's cores (0.35 on 2 cores): with 0.5 each, the
#           3-replica run needs every core of a 2-core VM (three hosts and
#           the client busy) while the 1-replica run needs half of them, so
#           any other load there (kernel threads, other work) took from the
#           3-replica side only: at load 4-8, 0.5 gave ratios 0.51-0.55 in
#           the same minutes in which 0.35 gave 0.75-0.83.
#   2. read throughput of the 3-replica file, reads spread over the
#      replicas beside reads from the tail only;
#   3. time from kill -9 of the 3-replica chain's head to the first write
#      that succeeds again (goal: under 2 s with the default 3 s lease).
# Each chunkserver runs in its own network namespace
# (tests/replication/netns.sh: the nodes on TCP reno, see
# chunkserver/README.md "What a replicated write costs"); the client is
# tests/replication/repl_bench.c driving chunk_client directly.
#
#   bench/replication.sh [BUILD_DIR (build-release)] [MB (256)] [THREADS (4)]
#   env: ROUNDS (5), HOST_CPU (0.7 x cores / 4, at most 1); RC_NODE_CC (reno; empty: the machine's
#   default, as before 2026-11-30) and RC_BRIDGE_NS (0; 1: the bridge in a
#   namespace of its own without br_netfilter) to compare network setups. Needs root (namespaces, cgroups, and
#   it syncs and drops the page cache before each timed step).
set -u
SRC=$(cd "$(dirname "$0")/.." && pwd)
BUILD=${1:-$SRC/build-release}
MB=${2:-256}
THREADS=${3:-4}
ROUNDS=${ROUNDS:-5}
HOST_CPU=${HOST_CPU:-$(awk -v n="$(nproc)" 'BEGIN{c = 0.7 * n / 4; if (c > 1) c = 1; printf "%.2f", c}')}
export STRATA_BIN="$BUILD/bin" STRATA_SRC="$SRC"
BENCH="$BUILD/tests/repl_bench"
[ -x "$BENCH" ] || { echo "build $BENCH first (make release)" >&2; exit 1; }
OUT=$(mktemp -d)
CG=""
# Daemon noise (the shell's "Killed" notices of chunkservers) goes to a log,
# printed only when something fails.
exec 3>&2 2>>"$OUT/log"
fail() { echo "bench/replication.sh: $*" >&3; cat "$OUT/log" >&3; exit 1; }

. "$SRC/tests/replication/netns.sh"
rc_require

cleanup() {
	local d
	if [ -n "$CG" ]; then
		for d in "$CG"/*/; do
			[ -d "$d" ] || continue
			while read -r p; do echo "$p" >"$CG/../cgroup.procs"; done <"$d/cgroup.procs" 2>/dev/null
			rmdir "$d" 2>/dev/null
		done
		rmdir "$CG" 2>/dev/null
	fi
	rc_teardown
	rm -rf "$OUT"
}

# One cgroup per host with a CPU quota of HOST_CPU cores (v1 cpu, else v2),
# over a 10 ms period: with the default 100 ms a throttled host stalls the
# whole chain for tens of ms at a time.
cg_setup() {
	local quota=$(awk -v c="$HOST_CPU" 'BEGIN{printf "%d", c * 10000}') i
	if [ -w /sys/fs/cgroup/cpu/cgroup.procs ]; then
		CG=/sys/fs/cgroup/cpu/strata-replbench.$$
		mkdir "$CG" || return 1
		for i in 1 2 3 client; do
			mkdir "$CG/h$i" && echo 10000 >"$CG/h$i/cpu.cfs_period_us" &&
				echo "$quota" >"$CG/h$i/cpu.cfs_quota_us" || return 1
		done
	elif grep -qw cpu /sys/fs/cgroup/cgroup.controllers 2>/dev/null; then
		CG=/sys/fs/cgroup/strata-replbench.$$
		mkdir "$CG" && echo +cpu >"$CG/cgroup.subtree_control" || return 1
		for i in 1 2 3 client; do
			mkdir "$CG/h$i" && echo "$quota 10000" >"$CG/h$i/cpu.max" || return 1
		done
	else
		return 1
	fi
	for i in 1 2 3; do echo "${RC_PID[$i]}" >"$CG/h$i/cgroup.procs" || return 1; done
}

# Before each timed step: nothing dirty (else later writes pay for the
# writeback of earlier ones, and 1 replica dirties a third of what 3 do)
# and the page cache dropped (else a run soon needs memory this VM never
# touched, which costs ~1.3 s/GB more the first time, and reads find the
# previous read's pages).
settle() {
	sync
	[ -w /proc/sys/vm/drop_caches ] && echo 1 >/proc/sys/vm/drop_caches
	true
}

# CPU seconds (user + system, all threads) of process $1.
proc_cpu() { awk -v hz="$(getconf CLK_TCK)" '{printf "%.3f", ($14 + $15) / hz}' "/proc/$1/stat"; }

# write FACTOR LABEL [CGROUP]: prints MB/s of one sequential write of a new
# file; appends "client node1 node2 node3" CPU seconds per GB written to
# $OUT/LABEL.cpu.FACTOR.
write_once() {
	local f=$1 label=$2 cg=${3:-} i before=() after=() res
	settle
	for i in 1 2 3; do before[$i]=$(proc_cpu "${RC_PID[$i]}"); done
	res=$(
		[ -n "$cg" ] && echo $BASHPID >"$cg/cgroup.procs"
		REPL_BENCH_REPLICAS=$f exec "$BENCH" write "$RC_META" "$MB" "$THREADS" 2>>"$OUT/files.$f"
	)
	for i in 1 2 3; do after[$i]=$(proc_cpu "${RC_PID[$i]}"); done
	echo "$res" | awk -v gb="$(awk -v m="$MB" 'BEGIN{print m * 1048576 / 1e9}')" \
		-v n1="${before[1]} ${after[1]}" -v n2="${before[2]} ${after[2]}" -v n3="${before[3]} ${after[3]}" '
		function d(s,  a) { split(s, a, " "); return (a[2] - a[1]) / gb }
		/^cpu_s/ { printf "%.2f %.2f %.2f %.2f\n", $2 / gb, d(n1), d(n2), d(n3) }' \
		>>"$OUT/$label.cpu.$f"
	echo "$res" | awk '/^MB\/s/{print $2}'
}

median() { sort -g | awk '{v[NR]=$1} END{if (NR) print v[int((NR+1)/2)]; else print "n/a"}'; }

# rounds LABEL [CGROUP]: ROUNDS alternating 1- and 3-replica writes.
rounds() {
	local i
	: >"$OUT/$1.1"
	: >"$OUT/$1.3"
	for i in $(seq 1 "$ROUNDS"); do
		if [ $((i % 2)) = 1 ]; then
			write_once 1 "$1" "${2:-}" >>"$OUT/$1.1"
			write_once 3 "$1" "${2:-}" >>"$OUT/$1.3"
		else
			write_once 3 "$1" "${2:-}" >>"$OUT/$1.3"
			write_once 1 "$1" "${2:-}" >>"$OUT/$1.1"
		fi
	done
}

ratio() { awk -v a="$1" -v b="$2" 'BEGIN{if (b > 0) printf "%.2f", a/b; else print "n/a"}'; }

report_writes() {
	local w1 w3
	w1=$(median <"$OUT/$1.1") w3=$(median <"$OUT/$1.3")
	printf "  %-46s %9s MB/s   (rounds: %s)\n" "$2, 1 replica" "$w1" "$(tr '\n' ' ' <"$OUT/$1.1")"
	printf "  %-46s %9s MB/s   (rounds: %s; ratio %s, goal >= 0.7)\n" "$2, 3 replicas" "$w3" \
		"$(tr '\n' ' ' <"$OUT/$1.3")" "$(ratio "$w3" "$w1")"
	local f
	for f in 1 3; do
		awk -v f="$f" '{for (i = 1; i <= 4; i++) s[i] += $i} END{if (NR) printf \
			"  %-46s client %.2f, node1 %.2f, node2 %.2f, node3 %.2f\n", \
			"  CPU s per GB written, " f " replica" (f > 1 ? "s" : ""), \
			s[1] / NR, s[2] / NR, s[3] / NR, s[4] / NR}' "$OUT/$1.cpu.$f"
	done
}

trap cleanup EXIT
RC_LOG_LEVEL=warn rc_start 3 2 3 || fail "cluster did not start"
trap cleanup EXIT # rc_start set its own
rc_admin --json chains | python3 -c '
import json,sys
f=sorted(c["replicas"] for c in json.load(sys.stdin)["chains"])
sys.exit(0 if 1 in f and 3 in f else 1)' || fail "no chains of factor 1 and 3: $(rc_admin chains)"

echo "chain replication: $MB MiB per write, $THREADS threads, 1 MiB chunks, 3 nodes (one netns each), $ROUNDS rounds, load $(cut -d' ' -f1-3 /proc/loadavg)"
cc=${RC_NODE_CC-reno}
echo "  network: bridge $([ -n "$RC_BNS" ] && echo "in netns $RC_BNS (br_netfilter off)" || echo "in the root netns"), nodes' tcp ${cc:-$(cat /proc/sys/net/ipv4/tcp_congestion_control)}"
rounds shared
report_writes shared "sequential write, shared CPUs"
if cg_setup; then
	rounds host "$CG/hclient"
	report_writes host "sequential write, $HOST_CPU CPU per host"
else
	echo "  (no cgroup cpu controller: the per-host CPU lines are skipped)"
fi

f3=$(awk '/^file/{print $2}' "$OUT/files.3" | tail -1)
settle
ra=$(REPL_BENCH_REPLICAS=3 REPL_BENCH_FILE=$f3 "$BENCH" read "$RC_META" "$MB" "$THREADS" any 2>/dev/null | awk '/^MB/{print $2}')
settle
rt=$(REPL_BENCH_REPLICAS=3 REPL_BENCH_FILE=$f3 "$BENCH" read "$RC_META" "$MB" "$THREADS" tail 2>/dev/null | awk '/^MB/{print $2}')
printf "  %-46s %9s MB/s\n" "read, 3 replicas, spread over replicas" "$ra"
printf "  %-46s %9s MB/s   (spread/tail %s)\n" "read, 3 replicas, tail only" "$rt" "$(ratio "$ra" "$rt")"

head=$(rc_admin --json chains | python3 -c '
import json,sys
print(next(c["targets"][0]["target"] for c in json.load(sys.stdin)["chains"] if c["replicas"] == 3))')
node=$(rc_node_of_target "$head")
fo=$(REPL_BENCH_REPLICAS=3 "$BENCH" failover "$RC_META" "${RC_PID[$node]}" 2>/dev/null | awk '{print $2}')
printf "  %-46s %9s ms     (goal < 2000)\n" "kill -9 head -> first successful write" "$fo"
