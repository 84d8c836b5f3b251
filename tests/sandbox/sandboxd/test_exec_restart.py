"""A sandboxd restart ends no exec of a container sandbox: background and
streamed execs run on, and the next sandboxd lists them under the same
numbers and collects the output they printed meanwhile and their exits; a
daemon an earlier exec left behind lives on too."""
import time

import pytest

from conftest import daemon_in_tmp
from test_exec_stdin import Stream
from test_execs import count_procs, execs
from test_http_api import create, request


@pytest.fixture
def own(daemon):  # daemon: the skip reasons (root, a built sandboxd)
    yield from daemon_in_tmp("strata-execs-restart-", [])


def background(d, sid, cmd):
    st, b = request(d, "POST", "/v1/sandboxes/%s/exec" % sid, {"cmd": cmd, "background": True})
    assert st == 200, b
    return b["exec_id"]


def collect(d, sid, xid):
    s = Stream(d, sid, None, path="/v1/sandboxes/%s/execs/%s/stream" % (sid, xid))
    assert s.status == 200
    assert s.event()["type"] == "start"
    out, ev = s.rest()
    s.close()
    return out, ev


def test_execs_run_on_through_a_restart(own):
    st, caps = request(own, "GET", "/v1/capabilities")
    if not caps["backends"]["container"]["available"]:
        pytest.skip("container backend unavailable: %s" % caps["backends"]["container"]["reason"])
    sid = create(own, backend="container")
    st, b = request(own, "POST", "/v1/sandboxes/%s/exec" % sid,
                    {"cmd": ["sh", "-c", "sleep 1000 >/dev/null 2>&1 &"]})
    assert st == 200
    quick = background(own, sid, ["sh", "-c", "sleep 0.5; echo quick; exit 5"])
    slow = background(own, sid, ["sh", "-c", "sleep 2.5; echo slow; exit 6"])
    streamed = Stream(own, sid, {"cmd": ["sh", "-c", "sleep 2; echo streamed; exit 7"]})
    fg = streamed.event()["exec_id"]
    own.restart()
    streamed.close()  # its stream ended with the old sandboxd
    listed = execs(own, sid)
    assert {quick, slow, fg} <= set(listed), listed
    assert listed[slow]["running"] and listed[slow]["background"], listed[slow]
    assert listed[slow]["pid"] > 1 and "slow" in listed[slow]["cmd"]
    for xid, text, code in ((quick, b"quick\n", 5), (slow, b"slow\n", 6),
                            (fg, b"streamed\n", 7)):
        out, ev = collect(own, sid, xid)
        assert (out, ev["exit_code"]) == (text, code), (xid, out, ev)
    assert not ({quick, slow, fg} & set(execs(own, sid)))  # collected
    assert count_procs(own, sid, "sleep 1000") == 1
    # new execs get new numbers
    st, b = request(own, "POST", "/v1/sandboxes/%s/exec" % sid,
                    {"cmd": ["true"], "background": True})
    assert st == 200 and int(b["exec_id"]) > max(int(quick), int(slow), int(fg)), b
    request(own, "DELETE", "/v1/sandboxes/%s" % sid)


def test_exec_ids_are_never_reused_after_a_restart(own):
    """Finished background execs nobody collected are gone after a restart
    (their records lived in sandboxd), but their numbers are not given to
    new execs: a client polling an old number never reads another command's
    exit. Ids are reserved in blocks, one state.json write per block."""
    import json
    import os
    st, caps = request(own, "GET", "/v1/capabilities")
    if not caps["backends"]["container"]["available"]:
        pytest.skip("container backend unavailable: %s" % caps["backends"]["container"]["reason"])
    sid = create(own, backend="container")
    old = [background(own, sid, ["sh", "-c", "exit 3"]) for _ in range(3)]
    state = os.path.join(own.home, "sandboxd", "sandboxes", sid, "state.json")
    with open(state) as f:
        reserved = json.load(f)["exec_ids_reserved"]
    assert reserved >= max(map(int, old)), reserved
    for _ in range(100):
        if not any(x["running"] for x in execs(own, sid).values()):
            break
        time.sleep(0.1)
    own.restart()
    new = background(own, sid, ["sh", "-c", "exit 4"])
    assert int(new) > reserved >= max(map(int, old)), (new, reserved, old)
    for xid in old:
        st, b = request(own, "GET", "/v1/sandboxes/%s/execs/%s" % (sid, xid))
        assert st == 404, (xid, b)  # lost, not someone else's
    out, ev = collect(own, sid, new)
    assert ev["exit_code"] == 4, ev
    own.restart()
    newer = background(own, sid, ["true"])
    assert int(newer) > int(new), (newer, new)
    request(own, "DELETE", "/v1/sandboxes/%s" % sid)
