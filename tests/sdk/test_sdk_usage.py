"""Per-sandbox usage and live settings through the SDK, against a real
strata-sandboxd: metrics (CPU seconds rise after a busy exec, the memory
peak covers an allocation, pids counts a background process, disk used
grows with a file, execs counted), set_timeout (a sandbox with a short TTL,
extended, outlives its old deadline, also across a sandboxd restart), label
updates and their limits, fncall's typed refusal, and the capabilities'
metrics and tar bits."""
import time

import pytest

import strata
from strata import Sandbox


def test_metrics_follow_the_workload(sock, need_container):
    with Sandbox.create("busybox", backend="container", socket=sock, memory_mb=256) as sb:
        m0 = sb.metrics()
        assert m0.cpu_seconds is not None and m0.cpu_seconds >= 0
        assert m0.pids >= 1  # the agent
        assert m0.execs == 0
        assert m0.memory_limit_bytes == 256 << 20
        # a fixed amount of work, 0.5-1 s of CPU here whatever the load
        r = sb.exec(["sh", "-c", "i=0; while [ $i -lt 500000 ]; do i=$((i+1)); done; echo $i"],
                    timeout=120)
        assert r.stdout == "500000\n", r
        m1 = sb.metrics()
        assert m1.cpu_seconds >= m0.cpu_seconds + 0.25, (m0, m1)
        assert m1.cpu_seconds <= m0.cpu_seconds + r.duration + 0.5, (m0, m1, r.duration)
        assert m1.execs == 1
        # an allocation: dd's 80 MiB buffer, touched by the read into it
        r = sb.exec(["dd", "if=/dev/zero", "of=/dev/null", "bs=80M", "count=1"], timeout=30)
        assert r.ok, r
        m = sb.metrics()
        assert m.memory_peak_bytes >= 80 << 20, m
        assert m.memory_bytes < 40 << 20, m  # freed at its exit
        # 64 MiB held in a tmpfs-backed file counts against the memory cgroup
        r = sb.exec(["sh", "-c", "dd if=/dev/zero of=/tmp/fill bs=1M count=64 2>/dev/null"],
                    timeout=30)
        assert r.ok, r
        m2 = sb.metrics()
        assert m2.memory_peak_bytes >= 60 << 20, m2
        assert m2.memory_bytes >= 60 << 20, m2
        assert m2.disk_used_bytes >= 60 << 20, m2
        sb.exec(["rm", "/tmp/fill"])
        m3 = sb.metrics()
        assert m3.disk_used_bytes < m2.disk_used_bytes - (50 << 20), (m2, m3)
        assert m3.memory_peak_bytes >= m2.memory_peak_bytes  # a peak stays
        # a background sleep is one more process
        bg = sb.exec_stream(["sh", "-c", "sleep 30 & echo started; wait"], timeout=60)
        assert next(bg).text.strip() == "started"
        m4 = sb.metrics()
        assert m4.pids >= m0.pids + 2, (m0, m4)  # sh and its sleep
        bg.close()
        assert m4.running_execs == 1 and m4.execs == 5


def test_memory_peak_is_the_sandbox_own(sock, need_container):
    """A reused cgroup must not hand the previous sandbox's peak on."""
    with Sandbox.create("busybox", backend="container", socket=sock) as sb:
        # freed at dd's exit: the cgroup is empty and fit for reuse after
        sb.exec(["dd", "if=/dev/zero", "of=/dev/null", "bs=100M", "count=1"])
        assert sb.metrics().memory_peak_bytes >= 100 << 20
    peaks = []
    for _ in range(12):  # past the library's pool of 8 staged sandboxes
        with Sandbox.create("busybox", backend="container", socket=sock) as sb:
            peaks.append(sb.metrics().memory_peak_bytes)
    assert max(peaks) < 50 << 20, peaks


def test_metrics_fncall_unsupported(sock):
    with Sandbox.create("busybox", backend="fncall", socket=sock) as sb:
        with pytest.raises(strata.Unsupported):
            sb.metrics()


def test_capabilities_tell_metrics_and_tar(sock, need_container):
    caps = strata.capabilities(socket=sock)
    assert caps["container"]["tar"] is True and caps["container"]["metrics"] is True
    assert caps["fncall"]["tar"] is False and caps["fncall"]["metrics"] is False
    with Sandbox.create("busybox", backend="container", socket=sock) as sb:
        sb.files.write("/tmp/a", b"x")
        assert sb.files.download_tar("/tmp")[:512].find(b"a") >= 0  # tar works, as it says


def test_set_timeout_extends_the_deadline(sock, need_container):
    sb = Sandbox.create("busybox", backend="container", socket=sock, ttl=2)
    try:
        old = sb.info["expires_at"]
        sb.set_timeout(30)
        assert sb.info["expires_at"] >= old + 25
        time.sleep(3.5)  # past the old deadline and a reaper tick
        assert sb.exec(["true"]).ok
        sb.set_timeout(0)
        assert sb.refresh()["expires_at"] == 0
        sb.set_timeout(1)
        deadline = time.time() + 10
        while time.time() < deadline:
            try:
                sb.refresh()
            except strata.NotFound:
                break
            time.sleep(0.2)
        else:
            pytest.fail("the sandbox outlived its new one-second timeout")
    finally:
        sb.kill()


def test_set_timeout_survives_restart(daemon, need_container):
    sb = Sandbox.create("busybox", backend="container", socket=daemon.socket, ttl=3)
    try:
        sb.set_timeout(60)
        sb.set_labels({"kept": "yes"})
        daemon.restart()
        time.sleep(4)  # past the old deadline, with the new sandboxd's reaper
        again = Sandbox.connect(sb.id, socket=daemon.socket)
        assert again.info["expires_at"] == sb.info["expires_at"]
        assert again.labels == {"kept": "yes"}
        assert again.exec(["true"]).ok
    finally:
        sb.kill()


def test_set_timeout_refuses_bad_values(sock, need_container):
    with Sandbox.create("busybox", backend="container", socket=sock) as sb:
        with pytest.raises(ValueError):
            sb.set_timeout(-1)
        with pytest.raises(strata.InvalidRequest, match="timeout"):
            sb.set_timeout(10 ** 9)
        c = sb._client
        with pytest.raises(strata.InvalidRequest, match="unknown field 'ttl'"):
            c.call("PATCH", sb._path(), body={"ttl": 5})
        with pytest.raises(strata.InvalidRequest):
            c.call("PATCH", sb._path(), body={"timeout": "soon"})


def test_set_labels(sock, need_container):
    with Sandbox.create("busybox", backend="container", socket=sock, labels={"a": "1"}) as sb:
        sb.set_labels({"b": "2", "c": "3"})
        assert sb.labels == {"b": "2", "c": "3"}
        assert sb.id in {s.id for s in Sandbox.list(labels={"b": "2"}, socket=sock)}
        assert sb.id not in {s.id for s in Sandbox.list(labels={"a": "1"}, socket=sock)}
        for bad in ({"x" * 64: "v"}, {"k": "v" * 256}, {"a,b": "v"}, {"a=b": "v"},
                    {"k%d" % i: "v" for i in range(33)}):
            with pytest.raises(strata.InvalidRequest, match="label"):
                sb.set_labels(bad)
        assert sb.refresh()["labels"] == {"b": "2", "c": "3"}  # unchanged by a refusal
        sb.set_labels({})
        assert sb.refresh()["labels"] == {}


def test_update_checks_everything_first(sock, need_container):
    """A refused label leaves the timeout as it was too."""
    with Sandbox.create("busybox", backend="container", socket=sock, ttl=100) as sb:
        before = sb.info["expires_at"]
        with pytest.raises(strata.InvalidRequest):
            sb._client.call("PATCH", sb._path(), body={"timeout": 5000, "labels": {"": "x"}})
        assert sb.refresh()["expires_at"] == before
