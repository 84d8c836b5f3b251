"""The floor of a fresh process per call: a warm python3 (the modules fncall's
template imports) forking a child that exits at once, and waiting for it, in
CONC processes at once for SECS seconds. Prints sandbox_bench's format:
RESULT pyfork_cCONC ops/s p50_ms p99_ms ops errors.
usage: python3 -I pyfork.py CONC SECS"""
import base64, ctypes, gc, io, json, os, socket, struct, sys, time, traceback  # noqa: F401

conc, secs = int(sys.argv[1]), float(sys.argv[2])
gc.collect()
gc.freeze()
pipes = []
for _ in range(conc):
    r, w = os.pipe()
    if os.fork() == 0:
        os.close(r)
        lat = []
        end = time.monotonic() + secs
        while time.monotonic() < end:
            t = time.monotonic()
            pid = os.fork()
            if pid == 0:
                os._exit(0)
            os.waitpid(pid, 0)
            lat.append(time.monotonic() - t)
        os.write(w, json.dumps(lat).encode())
        os._exit(0)
    os.close(w)
    pipes.append(r)
lat = []
for r in pipes:
    b = b""
    while True:
        c = os.read(r, 1 << 16)
        if not c:
            break
        b += c
    lat += json.loads(b)
while True:
    try:
        os.wait()
    except ChildProcessError:
        break
lat.sort()
q = lambda f: lat[min(len(lat) - 1, int(f * len(lat)))] * 1e3 if lat else 0
print("RESULT pyfork_c%d %.1f %.3f %.3f %d 0" % (conc, len(lat) / secs, q(0.5), q(0.99), len(lat)))
