"""Container sandboxes in user namespaces, sandboxd's default (issue 14):
root inside is an unprivileged range of host ids (0x10000000 + n x 65536),
and the files API, which works from the host through the sandbox's root,
shifts the ids it is given into that range and back, so that inside root
owns what root wrote, user= owns what it wrote, and a tar round trip keeps
its owners. Also: the create option (true, false, left out), the
capabilities, exec user= resolved inside, and --no-userns."""
import io
import os
import tarfile
import time

import pytest

from conftest import daemon_in_tmp
from test_http_api import request, stream_events

import base64

BASE0 = 0x10000000
RANGE = 65536


@pytest.fixture(scope="module")
def userns(daemon):
    st, caps = request(daemon, "GET", "/v1/capabilities")
    k = caps["backends"]["container"]
    if not k["available"]:
        pytest.skip("container backend unavailable")
    if not k["userns"]:
        pytest.skip("no user namespaces here: %s" % k.get("userns_reason"))
    return daemon


def create(d, **kw):
    body = {"image": "busybox", "backend": "container"}
    body.update(kw)
    st, b = request(d, "POST", "/v1/sandboxes", body)
    assert st == 201, b
    return b


def delete(d, sid):
    assert request(d, "DELETE", "/v1/sandboxes/%s" % sid)[0] in (200, 204)


def run(d, sid, cmd, user=None, code=0):
    body = {"cmd": ["sh", "-c", cmd]}
    if user is not None:
        body["user"] = user
    st, out = request(d, "POST", "/v1/sandboxes/%s/exec" % sid, body)
    assert st == 200, out
    ev = stream_events(out)
    text = b"".join(base64.b64decode(e["data"]) for e in ev if e["type"] in ("stdout", "stderr"))
    assert ev[-1]["type"] == "exit" and ev[-1]["exit_code"] == code, (cmd, ev[-1], text)
    return text.decode()


def agent_of(d, sid):
    """The host pid of a process of sandbox sid (a sleep it starts with a
    mark of its own) and the host uid that is its root (from its uid_map)."""
    mark = "%d" % (900000 + (hash(sid) % 99999))
    run(d, sid, "sleep %s >/dev/null 2>&1 </dev/null &" % mark)
    for _ in range(100):
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                with open("/proc/%s/cmdline" % pid, "rb") as f:
                    if f.read().split(b"\0")[:2] != [b"sleep", mark.encode()]:
                        continue
                with open("/proc/%s/uid_map" % pid) as f:
                    inside, base, n = map(int, f.read().split()[:3])
                return int(pid), base if (inside, n) == (0, RANGE) else 0
            except OSError:
                continue
        time.sleep(0.05)
    raise AssertionError("no process of %s found on the host" % sid)


def host_stat(pid, path):
    return os.lstat("/proc/%d/root%s" % (pid, path))


def ids(d, sid, *paths):
    return run(d, sid, "stat -c '%u:%g' " + " ".join(paths)).split()


def test_capabilities_and_default(userns):
    st, caps = request(userns, "GET", "/v1/capabilities")
    k = caps["backends"]["container"]
    assert k["userns"] is True and "userns_reason" not in k
    f = caps["backends"]["fncall"]
    assert f["userns"] is False and f["userns_reason"]
    sb = create(userns)
    try:
        assert sb["userns"] is True
        assert run(userns, sb["id"], "id -u; id -g") == "0\n0\n"
        pid, base = agent_of(userns, sb["id"])
        assert base >= BASE0 and (base - BASE0) % RANGE == 0, base
        with open("/proc/%d/status" % pid) as f:
            uid = [l for l in f if l.startswith("Uid:")][0].split()[1]
        assert int(uid) == base  # root inside is nobody on the host
        st, got = request(userns, "GET", "/v1/sandboxes/%s" % sb["id"])
        assert got["userns"] is True
    finally:
        delete(userns, sb["id"])


def test_files_written_by_root_are_roots_inside(userns):
    sb = create(userns)
    sid = sb["id"]
    try:
        pid, base = agent_of(userns, sid)
        assert base
        st, b = request(userns, "PUT", "/v1/sandboxes/%s/files?path=/new/dir/f.txt" % sid,
                        b"root's")
        assert st == 200, b
        assert ids(userns, sid, "/new/dir/f.txt", "/new/dir", "/new") == ["0:0"] * 3
        for p in ("/new/dir/f.txt", "/new/dir", "/new"):
            s = host_stat(pid, p)
            assert (s.st_uid, s.st_gid) == (base, base), p
        # root inside can change what it owns
        run(userns, sid, "echo more >> /new/dir/f.txt && chmod 600 /new/dir/f.txt")
        # user=: a name of the sandbox's /etc/passwd, a uid, uid:gid
        for user, want in (("app", 1000), ("1234", 1234), ("77:88", None)):
            path = "/w/%s" % user.replace(":", "_")
            st, b = request(userns, "PUT", "/v1/sandboxes/%s/files?path=%s&user=%s"
                            % (sid, path, user), b"x")
            assert st == 200, b
            inside = ids(userns, sid, path)[0]
            uid, gid = map(int, inside.split(":"))
            if want is not None:
                assert (uid, gid) == (want, want), (user, inside)
            else:
                assert (uid, gid) == (77, 88), inside
            s = host_stat(pid, path)
            assert (s.st_uid, s.st_gid) == (base + uid, base + gid), path
        # what user= made is writable by that user inside
        run(userns, sid, "echo again >> /w/app", user="app")
        # a replaced file keeps its owner when no user= is given
        st, b = request(userns, "PUT", "/v1/sandboxes/%s/files?path=/w/app" % sid, b"new")
        assert st == 200, b
        assert ids(userns, sid, "/w/app") == ["1000:1000"]
        assert run(userns, sid, "cat /w/app") == "new"
        # an id the sandbox does not have is refused
        st, b = request(userns, "PUT", "/v1/sandboxes/%s/files?path=/w/big&user=70000" % sid,
                        b"x")
        assert st == 400 and "65535" in b["error"]["message"], b
    finally:
        delete(userns, sid)


def make_tar(members):
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as t:
        for name, kind, uid, gid in members:
            ti = tarfile.TarInfo(name)
            ti.uid, ti.gid, ti.mtime = uid, gid, 1_600_000_000
            if kind == "dir":
                ti.type, ti.mode = tarfile.DIRTYPE, 0o755
                t.addfile(ti)
            elif kind == "link":
                ti.type, ti.linkname = tarfile.SYMTYPE, "f0"
                t.addfile(ti)
            else:
                data = name.encode()
                ti.size, ti.mode = len(data), 0o644
                t.addfile(ti, io.BytesIO(data))
    return buf.getvalue()


def test_tar_round_trip_keeps_owners(userns):
    sb = create(userns)
    sid = sb["id"]
    members = [("d", "dir", 1000, 1000), ("d/f0", "file", 0, 0), ("d/f1", "file", 1000, 1001),
               ("d/f2", "file", 4242, 65534), ("d/l", "link", 1000, 1000),
               ("d/big", "file", 70000, 70000)]
    try:
        pid, base = agent_of(userns, sid)
        st, b = request(userns, "PUT", "/v1/sandboxes/%s/files/tar?path=/t" % sid,
                        make_tar(members))
        assert st == 200 and b["files"] == 4, b
        got = ids(userns, sid, "/t", "/t/d", "/t/d/f0", "/t/d/f1", "/t/d/f2", "/t/d/big")
        # /t made by sandboxd: root's; an id outside 0..65535: its nobody
        assert got == ["0:0", "1000:1000", "0:0", "1000:1001", "4242:65534",
                       "65534:65534"], got
        assert run(userns, sid, "stat -c '%u:%g' -L /t/d/l; ls -ln /t/d/l | awk '{print $3\":\"$4}'") \
            == "0:0\n1000:1000\n"
        for path, uid, gid in (("/t/d/f1", 1000, 1001), ("/t/d/f0", 0, 0), ("/t/d/l", 1000, 1000)):
            s = host_stat(pid, path)
            assert (s.st_uid, s.st_gid) == (base + uid, base + gid), path
        run(userns, sid, "touch /t/d/inside && chown 1234:1234 /t/d/f0")
        st, body = request(userns, "GET", "/v1/sandboxes/%s/files/tar?path=/t/d" % sid)
        assert st == 200
        data, rest = b"", body
        while rest:  # chunked
            n, _, rest = rest.partition(b"\r\n")
            n = int(n, 16)
            if n == 0:
                break
            data, rest = data + rest[:n], rest[n + 2:]
        with tarfile.open(fileobj=io.BytesIO(data)) as t:
            owners = {m.name.lstrip("./"): (m.uid, m.gid) for m in t.getmembers()}
        assert owners["f1"] == (1000, 1001) and owners["f2"] == (4242, 65534), owners
        assert owners["f0"] == (1234, 1234) and owners["inside"] == (0, 0), owners
        assert owners["l"] == (1000, 1000) and owners["big"] == (65534, 65534), owners
        # the same archive into a second sandbox (another range): the same owners
        sb2 = create(userns)
        try:
            pid2, base2 = agent_of(userns, sb2["id"])
            assert base2 != base
            st, b = request(userns, "PUT", "/v1/sandboxes/%s/files/tar?path=/copy" % sb2["id"],
                            data)
            assert st == 200, b
            assert ids(userns, sb2["id"], "/copy/f1", "/copy/f0", "/copy/inside") == \
                ["1000:1001", "1234:1234", "0:0"]
            s = host_stat(pid2, "/copy/f1")
            assert (s.st_uid, s.st_gid) == (base2 + 1000, base2 + 1001)
        finally:
            delete(userns, sb2["id"])
        # user= over an archive: every member that user's
        st, b = request(userns, "PUT", "/v1/sandboxes/%s/files/tar?path=/u&user=app" % sid,
                        make_tar(members[:3]))
        assert st == 200, b
        assert ids(userns, sid, "/u/d/f0", "/u/d/f1") == ["1000:1000"] * 2
        assert host_stat(pid, "/u/d/f0").st_uid == base + 1000
    finally:
        delete(userns, sid)


def test_exec_user_resolves_inside(userns):
    sb = create(userns, user="app")
    sid = sb["id"]
    try:
        pid, base = agent_of(userns, sid)
        assert run(userns, sid, "id -u; id -g") == "1000\n1000\n"  # the sandbox's default user
        assert run(userns, sid, "id -u", user="nobody") == "65534\n"
        assert run(userns, sid, "id -u; id -g", user="4000:4001") == "4000\n4001\n"
        assert run(userns, sid, "id -u", user="root") == "0\n"
        run(userns, sid, "mkdir /mine && chown app:app /mine", user="root")
        run(userns, sid, "touch /mine/by-app")
        s = host_stat(pid, "/mine/by-app")
        assert (s.st_uid, s.st_gid) == (base + 1000, base + 1000)
        # a user the sandbox's /etc/passwd does not have
        st, out = request(userns, "POST", "/v1/sandboxes/%s/exec" % sid,
                          {"cmd": ["true"], "user": "nosuchuser"})
        ev = stream_events(out) if st == 200 else []
        assert st != 200 or ev[-1].get("error_code") == "no_such_user", (st, out)
    finally:
        delete(userns, sid)


def test_userns_false_is_root(userns):
    sb = create(userns, userns=False)
    sid = sb["id"]
    try:
        assert sb["userns"] is False
        pid, base = agent_of(userns, sid)
        assert base == 0
        st, b = request(userns, "PUT", "/v1/sandboxes/%s/files?path=/r&user=app" % sid, b"x")
        assert st == 200
        assert host_stat(pid, "/r").st_uid == 1000
    finally:
        delete(userns, sid)
    st, b = request(userns, "POST", "/v1/sandboxes",
                    {"image": "busybox", "backend": "container", "userns": "yes"})
    assert st == 400 and "userns" in b["error"]["message"], b
    st, b = request(userns, "POST", "/v1/sandboxes",
                    {"image": "busybox", "backend": "fncall", "userns": True})
    assert st == 501 and "user namespaces" in b["error"]["message"], b


@pytest.fixture(scope="module")
def no_userns(userns):
    yield from daemon_in_tmp("strata-nouserns-", ["--no-userns"])


def test_no_userns_flag(no_userns):
    st, caps = request(no_userns, "GET", "/v1/capabilities")
    assert caps["backends"]["container"]["userns"] is True  # possible, not the default
    sb = create(no_userns)
    try:
        assert sb["userns"] is False
        assert agent_of(no_userns, sb["id"])[1] == 0
    finally:
        delete(no_userns, sb["id"])
    sb = create(no_userns, userns=True)
    try:
        assert sb["userns"] is True
        assert agent_of(no_userns, sb["id"])[1] >= BASE0
    finally:
        delete(no_userns, sb["id"])


def test_cli_flags(userns):
    from test_cli import strata
    import json
    for flag, want in (("--no-userns", False), ("--userns", True), (None, True)):
        r = strata(userns, "create", "busybox", "--backend", "container", "--json",
                   *([flag] if flag else []))
        assert r.returncode == 0, r.stderr
        sb = json.loads(r.stdout)
        try:
            assert sb["userns"] is want, (flag, sb)
        finally:
            delete(userns, sb["id"])
