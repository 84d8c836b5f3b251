"""Container creates run on worker threads: concurrent creates keep
admission exact, idempotent repeats of a create in flight get the same
sandbox, and other requests are answered meanwhile."""
import concurrent.futures
import threading
import time

import pytest

from conftest import daemon_in_tmp
from test_http_api import request


@pytest.fixture(scope="module")
def small(daemon):  # daemon: root and a built sandboxd, else skipped
    st, caps = request(daemon, "GET", "/v1/capabilities")
    if not caps["backends"]["container"]["available"]:
        pytest.skip("container backend unavailable")
    yield from daemon_in_tmp("strata-acreate-", ["--max-sandboxes", "3"])


def delete_all(d):
    for sb in request(d, "GET", "/v1/sandboxes")[1]["sandboxes"]:
        request(d, "DELETE", "/v1/sandboxes/%s" % sb["id"])


def test_concurrent_creates_respect_admission(small):
    body = {"image": "busybox", "backend": "container", "memory_mb": 64}
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        res = list(ex.map(lambda _: request(small, "POST", "/v1/sandboxes", body), range(8)))
    codes = sorted(st for st, _ in res)
    assert codes == [201] * 3 + [503] * 5, res
    assert all(b["error"]["code"] == "no_capacity" for st, b in res if st == 503)
    node = request(small, "GET", "/v1/node")[1]
    assert node["sandboxes"] == 3 and node["creating"] == 0
    delete_all(small)


def test_idempotent_repeats_in_flight(small):
    body = {"image": "busybox", "backend": "container", "idempotency_key": "same-%d" % time.time()}
    with concurrent.futures.ThreadPoolExecutor(4) as ex:
        res = list(ex.map(lambda _: request(small, "POST", "/v1/sandboxes", body), range(4)))
    assert sorted(st for st, _ in res) == [200, 200, 200, 201], res
    assert len({b["id"] for _, b in res}) == 1
    assert request(small, "GET", "/v1/node")[1]["sandboxes"] == 1
    delete_all(small)


def test_served_while_creating(small):
    """Health checks keep being answered while creates are in flight."""
    stop = threading.Event()
    lat = []

    def probe():
        while not stop.is_set():
            t = time.monotonic()
            assert request(small, "GET", "/v1/health")[0] == 200
            lat.append(time.monotonic() - t)

    th = threading.Thread(target=probe)
    th.start()
    try:
        for _ in range(6):
            st, b = request(small, "POST", "/v1/sandboxes",
                            {"image": "busybox", "backend": "container"})
            assert st == 201, b
            assert request(small, "DELETE", "/v1/sandboxes/%s" % b["id"])[0] == 200
    finally:
        stop.set()
        th.join()
    assert lat and max(lat) < 5


def test_many_concurrent_creates_all_answered(small):
    """Creates finishing in every order: each gets its answer (201, or 503
    when the node is full), and the counters come back to zero."""
    def loop(i):
        got = []
        for _ in range(10):
            st, b = request(small, "POST", "/v1/sandboxes",
                            {"image": "busybox", "backend": "container"})
            got.append(st)
            if st == 201:
                assert request(small, "DELETE", "/v1/sandboxes/%s" % b["id"])[0] == 200
        return got
    with concurrent.futures.ThreadPoolExecutor(8) as ex:
        res = [st for got in ex.map(loop, range(8)) for st in got]
    assert set(res) <= {201, 503} and res.count(201) >= 10, res
    node = request(small, "GET", "/v1/node")[1]
    assert node["sandboxes"] == 0 and node["creating"] == 0
