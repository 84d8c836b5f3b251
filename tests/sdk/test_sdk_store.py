"""An image store that does not answer, through the SDK: StoreUnavailable.

sandboxd calls the cluster's image store (names, configs, mounts) on worker
threads with a deadline (--store-timeout), never on its loop. Here the store
"hangs" without a cluster: the daemon's HOME/cluster.env (which names the
store's mount, read by the first store call) is a FIFO nobody writes, so the
call's open waits in the kernel as a stat of a stopped strata-fuse's mount
would (test_image_store.py stops the real one). Meanwhile the daemon must
answer everything else at once; a create of an image it does not have
registered answers 503 store_unavailable (strata.StoreUnavailable, sync and
async) within the deadline; at most 16 calls wait, the next one is refused
at once; SIGTERM ends the daemon within a bound although a thread is stuck.
On a sandboxd that called the store on its loop, the first create blocked
the whole daemon (health included) until the FIFO was opened."""
import asyncio
import os
import signal
import tempfile
import threading
import time

import pytest

import strata
from strata import AsyncSandbox, Sandbox
from sandboxd_harness import Daemon

STORE_TIMEOUT = 1.0  # --store-timeout of these daemons
SLACK = 1.5          # what "promptly" allows on a loaded 2-core VM


@pytest.fixture
def stuck_daemon(workdir, images):
    """A daemon whose store calls block until release() writes the FIFO."""
    made = []

    def make(timeout=STORE_TIMEOUT):
        d = Daemon(tempfile.mkdtemp(dir=workdir), images,
                   ["--store-timeout", str(timeout)])
        os.makedirs(d.home)
        d.fifo = os.path.join(d.home, "cluster.env")
        os.mkfifo(d.fifo)
        made.append(d)
        return d.start()
    yield make
    for d in made:
        release(d)
        d.stop()


def release(d):
    """Lets every store call that waits on d's FIFO go on (they then find
    no store: nothing imported)."""
    try:
        fd = os.open(d.fifo, os.O_WRONLY | os.O_NONBLOCK)  # ENXIO: no reader waits
    except OSError:
        return
    os.close(fd)


def timed(fn):
    t0 = time.monotonic()
    r = fn()
    return r, time.monotonic() - t0


def test_create_answers_store_unavailable(stuck_daemon):
    d = stuck_daemon()
    got = {}

    def create():
        t0 = time.monotonic()
        try:
            Sandbox.create("not-registered:1", backend="container", socket=d.socket, timeout=20)
            got["r"] = "created"
        except strata.StrataError as e:
            got["r"] = e
        got["took"] = time.monotonic() - t0

    th = threading.Thread(target=create)
    th.start()
    time.sleep(0.3)  # the create's store call waits now
    # The loop serves meanwhile.
    ok, took = timed(lambda: strata.health(socket=d.socket, timeout=5))
    assert ok and took < 0.5, "health took %.2f s while a store call waited" % took
    lst, took = timed(lambda: Sandbox.list(socket=d.socket, timeout=5))
    assert lst == [] and took < 0.5, took
    th.join(STORE_TIMEOUT + 20)
    e = got["r"]
    assert isinstance(e, strata.StoreUnavailable), e
    assert isinstance(e, strata.StrataError)
    assert e.code == "store_unavailable" and e.status == 503, (e.code, e.status)
    assert "image store did not answer" in str(e) and "not-registered:1" in str(e), str(e)
    assert STORE_TIMEOUT - 0.1 <= got["took"] < STORE_TIMEOUT + SLACK, got["took"]
    # The abandoned call still waits on the FIFO; the daemon still serves.
    assert strata.health(socket=d.socket, timeout=5)


def test_async_create_answers_store_unavailable(stuck_daemon):
    d = stuck_daemon()

    async def main():
        t0 = time.monotonic()
        with pytest.raises(strata.StoreUnavailable) as ei:
            await AsyncSandbox.create("not-registered:2", backend="container", socket=d.socket,
                                      timeout=20)
        return ei.value, time.monotonic() - t0
    e, took = asyncio.run(main())
    assert e.code == "store_unavailable" and e.status == 503
    assert took < STORE_TIMEOUT + SLACK, took


def test_registered_image_needs_no_store(stuck_daemon, need_container):
    """A registered directory is found without the store: its creates work
    while a store call hangs."""
    d = stuck_daemon(timeout=30)
    th = threading.Thread(target=lambda: pytest.raises(
        strata.StrataError, Sandbox.create, "not-registered:3", socket=d.socket, timeout=40))
    th.start()
    time.sleep(0.3)
    with Sandbox.create("busybox", backend="container", socket=d.socket, timeout=20) as sb:
        assert sb.exec(["echo", "ok"], timeout=10).stdout == "ok\n"
    release(d)
    th.join(20)


def test_waiting_calls_are_bounded(stuck_daemon):
    """16 look-ups wait at most; the 17th is refused at once (503), so a
    dead store cannot pile up threads; once the store answers, they all do."""
    d = stuck_daemon(timeout=60)
    results = [None] * 16

    def create(i):
        try:
            Sandbox.create("not-registered:%d" % i, backend="container", socket=d.socket,
                           timeout=90)
            results[i] = "created"
        except strata.StrataError as e:
            results[i] = e
    threads = [threading.Thread(target=create, args=(i,)) for i in range(16)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:  # until all 16 wait in the store
        st = strata.node_metrics(socket=d.socket).get("store_calls")
        if st == 16:
            break
        time.sleep(0.1)
    assert strata.node_metrics(socket=d.socket).get("store_calls") == 16
    t0 = time.monotonic()
    with pytest.raises(strata.StoreUnavailable) as ei:
        Sandbox.create("not-registered:17", backend="container", socket=d.socket, timeout=10)
    assert time.monotonic() - t0 < 0.5
    assert "waiting already" in str(ei.value), str(ei.value)
    assert threading.active_count() >= 17
    release(d)
    for t in threads:
        t.join(30)
    # Each found out there is no store (nothing imported): not found.
    assert all(isinstance(r, strata.ImageNotFound) for r in results), results
    deadline = time.monotonic() + 5
    while strata.node_metrics(socket=d.socket).get("store_calls") and \
            time.monotonic() < deadline:
        time.sleep(0.05)
    assert strata.node_metrics(socket=d.socket).get("store_calls") == 0


def test_sigterm_with_a_stuck_call_is_bounded(stuck_daemon):
    d = stuck_daemon(timeout=60)
    th = threading.Thread(target=lambda: pytest.raises(
        strata.StrataError, Sandbox.create, "not-registered:4", socket=d.socket, timeout=30))
    th.start()
    time.sleep(0.5)
    assert strata.node_metrics(socket=d.socket).get("store_calls") == 1
    t0 = time.monotonic()
    d.proc.send_signal(signal.SIGTERM)
    try:
        rc = d.proc.wait(10)
    except Exception:
        pytest.fail("sandboxd did not end within 10 s of SIGTERM with a store call stuck")
    took = time.monotonic() - t0
    assert rc == 0, rc
    assert took < 5, "SIGTERM took %.1f s" % took
    th.join(10)
    assert "image store calls are stuck" in d.log_text()
