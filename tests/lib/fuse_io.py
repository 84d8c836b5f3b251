"""fuse_io.py — the processes the strata-fuse survival tests (tests/fuse/
takeover.sh, restart.sh, holder_kill.sh) keep busy on the mount while
strata-fuse is killed, restarted or loses its holder.

  fuse_io.py reader PATH SHA256 STOP OUT   O_DIRECT passes over PATH (every read a
      FUSE request, so one is in flight or queued at any moment) until STOP
      exists; one line per pass in OUT: "ok MS" (MS: the longest time between
      two reads returning, the pause a reader saw), "BAD <hash>" or "ERR <error>".
  fuse_io.py held PATH GO OUT   opens PATH, writes "ready" to OUT, waits for
      GO, then appends the SHA-256 of what it reads through that descriptor.
      A process of its own: a file of the mount closed while no strata-fuse
      serves (by any child of the test shell that inherited it) waits for the
      next strata-fuse.
"""
import hashlib
import mmap
import os
import sys
import time


def reader(path, want, stop, out):
    buf = mmap.mmap(-1, 1 << 20)
    last = time.monotonic()
    with open(out, "w", buffering=1) as log:
        while not os.path.exists(stop):
            gap = 0.0
            try:
                fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
                h = hashlib.sha256()
                while True:
                    n = os.readv(fd, [buf])
                    now = time.monotonic()
                    gap, last = max(gap, now - last), now
                    if n == 0:
                        break
                    h.update(buf[:n])
                os.close(fd)
                if h.hexdigest() == want:
                    log.write("ok %.1f\n" % (gap * 1000))
                else:
                    log.write("BAD %s\n" % h.hexdigest())
            except OSError as e:
                log.write("ERR %s\n" % e)


def held(path, go, out):
    with open(path, "rb") as f:
        with open(out, "w") as o:
            o.write("ready\n")
        while not os.path.exists(go):
            time.sleep(0.05)
        digest = hashlib.sha256(f.read()).hexdigest()
    with open(out, "a") as o:
        o.write(digest + "\n")


if __name__ == "__main__":
    {"reader": reader, "held": held}[sys.argv[1]](*sys.argv[2:])
