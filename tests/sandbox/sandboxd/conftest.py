"""Fixtures of the HTTP API tests: one strata-sandboxd on a temporary socket
(the harness is shared with tests/sdk)."""
import os
import shutil
import sys
import tempfile

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("STRATA_SRC") or os.path.abspath(os.path.join(HERE, "..", "..", ".."))
sys.path.insert(0, os.path.join(SRC, "tests", "sdk"))

from sandboxd_harness import Daemon, make_busybox_rootfs, sandboxd_binary  # noqa: E402


def daemon_in_tmp(prefix, extra, env=None):
    """A fixture body: one sandboxd with image busybox in a temporary
    directory, stopped and removed afterwards (env: over its environment)."""
    if os.geteuid() != 0:
        pytest.skip("strata-sandboxd needs root (namespaces, mounts)")
    if not sandboxd_binary():
        pytest.skip("strata-sandboxd is not built (set STRATA_BIN)")
    base = tempfile.mkdtemp(prefix=prefix)
    root = make_busybox_rootfs(os.path.join(base, "rootfs"))
    d = Daemon(os.path.join(base, "d"), {"busybox": root}, extra, env)
    os.makedirs(d.base)
    d.start()
    yield d
    d.stop()
    shutil.rmtree(base, ignore_errors=True)


@pytest.fixture(scope="session")
def daemon():
    yield from daemon_in_tmp("strata-api-", ["--max-body-mb", "1"])
