"""Issue 14, item 3: a sandbox cannot take over its control channel.

Root in a container sandbox tries the takeover of the review: the classic
chroot escape, then the agent's socket moved aside and a fake agent
listening in its place (/bin/probe fakeagent, from tests/sandbox/sbx_probe.c,
copied into the image). After a sandboxd restart every exec must still be
the real agent's: real output, its timeout and output cap enforced. The
capabilities and every route to the staging root are checked from inside
too (probe caps, probe staging)."""
import os
import shutil
import tempfile

import pytest

from conftest import SRC
from sandboxd_harness import Daemon, make_busybox_rootfs, sandboxd_binary
from test_http_api import create, request, stream_events
from test_restart_paused import run


def probe_binary():
    build = os.environ.get("STRATA_BUILD") or os.path.join(SRC, "build")
    p = os.path.join(build, "tests", "sbx_probe")
    return p if os.path.exists(p) else None


@pytest.fixture
def d():
    if os.geteuid() != 0:
        pytest.skip("strata-sandboxd needs root (namespaces, mounts)")
    if not sandboxd_binary():
        pytest.skip("strata-sandboxd is not built (set STRATA_BIN)")
    if not probe_binary():
        pytest.skip("tests/sbx_probe is not built (set STRATA_BUILD)")
    base = tempfile.mkdtemp(prefix="strata-agent-channel-")
    root = make_busybox_rootfs(os.path.join(base, "rootfs"))
    shutil.copy(probe_binary(), os.path.join(root, "bin", "probe"))
    dd = Daemon(os.path.join(base, "d"), {"busybox": root}, [])
    os.makedirs(dd.base)
    dd.start()
    st, caps = request(dd, "GET", "/v1/capabilities")
    if not caps["backends"]["container"]["available"]:
        dd.stop()
        shutil.rmtree(base, ignore_errors=True)
        pytest.skip("container backend unavailable: %s"
                    % caps["backends"]["container"]["reason"])
    yield dd
    dd.stop()
    shutil.rmtree(base, ignore_errors=True)


def last_event(d, sid, body):
    st, b = request(d, "POST", "/v1/sandboxes/%s/exec" % sid, body)
    assert st == 200, b
    return stream_events(b)[-1]


def test_no_fake_agent_after_a_restart(d):
    sid = create(d, backend="container")
    ex, out = run(d, sid, "/bin/probe caps")
    assert ex["exit_code"] == 0, out
    ex, out = run(d, sid, "/bin/probe staging")  # before the fake's own socket
    assert ex["exit_code"] == 0, out
    ex, out = run(d, sid, "/bin/probe fakeagent")
    assert ex["exit_code"] == 0, out
    d.restart()
    st, b = request(d, "GET", "/v1/sandboxes/%s" % sid)
    assert st == 200 and b["state"] == "running", b
    ex, out = run(d, sid, "echo real")
    assert (ex["exit_code"], out) == (0, "real\n"), (ex, out)
    ex = last_event(d, sid, {"cmd": ["sleep", "5"], "timeout": 1})
    assert ex["timed_out"] and ex["exit_code"] != 0, ex
    ex = last_event(d, sid, {"cmd": "yes | head -c 100000", "output_cap": 1000})
    assert ex["truncated"], ex
    request(d, "DELETE", "/v1/sandboxes/%s" % sid)
