"""strata-sandboxd's HTTP API under hostile and malformed input, spoken over
raw sockets: every bad request gets a clear 4xx, and the daemon stays up and
correct for everyone else."""
import json
import os
import socket
import time

import pytest

from sandboxd_harness import Daemon, SRC


def raw(daemon, data, timeout=10, shut=True):
    """Sends bytes, returns everything the server answered until it closed
    (or until timeout)."""
    s = socket.socket(socket.AF_UNIX)
    s.settimeout(timeout)
    s.connect(daemon.socket)
    s.sendall(data)
    if shut:
        s.shutdown(socket.SHUT_WR)
    out = b""
    try:
        while True:
            b = s.recv(65536)
            if not b:
                break
            out += b
    except socket.timeout:
        pass
    s.close()
    return out


def request(daemon, method, path, body=None, headers=None):
    """One request with Connection: close; returns (status, parsed body or bytes)."""
    if isinstance(body, (dict, list)):
        body = json.dumps(body).encode()
    body = body or b""
    h = "%s %s HTTP/1.1\r\nHost: x\r\nConnection: close\r\nContent-Length: %d\r\n" % (
        method, path, len(body))
    for k, v in (headers or {}).items():
        h += "%s: %s\r\n" % (k, v)
    return response(raw(daemon, h.encode() + b"\r\n" + body))


def response(out):
    """(status, parsed body or bytes) of a whole answer out (a chunked body
    as it is: stream_events reads it)."""
    head, _, rest = out.partition(b"\r\n\r\n")
    status = int(head.split(b" ")[1])
    if b"Transfer-Encoding: chunked" in head:
        return status, rest
    try:
        return status, json.loads(rest)
    except ValueError:
        return status, rest


def healthy(daemon):
    return request(daemon, "GET", "/v1/health")[0] == 200


def wait_no_execs(daemon, sid, timeout=10):
    """Waits until sandbox sid has no running exec (asserts it happens)."""
    deadline = time.time() + timeout
    while time.time() < deadline:
        st, b = request(daemon, "GET", "/v1/sandboxes/%s" % sid)
        if b["running_execs"] == 0:
            return
        time.sleep(0.05)
    assert b["running_execs"] == 0


def create(daemon, **kw):
    kw.setdefault("image", "busybox")
    kw.setdefault("backend", "fncall")
    st, b = request(daemon, "POST", "/v1/sandboxes", kw)
    assert st == 201, b
    return b["id"]


def stream_events(body):
    """The JSON-lines events of a chunked exec stream's body."""
    data, rest = b"", body
    while rest:
        n, _, rest = rest.partition(b"\r\n")
        n = int(n, 16)
        if n == 0:
            break
        data, rest = data + rest[:n], rest[n + 2:]
    return [json.loads(line) for line in data.splitlines()]


def test_health_and_unknown_route(daemon):
    assert healthy(daemon)
    st, b = request(daemon, "GET", "/v2/nothing")
    assert st == 404 and b["error"]["code"] == "not_found"
    st, b = request(daemon, "PATCH", "/v1/sandboxes")
    assert st == 404


@pytest.mark.parametrize("body", [b"{", b"[1,2", b"{\"image\":}", b"nul\x00l", b"\xff\xfe",
                                  b"{\"a\":1,\"a\":2}", b"\"\\ud800\"", b"1e999",
                                  b"[" * 100 + b"]" * 100, b"{\"image\": \"busybox\"} trailing"])
def test_malformed_json(daemon, body):
    st, b = request(daemon, "POST", "/v1/sandboxes", body)
    assert st == 400 and b["error"]["code"] == "bad_request", b
    assert healthy(daemon)


def test_not_an_object(daemon):
    st, b = request(daemon, "POST", "/v1/sandboxes", b"[]")
    assert st == 400 and "object" in b["error"]["message"]


def test_unknown_fields_are_named(daemon):
    st, b = request(daemon, "POST", "/v1/sandboxes", {"image": "busybox", "colour": "red"})
    assert st == 400 and b["error"]["code"] == "unknown_field" and "'colour'" in b["error"]["message"]
    sid = create(daemon)
    st, b = request(daemon, "POST", "/v1/sandboxes/%s/exec" % sid, {"cmd": ["true"], "shell": 1})
    assert st == 400 and "'shell'" in b["error"]["message"]


def test_bad_field_types(daemon):
    for body in ({"image": 5}, {"image": "busybox", "memory_mb": "lots"},
                 {"image": "busybox", "memory_mb": 1.5}, {"image": "busybox", "labels": [1]},
                 {"image": "busybox", "env": {"A": 1}}, {"image": "busybox", "network": "bridge"},
                 {"image": "busybox", "cwd": "relative"}, {"image": "busybox", "ttl": -1}):
        st, b = request(daemon, "POST", "/v1/sandboxes", body)
        assert st == 400, (body, b)


def test_huge_body_is_refused_early(daemon):
    # --max-body-mb 1: the head alone announces 2 MiB; nothing is buffered
    head = b"POST /v1/sandboxes HTTP/1.1\r\nContent-Length: 2097152\r\n\r\n"
    out = raw(daemon, head + b"x" * 1000)
    assert out.startswith(b"HTTP/1.1 413") and b"too_large" in out
    out = raw(daemon, b"POST /v1/sandboxes HTTP/1.1\r\nContent-Length: 99999999999999999\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400") or out.startswith(b"HTTP/1.1 413")
    assert healthy(daemon)


def test_huge_head(daemon):
    out = raw(daemon, b"GET /v1/health HTTP/1.1\r\nX: " + b"a" * 40000 + b"\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 431")
    out = raw(daemon, b"GET /v1/health HTTP/1.1\r\n" + b"X: y\r\n" * 100 + b"\r\n")
    assert out.startswith(b"HTTP/1.1 431")
    assert healthy(daemon)


def test_garbage_and_protocol_errors(daemon):
    assert raw(daemon, b"\x00\x01\x02garbage\r\n\r\n").startswith(b"HTTP/1.1 400")
    assert raw(daemon, b"GET /v1/health HTTP/2.0\r\n\r\n").startswith(b"HTTP/1.1 505")
    assert raw(daemon, b"GET /v1/health%00x HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 400")
    out = raw(daemon, b"POST /v1/sandboxes HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 501")
    out = raw(daemon, b"POST /v1/sandboxes HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 2\r\n\r\n")
    assert out.startswith(b"HTTP/1.1 400")
    assert healthy(daemon)


def test_path_traversal(daemon):
    sid = create(daemon)
    for p in ("/tmp/../../etc/passwd", "..", "etc/passwd", "/a/%2e%2e/b", ""):
        st, b = request(daemon, "GET", "/v1/sandboxes/%s/files?path=%s" % (sid, p))
        assert st == 400 and b["error"]["code"] == "invalid_path", (p, b)
    st, b = request(daemon, "GET", "/v1/sandboxes/%s/files?path=/x%%00y" % sid)
    assert st == 400
    st, b = request(daemon, "GET", "/v1/sandboxes/../../etc/files?path=/x")
    assert st == 404


def test_closing_mid_request_and_mid_stream(daemon):
    sid = create(daemon)
    # half a head, then gone
    raw(daemon, b"POST /v1/sandboxes HTTP/1.1\r\nContent-Le", timeout=1)
    # a body shorter than announced, then gone
    raw(daemon, b"POST /v1/sandboxes HTTP/1.1\r\nContent-Length: 100\r\n\r\n{\"im", timeout=1)
    # an exec whose client leaves while it runs: the command is killed
    body = json.dumps({"cmd": ["sh", "-c", "echo started; sleep 60"]}).encode()
    s = socket.socket(socket.AF_UNIX)
    s.connect(daemon.socket)
    s.sendall(b"POST /v1/sandboxes/%s/exec HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % (
        sid.encode(), len(body)) + body)
    got = b""
    while b"stdout" not in got:
        got += s.recv(4096)
    s.close()
    wait_no_execs(daemon, sid)
    assert healthy(daemon)


def test_keep_alive_and_pipelining(daemon):
    one = b"GET /v1/health HTTP/1.1\r\nHost: x\r\n\r\n"
    out = raw(daemon, one * 3 + b"GET /v1/health HTTP/1.1\r\nConnection: close\r\n\r\n")
    assert out.count(b"HTTP/1.1 200") == 4


def test_exec_stream_framing(daemon):
    sid = create(daemon)
    st, body = request(daemon, "POST", "/v1/sandboxes/%s/exec" % sid,
                       {"cmd": ["sh", "-c", "printf 'a\\x00b'; exit 7"]})
    assert st == 200
    events = stream_events(body)
    assert events[-1]["type"] == "exit" and events[-1]["exit_code"] == 7
    import base64
    out = b"".join(base64.b64decode(e["data"]) for e in events if e["type"] == "stdout")
    assert out == b"a\x00b"


def test_many_connections(daemon):
    socks = []
    for _ in range(300):
        s = socket.socket(socket.AF_UNIX)
        s.connect(daemon.socket)
        s.sendall(b"GET /v1/hea")
        socks.append(s)
    assert healthy(daemon)
    for s in socks:
        s.close()
    assert healthy(daemon)


def test_node_metrics(daemon):
    st, b = request(daemon, "GET", "/v1/node")
    assert st == 200 and b["sandboxes"] >= 0 and b["sandboxd_rss_kb"] > 0


def test_delete_and_not_found(daemon):
    sid = create(daemon)
    assert request(daemon, "DELETE", "/v1/sandboxes/%s" % sid)[0] == 200
    st, b = request(daemon, "DELETE", "/v1/sandboxes/%s" % sid)
    assert st == 404 and b["error"]["code"] == "not_found"
    st, b = request(daemon, "GET", "/v1/sandboxes/sb-" + "x" * 100)
    assert st == 404


def test_tcp_needs_the_bearer_token(workdir_tcp):
    """--listen-tcp serves the same API, but only with the token."""
    import http.client
    port, token = workdir_tcp
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/v1/health")
    r = c.getresponse()
    assert r.status == 401 and b"unauthorized" in r.read()
    c.close()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/v1/health", headers={"Authorization": "Bearer wrong"})
    assert c.getresponse().status == 401
    c.close()
    c = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    c.request("GET", "/v1/health", headers={"Authorization": "Bearer " + token})
    assert c.getresponse().status == 200
    c.close()
    import sys
    sys.path.insert(0, os.path.join(SRC, "sdk", "python"))
    import strata
    assert strata.health(url="http://127.0.0.1:%d" % port, token=token)


@pytest.fixture
def workdir_tcp(daemon):
    import tempfile
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    token = "t-%d" % os.getpid()
    base = tempfile.mkdtemp(prefix="strata-tcp-")
    d = Daemon(base, {}, ["--listen-tcp", "127.0.0.1:%d" % port, "--token", token])
    d.start()
    yield port, token
    d.stop()
    import shutil
    shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("backend", ["fncall", "container"])
def test_slow_reader_is_held_back(daemon, backend):
    """A client that does not read its exec stream holds the command back;
    sandboxd's memory does not grow to the output cap."""
    st, caps = request(daemon, "GET", "/v1/capabilities")
    if not caps["backends"][backend]["available"]:
        pytest.skip("%s backend unavailable: %s" % (backend, caps["backends"][backend]["reason"]))
    sid = create(daemon, backend=backend)
    rss0 = request(daemon, "GET", "/v1/node")[1]["sandboxd_rss_kb"]
    body = json.dumps({"cmd": ["sh", "-c", "yes 0123456789012345678901234567890123456789"],
                       "output_cap": 64 << 20, "timeout": 4}).encode()
    s = socket.socket(socket.AF_UNIX)
    s.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    s.connect(daemon.socket)
    s.sendall(b"POST /v1/sandboxes/%s/exec HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % (
        sid.encode(), len(body)) + body)
    s.recv(1024)  # the stream started; now read nothing for a while
    time.sleep(2)
    rss1 = request(daemon, "GET", "/v1/node")[1]["sandboxd_rss_kb"]
    s.close()
    print("rss growth %d kB" % (rss1 - rss0))
    assert rss1 - rss0 < 32 * 1024, (rss0, rss1)  # far below 64 MiB of output
    assert healthy(daemon)
    assert request(daemon, "DELETE", "/v1/sandboxes/%s" % sid)[0] == 200


def test_update_and_metrics_refuse_bad_input(daemon):
    """PATCH /v1/sandboxes/{id} and GET .../metrics: every bad request a clear
    4xx (nothing changed), unknown sandboxes 404, fncall's metrics 501."""
    sid = create(daemon, ttl=100, labels={"a": "1"})
    path = "/v1/sandboxes/%s" % sid
    before = request(daemon, "GET", path)[1]
    for body, code, words in [
            (b"", "bad_request", "body is required"),
            (b"{", "bad_request", "malformed"),
            (b"[]", "bad_request", "object"),
            ({"ttl": 1}, "unknown_field", "'ttl'"),
            ({"timeout": -1}, "bad_request", "timeout"),
            ({"timeout": 1.5}, "bad_request", "timeout"),
            ({"timeout": 30 * 86400 + 1}, "bad_request", "timeout"),
            ({"labels": []}, "bad_request", "labels"),
            ({"labels": {"k": 1}}, "bad_request", "label"),
            ({"labels": {"": "v"}}, "bad_request", "label"),
            ({"timeout": 5, "labels": {"x" * 64: "v"}}, "bad_request", "label")]:
        st, b = request(daemon, "PATCH", path, body)
        assert st == 400 and b["error"]["code"] == code, (body, st, b)
        assert words in b["error"]["message"], (body, b)
    assert request(daemon, "GET", path)[1] == before  # nothing changed
    st, b = request(daemon, "PATCH", path, {"timeout": 50, "labels": {"b": "2"}})
    assert st == 200 and b["labels"] == {"b": "2"}
    assert abs(b["expires_at"] - (time.time() + 50)) < 5
    assert request(daemon, "PATCH", "/v1/sandboxes/sb-nope", {"timeout": 5})[0] == 404
    assert request(daemon, "GET", "/v1/sandboxes/sb-nope/metrics")[0] == 404
    st, b = request(daemon, "GET", path + "/metrics")
    assert st == 501 and b["error"]["code"] == "unsupported"
    assert request(daemon, "POST", path + "/metrics")[0] == 404
    assert healthy(daemon)
    assert request(daemon, "DELETE", path)[0] == 200


def test_cpu_below_the_smallest_quota_refused(daemon):
    """cpu under 0.01 (a quota under the kernel's 1 ms per 100 ms) is
    refused with a 400 naming the minimum: 1e-10 was accepted and written
    as no limit at all, 0.001-0.0099 failed with "Invalid argument"."""
    for cpu in (1e-10, 0.001, 0.0099, 0, -1, 1025, 1e308):
        st, b = request(daemon, "POST", "/v1/sandboxes",
                        {"image": "busybox", "backend": "fncall", "cpu": cpu})
        assert st == 400, (cpu, st, b)
        assert b["error"]["code"] == "bad_request" and "0.01" in b["error"]["message"], b
    for bad in ({"memory_mb": 1.5}, {"memory_mb": -16}, {"pids": 1e20}, {"disk_mb": 0},
                {"ttl": -1}, {"ttl": 0.5}, {"idle_timeout": 1e300}, {"cpu": "1"}):
        st, b = request(daemon, "POST", "/v1/sandboxes",
                        dict({"image": "busybox", "backend": "fncall"}, **bad))
        assert st == 400, (bad, st, b)
    st, b = request(daemon, "POST", "/v1/sandboxes",
                    {"image": "busybox", "backend": "fncall", "cpu": 0.01})
    assert st == 201, b
    assert b["cpu"] == 0.01
    assert request(daemon, "DELETE", "/v1/sandboxes/%s" % b["id"])[0] in (200, 204)


def test_update_that_cannot_be_persisted_changes_nothing(daemon):
    """A PATCH whose state.json cannot be written is answered with an error
    and leaves the TTL and labels as they were (a directory in the way of
    state.json.tmp makes the write fail, root or not)."""
    sid = create(daemon, ttl=100, labels={"a": "1"})
    path = "/v1/sandboxes/%s" % sid
    before = request(daemon, "GET", path)[1]
    blocker = os.path.join(daemon.home, "sandboxd", "sandboxes", sid, "state.json.tmp")
    os.mkdir(blocker)
    try:
        st, b = request(daemon, "PATCH", path, {"timeout": 5000, "labels": {"b": "2"}})
        assert st >= 400 and "persisted" in b["error"]["message"], (st, b)
        assert request(daemon, "GET", path)[1] == before
    finally:
        os.rmdir(blocker)
    st, b = request(daemon, "PATCH", path, {"labels": {"b": "2"}})
    assert st == 200 and b["labels"] == {"b": "2"}
    assert request(daemon, "DELETE", path)[0] == 200
