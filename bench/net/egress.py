"""Network "egress" benchmark (issue 19), one run, side by side:
  - creations/s of container sandboxes with network "egress" and a policy
    against network "none" (rounds alternate, median of each);
  - TCP connect latency and bulk throughput from a sandbox through the
    node's NAT against the same client run on the node itself ("host");
  - the cost of a policy update (PUT .../network) with 1 and with --alive
    sandboxes attached.
The outside world is network namespaces (tests/net/egress_ns.py); nothing
leaves this machine. Run as root under flock /tmp/strata-bench.lock:
  flock /tmp/strata-bench.lock python3 bench/net/egress.py --bin build-release/bin"""
import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path[:0] = [os.path.join(SRC, "sdk", "python"), os.path.join(SRC, "tests", "sdk"),
                os.path.join(SRC, "tests", "net")]

import sandboxd_harness  # noqa: E402
from egress_ns import ALLOWED, DNS, World  # noqa: E402

import strata  # noqa: E402

POLICY = dict(allow_out=[ALLOWED + "/32:80", "allowed.example", "*.cdn.example:443"],
              deny_out=["198.51.100.20/32"])

CLIENT = r"""
import socket, sys, time
addr, port, n, mode = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if mode == "connect":
    ts = []
    for _ in range(n):
        s = socket.socket()
        t = time.perf_counter()
        s.connect((addr, port))
        ts.append(time.perf_counter() - t)
        s.close()
    ts.sort()
    print("%.1f %.1f" % (ts[len(ts) // 2] * 1e6, ts[int(len(ts) * 0.99)] * 1e6))
else:
    s = socket.create_connection((addr, port))
    t, got = time.perf_counter(), 0
    while True:
        b = s.recv(1 << 20)
        if not b:
            break
        got += len(b)
    print("%.1f" % (got / (time.perf_counter() - t) / 1e6))
"""


def start_daemon(world, base, binary):
    root = os.path.join(base, "rootfs")
    sandboxd_harness.BUSYBOX_APPLETS += ["nc"]
    sandboxd_harness.make_busybox_rootfs(root)
    wrapper = world.sandboxd_wrapper(binary, base)
    real = sandboxd_harness.sandboxd_binary
    sandboxd_harness.sandboxd_binary = lambda: wrapper
    d = sandboxd_harness.Daemon(base, {"busybox": root, "hostroot": "/"},
                                ["--net-uplink", "up0", "--net-dns", DNS, "--log-level", "warn",
                                 "--max-sandboxes", "4096",
                                 "--memory-budget-mb", "1048576", "--pids-budget", "1048576"])
    try:
        d.start()
    finally:
        sandboxd_harness.sandboxd_binary = real
    return d


def create_rate(sock, n, par, egress):
    kw = dict(network="egress", **POLICY) if egress else dict(network="none")
    t = time.perf_counter()
    sbs = strata.Sandbox.create_many("busybox", n, parallelism=par, socket=sock, **kw)
    rate = n / (time.perf_counter() - t)
    for sb in sbs:
        sb.kill()
    return rate


def policy_update_ms(sb, k=20):
    ts = []
    for i in range(k):
        t = time.perf_counter()
        sb.set_network_policy(allow_out=[ALLOWED + "/32:%d" % (80 + i % 2), "allowed.example"])
        ts.append(time.perf_counter() - t)
    return statistics.median(ts) * 1e3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=os.path.join(SRC, "build-release", "bin"))
    ap.add_argument("--n", type=int, default=100, help="sandboxes per creation round")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--parallelism", type=int, default=4)
    ap.add_argument("--alive", type=int, default=200,
                    help="sandboxes attached while policies are updated")
    a = ap.parse_args()
    binary = os.path.join(a.bin, "strata-sandboxd")
    base = tempfile.mkdtemp(prefix="strata-egress-bench-")
    with World("b%d" % os.getpid()) as world:
        d = start_daemon(world, base, binary)
        try:
            sock = d.socket
            create_rate(sock, 10, a.parallelism, True)  # warm: pools, caches
            rates = {False: [], True: []}
            for _ in range(a.rounds):
                for egress in (False, True):
                    rates[egress].append(create_rate(sock, a.n, a.parallelism, egress))
            none, egr = statistics.median(rates[False]), statistics.median(rates[True])
            print("creations/s (n=%d, parallelism %d, median of %d rounds): none %.1f, "
                  "egress+policy %.1f, ratio %.2f" % (a.n, a.parallelism, a.rounds, none, egr,
                                                     egr / none))
            # The node's client first: a sandbox of image "/" unmounts the
            # host's /run/netns entries (found here; sandbox/net/README.md).
            res = {}
            for where in ("node (host)", "sandbox (NAT)"):
                if where.startswith("sandbox"):
                    sb = strata.Sandbox.create("hostroot", network="egress", socket=sock)
                out = []
                for mode, port, n in (("connect", 80, 500), ("bulk", 8090, 1)):
                    argv = ["python3", "-c", CLIENT, ALLOWED, str(port), str(n), mode]
                    if where.startswith("sandbox"):
                        out.append(sb.exec(argv, timeout=120).stdout.strip())
                        continue
                    r = world.in_node(*argv, capture_output=True, text=True)
                    if r.returncode:
                        raise RuntimeError("client on the node: " + r.stderr)
                    out.append(r.stdout.strip())
                res[where] = out
            try:
                for where, (conn, bulk) in res.items():
                    med, p99 = conn.split()
                    print("%-14s TCP connect median %s us, p99 %s us; bulk %s MB/s"
                          % (where, med, p99, bulk))
                one = policy_update_ms(sb)
                many = strata.Sandbox.create_many("busybox", a.alive, parallelism=a.parallelism,
                                                  socket=sock, network="egress", memory_mb=16,
                                                  pids=8, **POLICY)
                try:
                    at = policy_update_ms(sb)
                finally:
                    for s in many:
                        s.kill()
                print("policy update (PUT .../network, median of 20): %.2f ms with 1 sandbox, "
                      "%.2f ms with %d" % (one, at, a.alive + 1))
            finally:
                sb.kill()
        finally:
            d.stop()
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
