"""The "outside world" of the network "egress" tests, run inside a network
namespace the test made (never on the host's network): a DNS server with a
small zone, TCP servers that greet and close, an echo server that holds
its connection, and a bulk sender (throughput). Usage: egress_world.py READY_FILE. Standard library only."""
import socket
import socketserver
import struct
import sys
import threading

ZONE = {  # name -> addresses (IPv4), TTL 60
    "allowed.example": ["198.51.100.10"],
    "www.cdn.example": ["198.51.100.11"],
    "denied.example": ["198.51.100.20"],
    "rebind.example": ["169.254.169.254", "198.51.100.10"],
}
GREETERS = [("198.51.100.10", p) for p in (80, 8080, 8081, 8082, 8083)] + \
           [("198.51.100.11", 80), ("198.51.100.20", 80), ("198.51.100.30", 9000)]
ECHO = ("198.51.100.10", 7001)
BULK = ("198.51.100.10", 8090)  # sends BULK_BYTES and closes (throughput)
BULK_BYTES = 64 << 20
DNS = ("198.51.100.53", 53)


def dns_answer(q):
    qid, flags, qd = struct.unpack(">HHH", q[:6])
    off, labels = 12, []
    while q[off]:
        n = q[off]
        labels.append(q[off + 1:off + 1 + n].decode().lower())
        off += 1 + n
    qtype, = struct.unpack(">H", q[off + 1:off + 3])
    question = q[12:off + 5]
    name = ".".join(labels)
    addrs = ZONE.get(name)
    if addrs is None:
        return struct.pack(">HHHHHH", qid, 0x8183, 1, 0, 0, 0) + question
    answers = b""
    if qtype == 1:
        for a in addrs:
            answers += struct.pack(">HHHIH", 0xc00c, 1, 1, 60, 4) + socket.inet_aton(a)
    n = len(addrs) if qtype == 1 else 0
    return struct.pack(">HHHHHH", qid, 0x8180, 1, n, 0, 0) + question + answers


def serve_dns():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
    s.bind(DNS)
    while True:
        q, peer = s.recvfrom(1500)
        try:
            s.sendto(dns_answer(q), peer)
        except Exception:
            pass


class Greeter(socketserver.BaseRequestHandler):
    def handle(self):
        a, p = self.server.server_address
        self.request.sendall(("hello from %s:%d\n" % (a, p)).encode())


class Echo(socketserver.StreamRequestHandler):
    def handle(self):
        for line in self.rfile:
            self.wfile.write(b"echo " + line)


class Bulk(socketserver.BaseRequestHandler):
    def handle(self):
        chunk = bytes(1 << 20)
        for _ in range(BULK_BYTES >> 20):
            self.request.sendall(chunk)


class Server(socketserver.ThreadingTCPServer):
    allow_reuse_address = True
    request_queue_size = 512  # the benchmark's connects come back to back
    daemon_threads = True


def main():
    threading.Thread(target=serve_dns, daemon=True).start()
    for addr in GREETERS:
        threading.Thread(target=Server(addr, Greeter).serve_forever, daemon=True).start()
    threading.Thread(target=Server(ECHO, Echo).serve_forever, daemon=True).start()
    threading.Thread(target=Server(BULK, Bulk).serve_forever, daemon=True).start()
    open(sys.argv[1], "w").close()
    threading.Event().wait()


if __name__ == "__main__":
    main()
