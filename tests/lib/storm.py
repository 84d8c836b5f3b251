#!/usr/bin/python3
"""storm.py — one worker of tests/lib/storm.sh: a loop of namespace
mutations whose every call must succeed, in a directory of its own.

    storm.py DIR STOP OUT

Iteration i: create f<i> with O_CREAT|O_EXCL, mkdir d<i>, symlink s<i>,
link f<i> to h<i>, rename f<i> to r<i> (renameat2 RENAME_NOREPLACE when the
libc has it, else rename), setxattr user.i on r<i> with XATTR_CREATE,
unlink h<i>; then, unless i-1 is a multiple of 10, the leftovers of i-1
go: rmdir d<i-1>, unlink s<i-1> and r<i-1>. Each of these answers EEXIST,
ENOENT or ENODATA if it is carried out twice. Stops when STOP exists and
writes to OUT "ok <iterations>" or "FAIL <call> <iteration> <error>", then
"tree ok" or "tree BAD ..." after comparing DIR with what must be there.
Progress (iterations done) is written to OUT.n as it goes."""
import ctypes
import errno
import os
import sys

root, stop, out = sys.argv[1:4]
libc = ctypes.CDLL(None, use_errno=True)
AT_FDCWD = -100
RENAME_NOREPLACE = 1


def rename_noreplace(a, b):
    f = getattr(libc, "renameat2", None)
    if f is None:
        os.rename(a, b)
        return
    if f(AT_FDCWD, a.encode(), AT_FDCWD, b.encode(), RENAME_NOREPLACE) != 0:
        e = ctypes.get_errno()
        raise OSError(e, os.strerror(e), a)


def kept(i):
    return i % 10 == 0


def run():
    os.makedirs(root, exist_ok=True)
    i = 0
    while not os.path.exists(stop):
        p = lambda n: os.path.join(root, "%s%d" % (n, i))
        q = lambda n: os.path.join(root, "%s%d" % (n, i - 1))
        steps = [
            ("create", lambda: os.close(os.open(p("f"), os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644))),
            ("mkdir", lambda: os.mkdir(p("d"))),
            ("symlink", lambda: os.symlink("t%d" % i, p("s"))),
            ("link", lambda: os.link(p("f"), p("h"))),
            ("rename", lambda: rename_noreplace(p("f"), p("r"))),
            ("setxattr", lambda: os.setxattr(p("r"), "user.i", b"%d" % i, os.XATTR_CREATE)),
            ("unlink", lambda: os.unlink(p("h"))),
        ]
        if i > 0 and not kept(i - 1):
            steps += [
                ("rmdir", lambda: os.rmdir(q("d"))),
                ("unlink", lambda: os.unlink(q("s"))),
                ("unlink", lambda: os.unlink(q("r"))),
            ]
        for name, call in steps:
            try:
                call()
            except OSError as e:
                return "FAIL %s %d %s" % (name, i, errno.errorcode.get(e.errno, e.errno)), i
        i += 1
        if i % 5 == 0:
            with open(out + ".n", "w") as f:
                f.write("%d\n" % i)
    return "ok %d" % i, i


def tree(n):
    want = set()
    for i in range(n):
        if kept(i) or i == n - 1:
            want |= {"d%d" % i, "s%d" % i, "r%d" % i}
    got = set(os.listdir(root))
    if got != want:
        return "tree BAD missing %s extra %s" % (sorted(want - got)[:5], sorted(got - want)[:5])
    for i in range(n):
        if kept(i) or i == n - 1:
            r = os.path.join(root, "r%d" % i)
            if os.getxattr(r, "user.i") != b"%d" % i or os.stat(r).st_nlink != 1:
                return "tree BAD r%d" % i
            if os.readlink(os.path.join(root, "s%d" % i)) != "t%d" % i:
                return "tree BAD s%d" % i
    return "tree ok"


res, n = run()
with open(out, "w") as f:
    f.write(res + "\n")
    if res.startswith("ok"):
        f.write(tree(n) + "\n")
