"""tests/usrbio/usrbio_py.py MNT SOCKET — the Python binding
(sdk/python/strata/usrbio.py) against FUSE: bytes written through FUSE read
through the ring, bytes written through the ring read through FUSE, a short
read at the end, EBADF for a write through a read-only registration."""
import errno
import os
import sys

sys.path.insert(0, os.path.join(os.environ["STRATA_SRC"], "sdk", "python"))
from strata.usrbio import NativeClient  # noqa: E402

mnt, sock = sys.argv[1], sys.argv[2]
path = os.path.join(mnt, "py1")
data = os.urandom(300000)
with open(path, "wb") as f:
    f.write(data)
with NativeClient(sock) as nc:
    ro = nc.register(path)
    for off, n in ((0, 4096), (12345, 70000), (299000, 4096)):
        got = nc.pread(ro, n, off)
        assert got == data[off:off + n], "ring read at %d differs from FUSE's write" % off
    try:
        nc.pwrite(ro, b"x", 0)
        raise AssertionError("write through a read-only registration succeeded")
    except OSError as e:
        assert e.errno == errno.EBADF, e
    rw = nc.register(path, "r+b")
    assert nc.pwrite(rw, b"hello", 100) == 5
    assert nc.pwrite(rw, b"tail", len(data)) == 4
    nc.fsync(rw)
with open(path, "rb") as f:
    back = f.read()
want = data[:100] + b"hello" + data[105:] + b"tail"
assert back == want, "FUSE read differs from ring writes"
print("ok   python binding")
