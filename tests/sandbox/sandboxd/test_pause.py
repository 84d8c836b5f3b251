"""Pause through the API, on the container library's sbx_pause_start/poll
(issue 14: the freezer lives in sandbox/container/ alone). A pause that
cannot complete (a process of the sandbox waits in a FUSE request that this
test, the filesystem's server, never answers: what a lazy image read from a
slow cluster looks like) is answered 409 busy at the deadline, and the
sandbox runs on; meanwhile sandboxd serves everyone else at once (the wait
is on a timer, not on the loop) and the sandbox refuses execs; a sandbox
whose record says running but which is frozen (a sandboxd that died
between the freeze and the record) is re-adopted paused, and resumes."""
import ctypes
import json
import os
import struct
import threading
import time

import pytest

from test_http_api import create, request
from test_restart_paused import agent_pid, d, frozen, run  # noqa: F401 (d: fixture)

FUSE_INIT = 26
CLONE_NEWNS = 0x00020000


def mount_fuse_in_sandbox(pid, fuse_fd, where="root"):
    """Mounts the FUSE filesystem served by fuse_fd at /<where> of the
    sandbox whose agent is pid: a child joins the sandbox's mount namespace
    (nothing inside may mount)."""
    ns = os.open("/proc/%d/ns/mnt" % pid, os.O_RDONLY)
    root = os.open("/proc/%d/root" % pid, os.O_RDONLY | os.O_DIRECTORY)
    child = os.fork()
    if child == 0:
        try:
            libc = ctypes.CDLL(None, use_errno=True)
            opts = "fd=%d,rootmode=40000,user_id=0,group_id=0,allow_other" % fuse_fd
            if libc.setns(ns, CLONE_NEWNS) != 0:
                os._exit(100 + ctypes.get_errno())
            os.fchdir(root)
            ok = libc.mount(b"stall", where.encode(), b"fuse", 0, opts.encode()) == 0
            os._exit(0 if ok else ctypes.get_errno())
        except BaseException:
            os._exit(2)
    os.close(ns)
    os.close(root)
    _, st = os.waitpid(child, 0)
    rc = os.waitstatus_to_exitcode(st)
    assert rc == 0, "mount in the sandbox: %s%s" % ("setns: " if rc > 100 else "",
                                                      os.strerror(rc % 100))


def fuse_next(fd):
    """Reads the next request; answers INIT (protocol 7.31) and nothing else.
    Returns its opcode."""
    buf = os.read(fd, 1 << 17)
    _, op, unique = struct.unpack_from("<IIQ", buf, 0)
    if op == FUSE_INIT:
        body = struct.pack("<IIIIHHIIHHI", 7, 31, 0, 0, 16, 12, 4096, 1, 32, 0, 0) + b"\0" * 28
        os.write(fd, struct.pack("<IiQ", 16 + len(body), 0, unique) + body)
    return op


def test_pause_that_cannot_freeze_is_refused_and_runs_on(d):  # noqa: F811
    if not os.path.exists("/dev/fuse"):
        pytest.skip("no /dev/fuse")
    sid = create(d, backend="container")
    pid = agent_pid(d, sid)
    fd = os.open("/dev/fuse", os.O_RDWR | os.O_CLOEXEC)
    try:
        mount_fuse_in_sandbox(pid, fd)
        assert fuse_next(fd) == FUSE_INIT
        ex, _ = run(d, sid, "stat /root/x >/dev/null 2>&1 &")
        assert ex["exit_code"] == 0, ex
        assert fuse_next(fd) != FUSE_INIT  # the stat's LOOKUP, never answered
        answer = {}

        def pause():
            t = time.monotonic()
            answer["r"] = request(d, "POST", "/v1/sandboxes/%s/pause" % sid)
            answer["took"] = time.monotonic() - t

        th = threading.Thread(target=pause)
        th.start()
        time.sleep(0.2)  # the pause waits for the freeze; the daemon serves on
        t = time.monotonic()
        assert request(d, "GET", "/v1/health")[0] == 200
        st, b = request(d, "POST", "/v1/sandboxes/%s/exec" % sid, {"cmd": ["true"]})
        assert st == 409 and "being paused" in b["error"]["message"], b
        st, b = request(d, "POST", "/v1/sandboxes/%s/pause" % sid)
        assert st == 409 and b["error"]["code"] == "busy", b
        assert time.monotonic() - t < 0.5
        th.join()
        (st, b), took = answer["r"], answer["took"]
        assert st == 409 and b["error"]["code"] == "busy", b
        assert "did not freeze within 1000 ms" in b["error"]["message"], b
        assert 0.9 < took < 5, took
        st, b = request(d, "GET", "/v1/sandboxes/%s" % sid)
        assert b["state"] == "running" and not frozen(pid), b
        ex, out = run(d, sid, "echo on")
        assert out == "on\n", ex
    finally:
        os.close(fd)  # the connection aborts: the stat fails
    time.sleep(0.2)
    assert request(d, "POST", "/v1/sandboxes/%s/pause" % sid)[0] == 200
    assert frozen(pid)
    assert request(d, "POST", "/v1/sandboxes/%s/resume" % sid)[0] == 200
    assert request(d, "DELETE", "/v1/sandboxes/%s" % sid)[0] == 200


def test_frozen_sandbox_recorded_running_is_adopted_paused(d):  # noqa: F811
    sid = create(d, backend="container")
    ex, _ = run(d, sid, "echo before > /tmp/f; sleep 1000 >/dev/null 2>&1 &")
    assert ex["exit_code"] == 0, ex
    pid = agent_pid(d, sid)
    assert request(d, "POST", "/v1/sandboxes/%s/pause" % sid)[0] == 200
    d.stop(cleanup=False)
    state = os.path.join(d.home, "sandboxd", "sandboxes", sid, "state.json")
    with open(state) as f:
        j = json.load(f)
    assert j["sandbox"]["state"] == "paused"
    j["sandbox"]["state"] = "running"  # as if it died before recording the pause
    with open(state, "w") as f:
        json.dump(j, f)
    d.start()
    st, b = request(d, "GET", "/v1/sandboxes/%s" % sid)
    assert st == 200 and b["state"] == "paused", (b, d.log_text()[-2000:])
    assert frozen(pid)
    with open(state) as f:
        assert json.load(f)["sandbox"]["state"] == "paused"  # the record follows
    st, b = request(d, "POST", "/v1/sandboxes/%s/resume" % sid)
    assert st == 200 and b["state"] == "running", b
    ex, out = run(d, sid, "cat /tmp/f")
    assert out == "before\n", ex
    assert request(d, "DELETE", "/v1/sandboxes/%s" % sid)[0] == 200
