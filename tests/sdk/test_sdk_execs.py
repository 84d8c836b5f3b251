"""SDK tests of execs as processes on the container backend: exec_stream
hands back its process as soon as the command started, background execs
(list, signal, attach, collect an exit later), and a server beside later
commands."""
import time

import pytest

import strata
from strata import Sandbox


@pytest.fixture
def box(sock, need_container):
    with Sandbox.create("busybox", backend="container", socket=sock, memory_mb=256) as sb:
        yield sb


def test_exec_stream_returns_at_once(box):
    t = time.monotonic()
    with box.exec_stream("sleep 3; echo x") as proc:
        assert time.monotonic() - t < 1.0
        assert [ev.text for ev in proc if ev.kind == "stdout"] == ["x\n"]
        assert proc.pid and proc.exec_id


def test_background_server_and_later_commands(box):
    t = time.monotonic()
    srv = box.exec(["sh", "-c", "echo ready; while :; do sleep 1; done"], background=True,
                   timeout=120)
    assert time.monotonic() - t < 1.0 and srv.pid
    for i in range(3):
        assert box.exec(["echo", str(i)], timeout=5).stdout == "%d\n" % i
    listed = {e["exec_id"]: e for e in box.execs()}
    assert listed[srv.exec_id]["running"] and listed[srv.exec_id]["pid"] == srv.pid
    with srv.connect(timeout=10) as proc:  # what it printed while nobody watched
        assert next(proc).text == "ready\n"
    srv.signal("TERM")
    r = srv.wait(timeout=10)
    assert r.signal == 15, r
    assert srv.exec_id not in {e["exec_id"] for e in box.execs()}


def test_background_exit_collected_later(box):
    job = box.exec("echo out; echo err >&2; exit 4", background=True)
    deadline = time.time() + 5
    while any(e["running"] for e in box.execs()) and time.time() < deadline:
        time.sleep(0.05)
    r = job.wait()
    assert (r.exit_code, r.stdout, r.stderr) == (4, "out\n", "err\n")
    with pytest.raises(strata.NotFound):
        job.kill()  # collected: gone


def test_connect_to_a_foreground_exec_from_another_client(box, sock):
    """exec_connect follows an exec another client streams (E2B's
    commands.connect): the output from then on and the exit, for both."""
    with box.exec_stream("echo one; while [ ! -e /tmp/go ]; do sleep 0.05; done; "
                         "echo two; exit 5", timeout=30) as owner:
        assert next(owner).text == "one\n"
        other = Sandbox.connect(box.id, socket=sock)
        with other.exec_connect(owner.exec_id, timeout=20) as follower:
            assert other.execs()[0]["followers"] == 1
            box.exec(["touch", "/tmp/go"])
            seen = [ev for ev in follower]
        assert [ev.text for ev in seen if ev.kind == "stdout"] == ["two\n"]
        assert seen[-1].kind == "exit" and seen[-1].result.exit_code == 5
        rest = [ev for ev in owner]
        assert [ev.text for ev in rest if ev.kind == "stdout"] == ["two\n"]
        assert rest[-1].result.exit_code == 5
