"""Interactive exec stdin through the HTTP API (stdin_stream, POST
.../execs/{exec_id}/stdin), spoken over raw sockets: round trips that prove
the input streams (each line's echo is read before the next is written),
EOF, a client that leaves mid-stream, stdin to a finished exec, an
oversized chunk, and the typed refusal of backends without it."""
import base64
import json
import socket
import time

import pytest

from test_http_api import create, healthy, request, wait_no_execs


class Stream:
    """An exec stream read event by event (chunked NDJSON)."""

    def __init__(self, daemon, sid, body, path=None):
        """POST .../exec with body, or GET path (an attach)."""
        self.s = socket.socket(socket.AF_UNIX)
        self.s.settimeout(20)
        self.s.connect(daemon.socket)
        if path:
            self.s.sendall(b"GET %s HTTP/1.1\r\n\r\n" % path.encode())
        else:
            data = json.dumps(body).encode()
            self.s.sendall(b"POST /v1/sandboxes/%s/exec HTTP/1.1\r\nContent-Length: %d\r\n\r\n"
                           % (sid.encode(), len(data)) + data)
        self.buf = b""
        while b"\r\n\r\n" not in self.buf:
            self._fill()
        head, _, self.buf = self.buf.partition(b"\r\n\r\n")
        self.status = int(head.split(b" ")[1])
        self.lines = b""

    def _fill(self):
        b = self.s.recv(65536)
        if not b:
            raise EOFError
        self.buf += b

    def event(self):
        while b"\n" not in self.lines:
            while b"\r\n" not in self.buf:
                self._fill()
            n, _, rest = self.buf.partition(b"\r\n")
            n = int(n, 16)
            while len(rest) < n + 2:
                self._fill()
                n2, _, rest = self.buf.partition(b"\r\n")
            self.lines += rest[:n]
            self.buf = rest[n + 2:]
            if n == 0:
                raise EOFError
        line, _, self.lines = self.lines.partition(b"\n")
        return json.loads(line)

    def rest(self):
        """Reads to the exit: (the output, the exit event)."""
        out = b""
        while True:
            ev = self.event()
            if ev["type"] == "exit":
                return out, ev
            if "data" in ev:
                out += base64.b64decode(ev["data"])

    def close(self):
        self.s.close()


def stdin(daemon, sid, xid, data, eof=False):
    return request(daemon, "POST", "/v1/sandboxes/%s/execs/%s/stdin%s" % (
        sid, xid, "?eof=1" if eof else ""), data)


@pytest.fixture
def container(daemon):
    st, caps = request(daemon, "GET", "/v1/capabilities")
    if not caps["backends"]["container"]["available"]:
        pytest.skip("container backend unavailable: %s" % caps["backends"]["container"]["reason"])
    assert caps["backends"]["container"]["exec_stdin_stream"] is True
    sid = create(daemon, backend="container")
    yield sid
    request(daemon, "DELETE", "/v1/sandboxes/%s" % sid)


def test_interactive_round_trips_and_eof(daemon, container):
    sid = container
    st = Stream(daemon, sid, {"cmd": ["sh", "-c", "while read l; do echo \"got $l\"; done; "
                                      "echo bye"], "stdin_stream": True})
    assert st.status == 200
    ev = st.event()
    assert ev["type"] == "start" and ev["exec_id"]
    xid = ev["exec_id"]
    for i in range(5):  # each answer is read before the next line is written
        code, b = stdin(daemon, sid, xid, b"line%d\n" % i)
        assert code == 200 and b["ok"], b
        ev = st.event()
        assert ev["type"] == "stdout"
        assert base64.b64decode(ev["data"]) == b"got line%d\n" % i
    code, b = stdin(daemon, sid, xid, b"", eof=True)
    assert code == 200, b
    out, ev = st.rest()
    assert out == b"bye\n" and ev["exit_code"] == 0
    st.close()
    # the exec is over: a clear error, not a hang
    code, b = stdin(daemon, sid, xid, b"late\n")
    assert code == 409 and b["error"]["code"] == "exec_finished", b
    code, b = stdin(daemon, sid, "999", b"x")
    assert code == 404


def test_after_eof_and_without_stdin_stream(daemon, container):
    sid = container
    st = Stream(daemon, sid, {"cmd": ["sh", "-c", "cat; sleep 0.3"], "stdin_stream": True})
    xid = st.event()["exec_id"]
    assert stdin(daemon, sid, xid, b"abc", eof=True)[0] == 200
    code, b = stdin(daemon, sid, xid, b"more")
    assert code == 409 and b["error"]["code"] == "stdin_closed", b
    ev = st.event()
    assert base64.b64decode(ev["data"]) == b"abc"
    while ev["type"] != "exit":
        ev = st.event()
    st.close()
    # an ordinary exec starts its stream with its start event too; up-front
    # stdin still works
    code, body = request(daemon, "POST", "/v1/sandboxes/%s/exec" % sid,
                         {"cmd": ["cat"], "stdin": base64.b64encode(b"upfront").decode()})
    assert code == 200 and body.index(b'"start"') < body.index(base64.b64encode(b"upfront"))


def test_oversized_chunk(daemon, container):
    sid = container
    st = Stream(daemon, sid, {"cmd": ["cat"], "stdin_stream": True})
    xid = st.event()["exec_id"]
    # refused from its head, before the body is read
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(10)
    s.connect(daemon.socket)
    s.sendall(b"POST /v1/sandboxes/%s/execs/%s/stdin HTTP/1.1\r\nContent-Length: %d\r\n\r\n"
              % (sid.encode(), xid.encode(), (1 << 20) + 1))
    out = b""
    while b"}}" not in out:
        out += s.recv(4096)
    s.close()
    assert out.startswith(b"HTTP/1.1 413") and b"too_large" in out, out
    # the stream is still usable afterwards
    assert stdin(daemon, sid, xid, b"ok\n")[0] == 200
    assert base64.b64decode(st.event()["data"]) == b"ok\n"
    assert stdin(daemon, sid, xid, b"", eof=True)[0] == 200
    while st.event()["type"] != "exit":
        pass
    st.close()


def test_client_leaves_mid_stream(daemon, container):
    sid = container
    st = Stream(daemon, sid, {"cmd": ["cat"], "stdin_stream": True})
    xid = st.event()["exec_id"]
    assert stdin(daemon, sid, xid, b"one\n")[0] == 200
    assert base64.b64decode(st.event()["data"]) == b"one\n"
    st.close()  # the command is killed; its stdin answers a clear error
    wait_no_execs(daemon, sid)
    code, b = stdin(daemon, sid, xid, b"two\n")
    assert code == 409 and b["error"]["code"] == "exec_finished", b
    assert healthy(daemon)


def test_large_interactive_input(daemon, container):
    """More than the agent's 4 MiB queue, in 1 MiB chunks each answered
    before the next: nothing is dropped."""
    sid = container
    st = Stream(daemon, sid, {"cmd": ["wc", "-c"], "stdin_stream": True})
    xid = st.event()["exec_id"]
    for _ in range(6):
        code, b = stdin(daemon, sid, xid, b"y" * (1 << 20))
        while code == 429:  # stdin_full: the command is behind; retry
            time.sleep(0.01)
            code, b = stdin(daemon, sid, xid, b"y" * (1 << 20))
        assert code == 200, b
    assert stdin(daemon, sid, xid, b"", eof=True)[0] == 200
    out, _ = st.rest()
    assert int(out) == 6 << 20
    st.close()


def test_fncall_refuses_stdin_stream(daemon):
    sid = create(daemon, backend="fncall")
    st, caps = request(daemon, "GET", "/v1/capabilities")
    assert caps["backends"]["fncall"]["exec_stdin_stream"] is False
    code, b = request(daemon, "POST", "/v1/sandboxes/%s/exec" % sid,
                      {"cmd": ["cat"], "stdin_stream": True})
    assert code == 501 and b["error"]["code"] == "unsupported", b
    code, b = request(daemon, "POST", "/v1/sandboxes/%s/exec" % sid,
                      {"cmd": ["cat"], "stdin_stream": "yes"})
    assert code == 400
    request(daemon, "DELETE", "/v1/sandboxes/%s" % sid)
