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
"""
import asyncio
import urllib.parse

from . import errors
from ._http import DEFAULT_TIMEOUT, error_of, json_of, unreachable

#: The longest line read from sandboxd (a response head line, a chunk
#: size line) and the stream buffer's size.
LINE_MAX = 1 << 20
#: The most header lines a response may have.
HEADERS_MAX = 100


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


async def _connect(client):
    if client.url:
        u = urllib.parse.urlsplit(client.url)
        return await asyncio.open_connection(u.hostname, u.port or 80, limit=LINE_MAX)
    return await asyncio.open_unix_connection(client.socket, limit=LINE_MAX)


async def _open(client, method, path, body, query, content_type):
    target, body, headers = client.prepare(method, path, body, query, content_type)
    try:
        reader, writer = await _connect(client)
    except OSError as e:
        raise unreachable(client, e) from e
    head = ["%s %s HTTP/1.1" % (method, target), "Host: localhost", "Connection: close",
            "Content-Length: %d" % (len(body) if body is not None else 0)]
    head += ["%s: %s" % kv for kv in headers.items()]
    try:
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode("latin-1"))
        if body:
            writer.write(body)
        await writer.drain()
        status, rheaders = await _read_head(reader)
    except OSError as e:
        writer.close()
        raise unreachable(client, e) from e
    except BaseException:
        writer.close()
        raise
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
