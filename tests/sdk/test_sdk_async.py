"""AsyncSandbox on asyncio streams, against a real strata-sandboxd: one
event loop drives 200 sandboxes at once without a thread per call
(threading.active_count() stays at 1), and the surface of the synchronous
Sandbox works the same: exec, exec_stream as an async iterator (the first
output before the command ends), interactive stdin, files, pause/resume,
metrics, set_timeout, set_labels, typed errors, the context manager."""
import asyncio
import hashlib
import io
import os
import tarfile
import threading
import time

import pytest

import strata
from strata import AsyncSandbox


def test_two_hundred_sandboxes_on_one_loop(sock, need_container):
    # 32 MB each: 200 of the default 512 MB exceed what a small node (the
    # cgroup v2 test VM) admits, and admission is not what this test checks.
    async def one(i, peak):
        async with await AsyncSandbox.create("busybox", backend="container", socket=sock,
                                             memory_mb=32, labels={"async": "200"}) as sb:
            r = await sb.exec(["sh", "-c", "sleep 0.2; echo $0", str(i)])
            peak[0] = max(peak[0], threading.active_count())
            return r.stdout.strip()

    async def main():
        peak = [threading.active_count()]
        t0 = time.monotonic()
        out = await asyncio.gather(*(one(i, peak) for i in range(200)))
        return out, peak[0], time.monotonic() - t0
    assert threading.active_count() == 1
    out, peak, took = asyncio.run(main())
    assert out == [str(i) for i in range(200)]
    assert peak == 1, "AsyncSandbox started %d threads" % (peak - 1)
    assert strata.Sandbox.list(labels={"async": "200"}, socket=sock) == []


def test_async_surface(sock, need_container):
    async def main():
        async with await AsyncSandbox.create("busybox", backend="container", socket=sock,
                                             ttl=60, labels={"k": "v"}) as sb:
            assert sb.labels == {"k": "v"} and sb.state == "running"
            r = await sb.exec("echo out; echo err >&2; exit 3")
            assert (r.exit_code, r.stdout, r.stderr) == (3, "out\n", "err\n")
            with pytest.raises(strata.Timeout) as ei:
                await sb.exec(["sh", "-c", "echo x; sleep 10"], timeout=1)
            assert ei.value.result.stdout == "x\n"
            # streaming: events arrive as they are printed
            t0 = time.monotonic()
            proc = sb.exec_stream(["sh", "-c", "echo a; sleep 1; echo b"])
            first = await proc.__anext__()
            assert first.text == "a\n" and time.monotonic() - t0 < 0.9
            kinds = [ev.kind async for ev in proc]
            assert kinds[-1] == "exit" and proc.result.exit_code == 0
            # interactive stdin, and an async iterable as stdin
            proc = sb.exec_stream(["cat"], stdin=strata.PIPE)
            await proc.write(b"hello ")
            await proc.write("world")
            await proc.close_stdin()
            assert (await proc.wait()).stdout == "hello world"

            async def chunks():
                for i in range(3):
                    yield b"%d" % i
            assert (await sb.exec_stream(["cat"], stdin=chunks()).wait()).stdout == "012"
            # files
            await sb.files.mkdir("/work/d")
            await sb.files.write("/work/d/f", b"data")
            assert await sb.files.read("/work/d/f") == b"data"
            assert [e.name for e in await sb.files.list("/work/d")] == ["f"]
            assert (await sb.files.stat("/work/d/f")).size == 4
            assert await sb.files.exists("/work/d/f")
            await sb.files.remove("/work/d", recursive=True)
            assert not await sb.files.exists("/work/d")
            with pytest.raises(strata.NotFound):
                await sb.files.read("/nope")
            # pause: the sandbox does not run; resume: it does again
            await sb.pause()
            assert sb.state == "paused"
            with pytest.raises(strata.Conflict):
                await sb.exec(["true"])
            await sb.resume()
            assert (await sb.exec(["true"])).ok
            # usage and settings
            m = await sb.metrics()
            assert m.execs >= 5 and m.pids >= 1
            await sb.set_timeout(120)
            assert sb.info["expires_at"] >= time.time() + 100
            await sb.set_labels({"n": "2"})
            assert sb.labels == {"n": "2"}
            again = await AsyncSandbox.connect(sb.id, socket=sock)
            assert again.labels == {"n": "2"}
            assert sb.id in {s.id for s in await AsyncSandbox.list(labels={"n": "2"},
                                                                   socket=sock)}
            victim = sb
        with pytest.raises(strata.Exited):
            await victim.exec(["true"])
        with pytest.raises(strata.NotFound):
            await AsyncSandbox.connect(victim.id, socket=sock)
        with pytest.raises(strata.ImageNotFound):
            await AsyncSandbox.create("no-such-image", socket=sock)
    asyncio.run(main())
    assert threading.active_count() == 1


def test_async_unreachable_and_timeout(tmp_path):
    async def main():
        with pytest.raises(strata.StrataError, match="not reachable"):
            await AsyncSandbox.create("busybox", socket=str(tmp_path / "none.sock"))
        # a server that accepts and never answers
        path = str(tmp_path / "mute.sock")
        server = await asyncio.start_unix_server(lambda r, w: None, path)
        async with server:
            with pytest.raises(strata.Timeout):
                await AsyncSandbox.connect("sb-x", socket=path, timeout=0.3)
    asyncio.run(main())


def test_create_many_async(sock, need_container):
    async def main():
        boxes = await AsyncSandbox.create_many("busybox", 20, backend="container",
                                               socket=sock, parallelism=8)
        try:
            assert len({b.id for b in boxes}) == 20
        finally:
            await asyncio.gather(*(b.kill() for b in boxes))
    asyncio.run(main())


def test_async_background_execs(sock, need_container):
    """A background server started through AsyncSandbox: later execs run
    while it runs, execs() lists it, exec_connect attaches to its output
    (what it printed while nobody watched), signal TERM ends it with
    signal 15, and the errors are typed; no thread is started."""
    async def main():
        async with await AsyncSandbox.create("busybox", backend="container", socket=sock,
                                             memory_mb=32) as sb:
            t0 = time.monotonic()
            srv = await sb.exec(["sh", "-c", "echo ready; while :; do sleep 1; done"],
                                background=True, timeout=120)
            assert isinstance(srv, strata.AsyncBackgroundExec)
            assert time.monotonic() - t0 < 1.0 and srv.pid and srv.exec_id
            outs = await asyncio.gather(*(sb.exec(["echo", str(i)], timeout=5)
                                          for i in range(4)))
            assert [r.stdout for r in outs] == ["%d\n" % i for i in range(4)]
            listed = {e["exec_id"]: e for e in await sb.execs()}
            assert listed[srv.exec_id]["running"] and listed[srv.exec_id]["background"]
            assert listed[srv.exec_id]["pid"] == srv.pid
            async with srv.connect(timeout=10) as proc:
                assert (await proc.__anext__()).text == "ready\n"
                assert (proc.exec_id, proc.pid) == (srv.exec_id, srv.pid)
            # detached: it runs on
            assert {e["exec_id"]: e["running"] for e in await sb.execs()}[srv.exec_id]
            with pytest.raises(strata.InvalidRequest):
                await srv.signal("NOSUCHSIG")
            await srv.signal("TERM")
            r = await srv.wait(timeout=10)
            assert r.signal == 15 and r.exit_code is None, r
            assert srv.exec_id not in {e["exec_id"] for e in await sb.execs()}
            with pytest.raises(strata.NotFound):
                await srv.kill()  # collected: gone
            with pytest.raises(strata.NotFound):
                await sb.exec_signal("999", "TERM")
            with pytest.raises(strata.NotFound):
                await sb.exec_connect("999").start()
            # an exit collected later, with its output; kill by id
            job = await sb.exec("echo out; echo err >&2; exit 4", background=True)
            sleeper = await sb.exec(["sleep", "30"], background=True)
            await sb.exec_kill(sleeper.exec_id)
            assert (await sleeper.wait(timeout=10)).signal == 9
            r = await job.wait(timeout=10)
            assert (r.exit_code, r.stdout, r.stderr) == (4, "out\n", "err\n")
            with pytest.raises(ValueError):
                await sb.exec(["cat"], stdin=strata.PIPE, background=True)
            # a second client on an ordinary exec: sandboxd either refuses
            # (Conflict: it belongs to its stream) or follows it live
            proc = sb.exec_stream(["sh", "-c", "echo a; sleep 1; echo b"])
            assert (await proc.__anext__()).text == "a\n" and proc.pid
            follower = sb.exec_connect(proc.exec_id, timeout=10)
            try:
                await follower
            except strata.Conflict:
                follower = None
            if follower is not None:
                r = await follower.wait()
                assert r.exit_code == 0 and r.stdout.endswith("b\n"), r
            assert (await proc.wait()).stdout == "b\n"
            assert threading.active_count() == 1  # (asyncio.run joins worker threads)
            victim = sb
        with pytest.raises(strata.Exited):
            await victim.exec(["true"], background=True)
        with pytest.raises(strata.Exited):
            await victim.execs()
    asyncio.run(main())
    assert threading.active_count() == 1


def test_async_files_streamed(sock, need_container, tmp_path):
    """The file calls of the synchronous Files, streamed on the loop: a
    write from a file object (chunked) and from bytes, append, user=,
    parents=False, read_to, upload_file/download_file keeping the mode, and
    a tree both ways as streamed tars (a file of more than one piece, a
    symlink, a hard link, a name over tar's 100 bytes, modes and mtimes);
    typed errors; no thread."""
    big = os.urandom(3 * (1 << 20) + 5)  # several pieces of 1 MiB
    src = tmp_path / "tree"
    long_dir = src / ("d" * 120)
    long_dir.mkdir(parents=True)
    (long_dir / "big.bin").write_bytes(big)
    (src / "run.sh").write_bytes(b"#!/bin/sh\necho run\n")
    os.chmod(src / "run.sh", 0o750)
    os.utime(src / "run.sh", (1_600_000_000, 1_600_000_000))
    os.symlink("run.sh", src / "link")
    os.link(src / "run.sh", src / "hard.sh")

    async def main():
        async with await AsyncSandbox.create("busybox", backend="container", socket=sock,
                                             memory_mb=64) as sb:
            fs = sb.files
            assert await fs.write("/work/a/b/big", io.BytesIO(big)) == len(big)  # chunked
            assert await fs.read("/work/a/b/big") == big
            assert await fs.write("/work/log", "one\n") == 4
            await fs.write("/work/log", b"two\n", append=True)
            assert await fs.read_text("/work/log") == "one\ntwo\n"
            await fs.write("/work/app/f", b"mine", mode=0o600, user="app")
            r = await sb.exec("/bin/busybox stat -c '%u %a' /work/app/f /work/app")
            assert r.stdout == "1000 600\n1000 755\n", r
            with pytest.raises(strata.NotFound):
                await fs.write("/work/no/such/f", b"x", parents=False)
            with pytest.raises(strata.InvalidRequest):
                await fs.write("/work/z", b"x", user="nosuchuser")

            async def many():  # more than sandboxd reads before it refuses
                for _ in range(64):
                    yield bytes(1 << 20)
            for body in (bytes(64 << 20), many()):  # Content-Length, chunked
                with pytest.raises(strata.InvalidRequest, match="user"):
                    await fs.write("/work/z", body, user="nosuchuser")
            out = io.BytesIO()
            assert await fs.read_to("/work/a/b/big", out) == len(big)
            assert out.getvalue() == big
            with pytest.raises(strata.NotFound):
                await fs.read_to("/work/absent", io.BytesIO())
            # one file each way (a real file: its length known up front)
            one = tmp_path / "one.sh"
            one.write_bytes(big[:1000])
            os.chmod(one, 0o700)
            assert await fs.upload_file(str(one), "/work/one.sh") == 1000
            assert (await fs.stat("/work/one.sh")).mode & 0o777 == 0o700
            assert await fs.download_file("/work/one.sh", str(tmp_path / "got")) == 1000
            assert (tmp_path / "got").read_bytes() == big[:1000]
            assert not os.path.exists(str(tmp_path / "got") + ".strata-part")
            assert await fs.upload(str(one), "/work/up1") == 1  # upload/download of a file
            assert await fs.download("/work/up1", str(tmp_path / "down1")) == 1
            with pytest.raises(FileNotFoundError):
                await fs.upload(str(tmp_path / "nope"), "/work/nope")
            # a tree, up and back
            assert await fs.upload(str(src), "/work/tree") == 2  # big.bin, run.sh
            r = await sb.exec("cd /work/tree && /bin/busybox stat -c '%a %Y %h %i' run.sh "
                              "hard.sh && /bin/busybox readlink link && "
                              "/bin/busybox md5sum d*/big.bin")
            run, hard, link, md5 = r.stdout.splitlines()
            assert run.split()[:3] == ["750", "1600000000", "2"] and run == hard, r
            assert link == "run.sh" and md5.split()[0] == hashlib.md5(big).hexdigest()
            back = tmp_path / "back"
            assert await fs.download("/work/tree", str(back)) == 2
            assert (back / ("d" * 120) / "big.bin").read_bytes() == big
            assert os.readlink(back / "link") == "run.sh"
            st = os.stat(back / "run.sh")
            assert st.st_ino == os.stat(back / "hard.sh").st_ino
            assert (st.st_mode & 0o777, st.st_mtime) == (0o750, 1_600_000_000)
            assert threading.active_count() == 1  # (asyncio.run joins worker threads)
    asyncio.run(main())
    assert threading.active_count() == 1


def test_async_disk_full_is_typed(sock, need_container):
    """An upload sandboxd refuses before it took the body (413, size known)
    or stops when the disk filled (507, chunked): DiskFull either way, its
    answer read after the early close."""
    if not strata.capabilities("container", socket=sock).get("limits_disk"):
        pytest.skip("disk_mb is no disk limit on this node (no quota for the layers)")
    MiB = 1 << 20

    async def chunks():
        for _ in range(16):
            yield b"y" * MiB

    async def main():
        async with await AsyncSandbox.create("busybox", backend="container", socket=sock,
                                             memory_mb=32, disk_mb=8) as sb:
            with pytest.raises(strata.DiskFull) as e:
                await sb.files.write("/tmp/big", b"x" * (9 * MiB))
            assert e.value.status == 413
            with pytest.raises(strata.DiskFull) as e:
                await sb.files.write("/tmp/big", chunks())  # an async iterable: chunked
            assert e.value.status == 507
            await sb.files.write("/tmp/small", b"fits")
            assert await sb.files.read("/tmp/small") == b"fits"
    asyncio.run(main())



def test_tar_stream_both_ways_without_a_daemon(tmp_path):
    """The asyncio tar code against tarfile: what _tar_pieces builds on the
    loop reads back with tarfile (the sync upload's format), and
    _TarReader unpacks tarfile's GNU (long names as 'L' records: what
    sandboxd sends) and pax archives, fed in pieces that cut headers."""
    from strata import aio
    src = tmp_path / "src"
    (src / ("n" * 150)).mkdir(parents=True)
    (src / ("n" * 150) / "f").write_bytes(b"z" * 70000)
    os.symlink("n" * 150 + "/f", src / ("l" * 120))
    os.link(src / ("n" * 150) / "f", src / "hard")

    async def built():
        return b"".join([p async for p in aio._tar_pieces(str(src))])
    data = asyncio.run(built())
    assert len(data) % tarfile.RECORDSIZE == 0
    with tarfile.open(fileobj=io.BytesIO(data), mode="r|") as tf:
        got = {m.name: (m.type, m.linkname, m.size) for m in tf}
    assert got == {"hard": (tarfile.REGTYPE, "", 70000),
                   "l" * 120: (tarfile.SYMTYPE, "n" * 150 + "/f", 0),
                   "n" * 150: (tarfile.DIRTYPE, "", 0),
                   "n" * 150 + "/f": (tarfile.LNKTYPE, "hard", 0)}

    class Pieces:  # a Response whose body comes 1000 bytes at a time
        def __init__(self, raw):
            self.raw, self.at = raw, 0

        async def read_piece(self):
            self.at += 1000
            return self.raw[self.at - 1000:self.at]

    async def unpack(raw, out):
        return await aio._unpack(aio._TarReader(Pieces(raw), 5), out)
    for fmt in (tarfile.GNU_FORMAT, tarfile.PAX_FORMAT):
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w", format=fmt) as tf:
            tf.add(str(src), arcname=".")
        out = tmp_path / ("out%d" % fmt)
        assert asyncio.run(unpack(buf.getvalue(), str(out))) == 1
        assert (out / ("n" * 150) / "f").read_bytes() == b"z" * 70000
        assert os.readlink(out / ("l" * 120)) == "n" * 150 + "/f"
        assert os.stat(out / "hard").st_ino == os.stat(out / ("n" * 150) / "f").st_ino
    with pytest.raises(strata.StrataError, match="ended inside"):
        asyncio.run(unpack(data[:3000], str(tmp_path / "cut")))


def test_early_answer_to_an_upload_keeps_its_error(tmp_path):
    """A server that answers an upload after its head and closes with the
    body unread (as sandboxd refuses one): the SDK raises that answer's
    typed error, not the reset of the close, for a body of known length
    and a chunked one."""
    path = str(tmp_path / "early.sock")
    body = b'{"error":{"code":"disk_full","message":"over the 8 MiB disk"}}'

    async def refuse(reader, writer):
        while (await reader.readline()) not in (b"\r\n", b""):
            pass
        writer.write(b"HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\n"
                     b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body))
        await writer.drain()
        writer.close()

    async def chunks():
        for _ in range(64):
            yield bytes(1 << 20)

    async def main():
        server = await asyncio.start_unix_server(refuse, path)
        async with server:
            sb = AsyncSandbox({"id": "sb-x"}, strata._http.Client(socket=path))
            for data in (bytes(32 << 20), chunks()):
                with pytest.raises(strata.DiskFull, match="8 MiB") as e:
                    await sb.files.write("/f", data, timeout=10)
                assert e.value.status == 413
    asyncio.run(main())
