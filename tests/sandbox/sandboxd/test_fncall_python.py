"""fncall Python calls (as root: a warm interpreter of backend_fncall.c) are
contained like the container backend's sandboxes: the library's seccomp
filter with no_new_privs, no capabilities, the same masked and read-only
/proc and /sys paths, and cgroups with the call's cpu limit and the
workers' pids and memory limits. Each is checked from inside a call, and
sandboxd keeps serving after a call that hit one. The image is the host's
root ("/"), which has /usr/bin/python3 (else these skip)."""
import json
import os
import shutil
import sys
import tempfile

import pytest

from conftest import SRC
from sandboxd_harness import Daemon, cgroup_dir, sandboxd_binary

sys.path.insert(0, os.path.join(SRC, "sdk", "python"))
import strata  # noqa: E402

_DAEMON = {}  # the module's sandboxd (sock), for tests that look at its children


@pytest.fixture(scope="module")
def sock():
    if os.geteuid() != 0:
        pytest.skip("strata-sandboxd needs root (namespaces, mounts)")
    if not sandboxd_binary():
        pytest.skip("strata-sandboxd is not built (set STRATA_BIN)")
    if not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("no /usr/bin/python3 for the image")
    base = tempfile.mkdtemp(prefix="strata-fnpy-")
    d = Daemon(os.path.join(base, "d"), {"hostroot": "/"})
    os.makedirs(d.base)
    d.start()
    _DAEMON["d"] = d
    yield d.socket
    d.stop()
    shutil.rmtree(base, ignore_errors=True)


def create(sock, **kw):
    return strata.Sandbox.create("hostroot", backend="fncall", socket=sock, **kw)


def test_limits_hold_after_another_sandboxd_stopped():
    """Every sandboxd below one cgroup shares its strata-fncall directory,
    which the last one to stop removes when empty: a sandboxd without
    interpreters yet (A) still puts its next ones in their cgroups after
    another one (B) stopped. First in this file: the module's daemon and its
    interpreters do not exist yet (with them, B could not remove it)."""
    if os.geteuid() != 0 or not sandboxd_binary() or not os.access("/usr/bin/python3", os.X_OK):
        pytest.skip("needs root, a built sandboxd and /usr/bin/python3")
    base = tempfile.mkdtemp(prefix="strata-fnpy2-")
    a = Daemon(os.path.join(base, "a"), {"hostroot": "/"})
    b = Daemon(os.path.join(base, "b"), {"hostroot": "/"})
    try:
        for d in (a, b):
            os.makedirs(d.base)
            d.start()
        with create(b.socket) as sb:
            assert sb.exec(python="print(1)", timeout=30).stdout == "1\n"
        b.stop()
        with create(a.socket) as sb:
            v1 = os.path.isdir("/sys/fs/cgroup/pids")
            d = while_running(sb, NAMED % "strata-pids",
                              lambda: _host_cgroup_dir("strata-pids", "pids" if v1 else ""))
            # the call cgroup (v1 and v2): the sandbox's 256, and 4 ready
            # call processes
            want = 256 + 4
            assert open(d + "/pids.max").read().strip() == str(want), d
    finally:
        a.stop()
        b.stop()
        shutil.rmtree(base, ignore_errors=True)


def still_serving(sock, sb):
    """sandboxd and the interpreters' pool serve the next call."""
    assert strata.health(socket=sock)
    assert sb.exec(python="print('next')", timeout=30).stdout == "next\n"


# Every call is made of syscalls the filter refuses with EPERM. Without the
# filter keyctl, add_key, personality and process_vm_readv succeed (no
# capability needed) and clone3 is no ENOSYS; the others fail for want of
# capabilities either way.
SECCOMP_PROBE = r"""
import ctypes, errno, json, os, socket
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def sc(nr, *args):
    ctypes.set_errno(0)
    r = libc.syscall(ctypes.c_long(nr), *[ctypes.c_long(a) if isinstance(a, int) else a for a in args])
    return "ok" if r >= 0 else errno.errorcode.get(ctypes.get_errno(), "?")
def sock(family, kind):
    try:
        socket.socket(family, kind).close()
        return "ok"
    except OSError as e:
        return errno.errorcode.get(e.errno, "?")
st = dict(l.split(":\t", 1) for l in open("/proc/self/status").read().splitlines() if ":\t" in l)
print(json.dumps({
    "Seccomp": st["Seccomp"].strip(), "NoNewPrivs": st["NoNewPrivs"].strip(),
    "CapEff": st["CapEff"].strip(), "CapBnd": st["CapBnd"].strip(),
    "getpid": sc(39),
    "mount": sc(165, b"none", b"/tmp", b"tmpfs", 0, None),
    "unshare": sc(272, 0x00020000),
    "ptrace_pid1": sc(101, 16, 1, 0, 0),
    "keyctl": sc(250, 0, -2, 1),
    "add_key": sc(248, b"user", b"strata-test", b"x", 1, -2),
    "personality": sc(135, 0x0040000),
    "process_vm_readv": sc(310, os.getpid(), None, 0, None, 0, 0),
    "clone3": sc(435, None, 0),
    "reboot_cad_off": sc(169, 0xfee1dead, 672274793, 0, None),
    "bpf": sc(321, 0, None, 0),
    "raw_socket": sock(socket.AF_INET, socket.SOCK_RAW),
    "packet_socket": sock(socket.AF_PACKET, socket.SOCK_RAW),
}))
"""


def test_python_calls_run_under_seccomp(sock):
    with create(sock) as sb:
        r = sb.exec(python=SECCOMP_PROBE, timeout=30)
        assert r.exit_code == 0, r.stderr
        got = json.loads(r.stdout)
        assert (got["Seccomp"], got["NoNewPrivs"]) == ("2", "1"), got
        assert int(got["CapEff"], 16) == 0 and int(got["CapBnd"], 16) == 0, got
        assert got["getpid"] == "ok"  # what the filter allows still works
        assert got.pop("clone3") == "ENOSYS", got  # libc falls back to clone
        for k in ("Seccomp", "NoNewPrivs", "CapEff", "CapBnd", "getpid"):
            del got[k]
        assert {k: v for k, v in got.items() if v != "EPERM"} == {}, got
        # a command call (the container library's sandbox) decides the same
        r = sb.exec(["/usr/bin/python3", "-c", SECCOMP_PROBE], timeout=30)
        cmd = json.loads(r.stdout)
        assert cmd["Seccomp"] == "2" and cmd["clone3"] == "ENOSYS", cmd
        for k in ("keyctl", "add_key", "personality", "process_vm_readv", "mount", "unshare",
                  "bpf", "raw_socket", "packet_socket"):
            assert cmd[k] == "EPERM", (k, cmd)
        still_serving(sock, sb)


def _templates():
    """/proc/PID/status of the module sandboxd's templates: its python3
    children, each pid 1 of its own namespace (NSpid: host pid, 1)."""
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/status" % pid) as f:
                st = dict(l.split(":\t", 1) for l in f.read().splitlines() if ":\t" in l)
        except OSError:
            continue
        if (st.get("PPid", "").strip() == str(_DAEMON["d"].proc.pid) and
                st.get("Name", "").strip() == "python3" and st["NSpid"].split()[1:] == ["1"]):
            out.append(st)
    return out


def test_the_template_keeps_only_what_its_calls_need(sock):
    """The template, a worker of the container library, keeps CAP_SYS_ADMIN
    and CAP_SETPCAP (its call processes' namespaces and mounts, and the
    drop of their bounding set) and none of root's others, with
    no_new_privs; the seccomp filter is each call process's, loaded after
    its mounts (sandbox/sandboxd/README.md, "Where the privileges are
    dropped"). Before, it kept every capability and no no_new_privs."""
    with create(sock) as sb:
        assert sb.exec(python="print(1)", timeout=30).stdout == "1\n"
        templates = _templates()
        assert templates, "no template of this sandboxd found"
        two = (1 << 21) | (1 << 8)  # CAP_SYS_ADMIN, CAP_SETPCAP
        for st in templates:
            caps = {k: int(st[k], 16) for k in ("CapBnd", "CapPrm", "CapEff", "CapInh", "CapAmb")}
            assert caps == {"CapBnd": two, "CapPrm": two, "CapEff": two, "CapInh": 0,
                            "CapAmb": 0}, st
            assert st["NoNewPrivs"].strip() == "1" and st["Seccomp"].strip() == "0", st
        still_serving(sock, sb)


def test_a_foreign_abi_syscall_kills_only_its_call(sock):
    """The filter kills a process that makes an x32 syscall (another ABI);
    the interpreter dies with the call, and the pool serves the next one."""
    with create(sock) as sb:
        r = sb.exec(python="import ctypes\nprint('before', flush=True)\n"
                    "ctypes.CDLL(None).syscall(0x40000000 | 39)\nprint('survived')", timeout=30)
        assert r.stdout == "before\n" and r.signal == 31, (r, r.stderr)  # SIGSYS
        still_serving(sock, sb)


def _host_cgroup_dir(comm, ctrl):
    """From the host: the cgroup directory of controller ctrl ("" for the
    cgroup2 one) of the process named comm."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open("/proc/%s/comm" % pid) as f:
                if f.read().strip() != comm:
                    continue
        except OSError:
            continue
        d = cgroup_dir(pid, ctrl)
        if d:
            return d
    raise AssertionError("no process named %r" % comm)


# Names the call process (its comm, seen from the host) and stays 3 s.
NAMED = "import time\nopen('/proc/self/comm', 'w').write(%r)\ntime.sleep(3)\n"


def while_running(sb, src, check, timeout=20):
    """check()'s result, tried while the call src runs (a call's process
    exists only during the call)."""
    import threading
    import time
    res = {}
    t = threading.Thread(target=lambda: res.update(r=sb.exec(python=src, timeout=60)))
    t.start()
    end, err = time.monotonic() + timeout, None
    while time.monotonic() < end:
        try:
            out = check()
            break
        except AssertionError as e:
            err = e
            time.sleep(0.05)
    else:
        t.join()
        raise err
    t.join()
    assert res["r"].exit_code == 0, res["r"].stderr
    return out


def _cpu_limit_of(comm):
    """(quota, period) of the cpu cgroup of the process named comm, and
    its nr_throttled."""
    v1 = os.path.isdir("/sys/fs/cgroup/cpu")
    d = _host_cgroup_dir(comm, "cpu" if v1 else "")
    if not v1:  # the calls' cgroup c, below the worker's, which has the cpu limit
        d = os.path.dirname(d)
    if v1:
        quota = int(open(d + "/cpu.cfs_quota_us").read())
        period = int(open(d + "/cpu.cfs_period_us").read())
    else:
        q, p = open(d + "/cpu.max").read().split()
        quota, period = (-1 if q == "max" else int(q)), int(p)
    stat = dict(l.split() for l in open(d + "/cpu.stat"))
    return quota, period, int(stat["nr_throttled"])


# Names the interpreter (its comm, seen from the host), then spins for
# 1.5 s of wall time and prints the CPU time it got per second.
BUSY = r"""
import time
open("/proc/self/comm", "w").write(%r)
t, c = time.monotonic(), time.process_time()
while time.monotonic() - t < 1.5:
    pass
print((time.process_time() - c) / (time.monotonic() - t))
"""


def test_python_calls_have_the_sandbox_cpu_limit(sock):
    if not os.path.isdir("/sys/fs/cgroup/cpu") and not os.path.exists("/sys/fs/cgroup/cgroup.controllers"):
        pytest.skip("no cpu cgroup controller")
    with create(sock, cpu=0.2) as sb:
        quota, period, _ = while_running(sb, NAMED % "strata-cpu20",
                                         lambda: _cpu_limit_of("strata-cpu20"))
        assert abs(quota / period - 0.2) < 0.001, (quota, period)
        r = sb.exec(python=BUSY % "strata-cpu20", timeout=60)
        assert r.exit_code == 0, r.stderr
        share = float(r.stdout)
        # 0.2 of a core allowed; generous for a loaded machine's accounting
        assert share < 0.35, share
        still_serving(sock, sb)
    # the limit is each call's: interpreters are shared by the sandboxes of
    # an image, and the next call on this one has its own sandbox's limit
    with create(sock, cpu=0.5) as sb:
        quota, period, _ = while_running(sb, NAMED % "strata-cpu50",
                                         lambda: _cpu_limit_of("strata-cpu50"))
        assert abs(quota / period - 0.5) < 0.001, (quota, period)


def test_python_calls_keep_the_pids_limit(sock):
    """A call may hold the sandbox's pids (64 here, itself included):
    forks beyond fail with EAGAIN, and the pool serves on."""
    src = r"""
import os, signal
kids, err = [], None
for _ in range(400):
    try:
        pid = os.fork()
    except OSError as e:
        err = e.errno
        break
    if pid == 0:
        signal.pause()
        os._exit(0)
    kids.append(pid)
for pid in kids:
    os.kill(pid, 9)
for pid in kids:
    os.waitpid(pid, 0)
import errno
print(len(kids), errno.errorcode.get(err))
"""
    with create(sock, pids=64) as sb:
        r = sb.exec(python=src, timeout=120)
        n, err = r.stdout.split()
        assert err == "EAGAIN" and 32 < int(n) <= 64, (r.stdout, r.stderr)
        still_serving(sock, sb)


def test_python_calls_keep_the_memory_limit(sock):
    """A call's memory cgroup holds the sandbox's 512 MiB: a call that fills 1.5 GiB is
    killed by the OOM killer, not the node, and the next call runs."""
    with create(sock) as sb:
        r = sb.exec(python="x = bytearray(b'\\1') * (1536 << 20)\nprint('allocated')", timeout=120)
        assert r.exit_code != 0 and "allocated" not in r.stdout, r
        still_serving(sock, sb)


# For each path the container library masks or makes read-only
# (sandbox/container/masks.c): absent, "null" (/dev/null bound over it),
# "empty" (an empty directory over it), else whether its mount is
# read-only; and what /sys is.
MASK_PROBE = r"""
import json, os, stat
paths = ["/proc/kcore", "/proc/keys", "/proc/key-users", "/proc/timer_list",
         "/proc/timer_stats", "/proc/sched_debug", "/proc/latency_stats", "/proc/kpagecgroup",
         "/proc/kpagecount", "/proc/kpageflags", "/proc/kallsyms", "/proc/vmallocinfo",
         "/proc/pagetypeinfo", "/proc/slabinfo", "/proc/acpi", "/proc/scsi", "/proc/asound",
         "/proc/driver", "/proc/bus", "/proc/fs", "/proc/irq", "/proc/sys",
         "/proc/sysrq-trigger", "/sys/firmware", "/sys/devices/virtual/powercap",
         "/sys/kernel/debug", "/sys/kernel/security", "/sys/fs/cgroup", "/sys"]
out = {}
for p in paths:
    try:
        st = os.stat(p)
    except OSError:
        out[p] = "absent"
        continue
    if stat.S_ISCHR(st.st_mode) and st.st_rdev == os.makedev(1, 3):
        out[p] = "null"
    elif stat.S_ISDIR(st.st_mode) and not os.listdir(p):
        out[p] = "empty"
    else:
        out[p] = "ro" if os.statvfs(p).f_flag & os.ST_RDONLY else "rw"
sys_mounts = [l.split()[4:] for l in open("/proc/self/mountinfo")]
out["/sys type"] = [m[-3] for m in sys_mounts if m[0] == "/sys"][-1:]
print(json.dumps(out, sort_keys=True))
"""


def test_masked_paths_match_the_container_backend(sock):
    with create(sock) as sb:
        r = sb.exec(python=MASK_PROBE, timeout=30)
        assert r.exit_code == 0, r.stderr
        py = json.loads(r.stdout)
        r = sb.exec(["/usr/bin/python3", "-c", MASK_PROBE], timeout=30)
        assert r.exit_code == 0, r.stderr
        cmd = json.loads(r.stdout)
        assert py == cmd
        assert py["/sys type"] == ["sysfs"] and py["/sys"] == "ro", py
        for p in ("/proc/kcore", "/proc/kpagecgroup", "/proc/kallsyms"):
            assert py[p] in ("null", "absent"), (p, py)
        assert py["/proc/sys"] == "ro" and py["/proc/sysrq-trigger"] in ("ro", "absent"), py
        assert py["/sys/firmware"] in ("empty", "absent"), py
        r = sb.exec(python="open('/proc/sys/kernel/hostname', 'w').write('evil')", timeout=30)
        assert r.exit_code != 0 and "Read-only file system" in r.stderr, r.stderr


def test_host_network_python_calls_run(sock):
    """network "host" (an admin's option: root on the unix socket is the
    operator): the template stays in the host's network namespace, whose
    sysfs is the one already on the host root's /sys, and mounting the same
    filesystem on the same mount point is EBUSY: every call failed with
    `mount /sys: Device or resource busy` before. Its /sys is still a
    read-only sysfs, masked as a call of network "none" sees it."""
    src = ("import json, os, socket\n"
           "names = sorted(n for _, n in socket.if_nameindex())\n"
           "ro = os.statvfs('/sys').f_flag & os.ST_RDONLY\n"
           "fw = os.listdir('/sys/firmware') if os.path.isdir('/sys/firmware') else None\n"
           "t = [l.split()[2] for l in open('/proc/self/mounts') if l.split()[1] == '/sys']\n"
           "print(json.dumps([names, bool(ro), fw, t]))\n")
    with create(sock, network="host") as sb:
        r = sb.exec(python=src, timeout=30)
        assert r.exit_code == 0, r.stderr
        names, ro, fw, types = json.loads(r.stdout)
        host = sorted(n for _, n in __import__("socket").if_nameindex())
        assert names == host, (names, host)
        assert ro and types and types[-1] == "sysfs", (ro, types)
        assert fw in (None, []), fw
    with create(sock) as sb:  # network "none": lo only
        r = sb.exec(python=src, timeout=30)
        assert r.exit_code == 0, r.stderr
        assert json.loads(r.stdout)[0] == ["lo"]
