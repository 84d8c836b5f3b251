"""Sandbox node leases (issue 17, step 1) against a real strata-meta: two
sandboxds with --meta report their load; `strata admin nodes` lists it; a
node silent past the lease is lost; a second sandboxd under a live node's
id is refused; a node that comes back after its lease lapsed removes the
sandboxes the cluster gave up on."""
import os
import signal
import sys
import time

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from cluster_harness import TOKEN, cluster_fixture  # noqa: E402

import strata  # noqa: E402


@pytest.fixture
def cluster():
    yield from cluster_fixture("strata-sbnodes-", 2, lease_ms=1000)


def test_nodes_report_their_load(cluster):
    nodes = cluster.wait_nodes(lambda n: set(n) == {1, 2} and all(
        x["state"] == "live" for x in n.values()))
    assert nodes[1]["addr"] == "127.0.0.1:%d" % cluster.nodes[1].port
    assert nodes[1]["sandboxes"] == 0 and nodes[1]["max_sandboxes"] == 4096
    assert nodes[1]["cpu_budget_milli"] > 0 and nodes[1]["memory_budget_bytes"] > 0
    n1 = cluster.nodes[1]
    sbs = [strata.Sandbox.create("busybox", "fncall", cpu=0.5, memory_mb=64, url=n1.url,
                                 token=TOKEN) for _ in range(3)]
    # ids carry the node: sb-0001...
    assert all(sb.id.startswith("sb-0001") for sb in sbs), [sb.id for sb in sbs]
    nodes = cluster.wait_nodes(lambda n: n[1]["sandboxes"] == 3)
    assert nodes[1]["cpu_milli"] == 1500
    assert nodes[1]["memory_bytes"] == 0  # fncall sandboxes hold no memory budget
    assert nodes[1]["images"] == [{"name": "busybox", "sandboxes": 3, "mounted": False,
                                   "cached_bytes": 0}]
    assert nodes[2]["sandboxes"] == 0
    for sb in sbs:
        sb.kill()
    cluster.wait_nodes(lambda n: n[1]["sandboxes"] == 0)


def test_silent_node_is_lost_and_duplicate_id_refused(cluster):
    cluster.wait_nodes(lambda n: set(n) == {1, 2})
    cluster.nodes[2].proc.send_signal(signal.SIGSTOP)
    t0 = time.time()
    nodes = cluster.wait_nodes(lambda n: n[2]["state"] == "lost", timeout=5)
    assert time.time() - t0 < 3.0  # the lease is 1 s
    assert nodes[1]["state"] == "live"
    cluster.nodes[2].proc.send_signal(signal.SIGCONT)
    cluster.wait_nodes(lambda n: n[2]["state"] == "live", timeout=5)
    # a second sandboxd given node 1's id while node 1 lives: refused by meta
    dup = cluster.add_node(1, name="dup1")
    time.sleep(1.5)
    assert "refused" in dup.log_text() or "File exists" in dup.log_text(), dup.log_text()[-2000:]
    nodes = cluster.admin_nodes()
    assert nodes[1]["addr"] != "127.0.0.1:%d" % dup.port


def test_returning_node_reconciles(cluster):
    n2 = cluster.nodes[2]
    sb = strata.Sandbox.create("busybox", "fncall", url=n2.url, token=TOKEN)
    cluster.wait_nodes(lambda n: n[2]["sandboxes"] == 1)
    n2.proc.send_signal(signal.SIGSTOP)
    cluster.wait_nodes(lambda n: n[2]["state"] == "lost", timeout=5)
    n2.proc.send_signal(signal.SIGCONT)
    # its next renewal is answered "reconcile": the sandbox is removed
    deadline = time.time() + 5
    while strata.Sandbox.list(url=n2.url, token=TOKEN) and time.time() < deadline:
        time.sleep(0.1)
    assert strata.Sandbox.list(url=n2.url, token=TOKEN) == []
    assert "lease had lapsed" in n2.log_text()
    with pytest.raises(strata.NotFound):
        sb.exec(["true"])
    cluster.wait_nodes(lambda n: n[2]["state"] == "live" and n[2]["sandboxes"] == 0)
