"""The synchronous SDK: :class:`Sandbox`, its :class:`Files`, and the results
of exec.

A Sandbox is a handle on one sandbox of a strata-sandboxd; it holds only the
sandbox's id and description, so it is cheap, picklable in spirit, and safe to
use from several threads. ``with Sandbox.create(...) as sb:`` deletes the
sandbox when the block ends, whatever happens in it.
"""
import base64
import concurrent.futures
import http.client
import io
import json
import os
import posixpath
import shutil
import socket
import stat
import tarfile
import threading
import time

from . import errors
from ._http import Client, DEFAULT_TIMEOUT

#: Extra seconds the SDK waits for an exec beyond the exec's own timeout.
EXEC_GRACE = 10.0

#: The largest stdin chunk one request carries (sandboxd's limit);
#: :meth:`ExecProcess.write` splits larger writes.
STDIN_CHUNK = 1 << 20


class _Pipe:
    def __repr__(self):
        return "strata.PIPE"


#: ``stdin=strata.PIPE``: :meth:`Sandbox.exec_stream` keeps the command's
#: stdin open; feed it with :meth:`ExecProcess.write`.
PIPE = _Pipe()


def _chunks_of(stdin):
    """The chunks of an interactive stdin source: a file-like object (read
    64 KiB at a time) or any other iterable of bytes/str; None for what is
    given up front (bytes, str, None) or PIPE."""
    if stdin is None or stdin is PIPE or isinstance(stdin, (bytes, bytearray, memoryview, str)):
        return None
    if hasattr(stdin, "read"):
        return iter(lambda: stdin.read(65536), stdin.read(0))
    if hasattr(stdin, "__iter__"):
        return iter(stdin)
    raise TypeError("stdin must be bytes, str, strata.PIPE, a file or an iterable of chunks, "
                    "not %s" % type(stdin).__name__)


class ExecResult:
    """What a finished command left: ``exit_code`` (None when killed by a
    signal), ``signal`` (or None), ``stdout`` and ``stderr`` (str, decoded as
    UTF-8 with replacement), ``stdout_raw``/``stderr_raw`` (bytes),
    ``truncated`` (output went over the cap and was cut), ``timed_out``,
    ``duration`` (seconds, as measured in the sandbox), ``error`` (why the
    command could not run, else None) and ``error_code`` (the same for
    programs: "no_such_directory", "no_such_user", "command_not_found",
    "not_executable", ...), ``oom_killed`` (the OOM killer ended it)."""

    def __init__(self, exit_code, signal, stdout_raw, stderr_raw, truncated=False,
                 timed_out=False, duration=0.0, error=None, error_code=None, oom_killed=False):
        self.exit_code = exit_code
        self.signal = signal
        self.stdout_raw = stdout_raw
        self.stderr_raw = stderr_raw
        self.truncated = truncated
        self.timed_out = timed_out
        self.duration = duration
        self.error = error
        self.error_code = error_code
        self.oom_killed = oom_killed

    @property
    def stdout(self):
        return self.stdout_raw.decode("utf-8", "replace")

    @property
    def stderr(self):
        return self.stderr_raw.decode("utf-8", "replace")

    @property
    def ok(self):
        """True when the command exited with status 0."""
        return self.exit_code == 0

    def __repr__(self):
        return ("ExecResult(exit_code=%r, signal=%r, stdout=%r, stderr=%r, truncated=%r)"
                % (self.exit_code, self.signal, self.stdout[:80], self.stderr[:80],
                   self.truncated))


class ExecEvent:
    """One event of :meth:`Sandbox.exec_stream`: ``kind`` is "stdout",
    "stderr" (``data`` holds the bytes) or "exit" (``result`` holds the
    :class:`ExecResult`, whose stdout/stderr are empty: they were streamed)."""

    def __init__(self, kind, data=b"", result=None):
        self.kind = kind
        self.data = data
        self.result = result

    @property
    def text(self):
        return self.data.decode("utf-8", "replace")

    def __repr__(self):
        if self.kind == "exit":
            return "ExecEvent(exit, %r)" % (self.result,)
        return "ExecEvent(%s, %r)" % (self.kind, self.data[:80])


class FileInfo:
    """A directory entry or stat result: ``name``, ``type`` ("file", "dir",
    "symlink", "other"), ``mode`` (permission bits), ``size``, ``mtime``."""

    def __init__(self, d, name=None):
        self.name = d.get("name", name)
        self.type = d.get("type")
        self.mode = d.get("mode")
        self.size = d.get("size")
        self.mtime = d.get("mtime")

    @property
    def is_dir(self):
        return self.type == "dir"

    def __repr__(self):
        return "FileInfo(%r, %s, size=%r)" % (self.name, self.type, self.size)


def _exec_body(cmd, python, env, cwd, user, stdin, timeout, output_cap):
    if (cmd is None) == (python is None):
        raise ValueError("give exactly one of cmd and python")
    body = {}
    if cmd is not None:
        body["cmd"] = cmd if isinstance(cmd, str) else [str(a) for a in cmd]
    else:
        body["python"] = python
    if env:
        body["env"] = {str(k): str(v) for k, v in env.items()}
    if cwd:
        body["cwd"] = cwd
    if user is not None:
        body["user"] = user
    if stdin is PIPE or _chunks_of(stdin) is not None:
        body["stdin_stream"] = True
    elif stdin is not None:
        if isinstance(stdin, str):
            stdin = stdin.encode()
        body["stdin"] = base64.b64encode(stdin).decode()
    if timeout is not None:
        body["timeout"] = timeout
    if output_cap is not None:
        body["output_cap"] = int(output_cap)
    return body


def _background_body(cmd, python, env, cwd, user, stdin, timeout, output_cap):
    """The body of an exec with background=True (sync and asyncio)."""
    if stdin is not None and not isinstance(stdin, (bytes, str)):
        raise ValueError("a background exec takes stdin as bytes or str only")
    body = _exec_body(cmd, python, env, cwd, user, stdin, timeout, output_cap)
    body["background"] = True
    return body


def _result_from_exit(ev, out=b"", err=b""):
    return ExecResult(ev.get("exit_code"), ev.get("signal"), out, err,
                      truncated=bool(ev.get("truncated")), timed_out=bool(ev.get("timed_out")),
                      duration=(ev.get("duration_us") or 0) / 1e6, error=ev.get("error"),
                      error_code=ev.get("error_code"), oom_killed=bool(ev.get("oom_killed")))


# What the synchronous and the asyncio ExecProcess share: the reading of
# an exec stream's lines (proc: one of them, with _wait, _timeout,
# _raise_timeout, _stdin_open, result and close()).
def _stream_error(proc, e, timed_out):
    """The exception for a read of proc's stream that failed with e (or
    timed out); the stream is closed."""
    proc.close()
    if timed_out:
        return errors.Timeout("no output or exit from the command within %.1f s" % proc._wait)
    return errors.Exited("the exec stream broke: %s" % e)


def _stream_line(proc, line):
    """One line of proc's stream as a dict (b"": the stream ended early)."""
    if not line:
        proc.close()
        raise errors.Exited("sandboxd ended the exec stream without an exit")
    return json.loads(line)


def _stream_event(proc, ev):
    """The ExecEvent of the stream's event ev, or None for an event of a
    newer sandboxd; at the exit, proc is closed and its result set (or
    the exception the exit means is raised)."""
    kind = ev.get("type")
    if kind in ("stdout", "stderr"):
        return ExecEvent(kind, base64.b64decode(ev["data"]))
    if kind == "start":
        proc.exec_id, proc.pid = ev.get("exec_id"), ev.get("pid")
    if kind != "exit":  # start, or an event of a newer sandboxd
        return None
    proc.close()
    proc._stdin_open = False
    result = proc.result = _result_from_exit(ev)
    if result.error and result.error.startswith("sandbox exited"):
        raise errors.Exited(result.error)
    if result.error and result.exit_code == -1:
        raise errors.StrataError(result.error)
    if proc._raise_timeout and result.timed_out:
        raise errors.Timeout("command ran past its timeout of %s s" % proc._timeout,
                             result=result)
    return ExecEvent("exit", result=result)


class _Output:
    """The output events of a stream, gathered into its ExecResult."""

    def __init__(self):
        self._parts = {"stdout": [], "stderr": [], "exit": []}

    def add(self, ev):
        self._parts[ev.kind].append(ev.data)

    def into(self, result):
        """result with the output gathered (None: the stream ended early)."""
        if result is None:
            raise errors.StrataError("the exec stream was closed before its exit")
        result.stdout_raw = b"".join(self._parts["stdout"])
        result.stderr_raw = b"".join(self._parts["stderr"])
        return result


class _StdinBackoff:
    """The waits between the tries of one stdin chunk that sandboxd dropped
    (``stdin_full``: the command has 4 MiB it has not read), for the
    synchronous and the asyncio ExecProcess alike."""

    def __init__(self, proc, now):
        self._proc = proc
        self._deadline = now + proc._wait
        self._nap = 0.002

    def after(self, e, now):
        """Seconds to wait before trying again after the StrataError e;
        raises e when it is not stdin_full, Timeout when the command did
        not read in time."""
        if isinstance(e, errors.StdinClosed):
            self._proc._stdin_open = False
            raise e
        if e.code != "stdin_full":
            raise e
        if now > self._deadline:
            raise errors.Timeout("exec %s did not read its stdin within %.1f s"
                                 % (self._proc.exec_id, self._proc._wait)) from e
        nap, self._nap = self._nap, min(self._nap * 2, 0.1)
        return nap


class Metrics:
    """What a sandbox uses now (:meth:`Sandbox.metrics`): ``cpu_seconds``
    (user + system time of every process it ran), ``memory_bytes`` (charged
    now), ``memory_peak_bytes`` (the most at once since it was created),
    ``pids`` (processes and threads now, its agent included),
    ``disk_used_bytes`` (its writable layer), ``execs`` (execs run),
    ``running_execs``, the limits ``memory_limit_bytes``, ``pids_limit``,
    ``disk_limit_bytes``, ``uptime`` (seconds), and with network "egress"
    ``net_bytes_out`` and ``net_bytes_in`` (through its veth). A figure the backend
    cannot tell is None; ``raw`` is the API's dict."""

    _FIELDS = ("cpu_seconds", "memory_bytes", "memory_peak_bytes", "memory_limit_bytes", "pids",
               "pids_limit", "disk_used_bytes", "disk_limit_bytes", "execs", "running_execs",
               "net_bytes_out", "net_bytes_in")

    def __init__(self, d):
        self.raw = d
        for k in self._FIELDS:
            setattr(self, k, d.get(k))
        self.uptime = d.get("uptime_s")

    def __repr__(self):
        return "Metrics(%s)" % ", ".join("%s=%r" % (k, getattr(self, k)) for k in self._FIELDS)


def _create_body(image, backend, fields):
    """The body of POST /v1/sandboxes: the arguments that are not None."""
    body = {"image": image, "backend": backend}
    body.update({k: v for k, v in fields.items() if v is not None})
    return body


def _list_query(labels, state, backend, tenant=None):
    q = {}
    if tenant is not None:
        q["tenant"] = tenant
    if labels:
        q["label"] = ",".join("%s=%s" % (k, v) for k, v in labels.items())
    if state:
        q["state"] = state
    if backend:
        q["backend"] = backend
    return q


def _timeout_body(seconds):
    if seconds is None or seconds < 0:
        raise ValueError("set_timeout takes seconds >= 0 (0: no deadline)")
    return {"timeout": int(seconds)}


def _labels_body(labels):
    if not isinstance(labels, dict):
        raise ValueError("labels must be a dict of strings")
    return {"labels": {str(k): str(v) for k, v in labels.items()}}


class ExecProcess:
    """A running command of :meth:`Sandbox.exec_stream`.

    Iterate it for :class:`ExecEvent` objects as output arrives (the last of
    kind "exit"). Its stdin is what ``stdin=`` said: given up front (bytes or
    str), fed from an iterable or file by a background thread, or, with
    ``stdin=strata.PIPE``, written by you::

        proc = sb.exec_stream(["sh", "-c", "while read l; do echo got $l; done"],
                              stdin=strata.PIPE)
        proc.write(b"one\n")
        print(next(proc).text)          # got one
        proc.close_stdin()              # EOF: the loop ends
        print(proc.wait().exit_code)    # 0

    ``write`` returns once sandboxd took the input (it is queued for the
    command: at most 4 MiB it has not read yet; beyond that ``write`` waits
    and retries). Writing after ``close_stdin``, or once the command closed
    its stdin or finished, raises :class:`StdinClosed`. ``exec_id`` names the
    exec in the API. Closing the process (or leaving its ``with`` block)
    before the exit kills the command."""

    def __init__(self, sandbox, body, stdin, timeout, raise_timeout=True, _attach=None):
        self._sb = sandbox
        self._timeout = timeout
        self._raise_timeout = raise_timeout
        self._wait = (timeout or 60.0) + EXEC_GRACE
        self._lock = threading.Lock()  # one stdin chunk in flight
        self._stdin_open = bool(body and body.get("stdin_stream"))
        self._done = False
        self.exec_id = None
        #: The command's pid in the sandbox, once its start event was read.
        self.pid = None
        #: The :class:`ExecResult` once the exit was read.
        self.result = None
        #: An exception raised by the iterable given as stdin (it was closed).
        self.stdin_error = None
        try:
            if _attach is not None:  # GET .../execs/{n}/stream: closing it detaches
                self._conn, self._resp = sandbox._client.open(
                    "GET", sandbox._path("execs/%s/stream" % _attach), timeout=self._wait)
            else:
                self._conn, self._resp = sandbox._client.open(
                    "POST", sandbox._path("exec"), body=body, timeout=self._wait)
        except errors.NotFound as e:
            if sandbox._killed:
                raise errors.Exited("sandbox %s was killed" % sandbox.id) from e
            raise
        if self._stdin_open:
            ev = self._read()
            if ev.get("type") != "start":
                self.close()
                raise errors.StrataError("exec stream began without its start event: %r" % ev)
            self.exec_id, self.pid = ev["exec_id"], ev.get("pid")
            chunks = _chunks_of(stdin)
            if chunks is not None:
                threading.Thread(target=self._feed, args=(chunks,), daemon=True,
                                 name="strata-stdin-%s" % self.exec_id).start()

    # -- output --------------------------------------------------------------
    def _read(self):
        try:
            line = self._resp.readline()
        except (http.client.HTTPException, OSError, ValueError) as e:
            raise _stream_error(self, e, isinstance(e, socket.timeout)) from e
        return _stream_line(self, line)

    def __iter__(self):
        return self

    def __next__(self):
        while not self._done:
            ev = _stream_event(self, self._read())
            if ev is not None:
                return ev
        raise StopIteration

    def wait(self):
        """Reads the events left and returns the :class:`ExecResult`; its
        stdout/stderr hold the output read here (not what was iterated
        before)."""
        out = _Output()
        for ev in self:
            out.add(ev)
        return out.into(self.result)

    # -- input ---------------------------------------------------------------
    def write(self, data):
        """Sends bytes (or str, as UTF-8) to the command's stdin; returns
        the number of bytes written."""
        if isinstance(data, str):
            data = data.encode()
        data = bytes(data)
        with self._lock:
            if not self._stdin_open:
                raise errors.StdinClosed("exec %s: stdin is closed%s" % (
                    self.exec_id, "" if self.exec_id else " (not opened with strata.PIPE)"),
                    code="stdin_closed")
            for off in range(0, len(data), STDIN_CHUNK):
                self._send(data[off:off + STDIN_CHUNK], False)
        return len(data)

    def close_stdin(self):
        """Ends the command's input (EOF). A no-op when it is already
        closed or the command finished."""
        with self._lock:
            if not self._stdin_open:
                return
            try:
                self._send(b"", True)
            except errors.StdinClosed:
                pass
            self._stdin_open = False

    def _send(self, chunk, eof):
        path = self._sb._path("execs/%s/stdin" % self.exec_id)
        backoff = _StdinBackoff(self, time.monotonic())
        while True:
            try:
                self._sb._client.call("POST", path, body=chunk, query={"eof": "1"} if eof else None,
                                      content_type="application/octet-stream",
                                      timeout=self._wait)
                return
            except errors.StrataError as e:
                time.sleep(backoff.after(e, time.monotonic()))

    def _feed(self, chunks):
        try:
            for c in chunks:
                if c:
                    self.write(c)
        except errors.StdinClosed:
            return  # the command stopped reading: like a broken pipe
        except Exception as e:  # noqa: BLE001 -- kept for the caller
            self.stdin_error = e
        try:
            self.close_stdin()
        except errors.StrataError:
            pass

    # -- lifetime ------------------------------------------------------------
    def close(self):
        """Closes the stream; a command still running is killed."""
        self._done = True
        self._conn.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def __repr__(self):
        return "ExecProcess(%s, exec_id=%s%s)" % (self._sb.id, self.exec_id,
                                                   ", done" if self._done else "")


class BackgroundExec:
    """A command started with ``sb.exec(..., background=True)``: it runs on
    whoever watches it (a server, a watcher), also across a restart of
    sandboxd. ``exec_id`` names it in the sandbox, ``pid`` is its pid there.
    :meth:`connect` attaches to its output (what it printed while nobody
    watched, then on to its exit); closing that stream does not stop it.
    Once it ended, its exit stays until one client read it."""

    def __init__(self, sandbox, exec_id, pid):
        self._sb = sandbox
        self.exec_id = exec_id
        self.pid = pid

    def connect(self, timeout=None):
        """An :class:`ExecProcess` on the command's output; ``timeout``:
        seconds to wait for each event (default: an hour)."""
        return self._sb.exec_connect(self.exec_id, timeout=timeout)

    def wait(self, timeout=None):
        """Attaches and reads to the exit; returns the :class:`ExecResult`
        (its output: what was kept since the start, up to the output cap)."""
        return self.connect(timeout=timeout).wait()

    def signal(self, sig):
        """Sends a signal (a number or a name such as "TERM") to its
        process group."""
        self._sb.exec_signal(self.exec_id, sig)

    def kill(self):
        """SIGKILL to its process group."""
        self._sb.exec_kill(self.exec_id)

    def __repr__(self):
        return "BackgroundExec(%s, exec_id=%s, pid=%s)" % (self._sb.id, self.exec_id, self.pid)


class Files:
    """File operations in a sandbox (``sb.files``). Paths are absolute paths
    inside the sandbox; ``..`` is refused."""

    def __init__(self, sandbox):
        self._sb = sandbox

    def _call(self, method, sub, path, body=None, timeout=DEFAULT_TIMEOUT, raw=False, **q):
        query = {"path": path}
        query.update({k: v for k, v in q.items() if v is not None})
        return self._sb._client.call(method, self._sb._path("files" + sub), body=body,
                                     query=query, timeout=timeout, raw=raw,
                                     content_type="application/octet-stream")

    def read(self, path, timeout=DEFAULT_TIMEOUT):
        """Returns the contents of a file as bytes."""
        return self._call("GET", "", path, timeout=timeout, raw=True)

    def read_text(self, path, encoding="utf-8", timeout=DEFAULT_TIMEOUT):
        return self.read(path, timeout).decode(encoding)

    def _upload(self, sub, path, source, length, timeout, **q):
        query = {"path": path}
        query.update({k: v for k, v in q.items() if v is not None})
        return self._sb._client.upload("PUT", self._sb._path("files" + sub), source, length,
                                       query=query, timeout=timeout)

    def write(self, path, data, mode=None, timeout=DEFAULT_TIMEOUT, *, user=None,
              parents=True, append=False):
        """Creates or replaces a file with data: bytes, str, or a binary file
        object (streamed from its position to its end; any size up to the
        sandbox's disk). Missing parent directories are made (``parents``).
        ``mode`` (octal int) defaults to 0o644 for a new file and leaves an
        existing file's mode; ``user`` (a name of the sandbox's /etc/passwd,
        "uid" or "uid:gid") owns the file and the directories made. A
        write that does not fit the sandbox's disk raises
        :class:`~strata.errors.DiskFull`. ``append`` adds to the end of the
        file. Returns the bytes written."""
        source, length, q = _write_args(data, mode, user, parents, append)
        return self._upload("", path, source, length, timeout, **q)["size"]

    def read_to(self, path, out, timeout=DEFAULT_TIMEOUT):
        """Streams a file of the sandbox into out (a binary file object);
        any size, in bounded memory. Returns the bytes written."""
        conn, resp = self._sb._client.open("GET", self._sb._path("files"),
                                           query={"path": path}, timeout=timeout)
        try:
            return _copy_response(resp, out, timeout)
        finally:
            conn.close()

    def upload_file(self, local_path, remote_path, mode=None, timeout=DEFAULT_TIMEOUT, *,
                    user=None):
        """Copies one local file into the sandbox (streamed with sendfile).
        ``mode`` defaults to the local file's. Returns the bytes written."""
        with open(local_path, "rb") as f:
            if mode is None:
                mode = os.fstat(f.fileno()).st_mode & 0o7777
            return self.write(remote_path, f, mode=mode, timeout=timeout, user=user)

    def download_file(self, remote_path, local_path, timeout=DEFAULT_TIMEOUT):
        """Copies one file of the sandbox to local_path (its parent must
        exist). Returns the bytes written."""
        tmp = local_path + ".strata-part"
        try:
            with open(tmp, "wb") as out:
                n = self.read_to(remote_path, out, timeout)
            os.replace(tmp, local_path)
        finally:
            if os.path.exists(tmp):
                os.unlink(tmp)
        return n

    def list(self, path="/", timeout=DEFAULT_TIMEOUT):
        """Returns the entries of a directory as :class:`FileInfo`."""
        r = self._call("GET", "/list", path, timeout=timeout)
        return [FileInfo(e) for e in r["entries"]]

    def stat(self, path, timeout=DEFAULT_TIMEOUT):
        """Returns a :class:`FileInfo` for path (NotFound if it is absent)."""
        return FileInfo(self._call("GET", "/stat", path, timeout=timeout),
                        name=posixpath.basename(path))

    def exists(self, path, timeout=DEFAULT_TIMEOUT):
        try:
            self.stat(path, timeout)
            return True
        except errors.NotFound:
            return False

    def mkdir(self, path, parents=True, mode=0o755, timeout=DEFAULT_TIMEOUT):
        """Creates a directory (and its parents)."""
        self._call("POST", "/mkdir", path, timeout=timeout,
                   parents="1" if parents else None, mode="%o" % mode)

    def remove(self, path, recursive=False, timeout=DEFAULT_TIMEOUT):
        """Removes a file, or a directory (recursive for a non-empty one)."""
        self._call("DELETE", "", path, timeout=timeout, recursive="1" if recursive else None)

    def upload(self, local_path, remote_path, timeout=DEFAULT_TIMEOUT, *, user=None):
        """Copies a local file, or a directory tree, into the sandbox at
        remote_path. A tree goes as one streamed tar: any size, with its
        symlinks, hard links, modes, owners and mtimes; ``user`` owns all of
        it instead. A missing local path raises FileNotFoundError. Returns
        the number of files written."""
        if not os.path.lexists(local_path):
            raise FileNotFoundError("upload: no such local file or directory: %r" % local_path)
        if not os.path.isdir(local_path) or os.path.islink(local_path):
            self.upload_file(local_path, remote_path, timeout=timeout, user=user)
            return 1
        r = self._upload("/tar", remote_path, _tar_chunks(local_path), None, timeout,
                         user=user)
        return r["files"]

    def upload_tar(self, data, remote_dir, timeout=DEFAULT_TIMEOUT):
        """Unpacks a tar archive (bytes) under remote_dir. Returns the number
        of files written."""
        return self._call("PUT", "/tar", remote_dir, body=bytes(data), timeout=timeout)["files"]

    def download_tar(self, remote_dir, timeout=DEFAULT_TIMEOUT):
        """Returns the tree at remote_dir as a tar archive (bytes)."""
        return self._call("GET", "/tar", remote_dir, timeout=timeout, raw=True)

    def download(self, remote_path, local_path, timeout=DEFAULT_TIMEOUT):
        """Copies a file of the sandbox to local_path, or a tree (streamed
        tar) into the directory local_path, keeping symlinks, hard links,
        modes and mtimes (owners too when run as root). Nothing is written
        outside local_path: a member that would leave it, or a hard link to
        outside, raises InvalidRequest. Returns the number of files
        written."""
        if self.stat(remote_path, timeout).type != "dir":
            self.download_file(remote_path, local_path, timeout)
            return 1
        os.makedirs(local_path, exist_ok=True)
        conn, resp = self._sb._client.open("GET", self._sb._path("files/tar"),
                                           query={"path": remote_path}, timeout=timeout)
        try:
            with tarfile.open(fileobj=resp, mode="r|") as tf:
                return _extract(tf, local_path)
        except socket.timeout as e:
            raise errors.Timeout("sandboxd did not answer within %.1f s" % timeout) from e
        finally:
            conn.close()


#: Bytes a streamed transfer holds in memory at once.
TRANSFER_CHUNK = 1 << 20


def _write_args(data, mode, user, parents, append):
    """(source, length, query) of a Files.write (sync and asyncio; an
    async iterable of chunks is the asyncio one's: length None)."""
    if isinstance(data, str):
        data = data.encode()
    q = {"mode": None if mode is None else "%o" % mode, "user": user,
         "parents": None if parents else "0", "append": "1" if append else None}
    if isinstance(data, (bytes, bytearray, memoryview)):
        data = bytes(data)
        return _chunks_of_bytes(data), len(data), q
    if hasattr(data, "__aiter__"):
        return data, None, q
    return _file_source(data) + (q,)


def _chunks_of_bytes(data):
    """A bytes body as the file-like source Client.upload sends."""
    return io.BytesIO(data)


def _file_source(f):
    """(source, length) of a binary file object: a real file from its
    position to its end (sent with sendfile), anything else chunked."""
    try:
        fd = f.fileno()
        st = os.fstat(fd)
        if stat_is_reg(st.st_mode):
            return f, st.st_size - f.tell()
    except (AttributeError, OSError, io.UnsupportedOperation):
        pass
    return iter(lambda: f.read(TRANSFER_CHUNK), b""), None


def stat_is_reg(mode):
    import stat
    return stat.S_ISREG(mode)


def _copy_response(resp, out, timeout):
    n = 0
    buf = bytearray(TRANSFER_CHUNK)
    view = memoryview(buf)
    try:
        while True:
            k = resp.readinto(view)
            if not k:
                break
            out.write(view[:k])
            n += k
    except socket.timeout as e:
        raise errors.Timeout("sandboxd did not answer within %.1f s" % timeout) from e
    except http.client.IncompleteRead as e:  # the file shrank, sandboxd stopped
        raise errors.StrataError("the file's stream ended early: %s" % e) from e
    return n


class _QueueWriter:
    """The file object tarfile's stream mode writes to: each write (about
    TRANSFER_CHUNK, tarfile's buffer) goes into a bounded queue."""

    def __init__(self, q):
        self.q = q

    def write(self, b):
        self.q.put(bytes(b))
        return len(b)


def _tar_entries(local_dir):
    """(path, name in the archive) of everything under local_dir, in the
    order its tar lists them (sync and asyncio upload)."""
    for root, dirs, files in os.walk(local_dir):
        dirs.sort()
        for name in dirs + sorted(files):
            full = os.path.join(root, name)
            yield full, os.path.relpath(full, local_dir)


def _tar_chunks(local_dir):
    """The tree at local_dir as a tar stream, in chunks: a generator fed by
    a thread that runs tarfile, at most a few chunks ahead (bounded
    memory). Symlinks stay symlinks; a second name of a file is a hard
    link (tarfile's own detection); sockets are left out."""
    import queue
    q = queue.Queue(maxsize=4)
    done = object()
    stop = threading.Event()

    def produce():
        try:
            with tarfile.open(fileobj=_QueueWriter(q), mode="w|", format=tarfile.PAX_FORMAT,
                              bufsize=TRANSFER_CHUNK) as tf:
                for full, arcname in _tar_entries(local_dir):
                    if stop.is_set():
                        return
                    tf.add(full, arcname=arcname, recursive=False)
            q.put(done)
        except BaseException as e:  # handed to the consumer
            q.put(e)

    t = threading.Thread(target=produce, daemon=True)
    t.start()
    try:
        while True:
            item = q.get()
            if item is done:
                return
            if isinstance(item, BaseException):
                raise item
            yield item
    finally:
        stop.set()
        while t.is_alive():  # unblock a producer waiting on a full queue
            try:
                q.get(timeout=0.05)
            except queue.Empty:
                pass


def _inside(base, path):
    return path == base or path.startswith(base + os.sep)


def _extract(tf, local_dir):
    """Extracts a stream-mode tarfile under local_dir, member by member,
    never writing through a symlink nor outside local_dir."""
    x = _Extractor(local_dir)
    for m in tf:
        dst = x.place(m)
        if dst is not None:
            with tf.extractfile(m) as src, open(dst, "xb") as out:
                shutil.copyfileobj(src, out, TRANSFER_CHUNK)
            x.wrote(dst, m)
    return x.finish()


class _Extractor:
    """Puts the members of a tar stream under local_dir, never through a
    symlink nor outside it (for the sync and the asyncio download, which
    write a regular file's data themselves). A symlink already at a
    member's path (one an earlier member made, to a directory too) is
    replaced, never followed."""

    def __init__(self, local_dir):
        self._dir = local_dir
        self._base = os.path.realpath(local_dir)
        self._count, self._dirs = 0, []

    def place(self, m):
        """Makes member m but a regular file's data; returns the path that
        data goes to (the caller creates it with mode "xb", then calls
        wrote), or None."""
        base = self._base
        dst = os.path.join(base, m.name.lstrip("/"))
        parent = os.path.realpath(os.path.dirname(dst))
        dst = os.path.join(parent, os.path.basename(dst))
        if not _inside(base, parent) or ".." in m.name.split("/"):
            raise errors.InvalidRequest("archive member %r leaves %s" % (m.name, self._dir))
        os.makedirs(parent, exist_ok=True)
        if os.path.lexists(dst) and not _real_dir(dst):
            os.unlink(dst)  # a symlink (to a directory too) is replaced, never followed
        if m.isdir():
            if not os.path.lexists(dst):
                os.mkdir(dst)
            self._dirs.append((dst, m))
            return None
        if m.isfile():
            return dst
        if m.issym():
            os.symlink(m.linkname, dst)
            _set_meta(dst, m)
        elif m.islnk():
            target = os.path.realpath(os.path.join(base, m.linkname))
            if not _inside(base, target) or ".." in m.linkname.split("/"):
                raise errors.InvalidRequest("archive link %r leaves %s" % (m.linkname,
                                                                           self._dir))
            os.link(target, dst, follow_symlinks=False)
        return None  # devices, FIFOs: skipped

    def wrote(self, dst, m):
        """The data of the regular file m is in dst."""
        self._count += 1
        _set_meta(dst, m)

    def finish(self):
        """Sets the directories' modes and times; returns the files written."""
        for d, m in reversed(self._dirs):
            _set_meta(d, m)
        return self._count


def _real_dir(path):
    """True when path is a directory itself (not a symlink to one)."""
    return stat.S_ISDIR(os.lstat(path).st_mode)


def _set_meta(path, m):
    """Owner, mode and times of member m on path, never through a symlink:
    a file or directory is opened with O_NOFOLLOW and changed through its fd."""
    if m.issym():
        if os.geteuid() == 0:
            os.chown(path, m.uid, m.gid, follow_symlinks=False)
        os.utime(path, (m.mtime, m.mtime), follow_symlinks=False)
        return
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC |
                 (os.O_DIRECTORY if m.isdir() else 0))
    try:
        _set_meta_fd(fd, m)
    finally:
        os.close(fd)


def _set_meta_fd(fd, m):
    if os.geteuid() == 0:
        os.fchown(fd, m.uid, m.gid)
    os.fchmod(fd, m.mode & 0o7777)
    os.utime(fd, (m.mtime, m.mtime))


class Sandbox:
    """One sandbox. Create with :meth:`create`, attach with :meth:`connect`.

    Every method takes ``timeout`` (seconds): how long to wait for sandboxd
    (and, for exec, for the command) before raising :class:`Timeout`.
    """

    def __init__(self, info, client):
        self._client = client
        self._info = info
        self.id = info["id"]
        self.files = Files(self)
        self._killed = False

    # -- construction ----------------------------------------------------
    @classmethod
    def create(cls, image, backend="container", *, cpu=None, memory_mb=None, pids=None,
               disk_mb=None, env=None, cwd=None, user=None, network=None, ttl=None,
               idle_timeout=None, labels=None, idempotency_key=None, tenant=None, keep_state=None,
               userns=None, allow_out=None, deny_out=None, egress_default=None, socket=None,
               url=None, token=None, timeout=DEFAULT_TIMEOUT, queue_timeout=None):
        """Creates a sandbox from ``image`` on ``backend`` ("container" or
        "docker", "fncall", "firecracker", "qemu") and returns it.

        Raises ImageNotFound, NoCapacity (with the node's reason),
        BackendUnavailable, Unsupported, InvalidRequest, QuotaExceeded (the
        tenant's quota), PermissionDenied (network="host" as a tenant). With
        an ``idempotency_key``, creating again returns the same sandbox.
        ``tenant=NAME`` (an admin's token): the sandbox is that tenant's,
        within its quotas. ``userns`` (container): True runs it in a user
        namespace (root inside is an unprivileged uid on the host; Unsupported
        where the node or the image cannot), False without one; None (the
        default) is the node's choice, one wherever possible
        (``sandbox.info["userns"]`` says which).

        Through a cluster's apiserver (``url=`` one or several of them): the
        sandbox goes to a node with room (``sandbox.info["node"]``); when
        the cluster is full the creation waits for room up to
        ``queue_timeout`` seconds (the apiserver's default without it),
        then raises NoCapacity. With an ``idempotency_key`` a creation whose
        apiserver died is retried on the next URL without a duplicate.

        ``network``: "none" (loopback only, the default), "egress" (its own
        address, NAT out of the node, under a policy: ``allow_out`` and
        ``deny_out`` lists of "CIDR", "name" or "*.domain", each with an
        optional ":PORT" or ":LO-HI"; ``egress_default`` "allow" or "deny",
        by default "deny" when ``allow_out`` is given, else "allow"), or
        "host" (administrators only)."""
        body = _create_body(image, backend, dict(
            cpu=cpu, memory_mb=memory_mb, pids=pids, disk_mb=disk_mb, env=env, cwd=cwd,
            user=user, network=network, ttl=ttl, idle_timeout=idle_timeout, labels=labels,
            idempotency_key=idempotency_key, tenant=tenant, keep_state=keep_state,
            userns=userns, allow_out=allow_out, deny_out=deny_out,
            egress_default=egress_default))
        client = Client(socket=socket, url=url, token=token)
        headers = None if queue_timeout is None else {"Strata-Queue-Timeout": str(queue_timeout)}
        info = client.call("POST", "/v1/sandboxes", body=body, timeout=timeout, headers=headers,
                           retry=idempotency_key is not None)
        return cls(info, client)

    @classmethod
    def create_many(cls, image, count, backend="container", *, idempotency_key=None,
                    parallelism=16, timeout=DEFAULT_TIMEOUT, **kw):
        """Creates ``count`` sandboxes concurrently and returns them in order.
        With ``idempotency_key`` K, sandbox i gets key "K-i", so a retry after
        a partial failure returns the ones already made. If any creation
        fails, the others are deleted and the first error is raised."""
        def one(i):
            key = None if idempotency_key is None else "%s-%d" % (idempotency_key, i)
            return cls.create(image, backend, idempotency_key=key, timeout=timeout, **kw)
        made, first_error = [None] * count, None
        with concurrent.futures.ThreadPoolExecutor(max(1, min(parallelism, count))) as ex:
            futs = {ex.submit(one, i): i for i in range(count)}
            for f in concurrent.futures.as_completed(futs):
                try:
                    made[futs[f]] = f.result()
                except errors.StrataError as e:
                    first_error = first_error or e
        if first_error is not None:
            for sb in made:
                if sb is not None:
                    sb.kill(timeout=timeout)
            raise first_error
        return made

    @classmethod
    def connect(cls, sandbox_id, *, socket=None, url=None, token=None, timeout=DEFAULT_TIMEOUT):
        """Attaches to an existing sandbox by id (NotFound if there is none)."""
        client = Client(socket=socket, url=url, token=token)
        info = client.call("GET", "/v1/sandboxes/" + sandbox_id, timeout=timeout)
        return cls(info, client)

    @classmethod
    def list(cls, labels=None, state=None, backend=None, *, tenant=None, socket=None, url=None,
             token=None, timeout=DEFAULT_TIMEOUT):
        """Returns the sandboxes of the node (a tenant's: its own), filtered by
        labels (a dict; all must match), state ("running", "paused"),
        backend and tenant (its name; "" the operator's)."""
        client = Client(socket=socket, url=url, token=token)
        r = client.call("GET", "/v1/sandboxes",
                        query=_list_query(labels, state, backend, tenant), timeout=timeout)
        return [cls(i, client) for i in r["sandboxes"]]

    # -- description ------------------------------------------------------
    def _path(self, sub=""):
        return "/v1/sandboxes/%s%s" % (self.id, "/" + sub if sub else "")

    @property
    def info(self):
        """The description returned by the last create/get/refresh (a dict)."""
        return self._info

    @property
    def backend(self):
        return self._info.get("backend")

    @property
    def state(self):
        return self._info.get("state")

    @property
    def labels(self):
        return dict(self._info.get("labels") or {})

    @property
    def tenant(self):
        """The tenant that created it (None: the operator)."""
        return self._info.get("tenant")

    def refresh(self, timeout=DEFAULT_TIMEOUT):
        """Fetches the current description; returns it."""
        self._info = self._call("GET", "", timeout=timeout)
        return self._info

    def _call(self, method, sub, body=None, timeout=DEFAULT_TIMEOUT):
        try:
            return self._client.call(method, self._path(sub), body=body, timeout=timeout)
        except errors.NotFound as e:
            if self._killed:
                raise errors.Exited("sandbox %s was killed" % self.id, code=e.code,
                                    status=e.status) from e
            raise

    # -- exec --------------------------------------------------------------
    def exec(self, cmd=None, *, python=None, env=None, cwd=None, user=None, stdin=None,
             timeout=60.0, output_cap=None, background=False):
        """Runs a command (a list of arguments, or a string for /bin/sh -c),
        or Python source with ``python=``, and returns an
        :class:`ExecResult`. Raises Timeout (with ``.result``) when it ran
        past ``timeout`` seconds and was killed. ``stdin``: bytes, str, an
        iterable of chunks or a file (see :meth:`exec_stream`). With
        ``background=True`` it returns a :class:`BackgroundExec` as soon as
        the command started (container backend; ``timeout`` still applies:
        give a long one to a server)."""
        if background:
            r = self._call("POST", "exec", body=_background_body(
                cmd, python, env, cwd, user, stdin, timeout, output_cap))
            return BackgroundExec(self, r["exec_id"], r.get("pid"))
        if stdin is PIPE:
            raise ValueError("exec() cannot take strata.PIPE: nobody would write it; "
                             "use exec_stream()")
        out, err, result = [], [], None
        for ev in self.exec_stream(cmd, python=python, env=env, cwd=cwd, user=user,
                                   stdin=stdin, timeout=timeout, output_cap=output_cap,
                                   _raise_timeout=False):
            if ev.kind == "stdout":
                out.append(ev.data)
            elif ev.kind == "stderr":
                err.append(ev.data)
            else:
                result = ev.result
        result.stdout_raw, result.stderr_raw = b"".join(out), b"".join(err)
        if result.timed_out:
            raise errors.Timeout("command ran past its timeout of %s s" % timeout, result=result)
        return result

    def exec_stream(self, cmd=None, *, python=None, env=None, cwd=None, user=None, stdin=None,
                    timeout=60.0, output_cap=None, _raise_timeout=True):
        """Runs a command like :meth:`exec` and returns an
        :class:`ExecProcess`: iterate it for :class:`ExecEvent` objects as
        output arrives, the last one of kind "exit". ``stdin`` is bytes or
        str (given up front), an iterable of chunks or a binary file (fed as
        the command runs, then closed), or ``strata.PIPE`` (write it
        yourself: :meth:`ExecProcess.write`, :meth:`ExecProcess.close_stdin`).
        Streamed stdin needs a backend with ``exec_stdin_stream`` (container;
        fncall raises Unsupported). Closing the process early kills the
        command."""
        body = _exec_body(cmd, python, env, cwd, user, stdin, timeout, output_cap)
        return ExecProcess(self, body, stdin, timeout, _raise_timeout)

    def execs(self, timeout=DEFAULT_TIMEOUT):
        """The execs of the sandbox, running or ended and not yet collected:
        dicts with exec_id, cmd, pid, started_at (wall seconds), running,
        background, attached, exit_code and signal."""
        return self._call("GET", "execs", timeout=timeout)["execs"]

    def exec_connect(self, exec_id, timeout=None):
        """Attaches to a running exec's output: an :class:`ExecProcess`. A
        background exec nobody streams gives what it printed while nobody
        watched, then on to its exit; an exec another client streams (a
        foreground one too) gives its output from now on and its exit.
        Closing it detaches; the command runs on."""
        return ExecProcess(self, None, None, timeout or 3600.0, raise_timeout=False,
                           _attach=exec_id)

    def exec_signal(self, exec_id, sig):
        """Sends a signal (a number, or a name such as "TERM") to an exec's
        process group."""
        self._call("POST", "execs/%s/signal" % exec_id, body={"signal": sig})

    def exec_kill(self, exec_id):
        """SIGKILL to an exec's process group (an ended one is forgotten)."""
        self._call("DELETE", "execs/%s" % exec_id)

    # -- lifecycle ----------------------------------------------------------
    def pause(self, timeout=DEFAULT_TIMEOUT):
        """Freezes every process of the sandbox (Unsupported on fncall)."""
        self._info = self._call("POST", "pause", timeout=timeout)

    def resume(self, timeout=DEFAULT_TIMEOUT):
        """Thaws a paused sandbox."""
        self._info = self._call("POST", "resume", timeout=timeout)

    # -- usage and settings -------------------------------------------------
    def metrics(self, timeout=DEFAULT_TIMEOUT):
        """What the sandbox uses now: a :class:`Metrics` (CPU seconds,
        memory now and peak, pids, disk used, execs run). Unsupported on
        fncall (its sandboxes hold nothing between calls)."""
        return Metrics(self._call("GET", "metrics", timeout=timeout))

    def network(self, timeout=DEFAULT_TIMEOUT):
        """Network "egress": the sandbox's address, gateway, policy and
        bytes out and in (a dict)."""
        return self._call("GET", "network", timeout=timeout)

    def set_network_policy(self, allow_out=None, deny_out=None, default=None,
                           timeout=DEFAULT_TIMEOUT):
        """Replaces the egress policy (as :meth:`create` takes it), at once
        and whole; connections already open are judged again at their next
        packet. Returns :meth:`network`'s dict."""
        body = {k: v for k, v in (("allow_out", allow_out), ("deny_out", deny_out),
                                  ("egress_default", default)) if v is not None}
        return self._call("PUT", "network", body=body, timeout=timeout)

    def network_log(self, offset=0, timeout=DEFAULT_TIMEOUT):
        """The decision log: a list of dicts, one per DNS answer and per
        verdict on a connection (``time``, ``kind`` "dns" or "connect",
        ``dst``, ``port``, ``proto``, ``name``, ``verdict`` "allow" or
        "deny", ``rule``)."""
        raw = self._client.call("GET", self._path("network/log"), query={"offset": str(offset)},
                                timeout=timeout, raw=True)
        return [json.loads(l) for l in raw.decode().splitlines() if l.strip()]

    def set_timeout(self, seconds, timeout=DEFAULT_TIMEOUT):
        """Gives the sandbox a new deadline ``seconds`` from now (0: none),
        replacing its ``ttl``; kept across a sandboxd restart."""
        self._info = self._call("PATCH", "", body=_timeout_body(seconds), timeout=timeout)

    def set_labels(self, labels, timeout=DEFAULT_TIMEOUT):
        """Replaces the sandbox's labels with ``labels`` (a dict of strings,
        the limits of :meth:`create`)."""
        self._info = self._call("PATCH", "", body=_labels_body(labels), timeout=timeout)

    def kill(self, timeout=DEFAULT_TIMEOUT):
        """Deletes the sandbox and everything in it. Idempotent: killing a
        sandbox that is already gone is not an error."""
        try:
            self._client.call("DELETE", self._path(), timeout=timeout)
        except errors.NotFound:
            pass
        self._killed = True

    delete = kill

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.kill()
        return False

    def __repr__(self):
        return "Sandbox(%s, %s, %s)" % (self.id, self._info.get("image"), self.backend)


def capabilities(backend=None, *, socket=None, url=None, token=None, timeout=DEFAULT_TIMEOUT):
    """What each backend of the node can do: a dict backend -> dict of
    features ("available", "reason", "exec", "files", "pause", "python", ...),
    or the dict of one backend."""
    r = Client(socket=socket, url=url, token=token).call("GET", "/v1/capabilities",
                                                         timeout=timeout)
    return _capabilities_of(r, backend)


def _capabilities_of(r, backend):
    """What GET /v1/capabilities answered (r) says of backend (None: all)."""
    caps = r["backends"]
    if backend is None:
        return caps
    name = r.get("aliases", {}).get(backend, backend)
    if name not in caps:
        raise errors.InvalidRequest("unknown backend %r" % backend)
    return caps[name]


def node_metrics(*, socket=None, url=None, token=None, timeout=DEFAULT_TIMEOUT):
    """The node's counters and admission state (a dict)."""
    return Client(socket=socket, url=url, token=token).call("GET", "/v1/node", timeout=timeout)


def tenant_info(*, socket=None, url=None, token=None, timeout=DEFAULT_TIMEOUT):
    """Who the caller is to sandboxd, its quotas and what its sandboxes hold
    (GET /v1/tenant): ``{"tenant": name or None (the operator), "admin":
    bool, "quotas": {"max_sandboxes", "cpu", "memory_mb"} (None: no limit),
    "usage": {"sandboxes", "cpu", "memory_mb"}}``."""
    return Client(socket=socket, url=url, token=token).call("GET", "/v1/tenant", timeout=timeout)


def health(*, socket=None, url=None, token=None, timeout=5.0):
    """Returns True when sandboxd answers its health check."""
    r = Client(socket=socket, url=url, token=token).call("GET", "/v1/health", timeout=timeout)
    return r.get("status") == "ok"
