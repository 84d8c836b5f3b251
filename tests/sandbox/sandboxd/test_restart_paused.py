"""Restarts lose nothing: a paused (frozen) container sandbox is re-adopted
by a restarted sandboxd, still paused, and resumes with its files and
processes; a sandbox that cannot be adopted is killed, not left behind;
`strata down` after a sandboxd that died leaves no process of a sandbox,
frozen or not."""
import json
import os
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from sandboxd_harness import Daemon, cgroup_dir, make_busybox_rootfs, sandboxd_binary
from test_http_api import create, request, stream_events


@pytest.fixture
def d(daemon):  # daemon: root and a built sandboxd, else skipped
    if not request(daemon, "GET", "/v1/capabilities")[1]["backends"]["container"]["available"]:
        pytest.skip("no container backend here")
    base = tempfile.mkdtemp(prefix="strata-paused-")
    dd = Daemon(os.path.join(base, "d"), {"busybox": make_busybox_rootfs(os.path.join(base, "r"))})
    os.makedirs(dd.base)
    dd.start()
    dd.agents = []
    yield dd
    dd.stop()
    for pid in dd.agents:  # whatever a failed test left: thawed and killed
        kill_sandbox_of(pid)
    shutil.rmtree(base, ignore_errors=True)


def agent_pid(d, sid):
    with open(os.path.join(d.home, "sandboxd", "sandboxes", sid, "state.json")) as f:
        pid = json.load(f)["backend_state"]["agent_pid"]
    d.agents.append(pid)
    return pid


def slot_dir(pid):
    """The sandbox's cgroup: the one whose cgroup.procs lists all of it."""
    return cgroup_dir(pid, "pids") or cgroup_dir(pid, "")


def procs(slot):
    try:
        with open(os.path.join(slot, "cgroup.procs")) as f:
            return [int(x) for x in f.read().split()]
    except OSError:
        return []


def frozen_now(pid):
    fz = cgroup_dir(pid, "freezer")
    if fz and os.path.exists(os.path.join(fz, "freezer.state")):
        return open(os.path.join(fz, "freezer.state")).read().strip() == "FROZEN"
    v2 = cgroup_dir(pid, "")
    with open(os.path.join(v2, "cgroup.events")) as f:
        return "frozen 1" in f.read()


def frozen(pid, want=True, secs=5.0):
    """Whether pid's cgroup is frozen, waiting up to secs for it to become
    want: v1's freezer passes through FREEZING, which takes longer on a
    loaded machine than the answer to the pause does to arrive."""
    deadline = time.monotonic() + secs
    while True:
        state = frozen_now(pid)
        if state == want or time.monotonic() >= deadline:
            return state
        time.sleep(0.05)


def kill_sandbox_of(pid):
    slot = slot_dir(pid)
    if not slot or "sbx-" not in slot:
        return
    for p in procs(slot):
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    for d, f, v in ((cgroup_dir(pid, "freezer"), "freezer.state", "THAWED"),
                    (slot, "cgroup.freeze", "0")):
        try:
            with open(os.path.join(d, f), "w") as fh:
                fh.write(v)
        except (OSError, TypeError):
            pass


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def run(d, sid, script):
    st, body = request(d, "POST", "/v1/sandboxes/%s/exec" % sid, {"cmd": ["sh", "-c", script]})
    assert st == 200, body
    import base64
    ev = stream_events(body)
    out = b"".join(base64.b64decode(e["data"]) for e in ev if e["type"] == "stdout")
    return ev[-1], out.decode()


def test_paused_sandbox_readopted_after_restart(d):
    sid = create(d, backend="container")
    ex, _ = run(d, sid, "echo before > /tmp/f; sleep 1000 >/dev/null 2>&1 &")
    assert ex["exit_code"] == 0, ex
    pid = agent_pid(d, sid)
    assert request(d, "POST", "/v1/sandboxes/%s/pause" % sid)[0] == 200
    assert frozen(pid)
    d.restart()
    st, b = request(d, "GET", "/v1/sandboxes/%s" % sid)
    assert st == 200, (b, d.log_text()[-2000:])
    assert b["state"] == "paused"
    assert frozen(pid) and alive(pid)  # not thawed by the adoption
    st, b = request(d, "POST", "/v1/sandboxes/%s/exec" % sid, {"cmd": ["true"]})
    assert st == 409 and b["error"]["code"] == "paused", b
    st, b = request(d, "POST", "/v1/sandboxes/%s/resume" % sid)
    assert st == 200 and b["state"] == "running", b
    assert not frozen(pid, want=False)
    ex, out = run(d, sid, "cat /tmp/f; ps")
    assert ex["exit_code"] == 0, ex
    assert out.startswith("before\n") and "sleep 1000" in out, out
    # a second restart, now running: adopted as before
    d.restart()
    ex, out = run(d, sid, "cat /tmp/f")
    assert out == "before\n", ex
    assert request(d, "DELETE", "/v1/sandboxes/%s" % sid)[0] in (200, 204)


def test_down_kills_what_a_dead_sandboxd_left(d):
    strata = os.path.join(os.path.dirname(sandboxd_binary()), "strata")
    if not os.access(strata, os.X_OK):
        pytest.skip("the strata CLI is not built")
    paused, running = create(d, backend="container"), create(d, backend="container")
    for sid in (paused, running):
        ex, _ = run(d, sid, "sleep 1000 >/dev/null 2>&1 &")
        assert ex["exit_code"] == 0, ex
    assert request(d, "POST", "/v1/sandboxes/%s/pause" % paused)[0] == 200
    pids = [agent_pid(d, paused), agent_pid(d, running)]
    slots = [slot_dir(p) for p in pids]
    assert frozen(pids[0]) and all(len(procs(s)) >= 2 for s in slots), slots
    d.proc.kill()  # sandboxd dies: its persistent sandboxes run on
    d.proc.wait()
    d.proc = None
    assert all(alive(p) for p in pids)
    r = subprocess.run([strata, "down", "--home", d.home], capture_output=True, text=True,
                       timeout=60, env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0"))
    assert r.returncode == 0, r.stdout + r.stderr
    assert "killed 2 sandbox" in r.stdout, r.stdout
    deadline = time.time() + 10
    while any(alive(p) for p in pids) and time.time() < deadline:
        time.sleep(0.05)
    assert not any(alive(p) for p in pids)
    assert [procs(s) for s in slots] == [[], []]
    assert os.listdir(os.path.join(d.home, "sandboxd", "sandboxes")) == []


def test_a_sandbox_that_cannot_be_adopted_is_killed(d):
    """An agent that cannot be verified (here its record names another start
    time: the pid would be another process's) is never adopted as running:
    sandboxd kills what is in the sandbox's cgroup slot (rather than leave it
    to run until its orphan timeout, or forever when frozen) and keeps the
    sandbox as failed, with the reason."""
    sid = create(d, backend="container")
    ex, _ = run(d, sid, "sleep 1000 >/dev/null 2>&1 &")
    assert ex["exit_code"] == 0, ex
    pid = agent_pid(d, sid)
    slot = slot_dir(pid)
    d.stop(cleanup=False)
    state = os.path.join(d.home, "sandboxd", "sandboxes", sid, "state.json")
    with open(state) as f:
        j = json.load(f)
    j["backend_state"]["agent_start"] += 1
    with open(state, "w") as f:
        json.dump(j, f)
    d.start()
    st, b = request(d, "GET", "/v1/sandboxes/%s" % sid)
    assert st == 200 and b["state"] == "failed", b
    assert "not the recorded agent" in b["failed_reason"], b
    deadline = time.time() + 10
    while alive(pid) and time.time() < deadline:
        time.sleep(0.05)
    assert not alive(pid) and procs(slot) == [], d.log_text()[-2000:]
    st, b = request(d, "POST", "/v1/sandboxes/%s/exec" % sid, {"cmd": ["true"]})
    assert st == 409 and b["error"]["code"] == "failed", b
    d.restart()  # still failed: nothing to adopt again
    st, b = request(d, "GET", "/v1/sandboxes/%s" % sid)
    assert st == 200 and b["state"] == "failed", b
    assert request(d, "DELETE", "/v1/sandboxes/%s" % sid)[0] == 200
    assert request(d, "GET", "/v1/sandboxes/%s" % sid)[0] == 404
