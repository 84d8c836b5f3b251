"""disk_mb through sandboxd's API (sandbox/container/layer.c): capabilities
tell whether the writable layer is on disk with a quota (limits_disk) and
why not (disk_reason); where it is, writing past disk_mb gives the writer
ENOSPC, the sandbox and sandboxd live on, and the memory limit (far below
what was written) kills nothing; two sandboxes' quotas are their own."""
import pytest

from test_container_exec import run
from test_http_api import create, request


def container_caps(daemon):
    st, caps = request(daemon, "GET", "/v1/capabilities")
    assert st == 200
    c = caps["backends"]["container"]
    if not c["available"]:
        pytest.skip("container backend unavailable: %s" % c["reason"])
    return c


def test_capabilities_say_where_the_layer_is(daemon):
    c = container_caps(daemon)
    assert isinstance(c["disk_reason"], str) and c["disk_reason"]
    if c["limits_disk"]:
        assert "project quotas" in c["disk_reason"]
    else:  # a tmpfs: disk_mb is inside memory_mb, and it says so
        assert "memory" in c["disk_reason"]


def sh(daemon, sid, cmd):
    out, err, ev = run(daemon, sid, {"cmd": ["/bin/sh", "-c", cmd], "timeout": 60})
    return out.decode(), err.decode(), ev


def test_enospc_past_disk_mb(daemon):
    c = container_caps(daemon)
    if not c["limits_disk"]:
        pytest.skip("writable layers not on disk here: %s" % c["disk_reason"])
    a = create(daemon, backend="container", memory_mb=48, disk_mb=96)
    b = create(daemon, backend="container", memory_mb=48, disk_mb=96)
    try:
        out, err, ev = sh(daemon, a, "dd if=/dev/zero of=/big bs=1M count=200; sync")
        assert "No space left on device" in err, (out, err, ev)
        assert ev.get("signal", 0) in (0, None), ev  # not OOM-killed at 48 MiB
        out, err, ev = sh(daemon, a, "echo alive; du -sm /big")
        assert out.startswith("alive\n") and 90 <= int(out.split()[1]) <= 96, out
        st, info = request(daemon, "GET", "/v1/sandboxes/%s" % a)
        assert st == 200 and info["state"] == "running"
        # the other sandbox's quota is its own
        out, err, ev = sh(daemon, b, "dd if=/dev/zero of=/half bs=1M count=48 && echo ok")
        assert out.endswith("ok\n"), (out, err)
    finally:
        request(daemon, "DELETE", "/v1/sandboxes/%s" % a)
        request(daemon, "DELETE", "/v1/sandboxes/%s" % b)
    assert request(daemon, "GET", "/v1/health")[0] == 200
