"""Execs as processes on the container backend: many at once in one sandbox
(the agent's channel carries them all), a stream that begins as soon as the
command started (a silent command too), file requests while execs run, the
per-sandbox limit of execs in flight (429), and a cancelled exec that ends
its own process group only (what an earlier exec left running stays)."""
import json
import socket
import threading
import time

import pytest

from test_container_exec import box, run  # noqa: F401 -- box is a fixture
from test_exec_stdin import Stream
from test_http_api import create, request, wait_no_execs

MAX_EXECS = 64  # SBX_MAX_EXECS


def count_procs(daemon, sid, pattern):
    out, err, ev = run(daemon, sid, {"cmd": ["sh", "-c", "ps -o args | grep -c '^%s' || true"
                                             % pattern]})
    return int(out.strip() or b"0")


def test_four_sleeps_run_at_once(daemon, box):
    results = {}

    def one(i):
        results[i] = run(daemon, box, {"cmd": ["sh", "-c", "sleep 0.5; echo %d" % i]})

    t = time.monotonic()
    threads = [threading.Thread(target=one, args=(i,)) for i in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(30)
    took = time.monotonic() - t
    for i in range(4):
        assert (results[i][0], results[i][2]["exit_code"]) == (b"%d\n" % i, 0)
    assert took < 1.3, "4 concurrent 'sleep 0.5' took %.2f s" % took


def test_stream_begins_when_the_command_started(daemon, box):
    t = time.monotonic()
    st = Stream(daemon, box, {"cmd": ["sh", "-c", "sleep 3; echo x"]})
    ev = st.event()
    first = time.monotonic() - t
    assert st.status == 200
    assert ev["type"] == "start" and ev["exec_id"] and ev["pid"] > 1, ev
    assert first < 1.0, "first event after %.2f s" % first
    out, ev = st.rest()
    assert out == b"x\n" and ev["exit_code"] == 0
    st.close()


def test_silent_server_and_later_commands(daemon, box):
    server = Stream(daemon, box, {"cmd": ["sh", "-c", "while :; do sleep 1; done"],
                                  "timeout": 60})
    assert server.event()["type"] == "start"
    for i in range(3):  # each would wait for the server on a serialising backend
        out, err, ev = run(daemon, box, {"cmd": ["echo", str(i)], "timeout": 5})
        assert (out, ev["exit_code"]) == (b"%d\n" % i, 0)
    # a file request while the server runs: no 409 busy
    st, b = request(daemon, "PUT", "/v1/sandboxes/%s/files?path=/tmp/f" % box, b"hello")
    assert st == 200, b
    st, b = request(daemon, "GET", "/v1/sandboxes/%s/files?path=/tmp/f" % box)
    assert st == 200 and b == b"hello", b
    server.close()
    wait_no_execs(daemon, box)


def test_cancel_ends_only_its_process_group(daemon, box):
    # an earlier exec leaves a daemon behind (in its own, finished, group)
    out, err, ev = run(daemon, box, {"cmd": ["sh", "-c", "sleep 1000 >/dev/null 2>&1 &"]})
    assert ev["exit_code"] == 0
    st = Stream(daemon, box, {"cmd": ["sh", "-c", "sleep 999 & sleep 998"]})
    assert st.event()["type"] == "start"
    st.close()  # the client leaves: its exec is cancelled
    wait_no_execs(daemon, box)
    deadline = time.time() + 5
    while count_procs(daemon, box, "sleep 99[89]") and time.time() < deadline:
        time.sleep(0.05)
    assert count_procs(daemon, box, "sleep 99[89]") == 0  # the cancelled group is gone
    assert count_procs(daemon, box, "sleep 1000") == 1  # the daemon lives on


def test_limit_of_execs_in_flight(daemon, box):
    streams = []
    try:
        for _ in range(MAX_EXECS):
            s = Stream(daemon, box, {"cmd": ["sleep", "30"]})
            assert s.event()["type"] == "start"
            streams.append(s)
        st, b = request(daemon, "POST", "/v1/sandboxes/%s/exec" % box, {"cmd": ["true"]})
        assert st == 429 and b["error"]["code"] == "too_many_execs", b
        assert "%d" % MAX_EXECS in b["error"]["message"]
    finally:
        for s in streams:
            s.close()
    wait_no_execs(daemon, box)
    deadline = time.time() + 5  # the killed ones count until the agent reported their end
    while True:
        st, b = request(daemon, "POST", "/v1/sandboxes/%s/exec" % box, {"cmd": ["echo", "ok"]})
        if st != 429 or time.time() > deadline:
            break
        time.sleep(0.05)
    assert st == 200 and b'"exit_code":0' in b, b


def execs(daemon, sid):
    st, b = request(daemon, "GET", "/v1/sandboxes/%s/execs" % sid)
    assert st == 200, b
    return {e["exec_id"]: e for e in b["execs"]}


def test_background_list_signal_attach(daemon, box):
    t = time.monotonic()
    st, b = request(daemon, "POST", "/v1/sandboxes/%s/exec" % box, {
        "cmd": ["sh", "-c", "trap 'echo term; exit 7' TERM; echo up; "
                "while :; do sleep 0.1; done"], "background": True})
    assert st == 200 and b["pid"] > 1, b
    assert time.monotonic() - t < 1.0
    xid = b["exec_id"]
    e = execs(daemon, box)[xid]
    assert e["running"] and e["background"] and e["pid"] == b["pid"], e
    assert "trap" in e["cmd"] and e["started_at"] > 0
    # later commands run beside it
    out, err, ev = run(daemon, box, {"cmd": ["echo", "later"]})
    assert out == b"later\n"
    # attach from another client: what it printed so far, then on
    s = Stream(daemon, box, None, path="/v1/sandboxes/%s/execs/%s/stream" % (box, xid))
    assert s.status == 200
    ev = s.event()
    assert ev["type"] == "start" and ev["exec_id"] == xid
    assert s.event()["type"] == "stdout"  # "up", kept while nobody watched
    st, b = request(daemon, "POST", "/v1/sandboxes/%s/execs/%s/signal" % (box, xid),
                    {"signal": "TERM"})
    assert st == 200, b
    out, ev = s.rest()
    assert b"term\n" in out and ev["exit_code"] == 7, (out, ev)  # stderr: "Terminated"
    s.close()
    assert xid not in execs(daemon, box)  # collected


def test_background_exit_collected_later(daemon, box):
    st, b = request(daemon, "POST", "/v1/sandboxes/%s/exec" % box,
                    {"cmd": ["sh", "-c", "echo done; exit 3"], "background": True})
    assert st == 200, b
    xid = b["exec_id"]
    deadline = time.time() + 5
    while execs(daemon, box)[xid]["running"] and time.time() < deadline:
        time.sleep(0.05)
    e = execs(daemon, box)[xid]
    assert not e["running"] and e["exit_code"] == 3, e
    s = Stream(daemon, box, None, path="/v1/sandboxes/%s/execs/%s/stream" % (box, xid))
    assert s.event()["type"] == "start"
    out, ev = s.rest()
    assert out == b"done\n" and ev["exit_code"] == 3
    s.close()
    st, b = request(daemon, "GET", "/v1/sandboxes/%s/execs/%s" % (box, xid))
    assert st == 404, b
    # a bad signal is refused; DELETE kills a foreground exec
    fg = Stream(daemon, box, {"cmd": ["sleep", "5"]})
    fid = fg.event()["exec_id"]
    st, b = request(daemon, "POST", "/v1/sandboxes/%s/execs/%s/signal" % (box, fid),
                    {"signal": "NOPE"})
    assert st == 400, b
    st, b = request(daemon, "DELETE", "/v1/sandboxes/%s/execs/%s" % (box, fid))
    assert st == 200, b
    out, ev = fg.rest()
    assert ev["signal"] == 9
    fg.close()


def test_followers_get_live_output_and_exit(daemon, box):
    owner = Stream(daemon, box, {"cmd": ["sh", "-c", "echo first; while [ ! -e /tmp/go ]; "
                                         "do sleep 0.05; done; echo second; exit 4"],
                                 "timeout": 30})
    start = owner.event()
    xid = start["exec_id"]
    assert owner.event() == {"type": "stdout", "data": "Zmlyc3QK"}  # first
    path = "/v1/sandboxes/%s/execs/%s/stream" % (box, xid)
    followers = [Stream(daemon, box, None, path=path) for _ in range(2)]
    for f in followers:
        assert f.status == 200
        ev = f.event()
        assert ev["type"] == "start" and ev["exec_id"] == xid and ev["pid"] == start["pid"]
    assert execs(daemon, box)[xid]["followers"] == 2
    run(daemon, box, {"cmd": ["touch", "/tmp/go"]})
    for s in [owner] + followers:
        out, ev = s.rest()
        assert out == b"second\n" and ev["exit_code"] == 4, (out, ev)
        s.close()


def test_follower_cap_and_owner_leaving(daemon, box):
    owner = Stream(daemon, box, {"cmd": ["sleep", "30"], "timeout": 60})
    xid = owner.event()["exec_id"]
    path = "/v1/sandboxes/%s/execs/%s/stream" % (box, xid)
    followers = [Stream(daemon, box, None, path=path) for _ in range(8)]  # EXEC_FOLLOWERS_MAX
    assert all(f.status == 200 and f.event()["type"] == "start" for f in followers)
    st, b = request(daemon, "GET", path)
    assert st == 429 and b["error"]["code"] == "too_many_attached", b
    followers.pop().close()  # a follower leaving frees its place, the exec runs on
    deadline = time.time() + 5
    while execs(daemon, box)[xid]["followers"] != 7 and time.time() < deadline:
        time.sleep(0.05)
    assert execs(daemon, box)[xid]["running"]
    owner.close()  # an ordinary exec ends with its client: followers are told why
    for f in followers:
        out, ev = f.rest()
        assert ev["signal"] == 9 and ev["error_code"] == "client_gone", ev
        f.close()
    wait_no_execs(daemon, box)


def test_a_follower_that_stops_reading_is_detached(daemon, box):
    """A follower gone silent costs bounded memory and never stalls the
    owner: past EXEC_FOLLOWER_BACKLOG (4 MiB) queued it is detached."""
    owner = Stream(daemon, box, {"cmd": ["sh", "-c", "while [ ! -e /tmp/flood ]; do sleep 0.05; "
                                         "done; head -c 12000000 /dev/zero; echo end >&2"],
                                 "timeout": 60, "output_cap": 16 << 20})
    xid = owner.event()["exec_id"]
    silent = Stream(daemon, box, None, path="/v1/sandboxes/%s/execs/%s/stream" % (box, xid))
    assert silent.event()["type"] == "start"
    run(daemon, box, {"cmd": ["touch", "/tmp/flood"]})
    out, ev = owner.rest()
    assert len(out) == 12000000 + 4 and ev["exit_code"] == 0, (len(out), ev)
    got = 0
    with pytest.raises(EOFError):  # its stream ends without an exit event
        while True:
            e = silent.event()
            assert e["type"] != "exit"
            got += len(e.get("data", ""))
    assert got < 12000000 * 4 // 3
    silent.close()
