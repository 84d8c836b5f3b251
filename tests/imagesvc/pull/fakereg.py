#!/usr/bin/env python3
"""fakereg.py — a registry (OCI distribution API, read side) for hostile
tests, on 127.0.0.1 only. It serves one OCI image layout:

  GET /v2/                         200 (or 401 with a Bearer challenge)
  GET /v2/NAME/manifests/REF       by tag (index.json ref.name) or digest
  GET /v2/NAME/blobs/DIGEST        with Range support
  GET /token                       anonymous bearer tokens (with "bearer")

and misbehaves as the JSON config (--config F) says:
  "tamper": N             layer N is served with one byte flipped
  "drop": {"layer": N, "after": BYTES, "times": K, "range": true}
                          the first K requests for layer N (K < 0: all) send
                          the full Content-Length, BYTES bytes, then close;
                          with range false, Range requests are ignored;
                          with "stall": S, it stalls S seconds before closing
  "huge_headers": BYTES   every response carries that many header bytes
  "header_line": BYTES    every response carries one header line that long
  "trickle": true         headers arrive a byte per 50 ms, without end
  "huge_manifest": BYTES  the manifest is padded to that size (valid JSON,
                          wrong digest: the limit must trip first)
  "chunked": true         every body in chunked transfer encoding
  "redirect": true        blob requests answer 307 to a second port
  "bearer": true          /v2/ requests need a token from /token
  "only_platform": "arm64" the tag resolves to a Docker manifest list that
                          only has an arm64 entry
It appends one line per request to --log F ("METHOD PATH RANGE AUTH") and
writes its ports to --port-file F ("PORT REDIRECT_PORT")."""
import argparse
import hashlib
import json
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LIST_MT = "application/vnd.docker.distribution.manifest.list.v2+json"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--layout", required=True)
    ap.add_argument("--config", required=True)
    ap.add_argument("--port-file", required=True)
    ap.add_argument("--log", required=True)
    a = ap.parse_args()
    with open(a.config) as f:
        cfg = json.load(f)
    blobs = os.path.join(a.layout, "blobs", "sha256")
    with open(os.path.join(a.layout, "index.json")) as f:
        index = json.load(f)
    tags = {m["annotations"]["org.opencontainers.image.ref.name"]: m for m in index["manifests"]}
    first = next(iter(tags.values()))
    with open(os.path.join(blobs, first["digest"][7:])) as f:
        manifest = json.load(f)
    layer_digests = [l["digest"] for l in manifest["layers"]]
    extra = {}  # synthetic documents by digest: (media type, bytes)
    if cfg.get("only_platform"):
        lst = {"schemaVersion": 2, "mediaType": LIST_MT, "manifests": [{
            "mediaType": first["mediaType"], "digest": first["digest"], "size": first["size"],
            "platform": {"os": "linux", "architecture": cfg["only_platform"]}}]}
        data = json.dumps(lst).encode()
        d = "sha256:" + hashlib.sha256(data).hexdigest()
        extra[d] = (LIST_MT, data)
        tags = {t: {"digest": d, "mediaType": LIST_MT} for t in tags}
    drops = {"n": 0}
    lock = threading.Lock()
    logf = open(a.log, "a", buffering=1)
    ports = {}

    def blob_bytes(digest):
        if digest in extra:
            return extra[digest][1]
        with open(os.path.join(blobs, digest[7:]), "rb") as f:
            data = f.read()
        if "tamper" in cfg and digest == layer_digests[cfg["tamper"]]:
            data = bytearray(data)
            data[len(data) // 2] ^= 0xFF
            data = bytes(data)
        return data

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def start(self, code, ctype=None, length=None, headers=()):
            self.send_response(code)
            if ctype:
                self.send_header("Content-Type", ctype)
            if cfg.get("header_line"):
                self.send_header("X-Long", "l" * cfg["header_line"])
            if cfg.get("huge_headers"):
                n = cfg["huge_headers"]
                for i in range(n // 4000 + 1):
                    self.send_header("X-Padding-%d" % i, "p" * 3990)
            for k, v in headers:
                self.send_header(k, v)
            if cfg.get("chunked") and length is not None:
                self.send_header("Transfer-Encoding", "chunked")
            elif length is not None:
                self.send_header("Content-Length", str(length))
            self.end_headers()

        def body(self, data):
            if not cfg.get("chunked"):
                self.wfile.write(data)
                return
            step = 1
            off = 0
            while off < len(data):
                n = min(step, len(data) - off)
                self.wfile.write(b"%x;ext=1\r\n" % n + data[off:off + n] + b"\r\n")
                off += n
                step = step * 3 + 1
            self.wfile.write(b"0\r\nX-Trailer: yes\r\n\r\n")

        def send(self, code, data, ctype="application/json", headers=()):
            self.start(code, ctype, len(data), headers)
            self.body(data)

        def authorized(self):
            if not cfg.get("bearer"):
                return True
            if self.headers.get("Authorization") == "Bearer good-token":
                return True
            port = ports["main"]
            self.send(401, b'{"errors":[{"code":"UNAUTHORIZED"}]}', headers=[(
                "WWW-Authenticate", 'Bearer realm="http://127.0.0.1:%d/token",service="fake",'
                                    'scope="repository:strata/busybox:pull"' % port)])
            return False

        def do_GET(self):
            logf.write("GET %s %s %s\n" % (self.path, self.headers.get("Range", "-"),
                                           (self.headers.get("Authorization") or "-").split(" ")[0]))
            p = self.path
            if p.startswith("/token"):
                return self.send(200, json.dumps({"token": "good-token"}).encode())
            if p.startswith("/redirected/"):
                return self.blob(p[len("/redirected/"):])
            if not p.startswith("/v2/"):
                return self.send(404, b"{}")
            if not self.authorized():
                return
            if cfg.get("trickle"):  # headers at a byte per 50 ms, forever
                self.wfile.write(b"HTTP/1.1 200 OK\r\n")
                for _ in range(100000):
                    self.wfile.write(b"X")
                    self.wfile.flush()
                    time.sleep(0.05)
            if p == "/v2/":
                return self.send(200, b"{}")
            parts = p.split("/")
            if len(parts) >= 5 and parts[-2] == "manifests":
                return self.manifest(parts[-1])
            if len(parts) >= 5 and parts[-2] == "blobs":
                if cfg.get("redirect"):
                    loc = "http://127.0.0.1:%d/redirected/%s" % (ports["redirect"], parts[-1])
                    return self.send(307, b"", headers=[("Location", loc)])
                return self.blob(parts[-1])
            return self.send(404, b"{}")

        def manifest(self, ref):
            if ref in tags:
                desc = tags[ref]
                digest, mt = desc["digest"], desc["mediaType"]
            else:
                digest = ref
                mt = extra[ref][0] if ref in extra else first["mediaType"]
            try:
                data = blob_bytes(digest)
            except (FileNotFoundError, ValueError):
                return self.send(404, b'{"errors":[{"code":"MANIFEST_UNKNOWN"}]}')
            if cfg.get("huge_manifest"):
                doc = json.loads(data)
                doc["annotations"] = {"pad": "x" * cfg["huge_manifest"]}
                data = json.dumps(doc).encode()
            self.send(200, data, ctype=mt, headers=[("Docker-Content-Digest", digest)])

        def blob(self, digest):
            try:
                data = blob_bytes(digest)
            except (FileNotFoundError, ValueError):
                return self.send(404, b'{"errors":[{"code":"BLOB_UNKNOWN"}]}')
            start = 0
            rng = self.headers.get("Range")
            drop = cfg.get("drop")
            use_range = rng and (not drop or drop.get("range", True))
            if use_range and rng.startswith("bytes=") and rng.endswith("-"):
                start = int(rng[6:-1])
            code = 206 if start else 200
            hdrs = [("Content-Range", "bytes %d-%d/%d" % (start, len(data) - 1, len(data)))] if start else []
            if drop and digest == layer_digests[drop["layer"]]:
                with lock:
                    drops["n"] += 1
                    dropping = drop["times"] < 0 or drops["n"] <= drop["times"]
                if dropping:
                    self.start(code, "application/octet-stream", len(data) - start, hdrs)
                    self.wfile.write(data[start:start + drop["after"]])
                    self.wfile.flush()
                    if drop.get("stall"):
                        time.sleep(drop["stall"])  # a peer that stops sending
                    self.connection.shutdown(socket.SHUT_RDWR)
                    self.close_connection = True
                    return
            self.send(code, data[start:], ctype="application/octet-stream", headers=hdrs)

    class Server(ThreadingHTTPServer):
        daemon_threads = True

        def handle_error(self, request, client_address):
            pass  # clients that stop reading (limits, refusals) are expected

    main_srv = Server(("127.0.0.1", 0), H)
    redir_srv = Server(("127.0.0.1", 0), H)
    ports["main"] = main_srv.server_address[1]
    ports["redirect"] = redir_srv.server_address[1]
    threading.Thread(target=redir_srv.serve_forever, daemon=True).start()
    with open(a.port_file + ".tmp", "w") as f:
        f.write("%d %d" % (ports["main"], ports["redirect"]))
    os.rename(a.port_file + ".tmp", a.port_file)
    main_srv.serve_forever()


if __name__ == "__main__":
    main()
