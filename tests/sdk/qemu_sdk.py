"""SDK tests of the qemu backend (a VM per sandbox, QEMU under TCG here):
create, exec (output, exit code, stderr), a streamed exec, interactive
stdin, timeouts and output caps, files and tar bodies, pause/resume over
QMP, TTL, kill -9 of the VMM and a guest kernel panic (the sandbox turns
failed with the reason), VMs adopted again by a restarted sandboxd (clean
stop, kill -9, paused; a VMM gone meanwhile: failed with the reason), warm
starts from a snapshot (a corrupted one
replaced by a boot; sharing one over the strata mount between two sandboxd
is sandboxd_image_store's: it needs a cluster and a store image). Run on its own (ctest sdk_python_qemu): every VM boots for ~10 s
under TCG, so few sandboxes serve all the tests. Skips with the reason
where the backend is unavailable (no QEMU, no guest in build/guest)."""
import os
import signal
import time

import pytest

import strata
from strata import Sandbox
from sandboxd_harness import start_counter


@pytest.fixture(scope="module")
def need_qemu(daemon):
    import shutil
    caps = strata.capabilities("qemu", socket=daemon.socket)
    guest = os.path.join(os.environ.get("STRATA_BUILD", "build"), "guest", "initrd.img")
    if shutil.which("qemu-system-x86_64") and os.path.exists(guest):
        # what the backend needs is here: it must say available
        assert caps["available"], caps.get("reason")
    if not caps["available"]:
        pytest.skip("qemu backend unavailable: %s" % caps.get("reason"))
    return caps


def drop_vm_state(d):
    """Removes what d's qemu backend keeps in its state dir (a tmpfs, kept
    after the daemon ends: ~170 MiB of snapshots and image conversions)."""
    import shutil
    state = os.path.realpath(os.path.join(d.home, "sandboxd"))
    for sub in ("vm/snapshots", "vm/images"):
        shutil.rmtree(os.path.join(state, sub), ignore_errors=True)


@pytest.fixture(scope="module", autouse=True)
def clean_state(daemon):
    yield
    drop_vm_state(daemon)  # no VM runs by now: the module's tests are done


@pytest.fixture(scope="module")
def vm(daemon, need_qemu):
    t0 = time.time()
    with Sandbox.create("busybox", backend="qemu", socket=daemon.socket, memory_mb=256,
                        cpu=1, disk_mb=128, timeout=180) as sb:
        sb.boot_s = time.time() - t0
        yield sb


def vmm_pid(sandbox_id):
    """The VMM of a sandbox: the process whose console (fd 1) is its log."""
    want = "/vm/%s/console.log" % sandbox_id
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.readlink("/proc/%s/fd/1" % pid).endswith(want):
                return int(pid)
        except OSError:
            pass
    return None


def test_capabilities(need_qemu):
    c = need_qemu
    assert c["exec"] and c["files"] and c["pause"] and c["exec_stdin_stream"]
    assert not c["network_host"] and c["persistent"]


def test_exec(vm):
    print("qemu sandbox created in %.1f s" % vm.boot_s)
    r = vm.exec(["sh", "-c", "echo hi; echo e >&2; exit 5"])
    assert (r.exit_code, r.stdout, r.stderr) == (5, "hi\n", "e\n")
    assert vm.exec(["cat"], stdin="abc").stdout == "abc"
    assert vm.exec("hostname").stdout == "sandbox\n"
    # its own kernel: the guest's, not the host's
    assert vm.exec("uname -r").stdout.strip() != os.uname().release
    r = vm.exec(["nosuchcmd"])
    assert r.exit_code == 127


def test_stream(vm):
    it = vm.exec_stream("echo one; sleep 1; echo two", timeout=60)
    chunks = [c.data for c in it if c.data]
    assert b"".join(chunks) == b"one\ntwo\n"


def test_stdin_stream(vm):
    proc = vm.exec_stream(["cat"], stdin=strata.PIPE, timeout=60)
    proc.write(b"interactive\n")
    proc.close_stdin()
    out = b"".join(c.data for c in proc if c.data)
    assert out == b"interactive\n"


def test_output_cap_and_timeout(vm):
    with pytest.raises(strata.Timeout):
        vm.exec(["sh", "-c", "sleep 30"], timeout=2)
    r = vm.exec(["sh", "-c", "head -c 100000 /dev/zero"], output_cap=1000)
    assert r.truncated and len(r.stdout_raw) == 1000


def test_files(vm, tmp_path):
    vm.files.mkdir("/work/a", parents=True)
    vm.files.write("/work/a/f.txt", b"hello\x00world")
    assert vm.files.read("/work/a/f.txt") == b"hello\x00world"
    assert vm.files.stat("/work/a/f.txt").size == 11
    assert [e.name for e in vm.files.list("/work/a")] == ["f.txt"]
    assert vm.exec("cat /work/a/f.txt").stdout_raw == b"hello\x00world"
    # a tree as one tar body (streamed, chunked uploads are the container
    # backend's: the qemu backend says so up front)
    import io
    import tarfile
    blob = os.urandom(3000)
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tf:
        info = tarfile.TarInfo("sub/b.bin")
        info.size = len(blob)
        tf.addfile(info, io.BytesIO(blob))
    vm.files.upload_tar(buf.getvalue(), "/work/up")
    assert vm.exec("wc -c < /work/up/sub/b.bin").stdout.strip() == "3000"
    with tarfile.open(fileobj=io.BytesIO(vm.files.download_tar("/work/up"))) as tf:
        assert tf.extractfile("sub/b.bin").read() == blob
    src = tmp_path / "src"
    src.mkdir()
    (src / "a").write_bytes(b"A")
    with pytest.raises(strata.Unsupported):
        vm.files.upload(str(src), "/work/up2")
    vm.files.remove("/work", recursive=True)
    assert not vm.files.exists("/work")


def test_tar_every_type(vm):
    """A tar body made and unpacked by the guest's agent: directories,
    files of any size, hard links, symlinks, FIFOs, devices, long names,
    owners, modes, mtimes and xattrs survive the round trip (uploaded,
    checked inside, downloaded again)."""
    import io
    import tarfile
    big = os.urandom(2500000)  # over one 1 MiB chunk of the protocol
    long = "l" * 120
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tf:
        def add(name, type_, data=b"", **kw):
            i = tarfile.TarInfo(name)
            i.type = type_
            i.size = len(data)
            i.mtime = kw.pop("mtime", 1600000000)
            for k, v in kw.items():
                setattr(i, k, v)
            tf.addfile(i, io.BytesIO(data) if data else None)
        add("d", tarfile.DIRTYPE, mode=0o750, mtime=1500000000)
        add("d/f", tarfile.REGTYPE, b"hello", mode=0o640, uid=1000, gid=1001,
            pax_headers={"SCHILY.xattr.user.k": "v1"})
        add("d/hard", tarfile.LNKTYPE, linkname="d/f")
        add("d/sym", tarfile.SYMTYPE, linkname="f", mode=0o777)
        add("d/fifo", tarfile.FIFOTYPE, mode=0o600)
        add("d/null", tarfile.CHRTYPE, mode=0o666, devmajor=1, devminor=3)
        add("d/big", tarfile.REGTYPE, big, mode=0o600)
        add("d/" + long, tarfile.REGTYPE, b"long", mode=0o644)
    vm.files.upload_tar(buf.getvalue(), "/work/t")
    out = vm.exec("cd /work/t/d && stat -c '%n %F %u:%g %a %h %Y' f hard sym fifo null big && "
                  "stat -c '%t,%T' null && readlink sym && cat hard && echo && wc -c < big").stdout
    lines = out.splitlines()
    assert lines[0] == "f regular file 1000:1001 640 2 1600000000", out
    assert lines[1].startswith("hard regular file 1000:1001 640 2"), out
    assert lines[2].startswith("sym symbolic link"), out
    assert lines[3].startswith("fifo fifo 0:0 600"), out
    assert lines[4].startswith("null character special file 0:0 666"), out
    assert lines[6:] == ["1,3", "f", "hello", "2500000"], out
    assert vm.exec("stat -c %Y /work/t/d").stdout.strip() == "1500000000"
    got = tarfile.open(fileobj=io.BytesIO(vm.files.download_tar("/work/t")))
    m = {x.name.rstrip("/"): x for x in got.getmembers()}
    assert m["d"].isdir() and m["d"].mode == 0o750 and m["d"].mtime == 1500000000
    # the inode's first name in the walk (readdir's order) is the file, the
    # other a link to it
    f, hard = (m["d/f"], m["d/hard"]) if m["d/hard"].islnk() else (m["d/hard"], m["d/f"])
    assert f.isreg() and (f.uid, f.gid, f.mode, f.mtime) == (1000, 1001, 0o640, 1600000000)
    assert f.pax_headers.get("SCHILY.xattr.user.k") == "v1", f.pax_headers
    assert got.extractfile(f).read() == b"hello"
    assert hard.islnk() and hard.linkname == f.name
    assert m["d/sym"].issym() and m["d/sym"].linkname == "f"
    assert m["d/fifo"].isfifo()
    assert m["d/null"].ischr() and (m["d/null"].devmajor, m["d/null"].devminor) == (1, 3)
    assert got.extractfile(m["d/big"]).read() == big
    assert got.extractfile(m["d/" + long]).read() == b"long"
    assert not [x for x in vm.exec("ls -a /").stdout.split() if x.startswith(".strata-tar")]
    # a name leaving the destination anywhere: refused before anything is written
    bad = io.BytesIO()
    with tarfile.open(fileobj=bad, mode="w") as tf:
        for name in ("first", "../escape"):
            i = tarfile.TarInfo(name)
            i.size = 1
            tf.addfile(i, io.BytesIO(b"x"))
    with pytest.raises(strata.StrataError):
        vm.files.upload_tar(bad.getvalue(), "/work/bad")
    assert not vm.files.exists("/work/bad/first") and not vm.files.exists("/work/escape")
    vm.files.remove("/work", recursive=True)


def test_pause_resume(vm):
    count = start_counter(vm)
    deadline = time.time() + 20
    while count() < 3 and time.time() < deadline:
        time.sleep(0.1)
    vm.pause()
    assert vm.state == "paused"
    with pytest.raises(strata.Conflict):
        vm.exec("true")
    vm.resume()
    before = count()
    time.sleep(2)
    assert count() > before, "the counter did not go on after resume"


def test_ttl(daemon, need_qemu):
    sb = Sandbox.create("busybox", backend="qemu", socket=daemon.socket, memory_mb=128,
                        ttl=20, timeout=180)
    assert sb.exec("echo up").stdout == "up\n"
    deadline = time.time() + 40
    while time.time() < deadline:
        try:
            Sandbox.connect(sb.id, socket=daemon.socket)
        except strata.NotFound:
            break
        time.sleep(0.5)
    else:
        pytest.fail("the sandbox outlived its TTL")
    assert vmm_pid(sb.id) is None


def test_vmm_killed(daemon, need_qemu):
    with Sandbox.create("busybox", backend="qemu", socket=daemon.socket, memory_mb=128,
                        timeout=180) as sb:
        pid = vmm_pid(sb.id)
        assert pid, "no VMM found for %s" % sb.id
        os.kill(pid, signal.SIGKILL)
        deadline = time.time() + 15
        while time.time() < deadline and sb.refresh()["state"] != "failed":
            time.sleep(0.2)
        assert sb.state == "failed"
        reason = sb.info.get("failed_reason", "")
        assert "killed by signal 9" in reason, reason
        with pytest.raises(strata.StrataError):
            sb.exec("true")


def test_guest_panic(daemon, need_qemu):
    """A guest kernel panic (sysrq c) ends the VMM: the sandbox is failed."""
    with Sandbox.create("busybox", backend="qemu", socket=daemon.socket, memory_mb=128,
                        timeout=180) as sb:
        try:  # the exec's stream ends with the guest, one way or another
            sb.exec(["sh", "-c", "echo c > /proc/sysrq-trigger; sleep 30"], timeout=60)
        except strata.StrataError:
            pass
        deadline = time.time() + 15
        while time.time() < deadline and sb.refresh()["state"] != "failed":
            time.sleep(0.2)
        assert sb.state == "failed"
        assert "kernel panic" in sb.info.get("failed_reason", "")


def test_warm_start(daemon, vm):
    """The first VM of a shape was saved after its boot: a second create of
    that shape restores it (far quicker), with a disk of its own as it was
    at the save (nothing the first one wrote since)."""
    vm.files.write("/written-after-the-save", b"x")
    t0 = time.time()
    with Sandbox.create("busybox", backend="qemu", socket=daemon.socket, memory_mb=256,
                        cpu=1, disk_mb=128, timeout=180) as sb:
        warm_s = time.time() - t0
        print("qemu sandbox: cold create %.2f s, warm create %.2f s" % (vm.boot_s, warm_s))
        assert sb.exec("cat /etc/passwd").stdout.startswith("root:")
        assert not sb.files.exists("/written-after-the-save")
        sb.files.write("/mine", b"y")
        assert not vm.files.exists("/mine")
    assert warm_s < 0.5 * vm.boot_s, (warm_s, vm.boot_s)


def test_corrupted_snapshot(daemon, vm):
    """A byte flipped in the saved state of test_warm_start's shape: the
    next create says why, removes the snapshot, boots (so still succeeds)
    and saves it anew, which the create after restores."""
    import re
    m = re.search(r"sandbox %s: saved its shape's snapshot (\S+)" % vm.id, daemon.log_text())
    assert m, "the first VM of the shape was not saved"
    snap = m.group(1)
    assert sorted(os.listdir(snap)) == ["disk", "manifest", "state"]
    state = os.path.join(snap, "state")
    with open(state, "r+b") as f:
        f.seek(os.path.getsize(state) // 2)
        c = f.read(1)
        f.seek(-1, os.SEEK_CUR)
        f.write(bytes([c[0] ^ 0x40]))

    def create():
        t0 = time.time()
        with Sandbox.create("busybox", backend="qemu", socket=daemon.socket, memory_mb=256,
                            cpu=1, disk_mb=128, timeout=180) as sb:
            s = time.time() - t0
            assert sb.exec("cat /etc/passwd").stdout.startswith("root:")
        return s, sb.id
    cold, sid = create()
    log = daemon.log_text()
    line = next((x for x in log.splitlines() if "sandbox %s: the snapshot" % sid in x), "")
    assert "state's checksum" in line and "removed; booting" in line, log[-3000:]
    assert "sandbox %s: saved its shape's snapshot %s" % (sid, snap) in log
    warm, sid = create()
    print("after the corruption: cold create %.2f s, then warm %.2f s" % (cold, warm))
    assert "sandbox %s: warm start from %s" % (sid, snap) in daemon.log_text()
    assert warm < 0.5 * cold, (warm, cold)


def kill9_restart(daemon):
    daemon.proc.kill()
    daemon.proc.wait()
    daemon.proc = None
    daemon.start()


def test_restart_adopts_vms(daemon, vm):
    """sandboxd stops (cleanly, then kill -9, then with the VM paused): the
    VMs run on and the next sandboxd adopts them, the same VMM, the guest's
    files and processes kept, exec working. A VMM that died while sandboxd
    was away leaves its sandbox failed with the reason, not gone."""
    shape = dict(backend="qemu", socket=daemon.socket, memory_mb=256, cpu=1, disk_mb=128,
                 timeout=180)
    sb = Sandbox.create("busybox", **shape)  # restored from vm's shape: quick
    other = Sandbox.create("busybox", **shape)
    try:
        sb.files.write("/tmp/state", b"kept")
        sb.exec("sleep 1000 > /dev/null 2>&1 &")
        pid = vmm_pid(sb.id)
        assert pid
        t0 = time.time()
        daemon.restart()  # SIGTERM: a clean stop
        s = Sandbox.connect(sb.id, socket=daemon.socket)
        assert s.state == "running", s.info.get("failed_reason")
        assert vmm_pid(sb.id) == pid
        assert s.files.read("/tmp/state") == b"kept"
        assert "sleep 1000" in s.exec("ps").stdout
        print("clean restart, first exec after it: %.2f s" % (time.time() - t0))
        kill9_restart(daemon)
        s = Sandbox.connect(sb.id, socket=daemon.socket)
        assert s.exec("echo again").stdout == "again\n" and vmm_pid(sb.id) == pid
        r = s.exec(["sh", "-c", "cat; echo e >&2; exit 3"], stdin=b"in")
        assert (r.stdout, r.stderr, r.exit_code) == ("in", "e\n", 3)
        # an exec that runs through a restart is followed again: the output
        # the guest's agent held while no sandboxd was there, its exit
        job = s.exec("echo before; sleep 1; echo during; sleep 1; echo after; exit 7",
                     background=True)
        time.sleep(0.5)
        kill9_restart(daemon)
        s = Sandbox.connect(sb.id, socket=daemon.socket)
        e = [x for x in s.execs() if x["exec_id"] == job.exec_id]
        assert e, s.execs()
        r = s.exec_connect(job.exec_id).wait()
        # (what the old sandboxd took before it died is gone with it)
        assert r.exit_code == 7 and r.stdout.endswith("during\nafter\n"), r
        s.pause()
        kill9_restart(daemon)
        s = Sandbox.connect(sb.id, socket=daemon.socket)
        assert s.state == "paused"
        s.resume()
        assert s.exec("cat /tmp/state").stdout == "kept"
        # the other VM's VMM dies while no sandboxd is there
        opid = vmm_pid(other.id)
        assert Sandbox.connect(other.id, socket=daemon.socket).exec("true").exit_code == 0
        daemon.stop(cleanup=False)
        os.kill(opid, signal.SIGKILL)
        daemon.start()
        o = Sandbox.connect(other.id, socket=daemon.socket)
        assert o.state == "failed"
        reason = o.info.get("failed_reason", "")
        assert "could not be re-adopted" in reason and "is gone" in reason, reason
        daemon.restart()  # and it stays failed, with its reason
        o = Sandbox.connect(other.id, socket=daemon.socket)
        assert o.state == "failed" and o.info.get("failed_reason") == reason
        with pytest.raises(strata.StrataError):
            o.exec("true")
    finally:
        for x in (sb, other):
            try:
                Sandbox.connect(x.id, socket=daemon.socket).kill()
            except strata.StrataError:
                pass
    assert vmm_pid(sb.id) is None
