"""The asyncio SDK: :class:`AsyncSandbox`, with the methods of
:class:`~strata.Sandbox` as coroutines, on asyncio streams
(:mod:`strata._aio_http`): no thread per call, so one event loop drives a
thousand sandboxes and their exec streams at once.

    async with await AsyncSandbox.create("busybox") as sb:
        r = await sb.exec(["echo", "hi"])
        async for ev in sb.exec_stream("sleep 1; echo done"):
            ...

Requests are built and answers read as in the synchronous SDK (the same
bodies, results and exceptions: :mod:`strata.sandbox`, :mod:`strata._http`).
Background execs, the execs of a sandbox (list, attach, signal, kill), and
files of any size both ways, trees included, go on the loop too: a tree
upload builds its tar a member at a time as it is sent, a tree download
unpacks the tar as it arrives. The local files of a transfer are read and
written on the loop's thread, a piece (1 MiB) at a time.
"""
import asyncio
import contextlib
import io
import json
import os
import posixpath
import tarfile

from . import _aio_http as http
from . import errors
from ._http import Client, DEFAULT_TIMEOUT
from .sandbox import (EXEC_GRACE, PIPE, STDIN_CHUNK, FileInfo, Metrics, Sandbox, _Extractor,
                      _Output, _StdinBackoff, _background_body, _capabilities_of, _chunks_of,
                      _create_body, _exec_body, _labels_body, _list_query,
                      _stream_error, _stream_event, _stream_line, _tar_entries, _timeout_body,
                      _write_args)


class AsyncExecProcess:
    """A running command of :meth:`AsyncSandbox.exec_stream`, the asyncio
    face of :class:`~strata.ExecProcess`. The exec starts at the first use
    (``await proc.start()``, ``async with proc``, ``write``, iteration)::

        proc = sb.exec_stream(["cat"], stdin=strata.PIPE)
        await proc.write(b"hi\\n")
        await proc.close_stdin()
        async for ev in proc:
            ...

    ``stdin`` may also be an iterable, a file or an async iterable of
    chunks: a task feeds it, then closes stdin. ``await proc`` starts it
    too and gives the process. One of :meth:`AsyncSandbox.exec_connect`
    attaches to an exec that runs already: closing it detaches."""

    def __init__(self, sandbox, body, stdin, timeout, raise_timeout=True, _attach=None):
        self._sb = sandbox
        self._body = body
        self._stdin = stdin
        self._timeout = timeout
        self._raise_timeout = raise_timeout
        self._wait = (timeout or 60.0) + EXEC_GRACE
        self._stdin_open = bool(body and body.get("stdin_stream"))
        self._attach = _attach
        self._resp = None
        self._starting = None
        self._lock = None  # one stdin chunk in flight; made on the loop
        self._feeder = None
        self._done = False
        self.exec_id = _attach
        #: The command's pid in the sandbox, once its start event was read.
        self.pid = None
        #: The :class:`ExecResult` once the exit was read.
        self.result = None
        #: An exception raised by the iterable given as stdin (it was closed).
        self.stdin_error = None

    def __await__(self):
        return self.start().__await__()

    async def start(self):
        """Starts the exec (once); returns self."""
        if self._starting is None:
            self._starting = asyncio.ensure_future(self._start())
        await self._starting
        return self

    async def _start(self):
        self._lock = asyncio.Lock()
        try:
            if self._attach is not None:  # GET .../execs/{n}/stream: closing it detaches
                self._resp = await http.stream(self._sb._client, "GET", self._sb._path(
                    "execs/%s/stream" % self._attach), timeout=self._wait)
            else:
                self._resp = await http.stream(self._sb._client, "POST", self._sb._path("exec"),
                                               body=self._body, timeout=self._wait)
        except errors.NotFound as e:
            if self._sb._killed:
                raise errors.Exited("sandbox %s was killed" % self._sb.id) from e
            raise
        if not self._stdin_open:
            return
        ev = await self._read()
        if ev.get("type") != "start":
            self.close()
            raise errors.StrataError("exec stream began without its start event: %r" % ev)
        self.exec_id, self.pid = ev["exec_id"], ev.get("pid")
        if self._stdin is not PIPE and self._stdin is not None:
            self._feeder = asyncio.ensure_future(self._feed())

    # -- output --------------------------------------------------------------
    async def _read(self):
        try:
            line = await asyncio.wait_for(self._resp.readline(), self._wait)
        except (asyncio.TimeoutError, OSError, ValueError, asyncio.IncompleteReadError) as e:
            raise _stream_error(self, e, isinstance(e, asyncio.TimeoutError)) from e
        return _stream_line(self, line)

    def __aiter__(self):
        return self

    async def __anext__(self):
        await self.start()
        while not self._done:
            ev = _stream_event(self, await self._read())
            if ev is not None:
                return ev
        raise StopAsyncIteration

    async def wait(self):
        """Reads the events left and returns the :class:`ExecResult`; its
        stdout/stderr hold the output read here (not what was iterated
        before)."""
        out = _Output()
        async for ev in self:
            out.add(ev)
        return out.into(self.result)

    # -- input ---------------------------------------------------------------
    async def write(self, data):
        """Sends bytes (or str, as UTF-8) to the command's stdin; returns
        the number of bytes written (see :meth:`ExecProcess.write`)."""
        await self.start()
        data = bytes(data.encode() if isinstance(data, str) else data)
        async with self._lock:
            if not self._stdin_open:
                raise errors.StdinClosed("exec %s: stdin is closed%s" % (
                    self.exec_id, "" if self.exec_id else " (not opened with strata.PIPE)"),
                    code="stdin_closed")
            for off in range(0, len(data), STDIN_CHUNK):
                await self._send(data[off:off + STDIN_CHUNK], False)
        return len(data)

    async def close_stdin(self):
        """Ends the command's input (EOF); a no-op once closed or finished."""
        await self.start()
        async with self._lock:
            if not self._stdin_open:
                return
            try:
                await self._send(b"", True)
            except errors.StdinClosed:
                pass
            self._stdin_open = False

    async def _send(self, chunk, eof):
        path = self._sb._path("execs/%s/stdin" % self.exec_id)
        loop = asyncio.get_running_loop()
        backoff = _StdinBackoff(self, loop.time())
        while True:
            try:
                await http.call(self._sb._client, "POST", path, body=chunk,
                                query={"eof": "1"} if eof else None,
                                content_type="application/octet-stream", timeout=self._wait)
                return
            except errors.StrataError as e:
                await asyncio.sleep(backoff.after(e, loop.time()))

    async def _feed(self):
        """Writes what stdin= gave, then closes stdin (not when the command
        closed it first: like a broken pipe)."""
        try:
            async for c in _aiter_chunks(self._stdin):
                if c:
                    await self.write(c)
        except errors.StdinClosed:
            return
        except Exception as e:  # noqa: BLE001 -- kept for the caller
            self.stdin_error = e
        with contextlib.suppress(errors.StrataError):
            await self.close_stdin()

    # -- lifetime ------------------------------------------------------------
    def close(self):
        """Closes the stream; a command still running is killed (one
        attached to with exec_connect runs on). (Not a coroutine, but may
        be awaited: ``await proc.close()``.)"""
        self._done = True
        if self._resp is not None:
            self._resp.close()
        if self._feeder is not None and not self._feeder.done() and \
                self._feeder is not asyncio.current_task():
            self._feeder.cancel()
        return _DONE

    async def aclose(self):
        """Closes the stream (see :meth:`close`)."""
        self.close()

    async def __aenter__(self):
        return await self.start()

    async def __aexit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return "AsyncExecProcess(%s, exec_id=%s%s)" % (self._sb.id, self.exec_id,
                                                        ", done" if self._done else "")


class AsyncBackgroundExec:
    """A command started with ``await sb.exec(..., background=True)``, the
    asyncio face of :class:`~strata.BackgroundExec`: ``exec_id``, ``pid``;
    :meth:`connect` attaches to its output, :meth:`wait` collects its
    exit, :meth:`signal` and :meth:`kill` end it."""

    def __init__(self, sandbox, exec_id, pid):
        self._sb = sandbox
        self.exec_id = exec_id
        self.pid = pid

    def connect(self, timeout=None):
        """An :class:`AsyncExecProcess` on the command's output (not a
        coroutine: it attaches at its first use); ``timeout``: seconds to
        wait for each event (default: an hour)."""
        return self._sb.exec_connect(self.exec_id, timeout=timeout)

    async def wait(self, timeout=None):
        """Attaches and reads to the exit; returns the :class:`ExecResult`
        (its output: what was kept since the start, up to the output cap)."""
        proc = self.connect(timeout=timeout)
        try:
            return await proc.wait()
        finally:
            proc.close()

    async def signal(self, sig):
        """Sends a signal (a number or a name such as "TERM") to its
        process group."""
        await self._sb.exec_signal(self.exec_id, sig)

    async def kill(self):
        """SIGKILL to its process group."""
        await self._sb.exec_kill(self.exec_id)

    def __repr__(self):
        return "AsyncBackgroundExec(%s, exec_id=%s, pid=%s)" % (self._sb.id, self.exec_id,
                                                                 self.pid)


async def _aiter_chunks(stdin):
    """The chunks of stdin=: an async iterable, or what _chunks_of takes."""
    if hasattr(stdin, "__aiter__"):
        async for c in stdin:
            yield c
    else:
        for c in _chunks_of(stdin):
            yield c


class _Done:
    """An awaitable that is already done (unlike a coroutine, nothing warns
    when it is not awaited)."""

    def __await__(self):
        return iter(())


_DONE = _Done()


class AsyncFiles:
    """``sb.files`` of an :class:`AsyncSandbox`: the methods of
    :class:`~strata.sandbox.Files` as coroutines."""

    def __init__(self, sandbox):
        self._sb = sandbox

    async def _call(self, method, sub, path, body=None, timeout=DEFAULT_TIMEOUT, raw=False, **q):
        query = {"path": path}
        query.update({k: v for k, v in q.items() if v is not None})
        return await http.call(self._sb._client, method, self._sb._path("files" + sub),
                               body=body, query=query, timeout=timeout, raw=raw,
                               content_type="application/octet-stream")

    async def read(self, path, timeout=DEFAULT_TIMEOUT):
        """The contents of a file (bytes)."""
        return await self._call("GET", "", path, timeout=timeout, raw=True)

    async def read_text(self, path, encoding="utf-8", timeout=DEFAULT_TIMEOUT):
        return (await self.read(path, timeout)).decode(encoding)

    async def _upload(self, sub, path, source, length, timeout, **q):
        query = {"path": path}
        query.update({k: v for k, v in q.items() if v is not None})
        return await http.upload(self._sb._client, "PUT", self._sb._path("files" + sub), source,
                                 length, query=query, timeout=timeout)

    async def write(self, path, data, mode=None, timeout=DEFAULT_TIMEOUT, *, user=None,
                    parents=True, append=False):
        """See :meth:`Files.write`: bytes, str, a binary file object or an
        async iterable of bytes (streamed, any size); returns the bytes
        written."""
        source, length, q = _write_args(data, mode, user, parents, append)
        return (await self._upload("", path, source, length, timeout, **q))["size"]

    async def read_to(self, path, out, timeout=DEFAULT_TIMEOUT):
        """See :meth:`Files.read_to`: streams a file into out (a binary
        file object) a piece at a time; returns the bytes written."""
        return await http.download(self._sb._client, self._sb._path("files"), out,
                                   query={"path": path}, timeout=timeout)

    async def upload_file(self, local_path, remote_path, mode=None, timeout=DEFAULT_TIMEOUT, *,
                          user=None):
        """See :meth:`Files.upload_file`."""
        with open(local_path, "rb") as f:
            if mode is None:
                mode = os.fstat(f.fileno()).st_mode & 0o7777
            return await self.write(remote_path, f, mode=mode, timeout=timeout, user=user)

    async def download_file(self, remote_path, local_path, timeout=DEFAULT_TIMEOUT):
        """See :meth:`Files.download_file`."""
        tmp = local_path + ".strata-part"
        try:
            with open(tmp, "wb") as out:
                n = await self.read_to(remote_path, out, timeout)
            os.replace(tmp, local_path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return n

    async def list(self, path="/", timeout=DEFAULT_TIMEOUT):
        """The entries of a directory (:class:`FileInfo`)."""
        return [FileInfo(e) for e in (await self._call("GET", "/list", path,
                                                       timeout=timeout))["entries"]]

    async def stat(self, path, timeout=DEFAULT_TIMEOUT):
        """A :class:`FileInfo` for path (NotFound if it is absent)."""
        return FileInfo(await self._call("GET", "/stat", path, timeout=timeout),
                        name=posixpath.basename(path))

    async def exists(self, path, timeout=DEFAULT_TIMEOUT):
        try:
            await self.stat(path, timeout)
            return True
        except errors.NotFound:
            return False

    async def mkdir(self, path, parents=True, mode=0o755, timeout=DEFAULT_TIMEOUT):
        await self._call("POST", "/mkdir", path, timeout=timeout,
                         parents="1" if parents else None, mode="%o" % mode)

    async def remove(self, path, recursive=False, timeout=DEFAULT_TIMEOUT):
        await self._call("DELETE", "", path, timeout=timeout,
                         recursive="1" if recursive else None)

    async def upload_tar(self, data, remote_dir, timeout=DEFAULT_TIMEOUT):
        """Unpacks a tar archive (bytes) under remote_dir; returns the
        number of files written."""
        return (await self._call("PUT", "/tar", remote_dir, body=bytes(data),
                                 timeout=timeout))["files"]

    async def download_tar(self, remote_dir, timeout=DEFAULT_TIMEOUT):
        """The tree at remote_dir as a tar archive (bytes)."""
        return await self._call("GET", "/tar", remote_dir, timeout=timeout, raw=True)

    async def upload(self, local_path, remote_path, timeout=DEFAULT_TIMEOUT, *, user=None):
        """See :meth:`Files.upload`: a file, or a tree as one streamed tar
        built on the loop as it is sent (no thread)."""
        if not os.path.lexists(local_path):
            raise FileNotFoundError("upload: no such local file or directory: %r" % local_path)
        if not os.path.isdir(local_path) or os.path.islink(local_path):
            await self.upload_file(local_path, remote_path, timeout=timeout, user=user)
            return 1
        r = await self._upload("/tar", remote_path, _tar_pieces(local_path), None, timeout,
                               user=user)
        return r["files"]

    async def download(self, remote_path, local_path, timeout=DEFAULT_TIMEOUT):
        """See :meth:`Files.download`: a file, or a tree unpacked from the
        tar stream as it arrives (no thread, bounded memory)."""
        if (await self.stat(remote_path, timeout)).type != "dir":
            await self.download_file(remote_path, local_path, timeout)
            return 1
        os.makedirs(local_path, exist_ok=True)
        resp = await http.stream(self._sb._client, "GET", self._sb._path("files/tar"),
                                 query={"path": remote_path}, timeout=timeout)
        try:
            return await _unpack(_TarReader(resp, timeout), local_path)
        finally:
            resp.close()


async def _unpack(tar, local_dir):
    """Unpacks the members of tar (a _TarReader) under local_dir as they
    arrive; returns the regular files written."""
    x = _Extractor(local_dir)
    async for m in tar.members():
        dst = x.place(m)
        if dst is not None:
            with open(dst, "xb") as out:
                async for piece in tar.data():
                    out.write(piece)
            x.wrote(dst, m)
    return x.finish()


async def _tar_pieces(local_dir):
    """The tree at local_dir as a pax tar stream, in pieces of at most
    http.PIECE (bounded memory): what the synchronous upload's tarfile
    writes (symlinks kept, a second name of a file a hard link, sockets
    left out), built here a member at a time as the body is sent."""
    # A TarFile only for gettarinfo, which detects the hard links.
    tf = tarfile.TarFile(fileobj=io.BytesIO(), mode="w", format=tarfile.PAX_FORMAT)
    sent = 0
    for full, arcname in _tar_entries(local_dir):
        ti = tf.gettarinfo(full, arcname)
        if ti is None:
            continue
        head = ti.tobuf(tf.format, tf.encoding, tf.errors)
        sent += len(head)
        yield head
        if ti.isreg():
            with open(full, "rb") as f:
                left = ti.size
                while left:
                    piece = f.read(min(left, http.PIECE))
                    if not piece:
                        raise OSError("upload: %s shrank while it was sent" % full)
                    left -= len(piece)
                    yield piece
            pad = -ti.size % tarfile.BLOCKSIZE
            sent += ti.size + pad
            yield tarfile.NUL * pad
    end = 2 * tarfile.BLOCKSIZE
    yield tarfile.NUL * (end + -(sent + end) % tarfile.RECORDSIZE)


#: The largest pax or GNU long-name header of a tar stream read: names
#: and link targets are at most PATH_MAX; more is a broken stream.
TAR_META_MAX = 1 << 20


class _TarReader:
    """The members of a tar stream as it arrives (an http Response):
    tarfile.TarInfo objects from their ustar headers, with what pax and
    GNU long-name headers said; a regular file's data through
    :meth:`data`, in pieces (what a member's reader left is skipped)."""

    def __init__(self, resp, timeout):
        self._pieces = http.pieces_of(resp, timeout, "the tar")
        self._buf = bytearray()
        self._left = 0  # data of the current member not read yet
        self._pad = 0

    async def _some(self, n):
        """Up to n bytes (at least one)."""
        if not self._buf:
            try:
                self._buf += await self._pieces.__anext__()
            except StopAsyncIteration:
                raise errors.StrataError("the tar stream ended inside a member") from None
        data = bytes(self._buf[:n])
        del self._buf[:n]
        return data

    async def _exactly(self, n):
        parts = []
        while n > 0:
            parts.append(await self._some(n))
            n -= len(parts[-1])
        return b"".join(parts)

    async def data(self):
        """The data of the current member, in pieces."""
        while self._left > 0:
            piece = await self._some(min(self._left, http.PIECE))
            self._left -= len(piece)
            yield piece

    async def members(self):
        pax, long_name, long_link = {}, None, None
        while True:
            async for _ in self.data():
                pass
            await self._exactly(self._pad)
            block = await self._exactly(tarfile.BLOCKSIZE)
            if block == tarfile.NUL * tarfile.BLOCKSIZE:
                return
            try:
                ti = tarfile.TarInfo.frombuf(block, "utf-8", "surrogateescape")
            except tarfile.HeaderError as e:
                raise errors.StrataError("a broken tar stream: %s" % e) from e
            self._pad = -ti.size % tarfile.BLOCKSIZE
            if ti.type in (tarfile.XHDTYPE, tarfile.XGLTYPE, tarfile.GNUTYPE_LONGNAME,
                           tarfile.GNUTYPE_LONGLINK):
                if ti.size > TAR_META_MAX:
                    raise errors.StrataError("a tar header of %d bytes" % ti.size)
                meta, self._left = await self._exactly(ti.size), 0
                if ti.type == tarfile.XHDTYPE:
                    pax.update(_pax_records(meta))
                elif ti.type == tarfile.GNUTYPE_LONGNAME:
                    long_name = meta.rstrip(b"\0").decode("utf-8", "surrogateescape")
                elif ti.type == tarfile.GNUTYPE_LONGLINK:
                    long_link = meta.rstrip(b"\0").decode("utf-8", "surrogateescape")
                continue  # a global header (XGLTYPE): sandboxd sends none
            ti.name = long_name or ti.name
            ti.linkname = long_link or ti.linkname
            _apply_pax(ti, pax)
            if ti.isdir():
                ti.name = ti.name.rstrip("/")
            if ti.isreg() or ti.type not in tarfile.SUPPORTED_TYPES:
                self._left, self._pad = ti.size, -ti.size % tarfile.BLOCKSIZE
            else:
                self._pad = 0  # links, directories, devices: no data
            pax, long_name, long_link = {}, None, None
            yield ti


def _pax_records(data):
    """The records ("%d key=value\n") of a pax extended header."""
    out, pos = {}, 0
    while pos < len(data) and data[pos:pos + 1] != b"\0":
        sp = data.find(b" ", pos)
        n = int(data[pos:sp]) if sp > pos and data[pos:sp].isdigit() else 0
        if n <= sp - pos or pos + n > len(data):
            raise errors.StrataError("a broken pax header in the tar stream")
        key, _, value = data[sp + 1:pos + n - 1].partition(b"=")
        out[key.decode("utf-8", "surrogateescape")] = value.decode("utf-8", "surrogateescape")
        pos += n
    return out


def _apply_pax(ti, pax):
    """What a pax header says of the member ti."""
    try:
        for key, attr, conv in (("path", "name", str), ("linkpath", "linkname", str),
                                ("size", "size", int), ("uid", "uid", int),
                                ("gid", "gid", int), ("mtime", "mtime", float),
                                ("uname", "uname", str), ("gname", "gname", str)):
            if key in pax:
                setattr(ti, attr, conv(pax[key]))
    except ValueError as e:
        raise errors.StrataError("a broken pax header in the tar stream: %s" % e) from e


class AsyncSandbox:
    """An asyncio handle on one sandbox; the methods of :class:`Sandbox`."""

    def __init__(self, info, client):
        self._client = client
        self._sync = Sandbox(info, client)  # the description, and upload/download
        self.id = info["id"]
        self.files = AsyncFiles(self)

    @property
    def _killed(self):
        return self._sync._killed

    def _path(self, sub=""):
        return self._sync._path(sub)

    # -- construction ----------------------------------------------------
    @classmethod
    async def create(cls, image, backend="container", *, cpu=None, memory_mb=None, pids=None,
                     disk_mb=None, env=None, cwd=None, user=None, network=None, ttl=None,
                     idle_timeout=None, labels=None, idempotency_key=None, tenant=None,
                     keep_state=None, userns=None, allow_out=None, deny_out=None,
                     egress_default=None, socket=None, url=None, token=None,
                     timeout=DEFAULT_TIMEOUT):
        """See :meth:`Sandbox.create`."""
        body = _create_body(image, backend, dict(
            cpu=cpu, memory_mb=memory_mb, pids=pids, disk_mb=disk_mb, env=env, cwd=cwd,
            user=user, network=network, ttl=ttl, idle_timeout=idle_timeout, labels=labels,
            idempotency_key=idempotency_key, tenant=tenant, keep_state=keep_state,
            userns=userns, allow_out=allow_out, deny_out=deny_out,
            egress_default=egress_default))
        client = Client(socket=socket, url=url, token=token)
        return cls(await http.call(client, "POST", "/v1/sandboxes", body=body,
                                   timeout=timeout), client)

    @classmethod
    async def create_many(cls, image, count, backend="container", *, idempotency_key=None,
                          parallelism=64, timeout=DEFAULT_TIMEOUT, **kw):
        """See :meth:`Sandbox.create_many` (``parallelism`` creates in
        flight at once on this loop)."""
        gate = asyncio.Semaphore(max(1, parallelism))

        async def one(i):
            key = None if idempotency_key is None else "%s-%d" % (idempotency_key, i)
            async with gate:
                return await cls.create(image, backend, idempotency_key=key, timeout=timeout,
                                        **kw)
        made = await asyncio.gather(*(one(i) for i in range(count)), return_exceptions=True)
        failed = [r for r in made if isinstance(r, BaseException)]
        if failed:
            await asyncio.gather(*(sb.kill(timeout=timeout) for sb in made
                                   if isinstance(sb, AsyncSandbox)), return_exceptions=True)
            raise failed[0]
        return made

    @classmethod
    async def connect(cls, sandbox_id, *, socket=None, url=None, token=None,
                      timeout=DEFAULT_TIMEOUT):
        """See :meth:`Sandbox.connect`."""
        client = Client(socket=socket, url=url, token=token)
        return cls(await http.call(client, "GET", "/v1/sandboxes/" + sandbox_id,
                                   timeout=timeout), client)

    @classmethod
    async def list(cls, labels=None, state=None, backend=None, *, tenant=None, socket=None,
                   url=None, token=None, timeout=DEFAULT_TIMEOUT):
        """See :meth:`Sandbox.list`."""
        client = Client(socket=socket, url=url, token=token)
        r = await http.call(client, "GET", "/v1/sandboxes",
                            query=_list_query(labels, state, backend, tenant),
                            timeout=timeout)
        return [cls(i, client) for i in r["sandboxes"]]

    # -- description ------------------------------------------------------
    @property
    def info(self):
        return self._sync.info

    @property
    def backend(self):
        return self._sync.backend

    @property
    def state(self):
        return self._sync.state

    @property
    def labels(self):
        return self._sync.labels

    @property
    def tenant(self):
        return self._sync.tenant

    async def _call(self, method, sub, body=None, timeout=DEFAULT_TIMEOUT):
        try:
            return await http.call(self._client, method, self._path(sub), body=body,
                                   timeout=timeout)
        except errors.NotFound as e:
            if self._killed:
                raise errors.Exited("sandbox %s was killed" % self.id, code=e.code,
                                    status=e.status) from e
            raise

    async def _describe(self, method, sub, body=None, timeout=DEFAULT_TIMEOUT):
        self._sync._info = await self._call(method, sub, body, timeout)
        return self._sync._info

    async def refresh(self, timeout=DEFAULT_TIMEOUT):
        """Fetches the current description; returns it."""
        return await self._describe("GET", "", timeout=timeout)

    # -- exec --------------------------------------------------------------
    async def exec(self, cmd=None, *, python=None, env=None, cwd=None, user=None, stdin=None,
                   timeout=60.0, output_cap=None, background=False):
        """See :meth:`Sandbox.exec`; ``background=True`` returns an
        :class:`AsyncBackgroundExec` as soon as the command started."""
        if background:
            r = await self._call("POST", "exec", body=_background_body(
                cmd, python, env, cwd, user, stdin, timeout, output_cap))
            return AsyncBackgroundExec(self, r["exec_id"], r.get("pid"))
        if stdin is PIPE:
            raise ValueError("exec() cannot take strata.PIPE: nobody would write it; "
                             "use exec_stream()")
        proc = self.exec_stream(cmd, python=python, env=env, cwd=cwd, user=user, stdin=stdin,
                                timeout=timeout, output_cap=output_cap, _raise_timeout=False)
        try:
            result = await proc.wait()
        finally:
            proc.close()
        if result.timed_out:
            raise errors.Timeout("command ran past its timeout of %s s" % timeout, result=result)
        return result

    def exec_stream(self, cmd=None, *, python=None, env=None, cwd=None, user=None, stdin=None,
                    timeout=60.0, output_cap=None, _raise_timeout=True):
        """See :meth:`Sandbox.exec_stream`: returns an
        :class:`AsyncExecProcess` at once (not a coroutine); ``stdin`` may
        also be an async iterable of chunks."""
        streamed = stdin is not None and hasattr(stdin, "__aiter__")
        body = _exec_body(cmd, python, env, cwd, user, PIPE if streamed else stdin, timeout,
                          output_cap)
        return AsyncExecProcess(self, body, stdin, timeout, _raise_timeout)

    async def execs(self, timeout=DEFAULT_TIMEOUT):
        """See :meth:`Sandbox.execs`: dicts with exec_id, cmd, pid,
        started_at, running, background, attached, exit_code, signal."""
        return (await self._call("GET", "execs", timeout=timeout))["execs"]

    def exec_connect(self, exec_id, timeout=None):
        """See :meth:`Sandbox.exec_connect`: an :class:`AsyncExecProcess`
        on a running exec's output (not a coroutine: it attaches at its
        first use, or ``await``); closing it detaches, the command runs on."""
        return AsyncExecProcess(self, None, None, timeout or 3600.0, raise_timeout=False,
                                _attach=exec_id)

    async def exec_signal(self, exec_id, sig):
        """See :meth:`Sandbox.exec_signal`."""
        await self._call("POST", "execs/%s/signal" % exec_id, body={"signal": sig})

    async def exec_kill(self, exec_id):
        """See :meth:`Sandbox.exec_kill`."""
        await self._call("DELETE", "execs/%s" % exec_id)

    # -- lifecycle, usage, settings ----------------------------------------
    async def pause(self, timeout=DEFAULT_TIMEOUT):
        """See :meth:`Sandbox.pause`."""
        await self._describe("POST", "pause", timeout=timeout)

    async def resume(self, timeout=DEFAULT_TIMEOUT):
        """See :meth:`Sandbox.resume`."""
        await self._describe("POST", "resume", timeout=timeout)

    async def metrics(self, timeout=DEFAULT_TIMEOUT):
        """See :meth:`Sandbox.metrics`."""
        return Metrics(await self._call("GET", "metrics", timeout=timeout))

    async def network(self, timeout=DEFAULT_TIMEOUT):
        """See :meth:`Sandbox.network`."""
        return await self._call("GET", "network", timeout=timeout)

    async def set_network_policy(self, allow_out=None, deny_out=None, default=None,
                                 timeout=DEFAULT_TIMEOUT):
        """See :meth:`Sandbox.set_network_policy`."""
        body = {k: v for k, v in (("allow_out", allow_out), ("deny_out", deny_out),
                                  ("egress_default", default)) if v is not None}
        return await self._call("PUT", "network", body=body, timeout=timeout)

    async def network_log(self, offset=0, timeout=DEFAULT_TIMEOUT):
        """See :meth:`Sandbox.network_log`."""
        raw = await http.call(self._client, "GET", self._path("network/log"),
                              query={"offset": str(offset)}, timeout=timeout, raw=True)
        return [json.loads(l) for l in raw.decode().splitlines() if l.strip()]

    async def set_timeout(self, seconds, timeout=DEFAULT_TIMEOUT):
        """See :meth:`Sandbox.set_timeout`."""
        await self._describe("PATCH", "", body=_timeout_body(seconds), timeout=timeout)

    async def set_labels(self, labels, timeout=DEFAULT_TIMEOUT):
        """See :meth:`Sandbox.set_labels`."""
        await self._describe("PATCH", "", body=_labels_body(labels), timeout=timeout)

    async def kill(self, timeout=DEFAULT_TIMEOUT):
        """See :meth:`Sandbox.kill`."""
        try:
            await http.call(self._client, "DELETE", self._path(), timeout=timeout)
        except errors.NotFound:
            pass
        self._sync._killed = True

    delete = kill

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.kill()
        return False

    def __repr__(self):
        return "Async" + repr(self._sync)


# -- the node ------------------------------------------------------------------
async def capabilities(backend=None, *, socket=None, url=None, token=None,
                       timeout=DEFAULT_TIMEOUT):
    """See :func:`strata.capabilities`."""
    r = await http.call(Client(socket=socket, url=url, token=token), "GET", "/v1/capabilities",
                        timeout=timeout)
    return _capabilities_of(r, backend)


async def node_metrics(*, socket=None, url=None, token=None, timeout=DEFAULT_TIMEOUT):
    """See :func:`strata.node_metrics`."""
    return await http.call(Client(socket=socket, url=url, token=token), "GET", "/v1/node",
                           timeout=timeout)


async def tenant_info(*, socket=None, url=None, token=None, timeout=DEFAULT_TIMEOUT):
    """See :func:`strata.tenant_info`."""
    return await http.call(Client(socket=socket, url=url, token=token), "GET", "/v1/tenant",
                           timeout=timeout)


async def health(*, socket=None, url=None, token=None, timeout=5.0):
    """See :func:`strata.health`."""
    r = await http.call(Client(socket=socket, url=url, token=token), "GET", "/v1/health",
                        timeout=timeout)
    return r.get("status") == "ok"
