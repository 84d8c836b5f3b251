#!/usr/bin/python3
"""create_storm.py — the writers and the checker of tests/fuse/create_storm.sh:
O_CREAT|O_EXCL creates in one shared directory while strata-meta or
strata-fuse is killed under them, and what must hold afterwards.

    create_storm.py write DIR W LOG STOP
        Writer W creates DIR/w<W>-<i> for i = 0, 1, ... until STOP exists.
        Name n gets 1-16 KiB of data (derived from the name), written and
        fsynced, if n % 3 is 1; half of it written and fsynced, then the
        rest appended and fsynced, if n % 3 is 2; nothing if n % 3 is 0.
        Every call that returned is logged to LOG (a local file, one
        unbuffered append per line) only AFTER it returned:
            c NAME              the create returned a descriptor
            f NAME LEN SHA256   an fsync returned 0 with the file LEN long
            z NAME              the close of an empty file returned 0
            e NAME CALL ERRNO   a call failed with EIO (retries ran out):
                                not acknowledged, the writer goes on
            s NAME CALL MS      the call took MS >= 250 ms (it waited for
                                a daemon to come back: the kills hit the
                                storm)
        Any other error is a failure of the storm: "FAIL NAME CALL ERRNO"
        is logged and the writer exits 1 (an O_EXCL create of a name never
        used before cannot answer EEXIST, not even when its first attempt
        was carried out by a daemon that died). The number of names tried
        goes to LOG.n every 10 names, for the script's progress checks.

    create_storm.py check DIR LOG...
        Against the writers' logs: every acknowledged create exists, as a
        regular file with one link; every fsynced file has exactly its
        length and bytes at its last fsync (if a later write or fsync
        failed with EIO: at least that length, and a prefix of its data),
        read with O_DIRECT (from the chunkservers, not the page cache);
        every empty file closed is empty; no name is listed
        twice and no two names share an inode; nothing is in DIR that no
        writer tried. Prints a summary, or each violation (up to 20) and
        exits 1."""
import errno
import hashlib
import mmap
import os
import sys
import time

KiB = 1024
SLOW = 0.25  # s: a call this long waited for a dead daemon's successor


def data_of(name):
    """The bytes of a data file: 1-16 KiB, different per name and offset."""
    h = hashlib.sha256(name.encode()).digest()
    n = KiB + int.from_bytes(h[:2], "little") % (15 * KiB)
    block = hashlib.sha256(h).digest() * (n // 32 + 1)
    return block[:n]


def cmd_write(d, w, log, stop):
    lfd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def note(line):
        os.write(lfd, (line + "\n").encode())

    def timed(name, call, fn, *args):
        t = time.monotonic()
        try:
            return fn(*args)
        finally:
            dt = time.monotonic() - t
            if dt >= SLOW:
                note("s %s %s %d" % (name, call, dt * 1000))

    i = 0
    while not os.path.exists(stop):
        n, i = i, i + 1
        name = "w%s-%d" % (w, n)
        path = os.path.join(d, name)
        if i % 10 == 0:
            with open(log + ".n", "w") as f:
                f.write("%d\n" % i)
        call = "create"
        try:
            fd = timed(name, call, os.open, path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except OSError as e:
            if e.errno != errno.EIO:
                note("FAIL %s create %s" % (name, errno.errorcode.get(e.errno, e.errno)))
                return 1
            note("e %s create EIO" % name)
            continue
        note("c %s" % name)
        try:
            if n % 3 == 0:
                call = "close"
                fd, f = -1, fd  # closed even if close fails
                timed(name, call, os.close, f)
                note("z %s" % name)
            else:
                # one write and fsync, or (every third name) two: the second
                # appends to a file whose length meta already has
                data = data_of(name)
                cuts = [len(data)] if n % 3 == 1 else [len(data) // 2, len(data)]
                off = 0
                for cut in cuts:
                    call = "write"
                    while off < cut:
                        off += os.write(fd, data[off:cut])
                    call = "fsync"
                    timed(name, call, os.fsync, fd)
                    note("f %s %d %s" % (name, cut, hashlib.sha256(data[:cut]).hexdigest()))
                call = "close"
                fd, f = -1, fd
                timed(name, call, os.close, f)
        except OSError as e:
            if fd >= 0:
                try:
                    os.close(fd)
                except OSError:
                    pass
            if e.errno != errno.EIO:
                note("FAIL %s %s %s" % (name, call, errno.errorcode.get(e.errno, e.errno)))
                return 1
            note("e %s %s EIO" % (name, call))
    with open(log + ".n", "w") as f:
        f.write("%d\n" % i)
    return 0


def read_direct(path, cap):
    """The file's bytes read with O_DIRECT (page-aligned buffer), up to cap."""
    size = (cap + 2 * mmap.PAGESIZE) & ~(mmap.PAGESIZE - 1)
    buf = mmap.mmap(-1, size)
    fd = os.open(path, os.O_RDONLY | os.O_DIRECT)
    try:
        n = os.preadv(fd, [buf], 0)
    finally:
        os.close(fd)
    return bytes(buf[:n])


def cmd_check(d, logs):
    created, fsynced, empty, tried, failed = set(), {}, set(), set(), set()
    slow = 0
    for log in logs:
        for line in open(log):
            f = line.split()
            if not f:
                continue
            if f[0] == "FAIL":
                print("FAIL: the writer of %s: %s" % (log, line.strip()), file=sys.stderr)
                return 1
            tried.add(f[1])
            if f[0] == "c":
                created.add(f[1])
            elif f[0] == "f":
                fsynced[f[1]] = (int(f[2]), f[3])
            elif f[0] == "z":
                empty.add(f[1])
            elif f[0] == "s":
                slow += 1
            elif f[0] == "e" and f[2] in ("write", "fsync"):
                failed.add(f[1])
    names = os.listdir(d)
    bad = []
    listed = set(names)
    if len(names) != len(listed):
        twice = sorted(n for n in listed if names.count(n) > 1)
        bad.append("listed twice: %s" % twice[:5])
    for n in sorted(created - listed):
        bad.append("%s: acknowledged create, not in the directory" % n)
    for n in sorted(listed - tried, key=str):
        bad.append("%s: in the directory, never created" % n)
    inodes = {}
    for n in sorted(listed & tried):
        try:
            st = os.lstat(os.path.join(d, n))
        except OSError as e:
            bad.append("%s: listed, but lstat: %s" % (n, e))
            continue
        if st.st_ino in inodes:
            bad.append("%s and %s: the same inode %d" % (inodes[st.st_ino], n, st.st_ino))
        inodes[st.st_ino] = n
        if not (os.path.stat.S_ISREG(st.st_mode) and st.st_nlink == 1):
            bad.append("%s: mode %o, %d links" % (n, st.st_mode, st.st_nlink))
        if n in empty and st.st_size != 0:
            bad.append("%s: empty file closed, %d bytes long" % (n, st.st_size))
        if n in fsynced:
            # a write or fsync that failed after an acknowledged fsync may
            # have made the file longer: then only the fsynced prefix counts
            want_len, want_sum = fsynced[n]
            if st.st_size != want_len and not (n in failed and want_len < st.st_size <= len(data_of(n))):
                bad.append("%s: fsynced at %d bytes, stat says %d" % (n, want_len, st.st_size))
                continue
            got = read_direct(os.path.join(d, n), st.st_size)
            if len(got) != st.st_size or hashlib.sha256(got[:want_len]).hexdigest() != want_sum or \
                    got != data_of(n)[:len(got)]:
                first = next((k for k in range(min(len(got), want_len))
                              if got[k] != data_of(n)[k]), min(len(got), want_len))
                bad.append("%s: fsynced bytes differ (read %d of %d, first difference at %d)" %
                           (n, len(got), want_len, first))
    if bad:
        for b in bad[:20]:
            print("FAIL: " + b, file=sys.stderr)
        if len(bad) > 20:
            print("FAIL: ... and %d more" % (len(bad) - 20), file=sys.stderr)
        return 1
    print("check: %d names tried, %d creates acknowledged, %d fsynced files intact, "
          "%d empty, %d creates and %d writes not acknowledged (EIO), %d entries, "
          "%d calls waited >= %d ms" %
          (len(tried), len(created), len(fsynced), len(empty), len(tried - created),
           len(failed), len(listed), slow, SLOW * 1000))
    return 0


def main(argv):
    if len(argv) == 6 and argv[1] == "write":
        return cmd_write(*argv[2:6])
    if len(argv) >= 4 and argv[1] == "check":
        return cmd_check(argv[2], argv[3:])
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv))
