"""fncall Python calls leave nothing behind for anyone: each runs in a fresh
process forked from a clean template (backend_fncall.c, py_boot), pid 1 of
its own pid namespace, with its own /tmp, thrown away after. Nothing one
call does (an audit hook, builtins, monkeypatched modules, /tmp files, the
working directory, sys.path, signal handlers, open descriptors) is seen by
another sandbox's call, nor by the same sandbox's next call unless it was
created with keep_state, whose calls share one interpreter of its own.
memory_mb and pids are each sandbox's. The image is the host's root ("/"),
which has /usr/bin/python3 (else these skip)."""
import os

import pytest

# The module's sandboxd (a fixture) and its fncall create are
# test_fncall_python's.
from test_fncall_python import create, sock  # noqa: F401


def run(sb, src):
    r = sb.exec(python=src, timeout=60)
    assert r.exit_code == 0, (r.exit_code, r.stdout, r.stderr)
    return r.stdout


HOOK = r"""
import sys
def loot(event, args):
    if event == "compile":
        with open("/tmp/.loot", "a") as f:
            f.write(repr(args[0]) + "\n")
sys.addaudithook(loot)
print("hooked")
"""


def test_an_audit_hook_does_not_see_another_sandbox_s_source(sock):
    """The reported leak: sandbox A installs an audit hook that writes every
    compiled source to /tmp/.loot; sandbox B (same image and limits) runs
    code holding an API key; A must not find it."""
    with create(sock) as a, create(sock) as b:
        for _ in range(4):  # on every interpreter A's calls land on
            assert run(a, HOOK) == "hooked\n"
        for _ in range(4):
            run(b, "API_KEY = 'sk-live-0123456789'\nprint('ok')")
        out = run(a, "import os\np = '/tmp/.loot'\n"
                     "print(open(p).read() if os.path.exists(p) else 'none')")
        assert "sk-live" not in out, out
        out = run(b, "import os\np = '/tmp/.loot'\n"
                     "print(open(p).read() if os.path.exists(p) else 'none')")
        assert out == "none\n", out


# What a call leaves behind, and how the next call looks for it.
LEAVE = r"""
import builtins, os, signal, sys, json
builtins.LEFT = "builtins"
json.dumps = lambda *a, **k: "patched"
open("/tmp/left", "w").write("tmp")
sys.path.append("/left")
signal.signal(signal.SIGUSR1, lambda *a: None)
fd = os.open("/etc/hostname", os.O_RDONLY)
os.set_inheritable(fd, True)
os.chdir("/usr")
print(fd)
"""
FIND = r"""
import builtins, os, signal, sys, json
fd = %d
seen = []
if hasattr(builtins, "LEFT"): seen.append("builtins")
if json.dumps([1]) == "patched": seen.append("module")
if os.path.exists("/tmp/left"): seen.append("tmp")
if os.getcwd() == "/usr": seen.append("cwd")
if "/left" in sys.path: seen.append("sys.path")
if signal.getsignal(signal.SIGUSR1) not in (signal.SIG_DFL, None): seen.append("signal")
try:
    os.fstat(fd)
    seen.append("fd")
except OSError:
    pass
print(",".join(seen) or "clean")
"""


@pytest.mark.parametrize("same", [False, True], ids=["other_sandbox", "same_sandbox"])
def test_nothing_a_call_leaves_reaches_the_next(sock, same):
    with create(sock) as a, create(sock) as b:
        fd = int(run(a, LEAVE))
        assert run(a if same else b, FIND % fd) == "clean\n"


def test_each_call_has_its_own_pid_namespace(sock):
    """pid 1 of its own namespace, and /proc shows its own processes only
    (not the template's, not another call's)."""
    src = ("import os, subprocess\n"
           "p = subprocess.Popen(['sleep', '5'])\n"
           "pids = sorted(int(x) for x in os.listdir('/proc') if x.isdigit())\n"
           "print(os.getpid(), pids)\n"
           "p.kill()\n")
    with create(sock) as a:
        out = run(a, src)
        assert out.split()[0] == "1" and out.split(None, 1)[1] == "[1, 2]\n", out


def test_memory_mb_is_the_sandbox_s(sock):
    """A call allocating beyond memory_mb is killed by the OOM killer (the
    result says so), and the next call runs."""
    with create(sock, memory_mb=64) as sb:
        r = sb.exec(python="x = bytearray(256 << 20)\nx[::4096] = b'\\1' * len(x[::4096])\n"
                           "print('allocated')", timeout=60)
        assert r.exit_code != 0 and "allocated" not in r.stdout, r
        assert r.oom_killed and r.signal in (9, "SIGKILL", "KILL"), vars(r)
        assert run(sb, "print('next')") == "next\n"
        assert run(sb, "x = bytearray(32 << 20)\nprint('fits')") == "fits\n"


def test_pids_is_the_sandbox_s(sock):
    """A fork bomb stops at the sandbox's pids limit; its processes die with
    the call."""
    src = r"""
import os, signal, errno
n, err = 0, None
for _ in range(200):
    try:
        pid = os.fork()
    except OSError as e:
        err = e.errno
        break
    if pid == 0:
        signal.pause()
        os._exit(0)
    n += 1
print(n, errno.errorcode.get(err))
"""
    with create(sock, pids=16) as sb:
        n, err = run(sb, src).split()
        assert err == "EAGAIN" and 8 <= int(n) <= 16, (n, err)
        assert run(sb, "import os\nprint(sorted(int(x) for x in os.listdir('/proc') "
                       "if x.isdigit()))") == "[1]\n"


def test_keep_state_keeps_a_sandbox_s_globals_only(sock):
    with create(sock, keep_state=True) as k, create(sock, keep_state=True) as k2, \
            create(sock) as plain:
        assert run(k, "x = 41\nimport builtins\nbuiltins.MARK = 1\nprint('set')") == "set\n"
        assert run(k, "print(x + 1, hasattr(__import__('builtins'), 'MARK'))") == "42 True\n"
        probe = "import builtins\nprint('x' in globals(), hasattr(builtins, 'MARK'))"
        assert run(k2, probe) == "False False\n"
        assert run(plain, probe) == "False False\n"
        assert run(plain, "x = 1\nprint(x)") == "1\n"
        assert run(plain, probe) == "False False\n"
