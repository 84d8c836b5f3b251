"""The network namespaces of the network "egress" tests and benchmark: a
"node" namespace (strata-sandboxd runs in it through nsenter) whose uplink
up0 is a veth into an "outside" namespace running egress_world.py on
198.51.100.0/24, and a listener of the node itself on port 7000. Made on
enter, removed on exit; nothing is routed off this machine."""
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
NODE_ADDR = "192.0.2.1"
ALLOWED, CDN, DENIED, CLUSTER = "198.51.100.10", "198.51.100.11", "198.51.100.20", "198.51.100.30"
DNS = "198.51.100.53"


def sh(*cmd):
    subprocess.run(cmd, check=True, capture_output=True)


def ns(name, *cmd):
    sh("ip", "-n", name, *cmd)


class World:
    def __init__(self, tag=None):
        tag = tag or str(os.getpid())
        self.node, self.out = "sgn" + tag, "sgo" + tag
        self.procs = []
        self.ready = None

    def __enter__(self):
        try:
            self._make()
        except BaseException:
            self.__exit__()
            raise
        return self

    def _make(self):
        sh("ip", "netns", "add", self.node)
        sh("ip", "netns", "add", self.out)
        ns(self.node, "link", "add", "up0", "type", "veth", "peer", "name", "out0", "netns",
           self.out)
        for n in (self.node, self.out):
            ns(n, "link", "set", "lo", "up")
        ns(self.node, "addr", "add", NODE_ADDR + "/24", "dev", "up0")
        ns(self.node, "link", "set", "up0", "up")
        ns(self.node, "route", "add", "default", "via", "192.0.2.2")
        ns(self.out, "addr", "add", "192.0.2.2/24", "dev", "out0")
        ns(self.out, "link", "set", "out0", "up")
        for a in (ALLOWED, CDN, DENIED, CLUSTER, DNS):
            ns(self.out, "addr", "add", a + "/32", "dev", "lo")
        self.ready = tempfile.mktemp(prefix="egress-world-")
        self.procs.append(subprocess.Popen(["ip", "netns", "exec", self.out, sys.executable,
                                            os.path.join(HERE, "egress_world.py"), self.ready]))
        deadline = time.time() + 10
        while not os.path.exists(self.ready):
            if self.procs[0].poll() is not None or time.time() > deadline:
                raise RuntimeError("egress_world.py did not start")
            time.sleep(0.02)
        # A listener of the node itself: always out of a sandbox's reach.
        self.procs.append(subprocess.Popen(
            ["ip", "netns", "exec", self.node, sys.executable, "-c",
             "import socket;s=socket.socket();s.setsockopt(1,2,1);"
             "s.bind(('0.0.0.0',7000));s.listen();"
             "[c.sendall(b'node\\n') or c.close() for c,_ in iter(s.accept,0)]"]))

    def in_node(self, *cmd, **kw):
        """Runs cmd in the node's network namespace (as "the host")."""
        return subprocess.run(["ip", "netns", "exec", self.node, *cmd], **kw)

    def sandboxd_wrapper(self, binary, directory):
        """An executable that runs binary in the node's namespace."""
        w = os.path.join(directory, "strata-sandboxd")
        with open(w, "w") as f:
            f.write("#!/bin/sh\nexec nsenter --net=/run/netns/%s %s \"$@\"\n" % (self.node, binary))
        os.chmod(w, 0o755)
        return w

    def __exit__(self, *exc):
        for p in self.procs:
            p.kill()
            p.wait()
        for n in (self.node, self.out):
            subprocess.run(["ip", "netns", "del", n], capture_output=True)
        if self.ready and os.path.exists(self.ready):
            os.unlink(self.ready)
