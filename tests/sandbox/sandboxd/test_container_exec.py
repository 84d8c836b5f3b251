"""Container execs through the HTTP API, as sandboxd's loop drives them
(the library's exec op on the agent's stream, no thread): output and exit,
a command that cannot start, up-front stdin, timeouts, output caps, large
output intact, several execs on one sandbox at once, a file operation right after a client left mid-stream, a delete
mid-exec, and an agent that stops answering (paused mid-exec: the exec
fails after its timeout and a grace period, the sandbox serves on)."""
import base64
import json
import socket
import threading
import time

import pytest

from test_exec_stdin import Stream
from test_http_api import create, healthy, request, wait_no_execs


@pytest.fixture
def box(daemon):
    st, caps = request(daemon, "GET", "/v1/capabilities")
    if not caps["backends"]["container"]["available"]:
        pytest.skip("container backend unavailable: %s" % caps["backends"]["container"]["reason"])
    sid = create(daemon, backend="container")
    yield sid
    request(daemon, "DELETE", "/v1/sandboxes/%s" % sid)


def run(daemon, sid, body):
    """An exec to its end: (stdout, stderr, the exit event)."""
    st = Stream(daemon, sid, body)
    assert st.status == 200
    out, err = b"", b""
    try:
        while True:
            ev = st.event()
            if ev["type"] == "exit":
                return out, err, ev
            if ev["type"] == "stdout":
                out += base64.b64decode(ev["data"])
            elif ev["type"] == "stderr":
                err += base64.b64decode(ev["data"])
    finally:
        st.close()


def test_output_exit_and_a_command_that_cannot_start(daemon, box):
    out, err, ev = run(daemon, box, {"cmd": ["sh", "-c", "echo out; echo err >&2; exit 3"]})
    assert (out, err, ev["exit_code"], ev["error"]) == (b"out\n", b"err\n", 3, None)
    out, err, ev = run(daemon, box, {"cmd": ["/no/such/binary"]})
    assert ev["exit_code"] == 127 and "cannot run" in ev["error"], ev
    out, err, ev = run(daemon, box, {"cmd": ["wc", "-c"],
                                     "stdin": base64.b64encode(b"x" * 300000).decode()})
    assert out.split() == [b"300000"] and ev["exit_code"] == 0


def test_timeout_and_output_cap(daemon, box):
    t = time.time()
    out, err, ev = run(daemon, box, {"cmd": ["sleep", "30"], "timeout": 1})
    assert ev["timed_out"] is True and ev["signal"] == 9, ev
    assert time.time() - t < 10
    out, err, ev = run(daemon, box, {"cmd": ["sh", "-c", "yes | head -c 200000"],
                                     "output_cap": 1000})
    assert ev["truncated"] is True and len(out) <= 1000 and ev["stdout_bytes"] == 200000, ev


def test_large_output_intact(daemon, box):
    out, err, ev = run(daemon, box, {"cmd": ["seq", "1", "300000"],
                                     "output_cap": 8 << 20})
    assert ev["exit_code"] == 0
    assert out == b"".join(b"%d\n" % i for i in range(1, 300001))


def test_concurrent_execs_on_one_sandbox(daemon, box):
    results = {}

    def one(i):
        results[i] = run(daemon, box, {"cmd": ["sh", "-c", "sleep 0.2; echo %d" % i]})

    threads = [threading.Thread(target=one, args=(i,)) for i in range(5)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    for i in range(5):
        out, err, ev = results[i]
        assert (out, ev["exit_code"]) == (b"%d\n" % i, 0)
    wait_no_execs(daemon, box)


def test_files_right_after_a_client_left(daemon, box):
    body = json.dumps({"cmd": ["sh", "-c", "echo started; sleep 30"]}).encode()
    for _ in range(3):
        s = socket.socket(socket.AF_UNIX)
        s.connect(daemon.socket)
        s.sendall(b"POST /v1/sandboxes/%s/exec HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % (
            box.encode(), len(body)) + body)
        s.recv(4096)  # it runs
        s.close()
        deadline = time.time() + 10
        while True:  # killed at once; a file request waits for its end
            st, b = request(daemon, "PUT", "/v1/sandboxes/%s/files?path=/tmp/f" % box, b"hello")
            if st != 409 or time.time() > deadline:
                break
            time.sleep(0.05)
        assert st == 200, b
    out, err, ev = run(daemon, box, {"cmd": ["cat", "/tmp/f"]})
    assert out == b"hello" and ev["exit_code"] == 0
    wait_no_execs(daemon, box)
    out, err, ev = run(daemon, box, {"cmd": ["sh", "-c", "ps -o comm | grep -c sleep || true"]})
    assert out.strip() == b"0", out  # the cancelled commands are gone


def test_delete_mid_exec(daemon):
    sid = create(daemon, backend="container")
    st = Stream(daemon, sid, {"cmd": ["sh", "-c", "echo a; sleep 30"]})
    assert st.status == 200
    assert st.event()["type"] == "start"
    assert st.event()["type"] == "stdout"
    t = time.time()
    assert request(daemon, "DELETE", "/v1/sandboxes/%s" % sid)[0] == 200
    ev = st.event()
    assert ev["type"] == "exit" and ev["signal"] == 9 and "sandbox exited" in ev["error"], ev
    assert time.time() - t < 5
    st.close()
    assert healthy(daemon)


def test_agent_that_stops_answering(daemon, box):
    """Paused mid-exec, the agent cannot answer: the exec fails after its
    timeout and a 10 s grace (a tick later), and the sandbox serves on once
    resumed."""
    st = Stream(daemon, box, {"cmd": ["sh", "-c", "echo a; sleep 3; echo b"], "timeout": 1})
    assert st.status == 200
    assert st.event()["type"] == "start"
    assert st.event()["type"] == "stdout"
    assert request(daemon, "POST", "/v1/sandboxes/%s/pause" % box)[0] == 200
    t = time.time()
    ev = st.event()
    assert ev["type"] == "exit" and "timed out" in ev["error"], ev
    assert 8 < time.time() - t < 20
    st.close()
    assert request(daemon, "POST", "/v1/sandboxes/%s/resume" % box)[0] == 200
    deadline = time.time() + 10
    while True:  # the late EXIT of the old exec is skipped by the next one
        out, err, ev = run(daemon, box, {"cmd": ["echo", "ok"]})
        if out == b"ok\n" or time.time() > deadline:
            break
    assert (out, ev["exit_code"]) == (b"ok\n", 0), ev
