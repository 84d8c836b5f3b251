"""File transfers of container sandboxes against a hostile sandbox or client
(review of issue 13: items 2, 6, 7, 9, 10, 11(e)): an upload with user= over
a name the sandbox swapped for a symlink to a root-owned file; a failed
upload that must leave the old file whole; transfers that end when their
sandbox is destroyed; the per-sandbox cap of transfers; pax headers with
numbers ustar cannot hold; a malformed mode refused."""
import io
import os
import socket
import sys
import tarfile
import time

import pytest

from sandboxd_harness import SRC

sys.path.insert(0, os.path.join(SRC, "sdk", "python"))
import strata  # noqa: E402
from test_files_stream import container, sh  # noqa: E402,F401 (a fixture, a helper)

PER_SANDBOX_MAX = 8  # XFER_PER_SANDBOX_MAX (xfer.h)


@pytest.fixture
def box(container):
    with strata.Sandbox.create("busybox", backend="container", socket=container.socket,
                               disk_mb=64, memory_mb=128) as sb:
        yield sb


def open_put(daemon, sid, path, head_extra, first=b""):
    """A PUT .../files whose body is still to come: the open socket."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(20)
    s.connect(daemon.socket)
    s.sendall(("PUT /v1/sandboxes/%s/files?path=%s HTTP/1.1\r\nHost: x\r\n"
               "Connection: close\r\n%s\r\n" % (sid, path, head_extra)).encode() + first)
    return s


def read_reply(s):
    out = b""
    while True:
        try:
            b = s.recv(65536)
        except (ConnectionResetError, socket.timeout):
            break
        if not b:
            break
        out += b
    return out


def tar_of(members):
    """A ustar archive of regular files: members is [(name, data)]."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name, data in members:
            ti = tarfile.TarInfo(name)
            ti.size = len(data)
            tf.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def test_user_upload_over_a_swapped_symlink(box):
    # the user replaces a file it owns by a symlink to a root-only file
    sh(box, "echo 'root:secret' > /etc/secret && chmod 600 /etc/secret && mkdir -p /home/u"
            " && chown 1000:1000 /home/u && ln -s /etc/secret /home/u/.profile")
    box.files.write("/home/u/.profile", b"export A=1\n", user="1000:1000")
    assert sh(box, "cat /etc/secret; /bin/busybox stat -c '%u %a' /etc/secret") == \
        "root:secret\n0 600\n"
    assert sh(box, "/bin/busybox stat -c '%F %u' /home/u/.profile") == "regular file 1000\n"
    assert box.files.read("/home/u/.profile") == b"export A=1\n"
    # the same through a tar member
    sh(box, "rm /home/u/.profile && ln -s /etc/secret /home/u/.profile")
    box.files.upload_tar(tar_of([(".profile", b"x=1")]), "/home/u")
    assert sh(box, "cat /etc/secret") == "root:secret\n"


def test_failed_upload_leaves_the_old_file(container, box):
    box.files.write("/tmp/f", b"the old contents")
    s = open_put(container, box.id, "/tmp/f", "Content-Length: 1000000\r\n", b"x" * 1000)
    s.close()  # the client leaves in the middle of the body
    time.sleep(0.5)
    for _ in range(50):
        if "strata-upload" not in sh(box, "ls -a /tmp"):
            break
        time.sleep(0.1)
    assert box.files.read("/tmp/f") == b"the old contents"
    assert "strata-upload" not in sh(box, "ls -a /tmp")  # the partial one is gone


def test_transfers_end_with_their_sandbox(container):
    sb = strata.Sandbox.create("busybox", backend="container", socket=container.socket,
                               disk_mb=64, memory_mb=128)
    s = open_put(container, sb.id, "/tmp/slow", "Transfer-Encoding: chunked\r\n",
                 b"4\r\nabcd\r\n")
    time.sleep(0.3)
    t0 = time.monotonic()
    sb.kill()
    out = read_reply(s)  # the socket is shut down, not left to the 30 s idle timeout
    s.close()
    assert time.monotonic() - t0 < 10, out
    assert b"HTTP/1.1 200" not in out


def test_per_sandbox_cap_of_transfers(container, box):
    socks = [open_put(container, box.id, "/tmp/p%d" % i, "Transfer-Encoding: chunked\r\n")
             for i in range(PER_SANDBOX_MAX)]
    try:
        time.sleep(0.5)
        s = open_put(container, box.id, "/tmp/over", "Content-Length: 1\r\n", b"z")
        out = read_reply(s)
        s.close()
        assert out.startswith(b"HTTP/1.1 429") and b"too_many_transfers" in out, out
        # another sandbox is not held up by this one
        with strata.Sandbox.create("busybox", backend="container", socket=container.socket,
                                   disk_mb=16, memory_mb=64) as other:
            other.files.write("/tmp/ok", b"ok")
    finally:
        for s in socks:
            s.close()
    for _ in range(50):  # the slots come back as the workers see the clients gone
        try:
            box.files.write("/tmp/after", b"1")
            break
        except strata.Conflict:
            time.sleep(0.1)
    assert box.files.read("/tmp/after") == b"1"


def pax_tar(name, data, size_in_ustar=None, **pax):
    """A one-member PAX_FORMAT archive; size_in_ustar patches the ustar size
    field (as tarfile writes 0 there for files of 8 GiB and more)."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        ti = tarfile.TarInfo(name)
        ti.size = len(data)
        for k, v in pax.items():
            setattr(ti, k, v)
        if size_in_ustar is not None:
            ti.pax_headers = {"size": str(len(data))}
        tf.addfile(ti, io.BytesIO(data))
    b = bytearray(buf.getvalue())
    if size_in_ustar is not None:
        # the member's ustar header follows the pax header and its data
        plen = int(bytes(b[124:135]).strip(b"\0 "), 8)
        off = 512 + (plen + 511) // 512 * 512
        b[off + 124:off + 136] = b"%011o\0" % size_in_ustar
        b[off + 148:off + 156] = b" " * 8
        b[off + 148:off + 155] = b"%06o\0" % sum(b[off:off + 512])
    return bytes(b)


def test_pax_numbers_are_honoured(box, container):
    tar = pax_tar("big-ids", b"ids", uid=3000000, gid=3000001, mtime=1700000000)
    # ids of 2^21 and more are only in the pax header; a sandbox in a user
    # namespace has ids 0..65535 only, and such an owner is its nobody
    assert box.files.upload_tar(tar, "/tmp/pax") == 1
    want = "65534 65534" if box.info["userns"] else "3000000 3000001"
    assert sh(box, "/bin/busybox stat -c '%u %g %Y' /tmp/pax/big-ids") == \
        want + " 1700000000\n"
    with strata.Sandbox.create("busybox", backend="container", socket=container.socket,
                               disk_mb=64, memory_mb=128, userns=False) as plain:
        assert plain.files.upload_tar(tar, "/tmp/pax") == 1
        assert sh(plain, "/bin/busybox stat -c '%u %g %Y' /tmp/pax/big-ids") == \
            "3000000 3000001 1700000000\n"
    tar = pax_tar("sized", b"hello", size_in_ustar=0)
    assert box.files.upload_tar(tar, "/tmp/pax") == 1
    assert box.files.read("/tmp/pax/sized") == b"hello"


def test_bad_mode_is_refused(box):
    for mode in ("abc", "9", "77777", ""):
        with pytest.raises(strata.InvalidRequest):
            box._client.call("PUT", box._path("files"), body=b"x",
                             query={"path": "/tmp/m", "mode": mode})
    box._client.call("PUT", box._path("files"), body=b"x", query={"path": "/tmp/m",
                                                                  "mode": "0750"})
    assert sh(box, "/bin/busybox stat -c %a /tmp/m") == "750\n"


def test_failed_tar_removes_the_parents_it_made(box):
    sh(box, "mkdir -p /tmp/rb")
    with pytest.raises(strata.InvalidRequest):
        box.files.upload_tar(tar_of([("a/b/c/f", b"1"), ("../escape", b"1")]), "/tmp/rb")
    assert sh(box, "ls -A /tmp/rb") == ""  # a, a/b, a/b/c went with a/b/c/f
