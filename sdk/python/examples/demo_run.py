"""The end of `make run`: create sandboxes from an image through the SDK,
run commands in them, and print what happened and how fast.

    python3 sdk/python/examples/demo_run.py IMAGE [--count N] [--backend B]

Finds sandboxd like every SDK program ($STRATA_SANDBOXD_SOCKET, else
$STRATA_HOME/run/sandboxd.sock). Uses the container backend when the node
has it, else fncall. Exit status 0 when every step worked."""
import argparse
import statistics
import sys
import time

import strata
from strata import Sandbox


def pick_backend(wanted):
    caps = strata.capabilities()
    if wanted:
        return wanted
    return "container" if caps["container"]["available"] else "fncall"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("image")
    ap.add_argument("--count", type=int, default=20)
    ap.add_argument("--backend")
    a = ap.parse_args()
    backend = pick_backend(a.backend)
    print("sandboxd: healthy=%s; backends: %s" % (strata.health(), ", ".join(
        "%s%s" % (k, "" if v["available"] else " (unavailable)")
        for k, v in strata.capabilities().items())))
    t0 = time.perf_counter()
    boxes = Sandbox.create_many(a.image, a.count, backend, labels={"demo": "make-run"}, ttl=300)
    t_create = time.perf_counter() - t0
    lat = []
    for i, sb in enumerate(boxes):
        t = time.perf_counter()
        r = sb.exec(["sh", "-c", "echo sandbox %d: $(hostname) $(id -u)" % i], timeout=30)
        lat.append(time.perf_counter() - t)
        if r.exit_code != 0:
            print("exec failed in %s: %r" % (sb.id, r), file=sys.stderr)
            return 1
    print(r.stdout.strip())
    t = time.perf_counter()
    for sb in boxes:
        sb.kill()
    t_delete = time.perf_counter() - t
    print("%d %s sandboxes from %s: created in %.2fs (%.0f/s), exec p50 %.1f ms, "
          "deleted in %.2fs" % (a.count, backend, a.image, t_create, a.count / t_create,
                                statistics.median(lat) * 1e3, t_delete))
    node = strata.node_metrics()
    print("node: %d sandboxes now, sandboxd RSS %d kB" % (node["sandboxes"], node["sandboxd_rss_kb"]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
