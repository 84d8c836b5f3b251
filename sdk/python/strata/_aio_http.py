"""HTTP/1.1 to strata-sandboxd on asyncio streams (standard library only),
for :mod:`strata.aio`: no thread per call, so one event loop can hold a
thousand requests and exec streams at once.

The endpoint, the request's target, body and headers, and the mapping of
error responses to exceptions are the synchronous client's
(:class:`strata._http.Client`); this module writes the request head and
reads the response: its head, then a body framed by Content-Length or
chunked transfer coding (exec streams), or ended by the close. One
connection per request, as in the synchronous client
(``Connection: close``).

Streamed bodies (files of any size, tar streams), both ways a piece at a
time: :func:`upload` sends a file or the chunks of an (async) iterable on
a plain non-blocking socket (``loop.sock_sendall``), so that an answer
sandboxd sends before it took the whole body (a refused upload, a full
disk) and its close stay readable: asyncio's stream transport would drop
them at the first EPIPE; :func:`download` writes a body into a file.
"""
import asyncio
import contextlib
import socket
import urllib.parse

from . import errors
from ._http import DEFAULT_TIMEOUT, error_of, json_of, unreachable

#: The longest line read from sandboxd (a response head line, a chunk
#: size line) and the stream buffer's size.
LINE_MAX = 1 << 20
#: The most header lines a response may have.
HEADERS_MAX = 100
#: Bytes of a streamed body read or sent at once (the synchronous SDK's
#: TRANSFER_CHUNK): bounded memory whatever the size.
PIECE = 1 << 20


class Response:
    """An open response: ``status``, ``headers`` (lower-case names), and
    its body through :meth:`read` (all of it) or :meth:`readline`."""

    def __init__(self, reader, writer, status, headers):
        self._r, self._w = reader, writer
        self.status = status
        self.headers = headers
        self._buf = bytearray()
        self._chunked = "chunked" in headers.get("transfer-encoding", "").lower()
        cl = headers.get("content-length")
        self._left = int(cl) if cl is not None and not self._chunked else None
        self._eof = self._left == 0

    async def _fill(self):
        """Appends the next piece of the body to the buffer; sets _eof at
        its end."""
        if self._chunked:
            line = await self._r.readline()
            if not line.endswith(b"\n"):
                raise errors.Exited("sandboxd ended the response inside a chunk")
            size = int(line.split(b";", 1)[0].strip() or b"0", 16)
            if size == 0:
                while (await self._r.readline()) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                self._eof = True
                return
            self._buf += await self._r.readexactly(size)
            await self._r.readexactly(2)
        elif self._left is not None:
            piece = await self._r.read(min(self._left, 1 << 16))
            if not piece:
                raise errors.Exited("sandboxd ended the response early")
            self._left -= len(piece)
            self._buf += piece
            self._eof = self._left == 0
        else:
            piece = await self._r.read(1 << 16)
            self._buf += piece
            self._eof = not piece

    async def read(self):
        """The rest of the body (bytes)."""
        while not self._eof:
            await self._fill()
        data, self._buf = bytes(self._buf), bytearray()
        return data

    async def read_piece(self):
        """The next piece of the body (bytes); b"" at its end."""
        while not self._buf and not self._eof:
            await self._fill()
        data, self._buf = bytes(self._buf), bytearray()
        return data

    async def readline(self):
        """The next line of the body, with its newline; b"" at its end."""
        while True:
            i = self._buf.find(b"\n")
            if i >= 0:
                line = bytes(self._buf[:i + 1])
                del self._buf[:i + 1]
                return line
            if self._eof:
                line, self._buf = bytes(self._buf), bytearray()
                return line
            await self._fill()

    def close(self):
        """Closes the connection (a command of an exec stream is killed)."""
        self._w.close()


async def _read_head(reader):
    line = await reader.readline()
    parts = line.split(None, 2)
    if len(parts) < 2 or not parts[0].startswith(b"HTTP/1."):
        raise errors.StrataError("sandboxd sent no HTTP response (%r)" % line[:80])
    headers = {}
    for _ in range(HEADERS_MAX):
        h = await reader.readline()
        if h in (b"\r\n", b"\n"):
            return int(parts[1]), headers
        if not h:
            break
        k, _, v = h.decode("latin-1").partition(":")
        headers[k.strip().lower()] = v.strip()
    raise errors.StrataError("sandboxd sent a malformed response head")


class _Protocol(asyncio.StreamReaderProtocol):
    """asyncio's stream protocol, but a connection lost with an error (a
    reset: sandboxd answered an upload early and closed with the body
    unread, which gives ECONNRESET) ends the reader like a close: the
    answer already received stays readable, where asyncio would raise the
    reset in its place. A response cut short is still found by its
    framing; a write after the loss still fails."""

    def connection_lost(self, exc):
        super().connection_lost(None)


async def _streams(client, sock=None):
    """(reader, writer) on a new connection to sandboxd, or on sock."""
    loop = asyncio.get_running_loop()
    reader = asyncio.StreamReader(limit=LINE_MAX, loop=loop)
    protocol = _Protocol(reader, loop=loop)
    if client.url:
        u = urllib.parse.urlsplit(client.url)
        where = {"sock": sock} if sock else {"host": u.hostname, "port": u.port or 80}
        transport, _ = await loop.create_connection(lambda: protocol, **where)
    else:
        where = {"sock": sock} if sock else {"path": client.socket}
        transport, _ = await loop.create_unix_connection(lambda: protocol, **where)
    return reader, asyncio.StreamWriter(transport, protocol, reader, loop)


def _head(method, target, headers, length):
    """A request head; length None: the body goes chunked."""
    head = ["%s %s HTTP/1.1" % (method, target), "Host: localhost", "Connection: close",
            "Transfer-Encoding: chunked" if length is None else "Content-Length: %d" % length]
    head += ["%s: %s" % kv for kv in headers.items()]
    return ("\r\n".join(head) + "\r\n\r\n").encode("latin-1")


async def _open(client, method, path, body, query, content_type):
    target, body, headers = client.prepare(method, path, body, query, content_type)
    try:
        reader, writer = await _streams(client)
    except OSError as e:
        raise unreachable(client, e) from e
    with _closed_on_error(client, writer):
        writer.write(_head(method, target, headers, len(body) if body is not None else 0))
        if body:
            writer.write(body)
        await writer.drain()
    return await _response(client, reader, writer)


@contextlib.contextmanager
def _closed_on_error(client, conn):
    """Closes conn (a writer or socket) when the block raises; an OSError
    becomes the SDK's error for an unreachable sandboxd."""
    try:
        yield
    except OSError as e:
        conn.close()
        raise unreachable(client, e) from e
    except BaseException:
        conn.close()
        raise


async def _response(client, reader, writer, head_timeout=None):
    """Reads the response's head (within head_timeout seconds, if given);
    returns the :class:`Response`, or raises what an error response
    means. The connection is closed unless a Response is returned."""
    with _closed_on_error(client, writer):
        status, rheaders = await asyncio.wait_for(_read_head(reader), head_timeout)
    resp = Response(reader, writer, status, rheaders)
    if status >= 400:
        try:
            data = await resp.read()
        except (OSError, errors.StrataError, asyncio.IncompleteReadError):
            data = b""
        finally:
            resp.close()
        raise error_of(status, data)
    return resp


async def stream(client, method, path, body=None, query=None, timeout=DEFAULT_TIMEOUT,
                 content_type="application/json"):
    """Sends a request; returns the :class:`Response` once its head came
    (within timeout seconds). The caller reads it and closes it."""
    try:
        return await asyncio.wait_for(_open(client, method, path, body, query, content_type),
                                      timeout)
    except asyncio.TimeoutError as e:
        raise errors.Timeout("no answer from sandboxd within %.1f s" % timeout) from e


def _timed(what, timeout):
    return errors.Timeout("sandboxd did not %s within %.1f s" % (what, timeout))


async def _raw_socket(client):
    """A connected non-blocking socket to sandboxd; the caller closes it."""
    loop = asyncio.get_running_loop()
    if client.url:
        u = urllib.parse.urlsplit(client.url)
        family, kind, proto, _, addr = (await loop.getaddrinfo(
            u.hostname, u.port or 80, type=socket.SOCK_STREAM))[0]
    else:
        family, kind, proto, addr = socket.AF_UNIX, socket.SOCK_STREAM, 0, client.socket
    sock = socket.socket(family, kind, proto)
    sock.setblocking(False)
    try:
        await loop.sock_connect(sock, addr)
    except BaseException:
        sock.close()
        raise
    return sock


async def _pieces(source, length):
    """The pieces of a body: length bytes of a binary file from its
    position, or the chunks of an iterable or async iterable (length None)."""
    if length is not None:
        left = length
        while left > 0:
            piece = source.read(min(left, PIECE))
            if not piece:
                raise errors.StrataError("the file shrank while it was sent")
            left -= len(piece)
            yield piece
    elif hasattr(source, "__aiter__"):
        async for piece in source:
            yield piece
    else:
        for piece in source:
            yield piece


async def _send_body(sock, head, source, length, timeout):
    """Sends the head and the body, each piece within timeout seconds;
    returns quietly when sandboxd closed early (its answer says why)."""
    loop = asyncio.get_running_loop()

    async def send(data):
        try:
            await asyncio.wait_for(loop.sock_sendall(sock, data), timeout)
        except asyncio.TimeoutError as e:
            raise _timed("take the body", timeout) from e
    try:
        await send(head)
        async for piece in _pieces(source, length):
            if piece:
                await send(piece if length is not None else
                           b"%x\r\n%s\r\n" % (len(piece), bytes(piece)))
        if length is None:
            await send(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError):
        pass


async def upload(client, method, path, source, length=None, query=None,
                 timeout=DEFAULT_TIMEOUT):
    """Streams a request body (a binary file: length bytes from its
    position; or an iterable or async iterable of bytes, sent chunked) and
    returns the parsed JSON answer. timeout bounds each piece and the wait
    for the answer, not the whole transfer (any size)."""
    target, _, headers = client.prepare(method, path, None, query)
    headers["Content-Type"] = "application/octet-stream"
    try:
        sock = await asyncio.wait_for(_raw_socket(client), timeout)
    except asyncio.TimeoutError as e:
        raise _timed("accept the connection", timeout) from e
    except OSError as e:
        raise unreachable(client, e) from e
    with _closed_on_error(client, sock):
        await _send_body(sock, _head(method, target, headers, length), source, length, timeout)
        reader, writer = await _streams(client, sock)
    try:
        resp = await _response(client, reader, writer, head_timeout=timeout)
        try:
            return json_of(await asyncio.wait_for(resp.read(), timeout))
        finally:
            resp.close()
    except asyncio.TimeoutError as e:
        raise _timed("answer", timeout) from e


async def download(client, path, out, query=None, timeout=DEFAULT_TIMEOUT):
    """GET path and writes its body into out (a binary file object) a
    piece at a time, each within timeout seconds; returns the bytes."""
    resp = await stream(client, "GET", path, query=query, timeout=timeout)
    n = 0
    try:
        async for piece in pieces_of(resp, timeout, "the file"):
            out.write(piece)
            n += len(piece)
        return n
    finally:
        resp.close()


async def pieces_of(resp, timeout, what):
    """The pieces of resp's body, each within timeout seconds; a body cut
    short raises StrataError."""
    while True:
        try:
            piece = await asyncio.wait_for(resp.read_piece(), timeout)
        except asyncio.TimeoutError as e:
            raise _timed("send " + what, timeout) from e
        except (OSError, asyncio.IncompleteReadError, errors.Exited) as e:
            raise errors.StrataError("the stream of %s ended early: %s" % (what, e)) from e
        if not piece:
            return
        yield piece


async def call(client, method, path, body=None, query=None, timeout=DEFAULT_TIMEOUT, raw=False,
               content_type="application/json"):
    """One request; returns the parsed JSON body (or bytes with raw)."""
    async def whole():
        resp = await _open(client, method, path, body, query, content_type)
        try:
            return await resp.read()
        except (OSError, asyncio.IncompleteReadError) as e:
            raise errors.StrataError("the answer of sandboxd broke off: %s" % e) from e
        finally:
            resp.close()
    try:
        data = await asyncio.wait_for(whole(), timeout)
    except asyncio.TimeoutError as e:
        raise errors.Timeout("sandboxd did not answer within %.1f s" % timeout) from e
    return data if raw else json_of(data)
