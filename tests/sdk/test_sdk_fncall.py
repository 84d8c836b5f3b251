"""SDK tests against a real strata-sandboxd, on the fncall backend (and on
what every backend shares: create, list, labels, admission, TTL, idle
timeout, restart, typed errors). Container-only features are in
test_sdk_container.py."""
import asyncio
import os
import time

import pytest

import strata
from strata import Sandbox, AsyncSandbox
from sandboxd_harness import cgroup_dir


def create(sock, **kw):
    kw.setdefault("backend", "fncall")
    return Sandbox.create(kw.pop("image", "busybox"), socket=sock, **kw)


def test_health_and_capabilities(sock):
    assert strata.health(socket=sock)
    caps = strata.capabilities(socket=sock)
    assert set(caps) >= {"container", "fncall", "firecracker", "qemu"}
    assert caps["fncall"]["available"] and caps["fncall"]["python"]
    assert not caps["fncall"]["files"] and not caps["fncall"]["pause"]
    assert strata.capabilities("docker", socket=sock) == caps["container"]
    assert not caps["firecracker"]["available"] and caps["firecracker"]["reason"]


def test_exec_basics(sock):
    with create(sock) as sb:
        r = sb.exec(["sh", "-c", "echo out; echo err >&2; exit 3"], timeout=10)
        assert (r.exit_code, r.stdout, r.stderr, r.signal, r.truncated) == (3, "out\n", "err\n", None, False)
        assert sb.exec("true").ok
        r = sb.exec(["cat"], stdin=b"from stdin")
        assert r.stdout == "from stdin"
        r = sb.exec("echo $FOO-$BAR; pwd", env={"FOO": "x"}, cwd="/tmp")
        assert r.stdout == "x-\n/tmp\n"
        r = sb.exec(["no-such-command"])
        assert r.exit_code == 127 and "no-such-command" in r.stderr


def test_sandbox_env_cwd_user(sock):
    with create(sock, env={"A": "1"}, cwd="/tmp", user="nobody") as sb:
        r = sb.exec("echo $A; pwd; id -u")
        assert r.stdout == "1\n/tmp\n65534\n"
        assert sb.exec("id -u", user="app").stdout == "1000\n"


def test_isolation(sock):
    with create(sock) as sb:
        r = sb.exec("hostname; echo x > /bin/evil; echo $?; cat /bin/evil")
        assert r.stdout.split("\n")[0] == "sandbox"
        # a command call's root is its own writable layer over the image, and
        # it is gone with the call: the next call sees the image as it is
        assert sb.exec("cat /bin/evil").exit_code != 0
        # our own pid namespace: the sandbox's init (strata-agent) is pid 1,
        # and nothing of the host or of other calls is visible
        r = sb.exec("cat /proc/1/cmdline; echo; ls /proc | grep -c '^[0-9]'")
        first, count = r.stdout.split("\n")[:2]
        assert "strata-agent" in first and int(count) <= 4, r.stdout
        # network none: only loopback
        out = sb.exec("cat /proc/net/dev").stdout
        assert "lo:" in out and "eth" not in out


def test_calls_do_not_share_state(sock):
    with create(sock) as sb:
        sb.exec("echo secret > /tmp/leftover")
        r = sb.exec("cat /tmp/leftover")
        assert r.exit_code != 0  # each call gets a fresh /tmp


def test_nothing_of_a_call_survives_it(sock):
    """A command call runs in a sandbox of its own, destroyed after it:
    files anywhere, background processes and shared memory are gone."""
    with create(sock) as sb:
        r = sb.exec("echo x > /root/left; echo y > /dev/shm/left; (sleep 60 &); echo ok")
        assert r.stdout == "ok\n", r.stderr
        r = sb.exec("cat /root/left /dev/shm/left; ps -o args | grep -c 'sleep 6[0]'")
        assert "x" not in r.stdout and "y" not in r.stdout and r.stdout.split()[-1] == "0", r.stdout


def test_commands_run_under_seccomp(sock):
    with create(sock) as sb:
        r = sb.exec("grep -E '^(Seccomp|NoNewPrivs|CapEff):' /proc/self/status")
        st = dict(l.split(":\t") for l in r.stdout.splitlines())
        assert st["Seccomp"] == "2" and st["NoNewPrivs"] == "1", r.stdout
        assert int(st["CapEff"], 16) & (1 << 21) == 0  # no CAP_SYS_ADMIN


def _host_cgroup_file(marker, ctrl, name):
    """From the host: the file `name` of controller ctrl's cgroup of the
    process whose command line holds marker."""
    deadline = time.time() + 10
    while time.time() < deadline:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    if marker.encode() not in f.read():
                        continue
            except OSError:
                continue
            d = cgroup_dir(pid, ctrl)
            if d:
                return open(d + "/" + name).read().strip()
        time.sleep(0.05)
    raise AssertionError("no process with %r" % marker)


def test_limits_per_call_cpu_memory_pids(sock):
    """Each call's sandbox has the fncall sandbox's cpu, memory and pids
    limits in its own cgroups (cpu is enforced now)."""
    caps = strata.capabilities("fncall", socket=sock)
    assert caps["limits_cpu"] and caps["limits_pids"] and caps["limits_memory"]
    v2 = os.path.exists("/sys/fs/cgroup/cgroup.controllers") and not os.path.isdir("/sys/fs/cgroup/cpu")
    for cpu, mem, pids in ((0.5, 96, 40), (2, 200, 64)):
        with create(sock, cpu=cpu, memory_mb=mem, pids=pids) as sb:
            import threading
            marker = "mark%d" % int(cpu * 1000)
            t = threading.Thread(target=sb.exec, args=("sleep 3; : %s" % marker,), kwargs={"timeout": 20})
            t.start()
            try:
                if v2:
                    quota, period = _host_cgroup_file(marker, "", "cpu.max").split()
                    memory = _host_cgroup_file(marker, "", "memory.max")
                    pmax = _host_cgroup_file(marker, "", "pids.max")
                else:
                    quota = _host_cgroup_file(marker, "cpu", "cpu.cfs_quota_us")
                    period = _host_cgroup_file(marker, "cpu", "cpu.cfs_period_us")
                    memory = _host_cgroup_file(marker, "memory", "memory.limit_in_bytes")
                    pmax = _host_cgroup_file(marker, "pids", "pids.max")
            finally:
                t.join()
            assert abs(int(quota) / int(period) - cpu) < 0.01, (quota, period)
            assert int(memory) == mem << 20 and int(pmax) == pids


def _children(pid):
    n = 0
    for p in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/stat" % p) as f:
                n += int(f.read().rsplit(")", 1)[1].split()[1]) == pid
        except (OSError, IndexError, ValueError):
            pass
    return n


def test_warm_sandboxes_of_idle_pools_are_bounded(make_daemon):
    """Every distinct set of limits makes a pool of warm sandboxes; pools
    without calls are kept warm only up to a bound (64), whatever the
    number of fncall sandboxes with different limits."""
    d = make_daemon()
    if not strata.capabilities("fncall", socket=d.socket)["limits_cpu"]:
        pytest.skip("no container runtime for fncall command calls")
    sbs = [create(d.socket, memory_mb=100 + i) for i in range(60)]  # 60 pools, 120 wanted
    try:
        time.sleep(4)
        n = _children(d.proc.pid)  # warm and staged sandboxes' agents
        assert n <= 64 + 8 + 4, n  # + the library's staged pool, + python
        r = sbs[-1].exec("echo still")  # an idle pool still serves calls
        assert r.stdout == "still\n"
    finally:
        for sb in sbs:
            sb.kill()


def test_stdin_larger_than_a_chunk(sock):
    """stdin given up front beyond the agent's 1 MiB chunk is fed as the
    command reads it."""
    with create(sock) as sb:
        data = bytes(range(256)) * (3 * 4096 + 7)  # ~3 MiB
        r = sb.exec(["wc", "-c"], stdin=data, timeout=30)
        assert r.stdout.strip() == str(len(data))
        r = sb.exec(["head", "-c", "10"], stdin=data, timeout=30)  # stops reading early
        assert r.exit_code == 0 and r.stdout_raw == data[:10]


def test_exec_stream_order_and_timing(sock):
    with create(sock) as sb:
        t0 = time.time()
        events = []
        for ev in sb.exec_stream("echo a; sleep 0.3; echo b >&2; exit 2", timeout=10):
            events.append((ev.kind, ev.data, time.time() - t0))
        kinds = [e[0] for e in events]
        assert kinds == ["stdout", "stderr", "exit"]
        assert events[0][1] == b"a\n" and events[1][1] == b"b\n"
        assert events[1][2] - events[0][2] > 0.2  # streamed as it came
        assert events[-1] and events[2][0] == "exit"


def test_exec_stream_stdin(sock):
    with create(sock) as sb:
        evs = list(sb.exec_stream(["wc", "-c"], stdin=b"x" * 100000))
        assert b"".join(e.data for e in evs if e.kind == "stdout").strip() == b"100000"


def test_timeout_and_signal(sock):
    with create(sock) as sb:
        t0 = time.time()
        with pytest.raises(strata.Timeout) as ei:
            sb.exec(["sleep", "30"], timeout=0.5)
        assert time.time() - t0 < 5
        assert ei.value.result.timed_out and ei.value.result.signal == 9
        r = sb.exec("sh -c 'kill -9 $$'; echo $?")  # a child killed by a signal
        assert r.stdout == "137\n"


def test_output_cap(sock):
    with create(sock) as sb:
        r = sb.exec("yes | head -c 5000000", output_cap=4096, timeout=30)
        assert r.truncated and len(r.stdout_raw) == 4096
        with pytest.raises(strata.Timeout) as ei:
            sb.exec("yes", timeout=1, output_cap=1000)
        assert ei.value.result.truncated and len(ei.value.result.stdout_raw) == 1000


def test_python_warm_interpreter(sock, images):
    if "hostroot" not in images:
        pytest.skip("no /usr/bin/python3 on this machine")
    with create(sock, image="hostroot") as sb:
        r = sb.exec(python="import sys\nprint(2+2)\nprint('e', file=sys.stderr)\nsys.exit(4)")
        assert (r.exit_code, r.stdout, r.stderr) == (4, "4\n", "e\n")
        r = sb.exec(python="raise ValueError('boom')")
        assert r.exit_code == 1 and "ValueError: boom" in r.stderr
        r = sb.exec(python="import os; print(os.environ['K'], os.getcwd())", env={"K": "v"}, cwd="/tmp")
        assert r.stdout == "v /tmp\n"
        r = sb.exec(python="print(input())", stdin="hello")
        assert r.stdout == "hello\n"
        t0 = time.time()
        for _ in range(20):
            assert sb.exec(python="print(1)").stdout == "1\n"
        per_call = (time.time() - t0) / 20
        print("fncall python call: %.1f ms" % (per_call * 1000))
    with create(sock) as sb:  # busybox has no python
        with pytest.raises(strata.Unsupported):
            sb.exec(python="print(1)")


def test_fncall_refuses_what_it_cannot_do(sock):
    with create(sock) as sb:
        with pytest.raises(strata.Unsupported):
            sb.files.write("/tmp/x", b"y")
        with pytest.raises(strata.Unsupported):
            sb.files.read("/tmp/x")
        with pytest.raises(strata.Unsupported):
            sb.pause()


def test_typed_errors(sock):
    with pytest.raises(strata.ImageNotFound):
        create(sock, image="no-such-image")
    with pytest.raises(strata.BackendUnavailable) as ei:
        create(sock, backend="firecracker")
    assert "firecracker" in str(ei.value)
    if not strata.capabilities("qemu", socket=sock)["available"]:  # qemu_sdk.py where it is
        with pytest.raises(strata.BackendUnavailable):
            create(sock, backend="qemu")
    with pytest.raises(strata.InvalidRequest):
        create(sock, backend="nonsense")
    with pytest.raises(strata.InvalidRequest):
        create(sock, memory_mb=-5)
    with pytest.raises(strata.NotFound):
        Sandbox.connect("sb-0000000000000000", socket=sock)
    with pytest.raises(strata.StrataError):
        Sandbox.create("busybox", socket="/nonexistent/socket")
    sb = create(sock)
    sb.kill()
    with pytest.raises(strata.Exited):
        sb.exec("true")
    sb.kill()  # idempotent


def test_get_list_labels_connect(sock):
    a = create(sock, labels={"team": "x", "run": "1"})
    b = create(sock, labels={"team": "x", "run": "2"})
    c = create(sock, labels={"team": "y"})
    try:
        ids = {s.id for s in Sandbox.list(labels={"team": "x"}, socket=sock)}
        assert ids == {a.id, b.id}
        assert [s.id for s in Sandbox.list(labels={"team": "x", "run": "2"}, socket=sock)] == [b.id]
        assert c.id in {s.id for s in Sandbox.list(state="running", socket=sock)}
        assert not Sandbox.list(state="paused", labels={"team": "y"}, socket=sock)
        s = Sandbox.connect(a.id, socket=sock)
        assert s.labels == {"team": "x", "run": "1"} and s.backend == "fncall"
        assert s.exec("echo hi").stdout == "hi\n"
        assert s.refresh()["execs"] == 1
    finally:
        for s in (a, b, c):
            s.kill()
    assert not Sandbox.list(labels={"team": "x"}, socket=sock)


def test_create_many_and_idempotency(sock):
    sbs = Sandbox.create_many("busybox", 5, backend="fncall", idempotency_key="batch7",
                              labels={"many": "1"}, socket=sock)
    try:
        assert len({s.id for s in sbs}) == 5
        again = Sandbox.create_many("busybox", 5, backend="fncall", idempotency_key="batch7",
                                    socket=sock)
        assert [s.id for s in again] == [s.id for s in sbs]
    finally:
        for s in sbs:
            s.kill()


def test_admission_refuses_with_reason(make_daemon, container_available):
    d = make_daemon("--max-sandboxes", "2", "--memory-budget-mb", "1000")
    a = create(d.socket)
    b = create(d.socket, memory_mb=4096)  # fncall holds no memory when idle
    with pytest.raises(strata.NoCapacity) as ei:
        create(d.socket)
    assert "limit is 2" in str(ei.value)
    a.kill()
    refused = 1
    if container_available[0]:  # memory admission: sandboxes that reserve it
        with pytest.raises(strata.NoCapacity) as ei:
            create(d.socket, backend="container", memory_mb=1001)
        assert "memory" in str(ei.value)
        refused += 1
        create(d.socket, backend="container", memory_mb=900).kill()
    b.kill()
    m = strata.node_metrics(socket=d.socket)
    assert m["sandboxes"] == 0 and m["refused_total"] == refused


def test_ttl_and_idle_timeout(sock):
    a = create(sock, ttl=1)
    b = create(sock, idle_timeout=1)
    c = create(sock, idle_timeout=30)
    deadline = time.time() + 10
    while time.time() < deadline:
        alive = {s.id for s in Sandbox.list(socket=sock)}
        if a.id not in alive and b.id not in alive:
            break
        time.sleep(0.2)
    assert a.id not in alive and b.id not in alive and c.id in alive
    c.kill()


def test_restart_readopts(daemon):
    sb = create(daemon.socket, labels={"keep": "yes"}, ttl=600)
    daemon.restart()
    s = Sandbox.connect(sb.id, socket=daemon.socket)
    assert s.labels == {"keep": "yes"} and s.info["ttl"] == 600
    assert s.exec("echo back").stdout == "back\n"
    s.kill()


def test_async_sandbox(sock):
    async def main():
        async with await AsyncSandbox.create("busybox", backend="fncall", socket=sock) as sb:
            rs = await asyncio.gather(*[sb.exec(["echo", str(i)]) for i in range(8)])
            assert [r.stdout for r in rs] == ["%d\n" % i for i in range(8)]
            out = [ev async for ev in sb.exec_stream("echo a; echo b")]
            assert out[-1].kind == "exit" and out[-1].result.exit_code == 0
            with pytest.raises(strata.Unsupported):
                await sb.files.read("/etc/passwd")
            many = await AsyncSandbox.create_many("busybox", 3, backend="fncall", socket=sock)
            assert len(many) == 3
            for m in many:
                await m.kill()
            assert sb.id in {s.id for s in await AsyncSandbox.list(socket=sock)}
    asyncio.run(main())


def test_latency_fncall(sock):
    """Create, exec and delete, 30 times: each works, within generous bounds
    (the figures go to sandbox-latency.txt; bench/sandbox measures them)."""
    import statistics
    c, e, d = [], [], []
    for i in range(30):
        t0 = time.perf_counter()
        sb = create(sock)
        t1 = time.perf_counter()
        assert sb.exec(["echo", str(i)]).stdout == "%d\n" % i
        t2 = time.perf_counter()
        sb.kill()
        t3 = time.perf_counter()
        with pytest.raises(strata.NotFound):
            Sandbox.connect(sb.id, socket=sock)
        c.append(t1 - t0)
        e.append(t2 - t1)
        d.append(t3 - t2)
    line = "fncall p50 create %.2f ms, exec true %.2f ms, delete %.2f ms" % (
        statistics.median(c) * 1e3, statistics.median(e) * 1e3, statistics.median(d) * 1e3)
    if os.environ.get("STRATA_BUILD"):
        with open(os.path.join(os.environ["STRATA_BUILD"], "sandbox-latency.txt"), "a") as f:
            f.write(line + "\n")
    # ~1-20 ms each on a loaded 2-core machine with a sanitizer build
    assert statistics.median(c) < 1.0 and statistics.median(e) < 1.0, line
    assert statistics.median(d) < 1.0, line


# ---- containment (fncall): contained, the node unharmed, others unaffected --------

def test_fork_bomb_is_contained(sock):
    with create(sock, pids=32) as sb, create(sock) as other:
        caps = strata.capabilities("fncall", socket=sock)
        if not caps["limits_pids"]:
            pytest.skip("no pids cgroup on this machine")
        r = sb.exec("bomb() { bomb | bomb & }; bomb; sleep 1; echo survived", timeout=20)
        assert "survived" in r.stdout and "fork" in r.stderr
        assert other.exec("echo fine").stdout == "fine\n"  # the node is unharmed


def test_memory_bomb_is_contained(sock, images):
    if "hostroot" not in images:
        pytest.skip("needs python3 in the image")
    with create(sock, image="hostroot", memory_mb=64) as sb:
        r = sb.exec(["python3", "-c", "x = bytearray(512 << 20); print('allocated')"], timeout=30)
        assert r.exit_code != 0 and "allocated" not in r.stdout
        assert sb.exec("echo fine").stdout == "fine\n"


def test_filling_tmp_is_contained(sock):
    with create(sock, memory_mb=512) as sb:
        r = sb.exec("dd if=/dev/zero of=/tmp/fill bs=1M count=200 2>&1; echo rc=$?", timeout=30)
        assert "rc=0" not in r.stdout  # /tmp is a size-limited tmpfs
        assert sb.exec("echo fine").stdout == "fine\n"


def test_privileged_operations_fail(sock):
    with create(sock) as sb:
        script = ("echo b > /proc/sysrq-trigger && echo SYSRQ; "
                  "mount -t tmpfs x /tmp && echo MOUNTED; "
                  "reboot -f && echo REBOOTED; "
                  "head -c 8 /proc/kpagecgroup | wc -c; "
                  "echo 1 > /proc/sys/kernel/panic && echo SYSCTL; "
                  "ip link set lo down && echo IPLINK; "
                  "hostname evil && echo HOSTNAME; "
                  "kill -9 1 && echo KILLED_INIT; echo end")
        r = sb.exec(script, timeout=20)
        for bad in ("SYSRQ", "MOUNTED", "REBOOTED", "SYSCTL", "IPLINK", "HOSTNAME"):
            assert bad not in r.stdout, (bad, r.stdout, r.stderr)
        assert r.stdout.split()[0] == "0"  # nothing readable from kpagecgroup
        assert sb.exec("hostname").stdout == "sandbox\n"


def test_no_host_network(sock):
    with create(sock) as sb:
        r = sb.exec("wget -T 2 -q -O- http://1.1.1.1/ 2>&1; echo rc=$?", timeout=20)
        assert "rc=0" not in r.stdout


def test_exited_when_deleted_mid_exec(sock):
    sb = create(sock)
    it = sb.exec_stream("echo up; sleep 30", timeout=60)
    assert next(it).data == b"up\n"
    Sandbox.connect(sb.id, socket=sock).kill()
    with pytest.raises(strata.Exited) as ei:
        list(it)
    assert "deleted" in str(ei.value)
