#!/usr/bin/env python3
"""tests/fuse/meta_calls.py MNT [N] | --visibility MNT OTHER_MNT — the round trips of metadata operations
in one directory, read from the mount's request counters (fuse/stats.c,
xattr trusted.strata.stats): meta calls per create, cold stat and unlink
must stay at or under what the caches promise (fuse/README.md "Round trips
per operation"). Prints the costs; exits 1 naming each one over its bound.
Run by tests/fuse/meta_calls.sh on a fresh cluster."""
import os
import sys
import time

STATS = "trusted.strata.stats"


def counters(mnt):
    text = os.getxattr(mnt, STATS).decode()
    out = {}
    for line in text.splitlines():
        name, value = line.split()
        out[name] = int(value)
    return out


def drop_caches():
    os.sync()
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def per_op(before, after, n):
    keys = set(before) | set(after)
    return {k: (after.get(k, 0) - before.get(k, 0)) / n for k in keys
            if after.get(k, 0) != before.get(k, 0) and k != "fuse.GETXATTR"}


def phase(mnt, d, n, name, fn):
    before = counters(mnt)
    for i in range(n):
        fn(os.path.join(d, "f%06d" % i))
    cost = per_op(before, counters(mnt), n)
    print("%-8s %s" % (name, " ".join("%s=%.2f" % kv for kv in sorted(cost.items()))))
    return cost


def create(path):
    os.close(os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))


# per phase: meta call -> most allowed per operation
BOUNDS = {
    # the lookup before a create is answered by the directory's listing, the
    # close batched (fuse/dircache.c, fuse/closer.c)
    "create": {"meta.create": 1.0, "meta.lookup": 0.05, "meta.close_many": 1.0},
    # a cold stat is answered by the listing: a page per 1024 names
    "stat": {"meta.lookup": 0.05, "meta.readdir": 0.05},
    # the removal's answer refreshes the parent and the removed inode: no
    # GETATTR of either, no write-back of the kernel's ctime (fuse/attrcache.c)
    "unlink": {"meta.unlink": 1.0, "meta.lookup": 0.05},
    # the rename's answer refreshes both inodes and the parent: the kernel's
    # ctime write-back and the directory's GETATTR cost no meta call
    "rename": {"meta.rename": 1.0},
}


def visibility(mnt, other):
    """A name created through another mount (another node) is seen here
    within the listing's window, as a negative dentry would let it be: the
    listing of a directory looked up often is not trusted past 1 s."""
    d, d2 = os.path.join(mnt, "vis"), os.path.join(other, "vis")
    os.mkdir(d)
    for i in range(8):  # enough misses to have the directory listed
        assert not os.path.exists(os.path.join(d, "absent%d" % i))
    start = time.monotonic()
    create(os.path.join(d2, "late"))
    while not os.path.exists(os.path.join(d, "late")):
        if time.monotonic() - start > 3.0:
            print("FAIL: a name created on another mount is not seen here after 3 s")
            sys.exit(1)
        time.sleep(0.05)
    print("visibility: a name created on another mount seen after %.2f s" %
          (time.monotonic() - start))


def main():
    if sys.argv[1] == "--visibility":
        visibility(sys.argv[2], sys.argv[3])
        return
    mnt = sys.argv[1]
    n = int(sys.argv[2]) if len(sys.argv) > 2 else 500
    d = os.path.join(mnt, "one")
    os.mkdir(d)
    costs = {"create": phase(mnt, d, n, "create", create)}
    drop_caches()
    costs["stat"] = phase(mnt, d, n, "stat", os.stat)
    assert len(os.listdir(d)) == n, "every created file is listed"
    costs["rename"] = phase(mnt, d, n, "rename", lambda p: os.rename(p, p + ".r"))
    drop_caches()
    costs["unlink"] = phase(mnt, d, n, "unlink", lambda p: os.unlink(p + ".r"))
    assert os.listdir(d) == [], "every file is gone"
    bad = []
    for ph, bounds in BOUNDS.items():
        for key, most in bounds.items():
            got = costs[ph].get(key, 0)
            if got > most + 0.01:  # the directory's own lookup and the like
                bad.append("%s: %s %.2f per operation, at most %.2f" % (ph, key, got, most))
        for key, got in costs[ph].items():
            if key.startswith("meta.") and key not in bounds and got > 0.05:
                bad.append("%s: %s %.2f per operation, none expected" % (ph, key, got))
    for b in bad:
        print("FAIL:", b)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
