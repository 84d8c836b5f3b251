"""A small cluster on loopback for the tests of issue 17: a real strata-meta,
several strata-sandboxd nodes that renew their lease with it (each on its
own TCP port and home), and strata-apiservers. Loopback ports, not network
namespaces: a node is a process here, and what the tests check (leases,
placement, routing, failures) does not depend on the addresses being on
other hosts; tests/cluster/up_nodes.sh runs `strata up --nodes` in
namespaces."""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("STRATA_SRC") or os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "sdk"))
sys.path.insert(0, os.path.join(SRC, "sdk", "python"))

from sandboxd_harness import Daemon, _die_with_parent, make_busybox_rootfs, sandboxd_binary  # noqa: E402,F401

TOKEN = "cluster-test-token"


def binary(name):
    for d in (os.environ.get("STRATA_BIN"), os.path.join(SRC, "build", "bin")):
        if d and os.access(os.path.join(d, name), os.X_OK):
            return os.path.join(d, name)
    return None


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    p = s.getsockname()[1]
    s.close()
    return p


def wait_port(port, proc, log, timeout=20):
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError("exited: %s" % open(log).read()[-2000:])
        try:
            socket.create_connection(("127.0.0.1", port), 0.2).close()
            return
        except OSError:
            time.sleep(0.02)
    raise RuntimeError("did not start: %s" % open(log).read()[-2000:])


class Proc:
    """A daemon of ours: started with args, logged into base/name.log."""

    def __init__(self, base, name, args, port):
        self.base, self.name, self.args, self.port = base, name, args, port
        self.log = os.path.join(base, name + ".log")
        self.proc = None

    def start(self):
        env = dict(os.environ, ASAN_OPTIONS="detect_leaks=0")
        self.proc = subprocess.Popen(self.args, stdout=open(self.log, "ab"),
                                     stderr=subprocess.STDOUT, env=env,
                                     start_new_session=True, preexec_fn=_die_with_parent)
        wait_port(self.port, self.proc, self.log)
        return self

    def kill(self, sig=signal.SIGKILL):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(sig)
            if sig in (signal.SIGKILL, signal.SIGTERM):
                self.proc.wait(20)

    def stop(self):
        if self.proc and self.proc.poll() is None:
            self.proc.send_signal(signal.SIGCONT)
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def log_text(self):
        try:
            return open(self.log).read()
        except OSError:
            return ""


class Cluster:
    def __init__(self, base, lease_ms=1000):
        self.base = base
        self.lease_ms = lease_ms
        self.rootfs = make_busybox_rootfs(os.path.join(base, "rootfs"))
        mport = free_port()
        self.meta_addr = "127.0.0.1:%d" % mport
        self.meta = Proc(base, "meta", [binary("strata-meta"), "--listen", self.meta_addr,
                                        "--db", os.path.join(base, "db"),
                                        "--lease-ms", str(lease_ms)], mport).start()
        self.nodes = {}
        self.extra_nodes = []
        self.apis = []

    def add_node(self, node_id, extra=(), name=None):
        port = free_port()
        name = name or "n%d" % node_id
        d = Daemon(os.path.join(self.base, name), {"busybox": self.rootfs, "other": self.rootfs},
                   ["--meta", self.meta_addr, "--node-id", str(node_id),
                    "--listen-tcp", "127.0.0.1:%d" % port, "--token", TOKEN,
                    "--state-dir", os.path.join(self.base, name, "state")] +
                   list(extra))
        os.makedirs(d.base, exist_ok=True)
        d.start()
        d.port = port
        d.url = "http://127.0.0.1:%d" % port
        if name == "n%d" % node_id:
            self.nodes[node_id] = d
        else:
            self.extra_nodes.append(d)
        return d

    def add_apiserver(self, extra=()):
        port = free_port()
        a = Proc(self.base, "api%d" % len(self.apis),
                 [binary("strata-apiserver"), "--meta", self.meta_addr,
                  "--listen", "127.0.0.1:%d" % port, "--token", TOKEN] + list(extra), port)
        a.start()
        a.url = "http://127.0.0.1:%d" % port
        self.apis.append(a)
        return a

    def admin_nodes(self):
        out = subprocess.run([binary("strata"), "admin", "--meta", self.meta_addr, "--json",
                              "nodes"], capture_output=True, text=True, timeout=20,
                             env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0"))
        assert out.returncode == 0, out.stderr
        return {n["node"]: n for n in json.loads(out.stdout)["sandbox_nodes"]}

    def wait_nodes(self, pred, timeout=10):
        deadline = time.time() + timeout
        while True:
            nodes = self.admin_nodes()
            if pred(nodes):
                return nodes
            if time.time() > deadline:
                raise AssertionError("nodes never matched: %r" % nodes)
            time.sleep(0.1)

    def stop(self):
        for a in self.apis:
            a.stop()
        for d in list(self.nodes.values()) + self.extra_nodes:
            if d.proc and d.proc.poll() is None:
                d.proc.send_signal(signal.SIGCONT)
            d.stop()
        self.meta.stop()


def cluster_fixture(prefix, nnodes, lease_ms=1000, node_extra=(), apis=0):
    if os.geteuid() != 0:
        pytest.skip("strata-sandboxd needs root (namespaces, mounts)")
    for b in ("strata-sandboxd", "strata-meta", "strata") + (("strata-apiserver",) if apis else ()):
        if not binary(b):
            pytest.skip("%s is not built (set STRATA_BIN)" % b)
    base = tempfile.mkdtemp(prefix=prefix)
    c = Cluster(base, lease_ms)
    try:
        for i in range(1, nnodes + 1):
            c.add_node(i, node_extra)
        for _ in range(apis):
            c.add_apiserver()
    except Exception:
        c.stop()
        raise
    yield c
    c.stop()
    shutil.rmtree(base, ignore_errors=True)
