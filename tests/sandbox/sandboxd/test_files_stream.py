"""Files of any size in and out of container sandboxes (issue 13, item 7):
uploads and downloads streamed by sandboxd's workers through the sandbox's
root, with Content-Length and chunked bodies, in bounded memory (sandboxd's
peak RSS measured around a 1 GiB file), trees as streamed tars keeping
symlinks, hard links, modes, owners and mtimes, user= ownership, a clear
error at the disk limit, and a hostile sandbox whose symlinks try to make
a read or a write leave its root.

The daemon of conftest.py has --max-body-mb 1: every size above 1 MiB here
is one that a buffered body could not take."""
import hashlib
import os
import random
import socket
import stat
import sys
import tempfile
import time

import pytest

from sandboxd_harness import SRC

sys.path.insert(0, os.path.join(SRC, "sdk", "python"))
import strata  # noqa: E402

MiB = 1 << 20


@pytest.fixture(scope="module")
def container(daemon):
    caps = strata.capabilities("container", socket=daemon.socket)
    if not caps["available"]:
        pytest.skip("container backend unavailable: %s" % caps.get("reason"))
    return daemon


@pytest.fixture
def box(container):
    with strata.Sandbox.create("busybox", backend="container", socket=container.socket,
                               disk_mb=512, memory_mb=256) as sb:
        yield sb


def sh(sb, cmd):
    r = sb.exec(["sh", "-c", cmd], timeout=120)
    assert r.exit_code == 0, (cmd, r.stdout, r.stderr)
    return r.stdout


def recv_all(s):
    """Everything the server sends until it closes."""
    out = b""
    while True:
        b = s.recv(1 << 20)
        if not b:
            return out
        out += b


def raw_put(daemon, sid, path, head_extra, body_parts, query=""):
    """PUT .../files over a raw socket; returns (status, body bytes)."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(60)
    s.connect(daemon.socket)
    s.sendall(("PUT /v1/sandboxes/%s/files?path=%s%s HTTP/1.1\r\nHost: x\r\n"
               "Connection: close\r\n%s\r\n" % (sid, path, query, head_extra)).encode())
    try:
        for p in body_parts:
            s.sendall(p)
    except (BrokenPipeError, ConnectionResetError):
        pass
    out = recv_all(s)
    s.close()
    head, _, rest = out.partition(b"\r\n\r\n")
    return int(head.split(b" ")[1]), rest


def peak_rss_kb(pid):
    with open("/proc/%d/status" % pid) as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
    raise AssertionError("no VmHWM")


def test_writes_over_the_old_limits(box):
    for size in (4 * MiB, 70 * MiB):
        data = random.randbytes(size)
        assert box.files.write("/work/big.bin", data) == size
        assert box.files.stat("/work/big.bin").size == size
        assert box.files.read("/work/big.bin") == data
        out = sh(box, "/bin/busybox md5sum /work/big.bin").split()[0]
        assert out == hashlib.md5(data).hexdigest()


def test_chunked_upload(container, box):
    parts = [b"5;ext=1\r\nhello\r\n", b"1\r\n \r\n", b"6\r\nworld!\r\n", b"0\r\nX-T: y\r\n\r\n"]
    st, body = raw_put(container, box.id, "/tmp/c.txt", "Transfer-Encoding: chunked\r\n", parts)
    assert st == 200, body
    assert box.files.read("/tmp/c.txt") == b"hello world!"
    st, body = raw_put(container, box.id, "/tmp/bad.txt", "Transfer-Encoding: chunked\r\n",
                       [b"zz\r\nabc\r\n0\r\n\r\n"])
    assert st == 400 and b"chunked" in body, body
    # the SDK streams a file object of unknown length chunked
    import io

    class Unsized(io.RawIOBase):
        def __init__(self, n):
            self.left = n

        def readable(self):
            return True

        def read(self, n=-1):
            k = min(self.left, 3 * MiB if n < 0 else n)
            self.left -= k
            return b"z" * k
    assert box.files.write("/tmp/u.bin", Unsized(5 * MiB + 7)) == 5 * MiB + 7
    assert box.files.stat("/tmp/u.bin").size == 5 * MiB + 7


def mem_available():
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) << 10
    return 0


def test_one_gib_both_ways_in_bounded_memory(container, tmp_path):
    size = 1 << 30
    # a tmpfs layer holds the file in memory; a layer on disk (a project
    # quota, where the kernel has them: the cgroup v2 VM) does not
    on_disk = strata.capabilities("container", socket=container.socket).get("limits_disk")
    if not on_disk and mem_available() < 4 * size:  # the tmpfs, the page cache of both copies
        pytest.skip("needs 4 GiB of available memory for a 1 GiB file in a tmpfs layer")
    src = tmp_path / "gib.bin"
    h = hashlib.sha256()
    with open(src, "wb") as f:
        block = random.randbytes(4 * MiB)
        for i in range(size // len(block)):
            b = i.to_bytes(8, "little") + block[8:]  # no two blocks alike
            h.update(b)
            f.write(b)
    want = h.hexdigest()
    with strata.Sandbox.create("busybox", backend="container", socket=container.socket,
                               disk_mb=1200, memory_mb=256) as sb:
        sb.files.write("/tmp/warm", b"x" * MiB)  # the first transfer's thread and buffers
        sb.files.read("/tmp/warm")
        pid = container.proc.pid
        before = peak_rss_kb(pid)
        t0 = time.monotonic()
        assert sb.files.upload_file(str(src), "/tmp/gib.bin", timeout=120) == size
        t_up = time.monotonic() - t0
        assert sb.files.stat("/tmp/gib.bin").size == size
        got = tmp_path / "back.bin"
        t0 = time.monotonic()
        assert sb.files.download_file("/tmp/gib.bin", str(got), timeout=120) == size
        t_down = time.monotonic() - t0
        after = peak_rss_kb(pid)
        h = hashlib.sha256()
        with open(got, "rb") as f:
            for b in iter(lambda: f.read(8 * MiB), b""):
                h.update(b)
        assert h.hexdigest() == want
        print("1 GiB: in %.2f s, out %.2f s; sandboxd VmHWM %d -> %d KiB"
              % (t_up, t_down, before, after))
        assert after - before < 64 * 1024, (before, after)


def test_tree_upload_keeps_links_modes_and_times(box, tmp_path):
    src = tmp_path / "repo"
    (src / ".git" / "objects").mkdir(parents=True)
    big = random.randbytes(20 * 1000 * 1000)
    (src / ".git" / "objects" / "pack.bin").write_bytes(big)
    (src / "run.sh").write_bytes(b"#!/bin/sh\necho run\n")
    os.chmod(src / "run.sh", 0o750)
    os.symlink("run.sh", src / "link-rel")
    os.symlink("/etc/passwd", src / "link-abs")
    os.link(src / "run.sh", src / "hard.sh")
    os.utime(src / "run.sh", (1_600_000_000, 1_600_000_000))
    os.chown(src / "run.sh", 1000, 1000)
    assert box.files.upload(str(src), "/work/repo") == 2  # pack.bin and run.sh (hard.sh: a link)
    out = sh(box, "cd /work/repo && /bin/busybox stat -c '%n %a %u %Y %h %i' run.sh hard.sh"
                  " && /bin/busybox readlink link-rel && /bin/busybox readlink link-abs && /bin/busybox md5sum .git/objects/pack.bin")
    lines = out.splitlines()
    run, hard = lines[0].split(), lines[1].split()
    assert run[1:5] == ["750", "1000", "1600000000", "2"], out
    assert run[5] == hard[5], out  # one inode: a hard link
    assert lines[2:4] == ["run.sh", "/etc/passwd"]
    assert lines[4].split()[0] == hashlib.md5(big).hexdigest()
    # and back: the same tree
    dst = tmp_path / "back"
    assert box.files.download("/work/repo", str(dst)) == 2
    assert os.readlink(dst / "link-rel") == "run.sh"
    assert os.readlink(dst / "link-abs") == "/etc/passwd"
    assert os.stat(dst / "run.sh").st_ino == os.stat(dst / "hard.sh").st_ino
    st = os.stat(dst / "run.sh")
    assert stat.S_IMODE(st.st_mode) == 0o750 and st.st_mtime == 1_600_000_000
    assert st.st_uid == 1000
    assert (dst / ".git" / "objects" / "pack.bin").read_bytes() == big


def test_single_file_and_missing_local_path(box, tmp_path):
    f = tmp_path / "one.txt"
    f.write_bytes(b"single")
    os.chmod(f, 0o600)
    assert box.files.upload(str(f), "/work/x/y/one.txt") == 1  # parents made
    assert sh(box, "cat /work/x/y/one.txt; /bin/busybox stat -c ' %a' /work/x/y/one.txt") \
        == "single 600\n"
    assert box.files.download("/work/x/y/one.txt", str(tmp_path / "got.txt")) == 1
    assert (tmp_path / "got.txt").read_bytes() == b"single"
    with pytest.raises(FileNotFoundError):
        box.files.upload(str(tmp_path / "nope"), "/work/nope")
    with pytest.raises(strata.NotFound):
        box.files.write("/work/no/such/dir/f", b"x", parents=False)
    with pytest.raises(strata.NotFound):
        box.files.download("/work/absent", str(tmp_path / "absent"))


def test_user_owns_what_it_writes(box, tmp_path):
    box.files.write("/work/app/sub/f.txt", b"mine", user="app")
    assert sh(box, "/bin/busybox stat -c '%u:%g' /work/app/sub/f.txt /work/app/sub") \
        == "1000:1000\n1000:1000\n"
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "a").write_bytes(b"a")
    box.files.upload(str(tmp_path / "t"), "/work/t", user="nobody")
    assert sh(box, "/bin/busybox stat -c '%u' /work/t/a") == "65534\n"
    with pytest.raises(strata.InvalidRequest):
        box.files.write("/work/z", b"x", user="nosuchuser")


def test_disk_limit_is_a_clear_error(container):
    with strata.Sandbox.create("busybox", backend="container", socket=container.socket,
                               disk_mb=8) as sb:
        with pytest.raises(strata.DiskFull) as e:  # size known: refused up front
            sb.files.write("/tmp/big", b"x" * (9 * MiB))
        assert e.value.status == 413 and "8 MiB" in str(e.value)

        def gen():
            for _ in range(16):
                yield b"y" * MiB
        with pytest.raises(strata.DiskFull) as e:  # chunked: found when the disk fills
            sb._client.upload("PUT", sb._path("files"), gen(), None, query={"path": "/tmp/big"})
        assert e.value.status == 507 and "disk" in str(e.value)
        sb.files.write("/tmp/small", b"fits")  # the space was given back
        assert sb.files.read("/tmp/small") == b"fits"


def test_hostile_symlinks_stay_inside(box):
    marker = "strata-escape-%d" % os.getpid()
    assert os.path.exists("/etc/shadow") or os.path.exists("/etc/passwd")
    sh(box, "ln -s /etc/shadow /tmp/shadow; ln -s ../../../../../../../etc /tmp/up;"
            " ln -s /proc/1/root /tmp/magic; ln -s /etc/passwd /tmp/pw")
    with pytest.raises(strata.NotFound):  # the sandbox has no /etc/shadow; the host's stays
        box.files.read("/tmp/shadow")
    assert box.files.read("/tmp/pw") == box.exec("cat /etc/passwd").stdout_raw
    box.files.write("/tmp/up/" + marker, b"inside")
    assert not os.path.exists("/etc/" + marker)
    assert box.exec("cat /etc/" + marker).stdout == "inside"
    with pytest.raises(strata.InvalidRequest):  # a magic link / another mount
        box.files.read("/tmp/magic/etc/hostname")
    # a tar download sends the links as links, never what they point to
    sh(box, "mkdir -p /tmp/t && ln -s /etc/shadow /tmp/t/s && ln -s / /tmp/t/root")
    import io
    import tarfile
    tf = tarfile.open(fileobj=io.BytesIO(box.files.download_tar("/tmp/t")))
    kinds = {m.name: (m.type, m.linkname) for m in tf.getmembers()}
    assert kinds == {"s": (tarfile.SYMTYPE, "/etc/shadow"), "root": (tarfile.SYMTYPE, "/")}


def test_racing_symlink_swap_cannot_escape(box):
    marker = "strata-race-%d" % os.getpid()
    sh(box, "mkdir -p /tmp/r/d; (i=0; while [ $i -lt 4000 ]; do rm -rf /tmp/r/d;"
            " ln -s /etc /tmp/r/d; rm -f /tmp/r/d; mkdir /tmp/r/d; i=$((i+1)); done)"
            " >/dev/null 2>&1 &")
    for i in range(200):
        try:
            box.files.write("/tmp/r/d/%s" % marker, b"x")
        except strata.StrataError:
            pass
        assert not os.path.exists("/etc/" + marker)
        try:
            box.files.read("/tmp/r/d/hostname")
        except strata.StrataError:
            pass
    assert not os.path.exists("/etc/" + marker)


def test_append_and_keep_alive_after_a_transfer(container, box):
    box.files.write("/tmp/log", b"one\n")
    box.files.write("/tmp/log", b"two\n", append=True)
    assert box.files.read("/tmp/log") == b"one\ntwo\n"
    # an upload, a download and a small request pipelined on one connection:
    # each transfer hands the socket back with what it read past its body
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(30)
    s.connect(container.socket)
    body = b"k" * (3 * MiB)
    s.sendall(b"PUT /v1/sandboxes/%s/files?path=/tmp/ka HTTP/1.1\r\nHost: x\r\n"
              b"Content-Length: %d\r\n\r\n" % (box.id.encode(), len(body)) + body +
              b"GET /v1/sandboxes/%s/files?path=/tmp/ka HTTP/1.1\r\nHost: x\r\n\r\n"
              % box.id.encode() +
              b"GET /v1/health HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
    out = recv_all(s)
    s.close()
    first, _, rest = out.partition(b"\r\n\r\n")
    assert first.startswith(b"HTTP/1.1 200"), out[:300]
    assert rest.startswith(b'{"ok":true,"size":%d}' % len(body)), rest[:100]
    second = rest.index(b"HTTP/1.1 200", 1)
    head, _, rest = rest[second:].partition(b"\r\n\r\n")
    assert b"Content-Length: %d" % len(body) in head
    assert rest[:len(body)] == body
    assert rest[len(body):].startswith(b"HTTP/1.1 200"), rest[len(body):len(body) + 100]


def test_expect_continue(container, box):
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(container.socket)
    s.sendall(b"PUT /v1/sandboxes/%s/files?path=/tmp/ec HTTP/1.1\r\nHost: x\r\n"
              b"Content-Length: 5\r\nExpect: 100-continue\r\nConnection: close\r\n\r\n"
              % box.id.encode())
    assert s.recv(100).startswith(b"HTTP/1.1 100 Continue")
    s.sendall(b"hello")
    out = recv_all(s)
    assert out.startswith(b"HTTP/1.1 200"), out
    assert box.files.read("/tmp/ec") == b"hello"


def test_deep_parents_and_tar_dir_modes(box, tmp_path):
    deep = "/tmp" + "/d" * 1500  # 1,500 directories to make for one write
    box.files.write(deep + "/f", b"deep")
    assert box.files.read(deep + "/f") == b"deep"
    (tmp_path / "t" / "sub").mkdir(parents=True)
    os.chmod(tmp_path / "t" / "sub", 0o711)
    box.files.mkdir("/work/t/sub")  # exists already: still gets the archive's mode
    box.files.upload(str(tmp_path / "t"), "/work/t")
    assert sh(box, "/bin/busybox stat -c %a /work/t/sub") == "711\n"
