#!/usr/bin/env python3
"""cluster_bench.py — creations/s through one strata-apiserver over N
sandboxd nodes, beside the same run straight to one node's sandboxd, in
the same process tree (issue 17).

Each round: C client threads for S seconds each doing create + exec `true`
+ delete (fncall backend; the SDK over TCP with a token). Rounds alternate
direct / api (the order swapped every round) on one cluster: a real
strata-meta, N sandboxds on loopback ports (tests/cluster/cluster_harness.py)
and one apiserver. CPU per creation is measured per process tree
(utime+stime of the process and its descendants, /proc, before and after):
the apiserver's, and the nodes' (every sandboxd with its workers).

    STRATA_BIN=build-release/bin python3 bench/cluster/cluster_bench.py \\
        [--nodes 3] [--clients 8] [--seconds 8] [--rounds 3] [--latency N]

--latency N: instead, N sequential create / exec / delete at concurrency 1,
p50 and p99 of each through the apiserver (proxied) beside the same SDK
calls sent straight to the sandbox's node (what "the SDK sent to the node
directly" would cost), alternating, the order swapped every round.
"""
import argparse
import os
import sys
import tempfile
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "cluster"))
from cluster_harness import TOKEN, Cluster  # noqa: E402

import strata  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def tree_cpu(pid):
    """CPU seconds of pid and its live descendants (reaped ones are in
    their parent's cutime/cstime)."""
    kids, cpu = {}, {}
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            f = open("/proc/%s/stat" % d).read()
        except OSError:
            continue
        rest = f[f.rindex(")") + 2:].split()
        kids.setdefault(int(rest[1]), []).append(int(d))
        cpu[int(d)] = sum(int(x) for x in rest[11:15]) / TICK
    total, todo = 0.0, [pid]
    while todo:
        p = todo.pop()
        total += cpu.get(p, 0.0)
        todo += kids.get(p, [])
    return total


def run(url, clients, seconds):
    done, errors = [0], []
    stop = time.time() + seconds
    lock = threading.Lock()

    def worker():
        while time.time() < stop:
            try:
                sb = strata.Sandbox.create("busybox", "fncall", url=url, token=TOKEN)
                sb.exec(["true"])
                sb.kill()
                with lock:
                    done[0] += 1
            except strata.StrataError as e:
                errors.append(e)
    ths = [threading.Thread(target=worker) for _ in range(clients)]
    t0 = time.time()
    for t in ths:
        t.start()
    for t in ths:
        t.join()
    return done[0], time.time() - t0, errors


def pct(v, q):
    v = sorted(v)
    return v[min(len(v) - 1, int(q * len(v)))] * 1000


def latency(c, api, n, rounds):
    print("%d sequential create + exec true + delete per run, concurrency 1 (ms)" % n)
    print("%-6s %-7s %15s %15s %15s" % ("round", "path", "create p50/p99", "exec p50/p99",
                                       "delete p50/p99"))
    for r in range(rounds):
        for path in (["direct", "api"] if r % 2 == 0 else ["api", "direct"]):
            ts = {"create": [], "exec": [], "delete": []}
            for i in range(n):
                t = time.perf_counter()
                sb = strata.Sandbox.create("busybox", "fncall", url=api.url, token=TOKEN)
                ts["create"].append(time.perf_counter() - t)
                if path == "direct":  # the node the id names, as an SDK could
                    sb = strata.Sandbox.connect(sb.id, url=c.nodes[sb.info["node"]].url,
                                                token=TOKEN)
                t = time.perf_counter()
                sb.exec(["true"])
                ts["exec"].append(time.perf_counter() - t)
                t = time.perf_counter()
                sb.kill()
                ts["delete"].append(time.perf_counter() - t)
            print("%-6d %-7s %15s %15s %15s" % (r + 1, path, *(
                "%.2f/%.2f" % (pct(ts[k], 0.5), pct(ts[k], 0.99))
                for k in ("create", "exec", "delete"))))
            sys.stdout.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--nodes", type=int, default=3)
    ap.add_argument("--clients", type=int, default=8)
    ap.add_argument("--seconds", type=float, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--latency", type=int, default=0)
    ap.add_argument("--check", action="store_true",
                    help="exit 1 on any failed operation or a run without any")
    o = ap.parse_args()
    base = tempfile.mkdtemp(prefix="strata-clbench-")
    c = Cluster(base, lease_ms=3000)
    try:
        for i in range(1, o.nodes + 1):
            c.add_node(i, ["--log-level", "warn"])
        api = c.add_apiserver(["--log-level", "warn"])
        c.wait_nodes(lambda t: len(t) == o.nodes)
        time.sleep(0.5)
        if o.latency:
            return latency(c, api, o.latency, o.rounds)
        nodes = [d.proc.pid for d in c.nodes.values()]
        bad = False
        print("nodes %d, clients %d, %.0f s per run, fncall create + exec true + delete"
              % (o.nodes, o.clients, o.seconds))
        print("%-6s %-7s %8s %10s %14s %14s %7s" % ("round", "path", "ops", "ops/s",
                                                   "node ms/op", "apisrv ms/op", "errors"))
        for r in range(o.rounds):
            order = ["direct", "api"] if r % 2 == 0 else ["api", "direct"]
            for path in order:
                url = c.nodes[1].url if path == "direct" else api.url
                n0 = sum(tree_cpu(p) for p in nodes)
                a0 = tree_cpu(api.proc.pid)
                ops, el, errs = run(url, o.clients, o.seconds)
                bad = bad or bool(errs) or ops == 0
                n1 = sum(tree_cpu(p) for p in nodes)
                a1 = tree_cpu(api.proc.pid)
                per = 1000.0 / max(ops, 1)
                print("%-6d %-7s %8d %10.1f %14.3f %14.3f %7d" % (
                    r + 1, path, ops, ops / el, (n1 - n0) * per, (a1 - a0) * per, len(errs)))
                sys.stdout.flush()
    finally:
        c.stop()
    if o.check and bad:
        sys.exit(1)


if __name__ == "__main__":
    main()
