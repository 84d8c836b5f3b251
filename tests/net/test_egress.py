"""Network "egress" through strata-sandboxd and the SDK (sandbox/net).

The node is a network namespace of its own (strata-sandboxd runs in it
through nsenter), its uplink a veth into an "outside" namespace that runs
egress_world.py: a DNS server and TCP servers on addresses of their own
(198.51.100.0/24). Both namespaces are made and removed here; nothing is
routed off this machine. Each case checks what the sandbox saw (a greeting,
NXDOMAIN, "Connection refused" quickly: refused, never dropped) and the
verdict and rule the decision log gives for it."""
import os
import shutil
import sys
import tempfile
import time

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("STRATA_SRC") or os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SRC, "sdk", "python"))
sys.path.insert(0, os.path.join(SRC, "tests", "sdk"))
sys.path.insert(0, HERE)

import sandboxd_harness  # noqa: E402
from sandboxd_harness import Daemon, make_busybox_rootfs, sandboxd_binary  # noqa: E402

import strata  # noqa: E402

from egress_ns import ALLOWED, CDN, CLUSTER, DENIED, NODE_ADDR, World  # noqa: E402


@pytest.fixture(scope="module")
def world():
    if os.geteuid() != 0:
        pytest.skip("needs root (network namespaces)")
    if not shutil.which("nft") or not sandboxd_binary():
        pytest.skip("nft (scripts/install-deps.sh) or strata-sandboxd missing")
    with World() as w:
        yield w


class NodeDaemon(Daemon):
    """strata-sandboxd inside the node's network namespace."""

    def __init__(self, world, *a):
        super().__init__(*a)
        self.world = world

    def start(self, timeout=20):
        real = sandboxd_binary
        wrapper = self.world.sandboxd_wrapper(real(), self.base)
        sandboxd_harness.sandboxd_binary = lambda: wrapper
        try:
            return super().start(timeout)
        finally:
            sandboxd_harness.sandboxd_binary = real


@pytest.fixture(scope="module")
def daemon(world):
    base = tempfile.mkdtemp(prefix="strata-egress-")
    root = os.path.join(base, "rootfs")
    sandboxd_harness.BUSYBOX_APPLETS += ["nc", "nslookup", "timeout"]
    make_busybox_rootfs(root)
    images = {"busybox": root}
    if os.access("/usr/bin/python3", os.X_OK):
        images["hostroot"] = "/"  # python3 inside, for the UDP client
    d = NodeDaemon(world, base, images,
                   ["--net-uplink", "up0", "--net-dns", "198.51.100.53",
                    "--net-protect", CLUSTER + "/32:tcp:9000"])
    d.start()
    caps = strata.capabilities("container", socket=d.socket)
    if not caps["available"]:
        d.stop()
        pytest.skip("container backend unavailable: %s" % caps.get("reason"))
    yield d
    d.stop()
    shutil.rmtree(base, ignore_errors=True)


def make(daemon, **kw):
    return strata.Sandbox.create("busybox", network="egress", socket=daemon.socket, **kw)


def connect(sb, addr, port):
    """What a TCP connect from the sandbox gets: the greeting, or nc's error.
    Returns (text, seconds)."""
    t = time.time()
    r = sb.exec(["timeout", "5", "nc", addr, str(port)])
    return (r.stdout + r.stderr).strip(), time.time() - t


def refused(sb, addr, port):
    text, took = connect(sb, addr, port)
    assert "refused" in text, text
    assert took < 2, "a refusal must be quick (RST), took %.1f s" % took


def greeted(sb, addr, port):
    text, _ = connect(sb, addr, port)
    assert text == "hello from %s:%d" % (addr, port), text


def lookup(sb, name):
    r = sb.exec(["nslookup", name, "198.51.100.53"])
    return r.stdout + r.stderr


def log_has(sb, **want):
    """The first record of the log with every field of want; waits a little
    (NFLOG records arrive asynchronously)."""
    deadline = time.time() + 3
    while True:
        recs = sb.network_log()
        for r in recs:
            if all(r.get(k) == v for k, v in want.items()):
                return r
        if time.time() > deadline:
            raise AssertionError("no record %r in %r" % (want, recs))
        time.sleep(0.05)


def test_cidr_allow_and_default_deny(daemon):
    sb = make(daemon, allow_out=[ALLOWED + "/32:80"])
    try:
        info = sb.network()
        assert info["network"] == "egress" and info["policy"]["default"] == "deny"
        greeted(sb, ALLOWED, 80)
        refused(sb, ALLOWED, 8080)  # the port is not allowed
        refused(sb, DENIED, 80)
        log_has(sb, kind="connect", dst=ALLOWED, port=80, verdict="allow",
                rule="allow_out " + ALLOWED + "/32:80")
        log_has(sb, kind="connect", dst=ALLOWED, port=8080, verdict="deny", rule="default")
        log_has(sb, kind="connect", dst=DENIED, port=80, verdict="deny", rule="default")
        m = sb.metrics()
        assert m.net_bytes_out > 0 and m.net_bytes_in > 0
    finally:
        sb.kill()


def test_names_enforced_by_the_resolver(daemon):
    sb = make(daemon, allow_out=["allowed.example", "*.cdn.example:80"])
    try:
        # An address never resolved is not open, even an allowed name's.
        refused(sb, ALLOWED, 80)
        out = lookup(sb, "allowed.example")
        assert ALLOWED in out, out
        greeted(sb, ALLOWED, 80)
        greeted(sb, ALLOWED, 8080)  # a name without a port: every port
        log_has(sb, kind="dns", name="allowed.example", qtype="A", verdict="allow",
                rule="allowed.example", answers=[ALLOWED])
        log_has(sb, kind="connect", dst=ALLOWED, port=80, verdict="allow", rule="dns",
                name="allowed.example")
        assert CDN in lookup(sb, "www.cdn.example")
        greeted(sb, CDN, 80)
        # A denied name: NXDOMAIN, and its address as a literal is refused.
        out = lookup(sb, "denied.example")
        assert DENIED not in out and "NXDOMAIN" in out, out
        log_has(sb, kind="dns", name="denied.example", verdict="deny", rule="default")
        refused(sb, DENIED, 80)
        log_has(sb, kind="connect", dst=DENIED, verdict="deny", rule="default")
    finally:
        sb.kill()


def test_deny_list_over_default_allow(daemon):
    sb = make(daemon, deny_out=[DENIED + "/32", "denied.example"])
    try:
        assert sb.network()["policy"]["default"] == "allow"
        greeted(sb, ALLOWED, 8081)
        refused(sb, DENIED, 80)
        log_has(sb, kind="connect", dst=DENIED, verdict="deny", rule="deny_out " + DENIED + "/32")
        assert "NXDOMAIN" in lookup(sb, "denied.example")
        log_has(sb, kind="dns", name="denied.example", verdict="deny", rule="denied.example")
    finally:
        sb.kill()


def test_always_denied(daemon):
    sb = make(daemon, egress_default="allow")
    other = make(daemon, egress_default="allow")
    try:
        gw = sb.network()["gateway"]
        refused(sb, NODE_ADDR, 7000)  # the node itself
        refused(sb, gw, 7000)
        log_has(sb, kind="connect", dst=NODE_ADDR, verdict="deny", rule="always:node")
        refused(sb, "169.254.169.254", 80)  # cloud metadata
        log_has(sb, kind="connect", dst="169.254.169.254", verdict="deny",
                rule="always:link-local")
        refused(sb, CLUSTER, 9000)  # --net-protect: the cluster's services
        log_has(sb, kind="connect", dst=CLUSTER, port=9000, verdict="deny", rule="always:cluster")
        peer = other.network()["address"]
        refused(sb, peer, 80)  # another sandbox
        log_has(sb, kind="connect", dst=peer, verdict="deny", rule="always:sandboxes")
        # DNS rebinding onto a denied range: the address is never granted.
        out = lookup(sb, "rebind.example")
        rec = log_has(sb, kind="dns", name="rebind.example", verdict="allow")
        assert rec["refused_answers"] == ["169.254.169.254"], rec
        assert rec["answers"] == [ALLOWED], (rec, out)
    finally:
        sb.kill()
        other.kill()


UDP_SEND = ("import socket,sys,time;s=socket.socket(2,2);s.connect((sys.argv[1],int(sys.argv[2])));"
            "s.settimeout(2);t=time.time();s.send(b'x')\n"
            "try:\n s.recv(1);print('answered')\n"
            "except socket.timeout:print('dropped')\n"
            "except OSError as e:print('refused',e.errno,round(time.time()-t,2))")


def test_udp_443_refused(daemon):
    """QUIC is refused (ICMP admin-prohibited), so clients fall back to TCP."""
    if "hostroot" not in daemon.images:
        pytest.skip("no python3 on this host for the UDP client")
    sb = strata.Sandbox.create("hostroot", network="egress", socket=daemon.socket)
    try:
        r = sb.exec(["python3", "-c", UDP_SEND, ALLOWED, "443"])
        assert r.stdout.startswith("refused"), r.stdout + r.stderr
        log_has(sb, kind="connect", proto="udp", dst=ALLOWED, port=443, verdict="deny",
                rule="always:quic")
    finally:
        sb.kill()


def test_policy_change_while_running(daemon):
    sb = make(daemon, allow_out=[ALLOWED + "/32"])
    try:
        # A connection open across the change: its second line meets the
        # new policy and the connection is reset.
        sb.exec(["sh", "-c", "((echo one; while [ ! -e /tmp/go ]; do sleep 0.05; done; echo two;"
                 " sleep 1) | nc %s 7001 > /tmp/echo 2>&1) </dev/null >/dev/null 2>&1 &"
                 % ALLOWED])
        deadline = time.time() + 5
        while "echo one" not in sb.exec("cat /tmp/echo").stdout:
            assert time.time() < deadline, "the connection did not open"
            time.sleep(0.05)
        info = sb.set_network_policy(allow_out=[CDN + "/32"], deny_out=[ALLOWED + "/32:7001"])
        assert info["policy"]["deny_out"] == [ALLOWED + "/32:7001"]
        sb.exec("touch /tmp/go")
        time.sleep(1.5)
        out = sb.exec("cat /tmp/echo").stdout
        assert "echo one" in out and "echo two" not in out, out
        log_has(sb, kind="connect", dst=ALLOWED, port=7001, verdict="deny",
                rule="deny_out " + ALLOWED + "/32:7001")
        refused(sb, ALLOWED, 80)  # no longer allowed: the default is deny
        greeted(sb, CDN, 80)
        # A bad policy changes nothing.
        with pytest.raises(strata.errors.InvalidRequest):
            sb.set_network_policy(allow_out=["not a cidr"])
        greeted(sb, CDN, 80)
    finally:
        sb.kill()


def test_many_sandboxes_with_their_own_policies(daemon):
    ports = [80, 8080, 8081, 8082, 8083]
    sbs = [make(daemon, allow_out=["%s/32:%d" % (ALLOWED, p)]) for p in ports]
    try:
        for i, sb in enumerate(sbs):
            greeted(sb, ALLOWED, ports[i])
            refused(sb, ALLOWED, ports[(i + 1) % len(ports)])
        addrs = {sb.network()["address"] for sb in sbs}
        assert len(addrs) == len(sbs)
    finally:
        for sb in sbs:
            sb.kill()


def test_async_sdk(daemon):
    import asyncio
    from strata.aio import AsyncSandbox

    async def run():
        sb = await AsyncSandbox.create("busybox", network="egress", socket=daemon.socket,
                                       allow_out=[ALLOWED + "/32:80"])
        try:
            info = await sb.set_network_policy(allow_out=[ALLOWED + "/32:8082"])
            assert info["policy"]["allow_out"] == [ALLOWED + "/32:8082"]
            r = await sb.exec(["timeout", "5", "nc", ALLOWED, "8082"])
            assert r.stdout.strip() == "hello from %s:8082" % ALLOWED
            for _ in range(60):
                if any(x.get("port") == 8082 and x["verdict"] == "allow"
                       for x in await sb.network_log()):
                    break
                await asyncio.sleep(0.05)
            else:
                raise AssertionError(await sb.network_log())
            assert (await sb.network())["network"] == "egress"
        finally:
            await sb.kill()
    asyncio.run(run())


def test_refused_requests(daemon):
    with pytest.raises(strata.errors.InvalidRequest):
        make(daemon, allow_out=["10.0.0.0/33"])
    with pytest.raises(strata.errors.InvalidRequest):
        strata.Sandbox.create("busybox", allow_out=["10.0.0.0/8"], socket=daemon.socket)
    sb = strata.Sandbox.create("busybox", socket=daemon.socket)
    try:
        with pytest.raises(strata.errors.StrataError):
            sb.network()
    finally:
        sb.kill()
