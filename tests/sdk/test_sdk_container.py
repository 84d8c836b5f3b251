"""SDK tests of the container backend (files, pause/resume, tar-like
upload/download, network none, limits). They skip, with the reason, where
the container backend is unavailable."""
import os
import time

import pytest

import strata
from sandboxd_harness import start_counter
from strata import Sandbox


@pytest.fixture
def box(sock, need_container):
    with Sandbox.create("busybox", backend="container", socket=sock, memory_mb=256) as sb:
        yield sb


def test_exec(box):
    r = box.exec(["sh", "-c", "echo hi; echo e >&2; exit 5"])
    assert (r.exit_code, r.stdout, r.stderr) == (5, "hi\n", "e\n")
    assert box.exec(["cat"], stdin="abc").stdout == "abc"
    assert box.exec("hostname").stdout == "sandbox\n"


def test_files_roundtrip(box):
    box.files.mkdir("/work/a/b", parents=True)
    box.files.write("/work/a/b/f.txt", b"hello\x00world")
    assert box.files.read("/work/a/b/f.txt") == b"hello\x00world"
    st = box.files.stat("/work/a/b/f.txt")
    assert st.type == "file" and st.size == 11
    assert [e.name for e in box.files.list("/work/a/b")] == ["f.txt"]
    assert box.exec("cat /work/a/b/f.txt").stdout_raw == b"hello\x00world"
    box.files.remove("/work/a", recursive=True)
    assert not box.files.exists("/work/a")
    with pytest.raises(strata.NotFound):
        box.files.read("/work/nothing")


def test_path_traversal_refused(box):
    with pytest.raises(strata.InvalidRequest):
        box.files.read("/tmp/../../etc/shadow")
    with pytest.raises(strata.InvalidRequest):
        box.files.write("relative/path", b"x")


def test_upload_download(box, tmp_path):
    src = tmp_path / "src"
    (src / "sub").mkdir(parents=True)
    (src / "a.txt").write_bytes(b"A")
    (src / "sub" / "b.bin").write_bytes(os.urandom(3000))
    assert box.files.upload(str(src), "/work/up") == 2
    assert box.exec("cat /work/up/a.txt").stdout == "A"
    dst = tmp_path / "dst"
    assert box.files.download("/work/up", str(dst)) == 2
    assert (dst / "sub" / "b.bin").read_bytes() == (src / "sub" / "b.bin").read_bytes()


def test_pause_resume(box, sock):
    """A paused sandbox does not run (a counter in it stands still, its CPU
    time too) and runs on after resume."""
    assert strata.capabilities("container", socket=sock)["pause"]
    count = start_counter(box)
    deadline = time.time() + 10
    while count() < 3 and time.time() < deadline:
        time.sleep(0.05)
    before = count()
    box.pause()
    assert box.state == "paused"
    with pytest.raises(strata.Conflict):
        box.exec("true")
    with pytest.raises(strata.Conflict):
        box.files.read("/tmp/n")
    cpu0 = box.metrics().cpu_seconds
    time.sleep(1.0)  # ~20 ticks if it ran
    assert box.metrics().cpu_seconds - cpu0 < 0.02
    box.resume()
    assert box.state == "running"
    frozen = count() - before
    assert frozen <= 4, "the counter went on by %d while paused" % frozen
    time.sleep(1.5)
    assert count() > before + frozen + 2, "the counter did not go on after resume"
    assert box.exec("echo ok").stdout == "ok\n"


def test_network_none(box):
    r = box.exec("cat /proc/net/dev")
    assert "lo:" in r.stdout and "eth" not in r.stdout


def test_client_closing_mid_stream_kills_command(box):
    it = box.exec_stream("echo start; sleep 30; echo never", timeout=60)
    first = next(it)
    assert first.data == b"start\n"
    it.close()  # hang up
    t0 = time.time()
    r = box.exec("echo after")  # the sandbox is usable again
    assert r.stdout == "after\n" and time.time() - t0 < 10


def test_latency_container(sock, need_container):
    """Create, exec and delete, 15 times: each works, within generous bounds
    (the figures go to sandbox-latency.txt; bench/sandbox measures them)."""
    import statistics
    c, e, d = [], [], []
    for _ in range(15):
        t0 = time.perf_counter()
        sb = Sandbox.create("busybox", backend="container", socket=sock)
        t1 = time.perf_counter()
        assert sb.exec(["echo", sb.id]).stdout == sb.id + "\n"
        t2 = time.perf_counter()
        sb.kill()
        t3 = time.perf_counter()
        with pytest.raises(strata.NotFound):
            Sandbox.connect(sb.id, socket=sock)
        c.append(t1 - t0)
        e.append(t2 - t1)
        d.append(t3 - t2)
    line = "container p50 create %.2f ms, exec true %.2f ms, delete %.2f ms" % (
        statistics.median(c) * 1e3, statistics.median(e) * 1e3, statistics.median(d) * 1e3)
    if os.environ.get("STRATA_BUILD"):
        with open(os.path.join(os.environ["STRATA_BUILD"], "sandbox-latency.txt"), "a") as f:
            f.write(line + "\n")
    # ~5-60 ms each on a loaded 2-core machine with a sanitizer build
    assert statistics.median(c) < 1.0 and statistics.median(e) < 1.0, line
    assert statistics.median(d) < 1.0, line


def test_tar_refuses_escaping_members(box):
    import io
    import tarfile
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        for name in ("ok.txt", "../evil.txt"):
            info = tarfile.TarInfo(name)
            info.size = 2
            tf.addfile(info, io.BytesIO(b"hi"))
    with pytest.raises(strata.InvalidRequest):
        box.files.upload_tar(buf.getvalue(), "/work/t")
    assert not box.files.exists("/work/t/ok.txt")  # refused before anything was written
    assert not box.files.exists("/work/evil.txt")


def test_tar_long_names(box, tmp_path):
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    (deep / ("f" * 80)).write_bytes(b"long")
    assert box.files.upload(str(tmp_path), "/work/long") == 1
    out = tmp_path / "back"
    box.files.download("/work/long/" + "d" * 60, str(out))
    assert (out / ("e" * 60) / ("f" * 80)).read_bytes() == b"long"


def test_restart_keeps_container_sandboxes(daemon, need_container):
    sb = Sandbox.create("busybox", backend="container", socket=daemon.socket, labels={"r": "1"})
    try:
        sb.files.write("/work/state", b"kept")
        sb.exec("sleep 1000 > /dev/null 2>&1 &")
        daemon.restart()
        s = Sandbox.connect(sb.id, socket=daemon.socket)
        assert s.files.read("/work/state") == b"kept"
        assert "sleep 1000" in s.exec("ps").stdout  # the processes lived on
    finally:
        sb.kill()
