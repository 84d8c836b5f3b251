"""Fixtures of the SDK tests: a real strata-sandboxd on a temporary socket,
with a busybox-static root filesystem built in a temporary directory and
registered as image "busybox".

The daemon comes from $STRATA_BIN (set by ctest) or build/bin. Tests that
need what this machine lacks skip with the reason. Every daemon started
here is stopped (SIGTERM, then SIGKILL) and its directory removed."""
import os
import shutil
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("STRATA_SRC") or os.path.abspath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(SRC, "sdk", "python"))
sys.path.insert(0, HERE)

from sandboxd_harness import Daemon, make_busybox_rootfs, sandboxd_binary  # noqa: E402


@pytest.fixture(scope="session")
def workdir():
    if os.geteuid() != 0:
        pytest.skip("strata-sandboxd needs root (namespaces, mounts)")
    if not sandboxd_binary():
        pytest.skip("strata-sandboxd is not built (set STRATA_BIN)")
    d = tempfile.mkdtemp(prefix="strata-sdk-")
    yield d
    shutil.rmtree(d, ignore_errors=True)


@pytest.fixture(scope="session")
def rootfs(workdir):
    return make_busybox_rootfs(os.path.join(workdir, "rootfs"))


@pytest.fixture(scope="session")
def images(rootfs):
    imgs = {"busybox": rootfs}
    if os.access("/usr/bin/python3", os.X_OK):
        imgs["hostroot"] = "/"  # for the warm-interpreter tests: needs python3 inside
    return imgs


@pytest.fixture(scope="session")
def daemon(workdir, images):
    d = Daemon(os.path.join(workdir, "main"), images)
    os.makedirs(d.base)
    d.start()
    yield d
    d.stop()


@pytest.fixture
def make_daemon(workdir, images):
    """Starts extra daemons with their own options (stopped after the test)."""
    made = []

    def make(*extra):
        base = tempfile.mkdtemp(dir=workdir)
        d = Daemon(base, images, extra)
        made.append(d)
        return d.start()
    yield make
    for d in made:
        d.stop()


@pytest.fixture
def sock(daemon):
    return daemon.socket


@pytest.fixture(scope="session")
def container_available(daemon):
    import strata
    caps = strata.capabilities("container", socket=daemon.socket)
    return caps["available"], caps.get("reason")


@pytest.fixture
def need_container(container_available):
    ok, why = container_available
    if not ok:
        pytest.skip("container backend unavailable: %s" % why)
