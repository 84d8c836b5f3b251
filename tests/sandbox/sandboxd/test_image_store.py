"""strata-sandboxd on images of the cluster's image store, through the SDK.

Run by test_image_store.sh, which starts a cluster, imports the busybox
sample as busybox:latest and starts sandboxd with --home; it exports
STRATA_IMAGE_TEST=1, STRATA_IMAGE_HEX (the image digest) and STRATA_HOME.
Without them (e.g. the pytest run of the whole directory) every test skips.

    test_image_store.py --create REF   creates a container sandbox, writes
                                       /tmp/keep in it and prints its id
"""
import base64
import json
import os
import shutil
import signal
import subprocess
import sys
import tarfile
import threading
import time

import pytest

if os.environ.get("STRATA_IMAGE_TEST") != "1" and __name__ != "__main__":
    pytest.skip("run by test_image_store.sh (needs a cluster with an imported image)",
                allow_module_level=True)

import strata  # noqa: E402
from strata import Sandbox  # noqa: E402
from strata._http import Client  # noqa: E402

HOME = os.environ.get("STRATA_HOME", "")
HEX = os.environ.get("STRATA_IMAGE_HEX", "")
IMG_ROOT = os.path.join(HOME, "cache", "images", HEX, "root")
LINGER_S = int(os.environ.get("STRATA_SANDBOXD_IMAGE_LINGER_S", "30"))
STORE_TIMEOUT_S = 5  # sandboxd's default --store-timeout


def agent_pid(sb):
    p = os.path.join(HOME, "sandboxd", "sandboxes", sb.id, "state.json")
    with open(p) as f:
        return json.load(f)["backend_state"]["agent_pid"]


def in_root(sb, leaf):
    """A path in the sandbox's root as the host sees it (its staging root,
    with the writable layer and the image tree, is detached: no path leads
    there)."""
    return "/proc/%d/root/%s" % (agent_pid(sb), leaf)


def erofs_mounts_at(path):
    n = 0
    with open("/proc/self/mountinfo") as f:
        for line in f:
            parts = line.split()
            sep = parts.index("-")
            if parts[4] == path and parts[sep + 1] == "erofs":
                n += 1
    return n


def users():
    """The node reference count (the first line; then one per holder)."""
    try:
        with open(os.path.join(HOME, "cache", "images", HEX, "users")) as f:
            return int(f.read().split("\n")[0].strip() or 0)
    except FileNotFoundError:
        return 0


def holder_lines():
    """The "COUNT HOLDER" lines below the count."""
    with open(os.path.join(HOME, "cache", "images", HEX, "users")) as f:
        lines = f.read().split("\n")[1:]
    return [(int(l.split(" ", 1)[0]), l.split(" ", 1)[1]) for l in lines if l]


def wait_users(n, timeout=5):
    deadline = time.monotonic() + timeout
    while users() != n and time.monotonic() < deadline:
        time.sleep(0.1)
    return users()


def store_image(name):
    for im in Client().call("GET", "/v1/images")["images"]:
        if im.get("source") == "store" and im["name"] == name:
            return im
    return None


def wait_unmounted():
    deadline = time.monotonic() + LINGER_S + 10
    while time.monotonic() < deadline:
        if erofs_mounts_at(IMG_ROOT) == 0 and users() == 0:
            return
        time.sleep(0.5)
    pytest.fail("the image mount is still there %d s after its last sandbox" % (LINGER_S + 10))


def test_create_exec_from_store_ref():
    with Sandbox.create("busybox:latest", backend="container", memory_mb=128, ttl=120) as sb:
        assert sb.info["image"] == "busybox:latest"
        r = sb.exec(["sh", "-c", "echo hi; pwd; echo $STRATA_SAMPLE; id -u"], timeout=30)
        assert r.exit_code == 0, r
        # The image config is the default: WorkingDir /app, Env, User 0:0.
        assert r.stdout.split() == ["hi", "/app", "busybox", "0"], r.stdout
        assert sb.info["cwd"] == "/app"
        assert sb.info["env"].get("STRATA_SAMPLE") == "busybox"
        sb.files.write("/tmp/x", b"data")
        assert sb.files.read("/tmp/x") == b"data"
        # In a user namespace (sandboxd's default, where the kernel's EROFS
        # takes idmapped mounts) the image's files and what root wrote
        # through the files API are root's inside all the same.
        r = sb.exec(["sh", "-c", "busybox stat -c %u:%g /app /tmp/x"], timeout=30)
        assert r.stdout.split() == ["0:0", "0:0"], (sb.info["userns"], r.stdout)
        print("EROFS image in a user namespace: %s" % sb.info["userns"])


def test_qemu_from_store_ref():
    """A VM sandbox of a store image: its EROFS metadata and blobs (on the
    strata mount) are the VM's read-only disks; the guest sees the tree."""
    caps = strata.capabilities("qemu")
    if not caps["available"]:
        pytest.skip("qemu backend unavailable: %s" % caps.get("reason"))
    with Sandbox.create("busybox:latest", backend="qemu", memory_mb=128, ttl=300,
                        timeout=180) as sb:
        r = sb.exec(["sh", "-c", "echo $STRATA_SAMPLE; ls /app >/dev/null && echo app; "
                     "grep -c '^overlay / overlay' /proc/mounts"], timeout=60)
        assert r.exit_code == 0, r
        assert r.stdout.split() == ["busybox", "app", "1"], r.stdout


def test_qemu_snapshot_on_the_strata_mount(tmp_path):
    """test_qemu_from_store_ref's VM was saved on the strata filesystem
    (MOUNT/.strata/vm-snapshots/KEY, KEY from the image's digest, not a
    path): a second sandboxd with a state dir of its own (another node over
    the same cluster mount) restores it instead of booting."""
    caps = strata.capabilities("qemu")
    if not caps["available"]:
        pytest.skip("qemu backend unavailable: %s" % caps.get("reason"))
    snaps = os.path.join(os.path.dirname(store_dir()), "vm-snapshots")
    keys = [k for k in os.listdir(snaps) if not k.startswith(".")]
    assert len(keys) == 1, os.listdir(snaps)
    assert sorted(os.listdir(os.path.join(snaps, keys[0]))) == ["disk", "manifest", "state"]
    sock, log = str(tmp_path / "sd.sock"), str(tmp_path / "sandboxd.log")
    proc = subprocess.Popen([os.path.join(os.environ["STRATA_BIN"], "strata-sandboxd"),
                             "--home", HOME, "--state-dir", str(tmp_path / "state"),
                             "--socket", sock, "--log-level", "debug"],
                            stdout=open(log, "wb"), stderr=subprocess.STDOUT)
    try:
        deadline = time.time() + 20
        while not os.path.exists(sock) and time.time() < deadline and proc.poll() is None:
            time.sleep(0.05)
        t0 = time.time()
        with Sandbox.create("busybox:latest", backend="qemu", memory_mb=128, ttl=300,
                            timeout=180, socket=sock) as sb:
            warm = time.time() - t0
            r = sb.exec(["sh", "-c", "echo $STRATA_SAMPLE"], timeout=60)
            assert r.stdout == "busybox\n", r
        print("qemu: created from the strata mount's snapshot in %.2f s" % warm)
        text = open(log).read()
        assert "warm start from %s/%s" % (snaps, keys[0]) in text, text[-3000:]
        print(next(line for line in text.splitlines() if "warm start from" in line))
    finally:
        proc.terminate()
        proc.wait(15)


def test_exec_image_command():
    """An exec with neither cmd nor python runs the image's Entrypoint + Cmd."""
    with Sandbox.create("busybox:latest", backend="container", memory_mb=128, ttl=120) as sb:
        conn, resp = Client().open("POST", "/v1/sandboxes/%s/exec" % sb.id, {}, timeout=30)
        try:
            events = [json.loads(line) for line in resp.read().splitlines() if line.strip()]
        finally:
            conn.close()
        out = b"".join(base64.b64decode(e["data"]) for e in events if e["type"] == "stdout")
        assert events[-1]["type"] == "exit" and events[-1]["exit_code"] == 0, events
        assert out == b"hello from the strata busybox sample\n", out


def test_two_sandboxes_share_one_mount():
    a = Sandbox.create("busybox", backend="container", memory_mb=128, ttl=120)
    b = Sandbox.create("sha256:" + HEX, backend="container", memory_mb=128, ttl=120)
    try:
        assert erofs_mounts_at(IMG_ROOT) == 1
        assert users() == 2  # one node reference per sandbox
        # ...counted on one line of their holder, not a line per sandbox
        assert holder_lines() == [(2, holder_lines()[0][1])], holder_lines()
        im = store_image("busybox:latest")
        assert im and im["mounted"] and im["sandboxes"] == 2, im
        assert im["cmd"] == ["/app/hello.sh"], im
        # Each has its own writable layer.
        assert a.exec(["sh", "-c", "echo A > /tmp/only-a"], timeout=30).exit_code == 0
        assert os.path.exists(in_root(a, "tmp/only-a"))
        assert not os.path.exists(in_root(b, "tmp/only-a"))
        assert b.exec(["cat", "/tmp/only-a"], timeout=30).exit_code != 0
        ua, ub = os.stat(in_root(a, "")), os.stat(in_root(b, ""))  # two overlays
        assert (ua.st_dev, ua.st_ino) != (ub.st_dev, ub.st_ino)
        # The image itself is unchanged.
        assert not os.path.exists(os.path.join(IMG_ROOT, "tmp", "only-a"))
    finally:
        a.kill()
        b.kill()
    assert store_image("busybox:latest")["sandboxes"] == 0
    # Their references went with them; the mount lingers (LINGER_S) for the
    # next sandbox, then the sweep takes it.
    assert users() == 0
    assert erofs_mounts_at(IMG_ROOT) == 1
    wait_unmounted()


def test_fncall_from_store_ref():
    with Sandbox.create("busybox:latest", backend="fncall") as sb:
        r = sb.exec(["sh", "-c", "cat /etc/hostname 2>/dev/null; echo ok"], timeout=30)
        assert r.exit_code == 0 and r.stdout.strip().endswith("ok"), r


def test_unknown_image():
    with pytest.raises(strata.ImageNotFound) as ei:
        Sandbox.create("no-such-image:latest", backend="container")
    assert "no-such-image" in str(ei.value)
    with pytest.raises(strata.ImageNotFound):
        Sandbox.create("sha256:" + "0" * 64, backend="container")


def store_dir():
    """The cluster's image store: STRATA_MOUNT of cluster.env, else HOME/mnt."""
    mnt = os.path.join(HOME, "mnt")
    for line in lines_of(os.path.join(HOME, "cluster.env")):
        if line.startswith("STRATA_MOUNT=") and line[13:]:
            mnt = line[13:]
    return os.path.join(mnt, ".strata", "images")


def import_other(tmp):
    """Imports "other:1": the busybox sample's layers and one more layer
    holding /opt/other. Returns its digest (hex)."""
    build = os.environ.get("STRATA_BUILD") or os.path.join(os.environ["STRATA_SRC"], "build")
    src = os.path.join(build, "sample-images", "busybox")
    blob = lambda d: os.path.join(src, "blobs", *d.split(":"))  # noqa: E731
    index = json.load(open(os.path.join(src, "index.json")))
    man = json.load(open(blob(index["manifests"][0]["digest"])))
    layers = []
    for i, l in enumerate(man["layers"]):
        mt = l["mediaType"]
        ext = ".tar.gz" if "gzip" in mt else ".tar.zst" if "zstd" in mt else ".tar"
        layers.append(os.path.join(str(tmp), "l%d%s" % (i, ext)))
        shutil.copyfile(blob(l["digest"]), layers[-1])
    extra = os.path.join(str(tmp), "extra")
    os.makedirs(os.path.join(extra, "opt"))
    with open(os.path.join(extra, "opt", "other"), "w") as f:
        f.write("the other image\n")
    layers.append(os.path.join(str(tmp), "extra.tar"))
    with tarfile.open(layers[-1], "w") as t:
        t.add(os.path.join(extra, "opt"), arcname="opt")
    oci = os.path.join(str(tmp), "oci")
    mkoci = os.path.join(os.environ["STRATA_SRC"], "tests", "imagesvc", "mkoci.py")
    subprocess.run([sys.executable, mkoci, oci] + layers, check=True, stdout=subprocess.DEVNULL)
    cli = os.path.join(os.environ["STRATA_BIN"], "strata")
    out = subprocess.run([cli, "image", "import", oci, "--name", "other:1", "--json",
                          "--home", HOME], check=True, capture_output=True, text=True).stdout
    return json.loads(out)["digest"][len("sha256:"):]


def test_rewritten_ref_is_refused(tmp_path):
    """Issue 14: a client that could write the store rewrote
    refs/busybox:latest and new busybox sandboxes booted another image. A
    rewritten name (unsigned, or another name's signed ref copied over it)
    now fails the create with the reason, and boots nothing; the good name
    creates again."""
    other = import_other(tmp_path)
    ref = os.path.join(store_dir(), "refs", "busybox:latest")
    good = open(ref).read()
    forged = ["sha256:%s\n" % other, open(os.path.join(store_dir(), "refs", "other:1")).read()]
    try:
        for text, why in zip(forged, ["unsigned", "valid signature"]):
            with open(ref, "w") as f:
                f.write(text)
            time.sleep(1.2)  # past sandboxd's 1 s cache of what a name resolved to
            with pytest.raises(strata.StrataError) as ei:
                sb = Sandbox.create("busybox:latest", backend="container", memory_mb=128,
                                    ttl=60)
                sb.kill()  # booted: the test fails below, leaving nothing behind
            assert why in str(ei.value), str(ei.value)
            assert "busybox" in str(ei.value), str(ei.value)
    finally:
        with open(ref, "w") as f:
            f.write(good)
    time.sleep(1.2)
    with Sandbox.create("busybox:latest", backend="container", memory_mb=128, ttl=60) as sb:
        r = sb.exec(["sh", "-c", "test ! -e /opt/other && echo busybox"], timeout=30)
        assert r.exit_code == 0 and r.stdout.strip() == "busybox", r


def drop_caches():
    """Every page cache, so that the next reads of image files reach
    strata-fuse (the EROFS mount caches their data in its own pages)."""
    with open("/proc/sys/vm/drop_caches", "w") as f:
        f.write("3\n")


def fuse_pid():
    return int(open(os.path.join(HOME, "run", "fuse.pid")).read())


def strata_up():
    cli = os.path.join(os.environ["STRATA_BIN"], "strata")
    subprocess.run([cli, "up", "--home", HOME], check=True, stdout=subprocess.DEVNULL)


def lines_of(path):
    try:
        with open(path) as f:
            return f.read().splitlines()
    except FileNotFoundError:
        return []


def test_fuse_replaced_renews_mount():
    """kill -9 of strata-fuse under a sandbox that is hashing files of its
    image, then `strata up`: the new strata-fuse takes the held FUSE
    connection over, so the same sandbox goes on reading the right bytes
    (its reads waiting while no daemon ran complete), the image mount is
    the same, and a new sandbox works too."""
    a = Sandbox.create("busybox:latest", backend="container", memory_mb=128, ttl=120)
    try:
        want = a.exec(["md5sum", "/bin/busybox"], timeout=30).stdout.strip()
        assert want.endswith("/bin/busybox"), want
        r = a.exec(["sh", "-c", "(while :; do md5sum /bin/busybox; sleep 0.05; done "
                    ">>/tmp/hashes 2>&1 &) </dev/null >/dev/null 2>&1; echo started"],
                   timeout=30)
        assert r.exit_code == 0, r
        hashes = in_root(a, "tmp/hashes")
        deadline = time.monotonic() + 10
        while len(lines_of(hashes)) < 3 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(lines_of(hashes)) >= 3, lines_of(hashes)
        old_dev = os.stat(IMG_ROOT).st_dev
        os.kill(fuse_pid(), 9)
        time.sleep(0.5)
        drop_caches()  # the loop's next reads wait for the successor
        time.sleep(1)
        before = len(lines_of(hashes))
        strata_up()
        deadline = time.monotonic() + 20
        while len(lines_of(hashes)) < before + 5 and time.monotonic() < deadline:
            time.sleep(0.2)
        got = lines_of(hashes)
        bad = [l for l in got if l != want]
        assert not bad, "reads across the restart: %r" % bad[:5]
        assert len(got) >= before + 5, "the sandbox's loop stopped (%d lines)" % len(got)
        r = a.exec(["md5sum", "/bin/busybox"], timeout=30)
        assert r.exit_code == 0 and r.stdout.strip() == want, r
        assert Sandbox.connect(a.id).info["state"] == "running"
        assert os.stat(IMG_ROOT).st_dev == old_dev  # the same image mount
        time.sleep(2.5)  # a sandboxd tick: nothing to renew
        with Sandbox.create("busybox:latest", backend="container", memory_mb=128) as b:
            r = b.exec(["sh", "-c", "busybox | head -1 && md5sum /bin/busybox"], timeout=30)
            assert r.exit_code == 0 and "BusyBox" in r.stdout and want in r.stdout, r
    finally:
        a.kill()
    wait_unmounted()


def test_fuse_and_holder_killed_fails_sandbox():
    """strata-fuse and the holder of its connection both killed: the mount
    ends, `strata up` mounts anew, and the sandbox on the old image mount
    is marked failed with the reason (never left running with broken
    files); a new sandbox works."""
    a = Sandbox.create("busybox:latest", backend="container", memory_mb=128, ttl=120)
    try:
        assert a.exec(["md5sum", "/bin/busybox"], timeout=30).exit_code == 0
        cli = os.path.join(os.environ["STRATA_BIN"], "strata")
        st = json.loads(subprocess.run([cli, "status", "--home", HOME, "--json"],
                                       stdout=subprocess.PIPE).stdout)
        holder = st["fuse_holder"]["pid"]
        assert holder > 0 and st["fuse_holder"]["state"] == "holding", st["fuse_holder"]
        os.kill(fuse_pid(), 9)
        os.kill(holder, 9)
        time.sleep(0.5)
        strata_up()
        deadline = time.monotonic() + 10
        info = Sandbox.connect(a.id).info
        while info["state"] != "failed" and time.monotonic() < deadline:
            time.sleep(0.2)
            info = Sandbox.connect(a.id).info
        assert info["state"] == "failed", info
        assert "strata-fuse" in info.get("failed_reason", ""), info
        with pytest.raises(strata.StrataError) as ei:
            a.exec(["true"], timeout=30)
        assert "failed" in str(ei.value)
        with Sandbox.create("busybox:latest", backend="container", memory_mb=128) as b:
            r = b.exec(["md5sum", "/bin/busybox"], timeout=30)
            assert r.exit_code == 0, r
    finally:
        a.kill()
    wait_unmounted()


def test_fuse_stopped_sandboxd_serves():
    """strata-fuse stopped (SIGSTOP: every request to the strata mount waits,
    as after a kill -9 while its holder keeps the connection, until `strata
    up`): sandboxd looks the store up on workers only, so health, lists and
    an exec in a running sandbox answer at once, and a create that needs the
    store answers 503 store_unavailable (StoreUnavailable) within
    --store-timeout plus slack. After SIGCONT creates work again, and the
    node reference the abandoned look-up took when the store answered at
    last is given back. (On a sandboxd that looked up on its loop, the
    create froze the whole daemon until SIGCONT.)"""
    a = Sandbox.create("busybox:latest", backend="container", memory_mb=128, ttl=120)
    pid = fuse_pid()
    stopped = False
    try:
        # The sandbox's files are read once: its exec below needs no FUSE.
        assert a.exec(["echo", "warm"], timeout=30).stdout == "warm\n"
        os.kill(pid, signal.SIGSTOP)
        stopped = True
        time.sleep(1.2)  # past sandboxd's 1 s cache of what a name resolved to
        got = {}

        def create():
            t0 = time.monotonic()
            try:
                Sandbox.create("busybox:latest", backend="container", memory_mb=128,
                               timeout=STORE_TIMEOUT_S + 30).kill()
                got["r"] = "created"
            except strata.StrataError as e:
                got["r"] = e
            got["took"] = time.monotonic() - t0

        th = threading.Thread(target=create)
        th.start()
        time.sleep(0.5)  # its look-up waits in the stopped mount now
        t0 = time.monotonic()
        assert strata.health(timeout=5)
        assert a.id in [sb.id for sb in Sandbox.list(timeout=5)]
        assert Sandbox.connect(a.id, timeout=5).info["state"] == "running"
        r = a.exec(["echo", "alive"], timeout=5)
        took = time.monotonic() - t0
        assert r.exit_code == 0 and r.stdout == "alive\n", r
        assert took < 2, "health, list, get and exec took %.2f s" % took
        th.join(STORE_TIMEOUT_S + 40)
        assert isinstance(got.get("r"), strata.StoreUnavailable), got
        assert got["r"].status == 503 and "busybox:latest" in str(got["r"]), str(got["r"])
        assert STORE_TIMEOUT_S - 0.2 <= got["took"] < STORE_TIMEOUT_S + 3, got["took"]
        m = strata.node_metrics(timeout=5)
        assert m["store_calls"] >= 1 and m["store_timeouts_total"] >= 1, m
        os.kill(pid, signal.SIGCONT)
        stopped = False
        with Sandbox.create("busybox:latest", backend="container", memory_mb=128) as b:
            r = b.exec(["md5sum", "/bin/busybox"], timeout=30)
            assert r.exit_code == 0, r
            assert wait_users(2) == 2  # a and b: the late one was given back
        deadline = time.monotonic() + 10
        while strata.node_metrics(timeout=5)["store_calls"] and time.monotonic() < deadline:
            time.sleep(0.1)
        assert strata.node_metrics(timeout=5)["store_calls"] == 0
        assert wait_users(1) == 1, holder_lines()
    finally:
        if stopped:
            os.kill(pid, signal.SIGCONT)
        a.kill()
    wait_unmounted()


def test_restart_readopts():
    sid = os.environ.get("STRATA_SANDBOX_ID")
    if not sid:
        pytest.skip("needs a sandbox made before a sandboxd restart")
    sb = Sandbox.connect(sid)
    r = sb.exec(["cat", "/tmp/keep"], timeout=30)
    assert r.exit_code == 0 and r.stdout == "kept\n", r
    # The re-adopted sandbox kept its reference; that of the sandbox that
    # died while sandboxd was down (test_image_store.sh) was given back.
    assert erofs_mounts_at(IMG_ROOT) == 1 and wait_users(1) == 1
    im = store_image("busybox:latest")
    assert im and im["sandboxes"] == 1, im
    sb.kill()
    wait_unmounted()


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] == "--create":
        s = Sandbox.create(sys.argv[2], backend="container", memory_mb=128, ttl=300)
        s.files.write("/tmp/keep", b"kept\n")
        print(s.id)
        sys.exit(0)
    sys.exit("usage: test_image_store.py --create REF")
