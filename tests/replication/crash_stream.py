#!/usr/bin/env python3
"""tests/replication/crash_stream.py — the write stream of crash_stream.sh and
its check of a killed replica's disk.

  crash_stream.py run MNT LOG      writes until MNT/cs.stop exists, then
                                   reads every file back through the mount
  crash_stream.py check LOG ACK_CUT ISSUE_CUT CHUNK_TOOL TARGET
                                   the files as the stopped target TARGET
                                   holds them, against the log

`run` keeps three writers, one per file, each op a write (or truncate)
followed by fsync, retried with the same bytes until it succeeds:
  big/append.dat  appends of 1-8 KiB (64 MiB chunks: one chunk grows)
  big/seq.dat     256 KiB sequential writes up to 40 MiB, then truncate to 0
  cs/over.dat     8 MiB written once, then overwrites of 1 B - 96 KiB at
                  random places (4 MiB chunks)
Every op is logged before it is issued ("B seq file kind off len seed") and
after its fsync returned ("A seq"); "I file ino" names a file.

`check` rebuilds each file from the log: the ops acknowledged in the first
ACK_CUT bytes (read before the kill) must be on the replica, byte for byte;
where an op issued in the first ISSUE_CUT bytes (read after the kill) but not
acknowledged covers a byte, its new value (or, for a truncate, no byte) is
allowed too. The replica's bytes come from `chunk_tool dump`, which opens the
target as the chunkserver does (finishing journaled writes) and fails on any
block that does not match its checksum. Exit 0 when every file matches.
"""
import os
import random
import subprocess
import sys
import threading
import time

MiB = 1 << 20


def content(seed, n):
    return random.Random(seed).randbytes(n)


class Log:
    def __init__(self, path):
        self.fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        self.lock = threading.Lock()
        self.seq = 0

    def line(self, s):
        os.write(self.fd, (s + "\n").encode())

    def begin(self, name, kind, off, n, seed):
        with self.lock:
            self.seq += 1
            self.line("B %d %s %s %d %d %d" % (self.seq, name, kind, off, n, seed))
            return self.seq

    def done(self, seq):
        self.line("A %d" % seq)


def do_op(fd, kind, off, n, seed):
    """Applies one op and fsyncs, retrying (the same bytes) until it works."""
    while True:
        try:
            if kind == "W":
                os.pwrite(fd, content(seed, n), off)
            else:
                os.ftruncate(fd, off)
            os.fsync(fd)
            return
        except OSError:
            time.sleep(0.2)


class Writer(threading.Thread):
    def __init__(self, mnt, name, log, stop):
        super().__init__(daemon=True)
        self.path = os.path.join(mnt, name)
        self.name_, self.log, self.stop = name, log, stop
        self.model = bytearray()
        self.rng = random.Random(name)
        self.error = None

    def op(self, kind, off, n):
        seed = self.rng.getrandbits(48)
        seq = self.log.begin(self.name_, kind, off, n, seed)
        do_op(self.fd, kind, off, n, seed)
        self.log.done(seq)
        if kind == "T":
            del self.model[off:]
        else:
            if len(self.model) < off + n:
                self.model.extend(bytes(off + n - len(self.model)))
            self.model[off:off + n] = content(seed, n)

    def next_op(self):
        raise NotImplementedError

    def run(self):
        try:
            self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o644)
            self.log.line("I %s %d" % (self.name_, os.fstat(self.fd).st_ino))
            while not self.stop.is_set():
                self.next_op()
        except Exception as e:  # reported by main
            self.error = e

    def verify(self):
        with open(self.path, "rb") as f:
            got = f.read()
        if got != bytes(self.model):
            return "%s: %d bytes read back, %d expected, first difference at %s" % (
                self.name_, len(got), len(self.model),
                next((i for i in range(min(len(got), len(self.model)))
                      if got[i] != self.model[i]), min(len(got), len(self.model))))
        return None


class Appender(Writer):
    def next_op(self):
        n = 1024 if self.rng.random() < 0.7 else self.rng.randint(1, 8192)
        self.op("W", len(self.model), n)


class Sequential(Writer):
    def next_op(self):
        if len(self.model) >= 40 * MiB:
            self.op("T", 0, 0)
        else:
            self.op("W", len(self.model), 256 * 1024)


class Overwriter(Writer):
    def next_op(self):
        if len(self.model) < 8 * MiB:
            self.op("W", len(self.model), MiB)
            return
        n = self.rng.choice([1, 100, 4096, 5000, 65536, 96 * 1024])
        self.op("W", self.rng.randrange(0, 8 * MiB - n), n)


def run(mnt, log_path):
    log = Log(log_path)
    stop = threading.Event()
    ws = [Appender(mnt, "big/append.dat", log, stop), Sequential(mnt, "big/seq.dat", log, stop),
          Overwriter(mnt, "cs/over.dat", log, stop)]
    for w in ws:
        w.start()
    while not os.path.exists(os.path.join(mnt, "cs.stop")) and all(w.is_alive() for w in ws):
        time.sleep(0.2)
    stop.set()
    for w in ws:
        w.join()
    bad = [str(w.error) for w in ws if w.error] + [e for e in (w.verify() for w in ws) if e]
    ops = log.seq
    print("crash_stream: %d ops; %s" % (ops, "; ".join(bad) if bad else "every file reads back"))
    return 1 if bad else 0


# ---- check -------------------------------------------------------------------

def parse(log_path, ack_cut, issue_cut):
    data = open(log_path, "rb").read()
    files, ops, acked = {}, {}, set()
    pos = 0
    for raw in data[:issue_cut].split(b"\n"):
        end = pos + len(raw) + 1  # just past its newline
        if end > issue_cut or not raw:
            pos = end
            continue
        f = raw.decode().split()
        if f[0] == "I":
            files[f[1]] = int(f[2])
        elif f[0] == "B":
            ops.setdefault(f[2], []).append((int(f[1]), f[3], int(f[4]), int(f[5]), int(f[6])))
        elif f[0] == "A" and end <= ack_cut:
            acked.add(int(f[1]))
        pos = end
    return files, ops, acked


def replica_bytes(tool, target, ino, chunk_size, length):
    """The file's first `length` bytes on the replica: (bytes, present) where
    present[i] says whether byte i is inside its chunk's length."""
    out, present = bytearray(), bytearray()
    for index in range((length + chunk_size - 1) // chunk_size):
        p = subprocess.run([tool, "dump", target, str(ino), str(index)], capture_output=True)
        if p.returncode not in (0, 2):
            raise SystemExit("chunk ino %d index %d on %s: chunk_tool exit %d: %s" % (
                ino, index, target, p.returncode, p.stderr.decode().strip()))
        d = p.stdout if p.returncode == 0 else b""
        out += d + bytes(chunk_size - len(d))
        present += b"\1" * len(d) + b"\0" * (chunk_size - len(d))
    return out[:length], present[:length]


CHUNK = {"big": 64 * MiB, "cs": 4 * MiB}


def check_file(name, ino, ops, acked, tool, target):
    model = bytearray()
    k = 0
    while k < len(ops) and ops[k][0] in acked:
        _, kind, off, n, seed = ops[k]
        if kind == "T":
            del model[off:]
        else:
            if len(model) < off + n:
                model.extend(bytes(off + n - len(model)))
            model[off:off + n] = content(seed, n)
        k += 1
    cands = ops[k:]
    if any(s in acked for s, *_ in cands):
        return "%s: an op acknowledged after one that was not" % name
    got, present = replica_bytes(tool, target, ino, CHUNK[name.split("/")[0]], len(model))
    vals = [(off, n, content(seed, n)) for _, kind, off, n, seed in cands if kind == "W"]
    cut = min([off for _, kind, off, n, seed in cands if kind == "T"] or [len(model)])
    step = 4096
    for base in range(0, len(model), step):
        hi = min(base + step, len(model))
        if got[base:hi] == model[base:hi] and all(present[base:hi]):
            continue
        for x in range(base, hi):
            if present[x] and got[x] == model[x]:
                continue
            if x >= cut and (not present[x] or got[x] == 0):
                continue
            if present[x] and any(off <= x < off + n and v[x - off] == got[x]
                                  for off, n, v in vals):
                continue
            return "%s (ino %d): byte %d is %s, acknowledged %d (%d ops acked, %d in flight)" % (
                name, ino, x, got[x] if present[x] else "missing", model[x], k, len(cands))
    return None


def check(log_path, ack_cut, issue_cut, tool, target):
    files, ops, acked = parse(log_path, ack_cut, issue_cut)
    bad, n = [], 0
    for name, ino in sorted(files.items()):
        err = check_file(name, ino, ops.get(name, []), acked, tool, target)
        n += sum(1 for o in ops.get(name, []) if o[0] in acked)
        if err:
            bad.append(err)
    print("crash_stream check %s: %d acknowledged ops, %s" % (
        target, n, "; ".join(bad) if bad else "all on the replica, no torn block"))
    return 1 if bad else 0


if __name__ == "__main__":
    a = sys.argv[1:]
    if len(a) == 3 and a[0] == "run":
        sys.exit(run(a[1], a[2]))
    if len(a) == 6 and a[0] == "check":
        sys.exit(check(a[1], int(a[2]), int(a[3]), a[4], a[5]))
    sys.exit(__doc__)
