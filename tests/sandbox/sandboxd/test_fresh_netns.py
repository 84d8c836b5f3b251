"""--fresh-netns: every container sandbox gets a network namespace of its
own, never one a finished sandbox used (the default reuses an empty one;
tests/sandbox/test_sandbox_reuse.c checks that reuse leaves nothing behind)."""
import base64
import os

import pytest

from conftest import daemon_in_tmp
from test_http_api import request, stream_events


@pytest.fixture(scope="module")
def fresh(daemon):  # daemon: root and a built sandboxd, else skipped
    st, caps = request(daemon, "GET", "/v1/capabilities")
    if not caps["backends"]["container"]["available"]:
        pytest.skip("container backend unavailable")
    yield from daemon_in_tmp("strata-freshns-", ["--fresh-netns"])


def exec_stdout(d, sid, cmd):
    st, body = request(d, "POST", "/v1/sandboxes/%s/exec" % sid, {"cmd": cmd})
    assert st == 200, body
    events = stream_events(body)
    assert events[-1]["type"] == "exit" and events[-1]["exit_code"] == 0, events
    return b"".join(base64.b64decode(e["data"]) for e in events if e["type"] == "stdout")


def pin_namespace(ns):
    """An fd of the network namespace ns (b"net:[N]"), taken from a process
    of the host that is in it (the sandbox's agent), or None: held, it keeps
    the kernel from giving N to a new namespace once the sandbox is gone
    (inode numbers of freed namespaces are reused, so without it a repeated
    N could be a new namespace)."""
    for pid in filter(str.isdigit, os.listdir("/proc")):
        path = "/proc/%s/ns/net" % pid
        try:
            if os.readlink(path).encode() == ns:
                return os.open(path, os.O_RDONLY)
        except OSError:
            continue
    return None


def test_every_sandbox_has_a_new_network_namespace(fresh):
    seen, pins = set(), []
    try:
        for _ in range(6):
            st, b = request(fresh, "POST", "/v1/sandboxes",
                            {"image": "busybox", "backend": "container"})
            assert st == 201, b
            ns = exec_stdout(fresh, b["id"], ["busybox", "readlink", "/proc/self/ns/net"]).strip()
            assert ns.startswith(b"net:["), ns
            assert ns not in seen, "network namespace %s reused under --fresh-netns" % ns
            seen.add(ns)
            pins.append(pin_namespace(ns))
            assert pins[-1] is not None, "no process of the host is in %s" % ns
            assert request(fresh, "DELETE", "/v1/sandboxes/%s" % b["id"])[0] in (200, 204)
    finally:
        for fd in (p for p in pins if p is not None):
            os.close(fd)
