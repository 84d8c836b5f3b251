#!/usr/bin/env python3
"""tokenserver.py — a tiny Docker registry token server for tests, on
127.0.0.1 only: GET /token?service=S&scope=repository:NAME:ACTIONS answers
{"token": JWT} with an RS256 JWT that docker-registry's `auth: token:`
accepts (x5c header carrying the signing certificate, which the registry
trusts as its rootcertbundle). Signing uses the openssl command line, so
only the python3 standard library is needed.

  tokenserver.py --port P --key KEY.pem --cert CERT.pem --issuer I
                 [--user USER:PASS]   # require basic credentials
                 [--port-file F]      # write the bound port there

Every scope asked for is granted (pull and push)."""
import argparse
import base64
import json
import os
import secrets
import subprocess
import time
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def b64url(data):
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, default=0)
    ap.add_argument("--key", required=True)
    ap.add_argument("--cert", required=True)
    ap.add_argument("--issuer", default="strata-test-issuer")
    ap.add_argument("--user")
    ap.add_argument("--port-file")
    a = ap.parse_args()
    der = subprocess.run(["openssl", "x509", "-in", a.cert, "-outform", "DER"],
                         stdout=subprocess.PIPE, check=True).stdout
    header = b64url(json.dumps({"typ": "JWT", "alg": "RS256",
                                "x5c": [base64.b64encode(der).decode()]}).encode())

    def sign(claims):
        payload = header + "." + b64url(json.dumps(claims).encode())
        sig = subprocess.run(["openssl", "dgst", "-sha256", "-sign", a.key], input=payload.encode(),
                             stdout=subprocess.PIPE, check=True).stdout
        return payload + "." + b64url(sig)

    class H(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def reply(self, code, body):
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            u = urllib.parse.urlparse(self.path)
            if u.path != "/token":
                return self.reply(404, {"error": "not found"})
            if a.user:
                want = "Basic " + base64.b64encode(a.user.encode()).decode()
                if self.headers.get("Authorization") != want:
                    return self.reply(401, {"error": "bad credentials"})
            q = urllib.parse.parse_qs(u.query)
            access = []
            for scope in q.get("scope", []):
                for s in scope.split(" "):
                    parts = s.split(":")
                    if len(parts) >= 3:
                        access.append({"type": parts[0], "name": ":".join(parts[1:-1]),
                                       "actions": ["pull", "push"]})
            now = int(time.time())
            tok = sign({"iss": a.issuer, "sub": "tester", "aud": q.get("service", [""])[0],
                        "exp": now + 600, "nbf": now - 60, "iat": now,
                        "jti": secrets.token_hex(8), "access": access})
            self.reply(200, {"token": tok, "access_token": tok, "expires_in": 600})

    srv = ThreadingHTTPServer(("127.0.0.1", a.port), H)
    if a.port_file:
        with open(a.port_file + ".tmp", "w") as f:
            f.write(str(srv.server_address[1]))
        os.rename(a.port_file + ".tmp", a.port_file)
    srv.serve_forever()


if __name__ == "__main__":
    main()
