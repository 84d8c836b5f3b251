"""Shared by the SDK and HTTP API tests: find strata-sandboxd, build a
busybox-static root filesystem, run a daemon on a temporary socket."""
import os
import shutil
import signal
import socket
import subprocess
import time

import pytest

SRC = os.environ.get("STRATA_SRC") or os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))

BUSYBOX_APPLETS = ["sh", "echo", "cat", "ls", "sleep", "true", "false", "yes", "env", "pwd",
                   "id", "head", "wc", "mkdir", "rm", "hostname", "kill", "dd", "seq", "tr",
                   "ps", "wget", "ip", "ifconfig", "mount", "touch", "grep", "test", "mv"]


def sandboxd_binary():
    for d in (os.environ.get("STRATA_BIN"), os.path.join(SRC, "build", "bin")):
        if d and os.access(os.path.join(d, "strata-sandboxd"), os.X_OK):
            return os.path.join(d, "strata-sandboxd")
    return None


def make_busybox_rootfs(root):
    """Builds a minimal root filesystem: busybox-static and its applets."""
    busybox = shutil.which("busybox") or "/bin/busybox"
    if not os.path.exists(busybox):
        pytest.skip("busybox-static is not installed (apt-get install busybox-static)")
    for d in ("bin", "sbin", "etc", "tmp", "proc", "dev", "sys", "usr/bin", "root", "work"):
        os.makedirs(os.path.join(root, d), exist_ok=True)
    shutil.copy2(busybox, os.path.join(root, "bin", "busybox"))
    for a in BUSYBOX_APPLETS:
        os.symlink("busybox", os.path.join(root, "bin", a))
    with open(os.path.join(root, "etc", "passwd"), "w") as f:
        f.write("root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n"
                "app:x:1000:1000:app:/work:/bin/sh\n")
    with open(os.path.join(root, "etc", "group"), "w") as f:
        f.write("root:x:0:\nnogroup:x:65534:\napp:x:1000:\n")
    return root


def cgroup_dir(pid, ctrl):
    """From the host: the cgroup directory of process pid for controller ctrl
    ("" for the cgroup2 one; a controller no v1 hierarchy has is looked up in
    the cgroup2 one on a pure-v2 host), or None (no such process or cgroup)."""
    try:
        with open("/proc/%s/cgroup" % pid) as f:
            lines = [l.rstrip("\n").split(":", 2) for l in f]
    except OSError:
        return None
    for _, ctrls, path in lines:
        if ctrl and ctrl in ctrls.split(","):
            d = "/sys/fs/cgroup/" + ctrls
            return (d if os.path.isdir(d) else "/sys/fs/cgroup/" + ctrl) + path
    for _, ctrls, path in lines:
        if ctrls == "" and (not ctrl or os.path.exists("/sys/fs/cgroup/cgroup.controllers")):
            return "/sys/fs/cgroup" + path
    return None


def _die_with_parent():
    """In the child: SIGTERM when the test process dies, however it dies."""
    import ctypes
    ctypes.CDLL(None).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class Daemon:
    """One strata-sandboxd process on a socket in its own directory."""

    def __init__(self, base, images, extra=(), env=None):
        self.base = base
        self.home = os.path.join(base, "home")
        self.socket = os.path.join(base, "sd.sock")
        self.log = os.path.join(base, "sandboxd.log")
        self.images = images
        self.extra = list(extra)
        self.env = dict(env or {})  # over the defaults below
        self.proc = None

    def start(self, timeout=20):
        binary = sandboxd_binary()
        args = [binary, "--home", self.home, "--socket", self.socket, "--log-level", "debug",
                "--fncall-pool", "2"]
        for name, path in self.images.items():
            args += ["--image", "%s=%s" % (name, path)]
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0")
        env.update(self.env)
        self.proc = subprocess.Popen(args + self.extra, stdout=open(self.log, "ab"),
                                     stderr=subprocess.STDOUT, env=env, start_new_session=True,
                                     preexec_fn=_die_with_parent)
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError("sandboxd exited: %s" % open(self.log).read()[-2000:])
            try:
                s = socket.socket(socket.AF_UNIX)
                s.connect(self.socket)
                s.close()
                return self
            except OSError:
                time.sleep(0.02)
        raise RuntimeError("sandboxd did not start: %s" % open(self.log).read()[-2000:])

    def stop(self, cleanup=True):
        """Stops the daemon; with cleanup, deletes its sandboxes first (they
        would outlive it: container sandboxes are persistent)."""
        if cleanup and self.proc and self.proc.poll() is None:
            self._delete_all()
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self.proc = None

    def restart(self):
        self.stop(cleanup=False)
        return self.start()

    def _delete_all(self):
        import sys
        sys.path.insert(0, os.path.join(SRC, "sdk", "python"))
        try:
            import strata
            for sb in strata.Sandbox.list(socket=self.socket, timeout=10):
                sb.kill(timeout=30)
        except Exception:
            pass

    def log_text(self):
        try:
            return open(self.log).read()
        except OSError:
            return ""




def start_counter(sb):
    """Starts a loop in sandbox sb counting up every 50 ms into /tmp/n and
    returns a function reading the count. Each value goes to a temporary file
    renamed over /tmp/n: `echo > /tmp/n` truncates first, and a read landing
    between the truncation and the write would see nothing."""
    sb.exec(["sh", "-c", "(i=0; while :; do i=$((i+1)); echo $i > /tmp/n.new;"
             " mv /tmp/n.new /tmp/n; sleep 0.05; done) >/dev/null 2>&1 </dev/null &"])
    return lambda: int(sb.exec("cat /tmp/n").stdout or 0)
