"""Clear results: an exec that cannot start names the cause (no such
directory, no such user, command not found, not executable) in `error` and
`error_code`; `oom_killed` tells an OOM kill from a plain SIGKILL; the
environment has Docker's HOME, USER and HOSTNAME (from the sandbox's
/etc/passwd), which the caller's env overrides."""
import base64
import time

import pytest

from test_container_exec import run
from test_http_api import create, request


@pytest.fixture(scope="module")
def box(daemon):
    caps = request(daemon, "GET", "/v1/capabilities")[1]
    if not caps["backends"]["container"]["available"]:
        pytest.skip("container backend unavailable: %s" % caps["backends"]["container"]["reason"])
    sid = create(daemon, backend="container", memory_mb=64)
    yield sid
    request(daemon, "DELETE", "/v1/sandboxes/%s" % sid)


def sh(daemon, sid, script, **kw):
    return run(daemon, sid, dict({"cmd": ["sh", "-c", script]}, **kw))


@pytest.mark.parametrize("req,code,exit_code,words", [
    ({"cmd": ["true"], "cwd": "/nonexistent"}, "no_such_directory", 126,
     "no such directory '/nonexistent'"),
    ({"cmd": ["true"], "cwd": "/bin/busybox"}, "not_a_directory", 126,
     "not a directory '/bin/busybox'"),
    ({"cmd": ["true"], "user": "nosuchuser"}, "no_such_user", 126, "no such user 'nosuchuser'"),
    ({"cmd": ["no-such-command"]}, "command_not_found", 127,
     "cannot run 'no-such-command': command not found"),
    ({"cmd": ["/etc/passwd"]}, "not_executable", 126, "cannot run '/etc/passwd': not executable"),
])
def test_start_failure_names_its_cause(daemon, box, req, code, exit_code, words):
    out, err, ev = run(daemon, box, req)
    assert (ev["error_code"], ev["exit_code"]) == (code, exit_code), ev
    assert words in ev["error"], ev
    assert ev["oom_killed"] is False


def test_a_command_that_runs_has_no_error(daemon, box):
    out, err, ev = sh(daemon, box, "exit 3")
    assert (ev["exit_code"], ev["error"], ev["error_code"]) == (3, None, None), ev


def test_oom_killed_and_a_plain_sigkill(daemon, box):
    out, err, ev = sh(daemon, box, "kill -9 $$")
    assert ev["signal"] == 9 and ev["oom_killed"] is False, ev
    # a shell doubling a string until the 64 MiB limit: the OOM killer ends it
    out, err, ev = sh(daemon, box, "x=xxxxxxxx; while :; do x=$x$x; done", timeout=60)
    assert ev["signal"] == 9 and ev["oom_killed"] is True and not ev["timed_out"], ev
    # the hog inside a script: the shell reports 137, still an OOM kill
    out, err, ev = sh(daemon, box, "sh -c 'x=xxxxxxxx; while :; do x=$x$x; done'; exit $?")
    assert ev["exit_code"] == 137 and ev["oom_killed"] is True, ev
    # after those, a SIGKILL of its own is not one: the count did not move
    out, err, ev = sh(daemon, box, "kill -9 $$")
    assert ev["signal"] == 9 and ev["oom_killed"] is False, ev
    out, err, ev = sh(daemon, box, "sh -c 'kill -9 $$'; exit $?")
    assert ev["exit_code"] == 137 and ev["oom_killed"] is False, ev


def test_a_sigkill_sent_is_not_an_oom_kill(daemon, box):
    """An OOM kill of another process during the exec's run does not make
    the SIGKILL a client sent it an OOM kill."""
    from test_exec_restart import collect
    st, b = request(daemon, "POST", "/v1/sandboxes/%s/exec" % box, {
        "cmd": ["sh", "-c", "rm -f /tmp/hog; sh -c 'x=xxxxxxxx; while :; do x=$x$x; done'; "
                "echo $? >/tmp/hog; exec sleep 100"], "background": True})
    assert st == 200, b
    deadline = time.time() + 180  # the hog reaches the limit in ~1 s here, minutes under TCG
    while time.time() < deadline:
        out, err, ev = sh(daemon, box, "cat /tmp/hog 2>/dev/null")
        if out:
            break
        time.sleep(0.2)
    assert out == b"137\n", (out, err)  # the hog was OOM-killed, the exec runs on
    st, r = request(daemon, "DELETE", "/v1/sandboxes/%s/execs/%s" % (box, b["exec_id"]))
    assert st == 200, r
    out, ev = collect(daemon, box, b["exec_id"])
    assert ev["signal"] == 9 and ev["oom_killed"] is False, ev


def env_of(daemon, sid, **kw):
    out, err, ev = run(daemon, sid, dict({"cmd": ["env"]}, **kw))
    assert ev["exit_code"] == 0, ev
    return dict(l.split("=", 1) for l in out.decode().splitlines() if "=" in l)


def test_docker_environment(daemon, box):
    e = env_of(daemon, box)
    assert (e.get("HOME"), e.get("USER"), e.get("HOSTNAME")) == ("/root", "root", "sandbox"), e
    assert "/bin" in e.get("PATH", "") and "TERM" not in e, e
    e = env_of(daemon, box, user="app")
    assert (e.get("HOME"), e.get("USER")) == ("/work", "app"), e
    e = env_of(daemon, box, user="4242")  # a uid without an entry: home "/", no name
    assert e.get("HOME") == "/" and "USER" not in e, e
    # the caller's variables win; PATH stays when other variables are given
    e = env_of(daemon, box, env={"HOME": "/tmp", "USER": "me", "HOSTNAME": "h", "K": "v"})
    assert (e["HOME"], e["USER"], e["HOSTNAME"], e["K"]) == ("/tmp", "me", "h", "v"), e
    assert "/bin" in e.get("PATH", ""), e
    out, err, ev = run(daemon, box, {"cmd": ["sh", "-c", "cd && pwd"], "user": "app"})
    assert out == b"/work\n", ev


def test_fncall_names_the_cause_too(daemon):
    sid = create(daemon, backend="fncall")
    try:
        st, body = request(daemon, "POST", "/v1/sandboxes/%s/exec" % sid,
                           {"cmd": ["true"], "cwd": "/nonexistent"})
        assert st == 200, body
        from test_http_api import stream_events
        ev = stream_events(body)
        err = b"".join(base64.b64decode(e["data"]) for e in ev if e["type"] == "stderr")
        assert ev[-1]["error_code"] == "no_such_directory", ev
        assert b"no such directory '/nonexistent'" in err, err
    finally:
        request(daemon, "DELETE", "/v1/sandboxes/%s" % sid)
