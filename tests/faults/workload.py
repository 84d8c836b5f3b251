#!/usr/bin/env python3
"""workload.py — the fsync'ing writer and the verifier of the fault tests.

  workload.py write DIR ACKLOG STOPFILE
      Writes files DIR/w<i> (sizes from 1 byte to 2.5 MiB, so many cross the
      1 MiB chunk boundary), each with content derived from i, then fsync()
      and close(). Only when both succeed is i appended to ACKLOG (on a local
      disk, flushed and fsync'd). Errors are counted and retried with the next
      i after a short pause (the cluster may be restarting). Stops when
      STOPFILE exists. Prints a summary line at the end.

  workload.py verify DIR ACKLOG
      Every acknowledged file must exist with exactly its content. Prints the
      count; exits 1 on the first damaged file with what differed.

  workload.py fill DIR LOG   /   workload.py verify-fill DIR LOG
      Writes 4 MiB files until a write fails; the failure must be ENOSPC (or
      EDQUOT). Completed files are appended to LOG. Exits 1 on another error
      or if nothing fails within 1 GiB.
"""
import errno
import os
import sys
import time

MiB = 1 << 20


def size_of(i):
    return 1 + (i * 7919 * 131) % (5 * MiB // 2)


def content(i, n):
    # Cheap, position-dependent, different per file.
    block = bytes(((i * 31 + k * 7) & 0xFF) for k in range(4096))
    out = bytearray()
    k = 0
    while len(out) < n:
        out += block
        out[-1] = (k + i) & 0xFF  # make each 4 KiB block distinct
        k += 1
    return bytes(out[:n])


def write_file(path, data):
    fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
    try:
        off = 0
        while off < len(data):
            off += os.write(fd, data[off:off + MiB])
        os.fsync(fd)
    finally:
        os.close(fd)


def cmd_write(d, acklog, stopfile):
    ack = open(acklog, "a")
    i = 0
    acked = errors = 0
    total = 0
    last_err = ""
    while not os.path.exists(stopfile):
        i += 1
        n = size_of(i)
        try:
            write_file(os.path.join(d, "w%d" % i), content(i, n))
        except OSError as e:
            errors += 1
            last_err = "%s (w%d)" % (e, i)
            time.sleep(0.05)
            continue
        ack.write("%d\n" % i)
        ack.flush()
        os.fsync(ack.fileno())
        acked += 1
        total += n
    print("workload: %d files acknowledged, %d failed attempts%s" %
          (acked, errors, (", last error: " + last_err) if last_err else ""))
    return 0


def cmd_verify(d, acklog):
    acked = sorted({int(x) for x in open(acklog).read().split()})
    for i in acked:
        path = os.path.join(d, "w%d" % i)
        want = content(i, size_of(i))
        try:
            with open(path, "rb") as f:
                got = f.read()
        except OSError as e:
            print("FAIL: acknowledged file %s: %s" % (path, e), file=sys.stderr)
            return 1
        if got != want:
            if len(got) != len(want):
                why = "size %d, expected %d" % (len(got), len(want))
            else:
                off = next(k for k in range(len(got)) if got[k] != want[k])
                why = "first difference at offset %d" % off
            print("FAIL: acknowledged file %s damaged: %s" % (path, why), file=sys.stderr)
            return 1
    print("verify: all %d acknowledged files intact" % len(acked))
    return 0


def cmd_fill(d, log):
    data = bytes((k * 13) & 0xFF for k in range(4 * MiB))
    written = 0
    i = 0
    with open(log, "w") as lf:
        while written < 1024 * MiB:
            i += 1
            path = os.path.join(d, "f%d" % i)
            try:
                write_file(path, data[i % 251:] + data[:i % 251])
            except OSError as e:
                if e.errno in (errno.ENOSPC, errno.EDQUOT):
                    print("fill: %s after %d MiB (file %d)" %
                          (os.strerror(e.errno), written // MiB, i))
                    return 0
                print("FAIL: writing %s failed with %s, expected ENOSPC" % (path, e),
                      file=sys.stderr)
                return 1
            lf.write("%d\n" % i)
            lf.flush()
            written += 4 * MiB
    print("FAIL: wrote %d MiB without ENOSPC" % (written // MiB), file=sys.stderr)
    return 1


def cmd_verify_fill(d, log):
    ids = [int(x) for x in open(log).read().split()]
    data = bytes((k * 13) & 0xFF for k in range(4 * MiB))
    for i in ids:
        path = os.path.join(d, "f%d" % i)
        want = data[i % 251:] + data[:i % 251]
        try:
            with open(path, "rb") as f:
                got = f.read()
        except OSError as e:
            print("FAIL: %s: %s" % (path, e), file=sys.stderr)
            return 1
        if got != want:
            print("FAIL: %s damaged (size %d)" % (path, len(got)), file=sys.stderr)
            return 1
    print("verify: all %d files written before ENOSPC intact" % len(ids))
    return 0


def main(argv):
    if len(argv) >= 5 and argv[1] == "write":
        return cmd_write(argv[2], argv[3], argv[4])
    if len(argv) == 4 and argv[1] == "verify":
        return cmd_verify(argv[2], argv[3])
    if len(argv) == 4 and argv[1] == "fill":
        return cmd_fill(argv[2], argv[3])
    if len(argv) == 4 and argv[1] == "verify-fill":
        return cmd_verify_fill(argv[2], argv[3])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
