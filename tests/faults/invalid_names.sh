#!/usr/bin/env bash
# tests/faults/invalid_names.sh SUITE — invalid names and limits through the
# mount: over-long names and paths, "." / ".." misuse, odd bytes (the names
# group of the POSIX suite), plus xattr and symlink limits; the mount must
# keep answering afterwards.
set -euo pipefail
suite=$1
. "${STRATA_SRC:-$(dirname "$0")/../..}/tests/lib/cluster.sh"
cluster_require
cluster_start
"$suite" "$MNT" names
python3 - "$MNT" <<'PY'
import errno, os, sys
mnt = sys.argv[1]
d = os.path.join(mnt, "limits")
os.mkdir(d)
def expect(what, fn, err):
    try:
        fn()
    except OSError as e:
        if e.errno in err:
            print("  %s: %s" % (what, errno.errorcode[e.errno]))
            return
        sys.exit("FAIL %s: expected %s, got %s" % (what, "/".join(errno.errorcode[x] for x in err), e))
    sys.exit("FAIL %s: expected %s, got success" % (what, "/".join(errno.errorcode[x] for x in err)))
def ok(what, fn):
    try:
        fn()
    except OSError as e:
        sys.exit("FAIL %s: expected success, got %s" % (what, e))
    print("  %s: ok" % what)
f = os.path.join(d, "f")
open(f, "w").close()
n255 = "a" * 255
n256 = "b" * 256
ok("create a 255-byte name", lambda: open(os.path.join(d, n255), "w").close())
expect("create a 256-byte name", lambda: open(os.path.join(d, n256), "w"), (errno.ENAMETOOLONG,))
expect("mkdir a 256-byte name", lambda: os.mkdir(os.path.join(d, n256)), (errno.ENAMETOOLONG,))
expect("rename to a 256-byte name", lambda: os.rename(f, os.path.join(d, n256)), (errno.ENAMETOOLONG,))
expect("lookup a 256-byte name", lambda: os.stat(os.path.join(d, n256)), (errno.ENAMETOOLONG,))
ok("symlink with a 4095-byte target", lambda: os.symlink("t" * 4095, os.path.join(d, "long-link")))
if os.readlink(os.path.join(d, "long-link")) != "t" * 4095:
    sys.exit("FAIL readlink of a 4095-byte target")
expect("symlink with a 4096-byte target", lambda: os.symlink("t" * 4096, os.path.join(d, "too-long")), (errno.ENAMETOOLONG,))
ok("xattr name of 255 bytes", lambda: os.setxattr(f, "user." + "x" * 250, b"v"))
expect("xattr name of 256 bytes", lambda: os.setxattr(f, "user." + "x" * 251, b"v"), (errno.ERANGE,))
ok("xattr value of 64 KiB", lambda: os.setxattr(f, "user.big", b"v" * 65536))
if os.getxattr(f, "user.big") != b"v" * 65536:
    sys.exit("FAIL a 64 KiB xattr value reads back wrong")
expect("xattr value over 64 KiB", lambda: os.setxattr(f, "user.huge", b"v" * 65537), (errno.E2BIG, errno.ENOSPC, errno.ERANGE))
try:  # ext4 refuses it; FUSE passes every namespace to the daemon: a note, not a failure
    os.setxattr(f, "bogus.name", b"v")
    print("  note: xattr in an unknown namespace (bogus.name) is accepted")
except OSError as e:
    print("  xattr in an unknown namespace: %s" % errno.errorcode[e.errno])
expect("empty xattr name", lambda: os.setxattr(f, "", b"v"), (errno.ERANGE, errno.EINVAL))
# A deep tree up to the path limit.
p = d
depth = 0
while len(p) + 101 < 4000:
    p = os.path.join(p, "d" * 100)
    os.mkdir(p)
    depth += 1
ok("file at the end of a %d-level path" % depth, lambda: open(os.path.join(p, "leaf"), "w").close())
print("limits: all checks passed")
PY
ls "$MNT" >/dev/null || cluster_fail "the mount stopped answering"
cluster_log "PASS: invalid names"
