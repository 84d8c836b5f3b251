"""`strata tenant add|list|rm|token|set` (tools/cmd_tenant.c) against a real
sandboxd that reads the file they write, and the SDK's side of tenants
(token=, QuotaExceeded, PermissionDenied, Unauthorized, tenant_info)."""
import asyncio
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

import pytest

from sandboxd_harness import SRC, Daemon, make_busybox_rootfs, sandboxd_binary
from slow_clients import free_port

sys.path.insert(0, os.path.join(SRC, "sdk", "python"))
import strata  # noqa: E402
import strata.aio  # noqa: E402


def cli(home, *args):
    binary = os.path.join(os.path.dirname(sandboxd_binary() or "/x"), "strata")
    if not os.access(binary, os.X_OK):
        pytest.skip("the strata CLI is not built")
    return subprocess.run([binary, "tenant", "--home", home] + list(args), capture_output=True,
                          text=True, env=dict(os.environ, ASAN_OPTIONS="detect_leaks=0"),
                          timeout=60)


@pytest.fixture(scope="module")
def d():
    if os.geteuid() != 0:
        pytest.skip("strata-sandboxd needs root (namespaces, mounts)")
    if not sandboxd_binary():
        pytest.skip("strata-sandboxd is not built (set STRATA_BIN)")
    base = tempfile.mkdtemp(prefix="strata-tenant-cli-")
    port = free_port()
    dd = Daemon(os.path.join(base, "d"), {"busybox": make_busybox_rootfs(os.path.join(base, "r"))},
                ["--listen-tcp", "127.0.0.1:%d" % port])
    os.makedirs(dd.home)
    # The file must exist for --listen-tcp without --token: the first tenant.
    r = cli(dd.home, "add", "first")
    assert r.returncode == 0, r.stderr
    dd.url = "http://127.0.0.1:%d" % port
    dd.start()
    yield dd
    dd.stop()
    shutil.rmtree(base, ignore_errors=True)


def add(d, name, *opts):
    r = cli(d.home, "add", name, *opts)
    assert r.returncode == 0, r.stderr
    token = r.stdout.strip()
    assert token.startswith(name + ".") and "\n" not in token
    assert "shown only now" in r.stderr
    wait_accepted(d, token)
    return token


def wait_accepted(d, token, want=True, timeout=5):
    """Waits until sandboxd read the file again (within a second)."""
    deadline = time.time() + timeout
    while True:
        try:
            strata.tenant_info(url=d.url, token=token)
            ok = True
        except strata.Unauthorized:
            ok = False
        if ok == want or time.time() > deadline:
            return ok
        time.sleep(0.1)


def test_add_list_set_rm(d):
    ta = add(d, "cli-a", "--max-sandboxes", "1", "--cpu", "0.5", "--memory-mb", "64")
    path = os.path.join(d.home, "tenants.json")
    assert os.stat(path).st_mode & 0o777 == 0o600
    assert ta not in open(path).read() and ta.split(".")[1] not in open(path).read()
    r = cli(d.home, "list", "--json")
    assert r.returncode == 0, r.stderr
    got = {t["name"]: t for t in json.loads(r.stdout)["tenants"]}
    assert got["cli-a"]["max_sandboxes"] == 1 and got["cli-a"]["cpu"] == 0.5
    assert got["cli-a"]["memory_mb"] == 64 and got["cli-a"]["admin"] is False
    assert "hash" not in got["cli-a"] and "salt" not in got["cli-a"]
    r = cli(d.home, "list")
    assert r.returncode == 0 and "cli-a" in r.stdout and "MAX_SANDBOXES" in r.stdout
    # The quota as sandboxd enforces it, then changed by set.
    sb = strata.Sandbox.create("busybox", backend="fncall", cpu=0.5, memory_mb=64, url=d.url,
                               token=ta)
    with pytest.raises(strata.QuotaExceeded) as e:
        strata.Sandbox.create("busybox", backend="fncall", cpu=0.01, memory_mb=16, url=d.url,
                              token=ta)
    assert e.value.status == 429 and "max_sandboxes 1, 1 in use" in e.value.message
    assert not isinstance(e.value, strata.NoCapacity)
    r = cli(d.home, "set", "cli-a", "--max-sandboxes", "none", "--cpu", "1")
    assert r.returncode == 0, r.stderr
    deadline = time.time() + 5
    while strata.tenant_info(url=d.url, token=ta)["quotas"]["max_sandboxes"] is not None:
        assert time.time() < deadline
        time.sleep(0.1)
    info = strata.tenant_info(url=d.url, token=ta)
    assert info == {"tenant": "cli-a", "admin": False,
                    "quotas": {"max_sandboxes": None, "cpu": 1, "memory_mb": 64},
                    "usage": {"sandboxes": 1, "cpu": 0.5, "memory_mb": 64}}
    with pytest.raises(strata.QuotaExceeded) as e:  # memory now
        strata.Sandbox.create("busybox", backend="fncall", cpu=0.1, memory_mb=16, url=d.url,
                              token=ta)
    assert "memory_mb 64, 64 in use, 16 requested" in e.value.message
    sb.kill()
    # rm: the token is refused from then on.
    r = cli(d.home, "rm", "cli-a")
    assert r.returncode == 0, r.stderr
    assert not wait_accepted(d, ta, want=False)
    with pytest.raises(strata.Unauthorized):
        strata.Sandbox.list(url=d.url, token=ta)
    r = cli(d.home, "rm", "cli-a")
    assert r.returncode == 1 and "no tenant 'cli-a'" in r.stderr


def test_token_rotates(d):
    old = add(d, "cli-rot")
    sb = strata.Sandbox.create("busybox", backend="fncall", url=d.url, token=old)
    r = cli(d.home, "token", "cli-rot", "--json")
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    new = out["token"]
    assert out["tenant"]["name"] == "cli-rot" and new != old and new.startswith("cli-rot.")
    assert wait_accepted(d, new)
    assert not wait_accepted(d, old, want=False)
    # The sandboxes stay the tenant's: its name, not its token, owns them.
    assert [s.id for s in strata.Sandbox.list(url=d.url, token=new)] == [sb.id]
    strata.Sandbox.connect(sb.id, url=d.url, token=new).kill()


def test_sdk_tenants_see_their_own_and_no_host_network(d):
    ta, tb = add(d, "sdk-a"), add(d, "sdk-b")
    admin = add(d, "sdk-ops", "--admin")
    sa = strata.Sandbox.create("busybox", backend="fncall", url=d.url, token=ta)
    assert sa.tenant == "sdk-a" and sa.exec(["echo", "a"]).stdout == "a\n"
    assert [s.id for s in strata.Sandbox.list(url=d.url, token=tb)] == []
    with pytest.raises(strata.NotFound):
        strata.Sandbox.connect(sa.id, url=d.url, token=tb)
    with pytest.raises(strata.PermissionDenied) as e:
        strata.Sandbox.create("busybox", backend="container", network="host", url=d.url,
                              token=tb)
    assert e.value.code == "admin_only"
    with pytest.raises(strata.PermissionDenied):
        strata.node_metrics(url=d.url, token=tb)
    assert strata.node_metrics(url=d.url, token=admin)["sandboxes"] >= 1
    assert sa.id in [s.id for s in strata.Sandbox.list(url=d.url, token=admin)]
    assert [s.id for s in strata.Sandbox.list(tenant="sdk-a", url=d.url, token=admin)] == [sa.id]
    for_b = strata.Sandbox.create("busybox", backend="fncall", tenant="sdk-b", url=d.url,
                                  token=admin)
    assert for_b.tenant == "sdk-b"
    assert [s.id for s in strata.Sandbox.list(url=d.url, token=tb)] == [for_b.id]
    for_b.kill()
    # The unix socket with a tenant's token is that tenant too.
    assert [s.id for s in strata.Sandbox.list(socket=d.socket, token=tb)] == []
    with pytest.raises(strata.Unauthorized):
        strata.Sandbox.list(socket=d.socket, token="sdk-b." + "0" * 64)
    assert asyncio.run(strata.aio.tenant_info(url=d.url, token=ta))["usage"]["sandboxes"] == 1
    assert strata.tenant_info(socket=d.socket)["tenant"] is None
    sa.kill()


def test_usage_errors(d):
    r = cli(d.home, "--help")
    assert r.returncode == 0 and "strata tenant" in r.stdout
    for args, want in ((["add", "Bad!"], "not a tenant name"), (["set", "first"], "needs"),
                       (["rm", "first", "--cpu", "1"], "takes no"),
                       (["add", "x", "--cpu", "lots"], "--cpu"),
                       (["add", "x", "--max-sandboxes", "-1"], "--max-sandboxes"),
                       (["frobnicate", "x"], "Usage")):
        r = cli(d.home, *args)
        assert r.returncode == 2 and want in r.stderr, (args, r.stderr)
    r = cli(d.home, "add", "first")
    assert r.returncode == 1 and "exists" in r.stderr
