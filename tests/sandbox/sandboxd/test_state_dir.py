"""sandboxd's default state dir: on a tmpfs (/run/strata or /dev/shm/strata),
linked from HOME/sandboxd, kept across a restart (re-adoption), removed at a
clean stop that leaves no sandbox; kept on disk when HOME/sandboxd already
holds sandboxes of an earlier sandboxd."""
import os
import shutil
import tempfile

import pytest

from sandboxd_harness import Daemon, make_busybox_rootfs
from test_http_api import create, request


def fs_type(path):
    best, kind = "", None
    with open("/proc/self/mounts") as f:
        for line in f:
            mnt, typ = line.split()[1], line.split()[2]
            if (path == mnt or path.startswith(mnt.rstrip("/") + "/")) and len(mnt) >= len(best):
                best, kind = mnt, typ
    return kind


@pytest.fixture
def base(daemon):  # daemon: root and a built sandboxd, else skipped
    b = tempfile.mkdtemp(prefix="strata-state-")
    yield b
    shutil.rmtree(b, ignore_errors=True)


def test_default_state_dir_on_tmpfs_and_readopt(base):
    root = make_busybox_rootfs(os.path.join(base, "rootfs"))
    d = Daemon(os.path.join(base, "d"), {"busybox": root})
    os.makedirs(d.base)
    d.start()
    try:
        state = request(d, "GET", "/v1/node")[1]["state_dir"]
        if not state.startswith(("/run/strata/", "/dev/shm/strata/")):
            pytest.skip("no writable tmpfs on this machine: state in %s" % state)
        assert fs_type(state) in ("tmpfs", "ramfs")
        link = os.path.join(d.home, "sandboxd")
        assert os.path.islink(link) and os.path.realpath(link) == state
        assert os.stat(state).st_mode & 0o777 == 0o700
        st, caps = request(d, "GET", "/v1/capabilities")
        backend = "container" if caps["backends"]["container"]["available"] else "fncall"
        sid = create(d, backend=backend)
        assert os.path.exists(os.path.join(link, "sandboxes", sid, "state.json"))
        d.restart()
        assert request(d, "GET", "/v1/node")[1]["state_dir"] == state
        st, b = request(d, "GET", "/v1/sandboxes/%s" % sid)
        if backend == "container":  # re-adopted from the tmpfs state
            assert st == 200, b
            st, body = request(d, "POST", "/v1/sandboxes/%s/exec" % sid, {"cmd": ["true"]})
            assert st == 200 and b'"exit_code":0' in body
        request(d, "DELETE", "/v1/sandboxes/%s" % sid)
    finally:
        d.stop()
    # a clean stop without sandboxes leaves nothing behind
    assert not os.path.exists(state) and not os.path.lexists(os.path.join(d.home, "sandboxd"))


def test_state_of_an_earlier_sandboxd_stays_on_disk(base):
    root = make_busybox_rootfs(os.path.join(base, "rootfs"))
    d = Daemon(os.path.join(base, "d"), {"busybox": root})
    old = os.path.join(d.home, "sandboxd", "sandboxes", "sb-0000000000000000")
    os.makedirs(old)  # not adoptable: dropped, but the dir is the state dir
    with open(os.path.join(old, "state.json"), "w") as f:
        f.write("{}")
    d.start()
    try:
        state = request(d, "GET", "/v1/node")[1]["state_dir"]
        assert os.path.realpath(state) == os.path.realpath(os.path.join(d.home, "sandboxd"))
        assert not os.path.islink(os.path.join(d.home, "sandboxd"))
    finally:
        d.stop()


def test_open_file_limit_raised_for_sandboxd_not_for_sandboxes(base):
    """sandboxd holds several fds per sandbox: it raises its soft
    RLIMIT_NOFILE to the hard limit (fs/daemon.h); a sandbox it creates still
    starts with the usual 1024."""
    import resource
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard <= 1024:
        pytest.skip("hard open file limit %d: nothing to raise" % hard)
    root = make_busybox_rootfs(os.path.join(base, "rootfs"))
    d = Daemon(os.path.join(base, "d"), {"busybox": root})
    os.makedirs(d.base)
    resource.setrlimit(resource.RLIMIT_NOFILE, (1024, hard))  # as a shell's default
    try:
        d.start()
    finally:
        resource.setrlimit(resource.RLIMIT_NOFILE, (soft, hard))
    try:
        with open("/proc/%d/limits" % d.proc.pid) as f:
            line = [l for l in f if l.startswith("Max open files")][0]
        assert line.split()[3:5] == [str(hard), str(hard)], line
        caps = request(d, "GET", "/v1/capabilities")[1]
        if not caps["backends"]["container"]["available"]:
            pytest.skip("no container backend here")
        sid = create(d, backend="container")
        st, body = request(d, "POST", "/v1/sandboxes/%s/exec" % sid,
                           {"cmd": ["sh", "-c", "ulimit -Sn; ulimit -Hn"]})
        assert st == 200, body
        import base64
        from test_http_api import stream_events
        events = stream_events(body)
        out = b"".join(base64.b64decode(e["data"]) for e in events if e["type"] == "stdout")
        assert out == b"1024\n%d\n" % hard and events[-1]["exit_code"] == 0, events
        request(d, "DELETE", "/v1/sandboxes/%s" % sid)
    finally:
        d.stop()
