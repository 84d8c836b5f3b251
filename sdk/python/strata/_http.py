"""HTTP/1.1 to strata-sandboxd over its unix socket (or TCP with a bearer
token), with the standard library's http.client.

Where sandboxd is found, first match wins:
  1. the ``socket=`` / ``url=`` arguments (``url`` may be a list, or several
     URLs separated by commas: a cluster's apiservers, tried in turn),
  2. ``$STRATA_SANDBOXD_SOCKET`` or ``$STRATA_SANDBOXD_URL`` (+ ``$STRATA_SANDBOXD_TOKEN``),
  3. the home (``$STRATA_HOME``, else ``./.strata``): a cluster of several
     nodes (``strata up --nodes N``) is its apiserver (``run/apiserver.addr``,
     the token in ``api.token``), one node its ``run/sandboxd.sock``.

One connection per request: connecting to a unix socket costs microseconds,
and it makes every object safe to share between threads.
"""
import http.client
import json
import os
import socket
import urllib.parse

from . import errors

DEFAULT_TIMEOUT = 60.0


class UnixHTTPConnection(http.client.HTTPConnection):
    """An HTTPConnection to a unix socket path."""

    def __init__(self, path, timeout=DEFAULT_TIMEOUT):
        super().__init__("localhost", timeout=timeout)
        self._path = path

    def connect(self):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(self.timeout)
        try:
            s.connect(self._path)
        except OSError:
            s.close()
            raise
        self.sock = s


def home_dir():
    return os.environ.get("STRATA_HOME") or os.path.join(os.getcwd(), ".strata")


def home_cluster():
    """(url, token) of the home's apiserver when `strata up --nodes N` runs
    one there, else (None, None)."""
    home = home_dir()
    try:
        with open(os.path.join(home, "run", "apiserver.addr")) as f:
            addr = f.read().strip()
        if not os.path.exists(os.path.join(home, "run", "apiserver.pid")):
            return None, None
    except OSError:
        return None, None
    token = None
    try:
        with open(os.path.join(home, "api.token")) as f:
            token = f.read().strip()
    except OSError:
        pass
    return ("http://" + addr if addr else None), token


def default_socket():
    """The sandboxd socket path this process would use."""
    if os.environ.get("STRATA_SANDBOXD_SOCKET"):
        return os.environ["STRATA_SANDBOXD_SOCKET"]
    home = os.environ.get("STRATA_HOME") or os.path.join(os.getcwd(), ".strata")
    return os.path.join(home, "run", "sandboxd.sock")


class Client:
    """A sandboxd endpoint. Cheap; holds no connection."""

    def __init__(self, socket=None, url=None, token=None):
        if url is None and socket is None:
            url = os.environ.get("STRATA_SANDBOXD_URL")
        if url is None and socket is None and not os.environ.get("STRATA_SANDBOXD_SOCKET"):
            url, home_token = home_cluster()
            token = token or home_token
        if isinstance(url, str):
            url = [u.strip() for u in url.split(",") if u.strip()] or None
        # several URLs: a cluster's apiservers (any serves any sandbox); the
        # first that answers is kept for the next requests
        self.urls = list(url) if url else []
        self.url = self.urls[0] if self.urls else None
        self.token = token or os.environ.get("STRATA_SANDBOXD_TOKEN")
        self.socket = None if self.url else (socket or default_socket())

    def __repr__(self):
        return "Client(%r)" % (self.url or self.socket)

    def _conn(self, timeout):
        if self.url:
            u = urllib.parse.urlsplit(self.url)
            return http.client.HTTPConnection(u.hostname, u.port or 80, timeout=timeout)
        return UnixHTTPConnection(self.socket, timeout=timeout)

    def prepare(self, method, path, body=None, query=None, content_type="application/json",
                extra=None):
        """What a request sends: (target, body bytes or None, headers).
        Shared by this client and the asyncio one (_aio_http.py)."""
        if query:
            path += "?" + urllib.parse.urlencode(query)
        headers = dict(extra or {})
        if body is not None:
            if not isinstance(body, (bytes, bytearray)):
                body = json.dumps(body).encode()
            headers["Content-Type"] = content_type
        if self.token:  # on either transport: a tenant's token is its identity
            headers["Authorization"] = "Bearer " + self.token
        return path, body, headers

    def where(self):
        """The endpoint, for messages."""
        return self.url or self.socket

    def open(self, method, path, body=None, query=None, timeout=DEFAULT_TIMEOUT,
             content_type="application/json", headers=None, retry=False):
        """Sends a request; returns (connection, response). The caller reads
        the response and closes the connection. With several URLs, a
        connection refused goes to the next one; so does any connection
        failure when ``retry`` (a GET, a create with an idempotency key):
        the retry says ``Strata-Attempt: N``, and an apiserver then finds
        what an earlier attempt made instead of making it again."""
        path, body, hdrs = self.prepare(method, path, body, query, content_type, headers)
        attempts = max(1, len(self.urls)) * (2 if retry and len(self.urls) > 1 else 1)
        start = self.urls.index(self.url) if self.url in self.urls else 0
        for attempt in range(attempts):
            if self.urls:
                self.url = self.urls[(start + attempt) % len(self.urls)]
            if attempt:
                hdrs["Strata-Attempt"] = str(attempt + 1)
            conn = self._conn(timeout)
            try:
                conn.request(method, path, body=body, headers=hdrs)
                resp = conn.getresponse()
                break
            except (OSError, http.client.HTTPException) as e:
                conn.close()
                moved = isinstance(e, ConnectionRefusedError) or (
                    retry and not isinstance(e, socket.timeout))
                if attempt + 1 < attempts and moved and len(self.urls) > 1:
                    continue
                if isinstance(e, http.client.HTTPException):
                    raise errors.StrataError("request to %s failed: %r" % (self.where(), e)) from e
                raise self._failed(e, timeout) from e
        if resp.status >= 400:
            try:
                data = resp.read()
            except OSError:
                data = b""
            finally:
                conn.close()
            raise error_of(resp.status, data)
        return conn, resp

    def _failed(self, e, timeout):
        """The SDK's exception for a failed exchange with sandboxd."""
        if isinstance(e, socket.timeout):
            return errors.Timeout("no answer from sandboxd within %.1f s" % timeout)
        return unreachable(self, e)

    def upload(self, method, path, source, length=None, query=None, timeout=DEFAULT_TIMEOUT):
        """Streams a request body and returns the parsed JSON answer. source
        is a binary file (sent with sendfile when it is a real one: length
        bytes from its position) or an iterable of bytes (sent chunked).
        An answer that comes before the body was taken whole (sandboxd
        refused it, or the disk filled) is read and raised."""
        if query:
            path += "?" + urllib.parse.urlencode(query)
        conn = self._conn(timeout)
        try:
            conn.putrequest(method, path)
            conn.putheader("Content-Type", "application/octet-stream")
            if self.token:
                conn.putheader("Authorization", "Bearer " + self.token)
            if length is None:
                conn.putheader("Transfer-Encoding", "chunked")
            else:
                conn.putheader("Content-Length", str(length))
            conn.endheaders()
            try:
                if length is None:
                    for chunk in source:
                        if chunk:
                            conn.send(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                    conn.send(b"0\r\n\r\n")
                elif length:
                    conn.sock.sendfile(source, count=length)
            except (BrokenPipeError, ConnectionResetError):
                pass  # sandboxd answered early and closed: its answer says why
            resp = conn.getresponse()
            data = resp.read()
        except (OSError, http.client.HTTPException) as e:
            conn.close()
            raise self._failed(e, timeout) from e
        conn.close()
        try:
            parsed = json.loads(data) if data else None
        except ValueError:
            parsed = None
        if resp.status >= 400:
            raise errors.from_response(resp.status, parsed)
        return parsed

    def call(self, method, path, body=None, query=None, timeout=DEFAULT_TIMEOUT, raw=False,
             content_type="application/json", headers=None, retry=None):
        """One request; returns the parsed JSON body (or bytes with raw)."""
        if retry is None:
            retry = method == "GET"
        again = retry and len(self.urls) > 1
        for attempt in range(2 if again else 1):
            hdrs = dict(headers or {})
            if attempt:  # the answer was cut (its apiserver died): the next one
                self.url = self.urls[(self.urls.index(self.url) + 1) % len(self.urls)]
                hdrs["Strata-Attempt"] = "2"
            conn, resp = self.open(method, path, body, query, timeout, content_type, hdrs, retry)
            try:
                data = resp.read()
                break
            except socket.timeout as e:
                raise errors.Timeout("sandboxd did not answer within %.1f s" % timeout) from e
            except (OSError, http.client.HTTPException) as e:
                if not again:
                    raise
                if attempt:
                    raise errors.StrataError("answer from %s cut: %r" % (self.where(), e)) from e
            finally:
                conn.close()
        if raw:
            return data
        return json_of(data)


def unreachable(client, e):
    """The StrataError for a connection or send that failed with OSError e."""
    if isinstance(e, (FileNotFoundError, ConnectionRefusedError)):
        return errors.StrataError("sandboxd is not reachable at %s: %s" % (client.where(), e))
    return errors.StrataError("request to sandboxd failed: %s" % e)


def error_of(status, data):
    """The exception for an error response (status >= 400, its body)."""
    try:
        parsed = json.loads(data) if data else None
    except ValueError:
        parsed = None
    return errors.from_response(status, parsed)


def json_of(data):
    """A JSON response body, parsed (None when empty)."""
    return json.loads(data) if data else None
