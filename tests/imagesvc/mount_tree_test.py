#!/usr/bin/env python3
"""mount_tree_test.py — real-world layers (GNU tar, pax format, gzip and zstd)
from real source trees, converted by img-mkimage, mounted by the kernel and
compared entry by entry against the expected merged tree.

Layer 1 is a directory with every kind of file GNU tar can archive: regular
files of edge sizes (0, 1, 4095, 4096, 1 MiB +/- 1, several MiB, zero runs
that become holes), symlinks (relative, absolute, dangling, long target),
hard links, a fifo, char and block devices, xattrs (user., trusted.,
security.capability), many owners and modes (suid, sgid, sticky), nanosecond
mtimes, 255-byte names and deep paths. Layer 2 carries OCI whiteouts, an
opaque directory, replacements of files by directories and back.

The expected tree is computed from the source directories with OCI rules in
Python; the mounted tree must match it exactly: the set of paths, type, mode,
uid, gid, mtime (ns), size, content (SHA-256), symlink target, rdev, xattrs,
link count, and which paths share an inode.

Usage: mount_tree_test.py IMG_MKIMAGE. Exit 0 pass, 1 fail, 77 skip (not
root, or the kernel cannot mount file-backed EROFS)."""
import ctypes
import hashlib
import os
import shutil
import stat
import subprocess
import sys
import tempfile

MS_RDONLY = 1
MNT_DETACH = 2


def skip(why):
    print(f"skip: {why}", file=sys.stderr)
    sys.exit(77)


def write(path, data, mode=0o644, uid=0, gid=0, mtime_ns=1700000000_000000000):
    with open(path, "wb") as f:
        f.write(data)
    os.chown(path, uid, gid)
    os.chmod(path, mode)
    os.utime(path, ns=(mtime_ns, mtime_ns))


def pattern(seed, n):
    out = bytearray(n)
    x = seed * 2654435761 & 0xFFFFFFFF
    for i in range(0, n, 4):
        x = (x * 1103515245 + 12345) & 0xFFFFFFFF
        out[i:i + 4] = x.to_bytes(4, "little")[: n - i]
    return bytes(out)


def make_layer1(d):
    os.makedirs(d)
    write(f"{d}/empty", b"")
    write(f"{d}/one", b"x", mode=0o600, uid=1000, gid=1000)
    write(f"{d}/b4095", pattern(1, 4095))
    write(f"{d}/b4096", pattern(2, 4096), mtime_ns=1600000000_123456789)
    write(f"{d}/mib-1", pattern(3, (1 << 20) - 1))
    write(f"{d}/mib", pattern(4, 1 << 20))
    write(f"{d}/mib+1", pattern(5, (1 << 20) + 1))
    write(f"{d}/holes", pattern(6, 5000) + bytes(3 << 20) + pattern(7, 100))
    write(f"{d}/dup-a", pattern(8, 2 << 20))
    write(f"{d}/dup-b", pattern(8, 2 << 20), mode=0o755)
    os.makedirs(f"{d}/usr/bin")
    write(f"{d}/usr/bin/suid", b"#!/bin/sh\n", mode=0o4755)
    write(f"{d}/usr/bin/sgid", b"#!/bin/sh\n", mode=0o2755, gid=50)
    write(f"{d}/usr/bin/ping", pattern(9, 12345), mode=0o755)
    os.setxattr(f"{d}/usr/bin/ping", "security.capability",
                bytes.fromhex("0100000200200000000000000000000000000000"))
    os.setxattr(f"{d}/usr/bin/ping", "user.note", b"has caps")
    os.setxattr(f"{d}/one", "trusted.secret", b"\x00\x01\x02binary\n")
    os.link(f"{d}/usr/bin/ping", f"{d}/usr/bin/ping4")
    os.link(f"{d}/usr/bin/ping", f"{d}/usr/bin/ping6")
    os.symlink("ping", f"{d}/usr/bin/rel-link")
    os.symlink("/etc/passwd", f"{d}/usr/bin/abs-link")
    os.symlink("does/not/exist", f"{d}/dangling")
    os.symlink("t" * 1000, f"{d}/long-target")
    os.lchown(f"{d}/dangling", 33, 33)
    os.makedirs(f"{d}/tmp")
    os.chmod(f"{d}/tmp", 0o1777)
    os.mkfifo(f"{d}/fifo", 0o640)
    os.mknod(f"{d}/null", 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    os.mknod(f"{d}/disk", 0o660 | stat.S_IFBLK, os.makedev(259, 65536 + 7))
    write(f"{d}/bigid", b"ids", uid=100000, gid=4000000)
    write(f"{d}/" + "N" * 255, b"long name")
    deep = d + "".join(f"/d{i}" for i in range(40))
    os.makedirs(deep)
    write(f"{deep}/leaf", b"deep")
    os.makedirs(f"{d}/opaque/sub")
    write(f"{d}/opaque/old", b"old")
    write(f"{d}/opaque/sub/old2", b"old2")
    os.makedirs(f"{d}/wh/inner")
    write(f"{d}/wh/gone", b"gone")
    write(f"{d}/wh/stays", b"stays")
    write(f"{d}/wh/inner/x", b"x")
    write(f"{d}/becomes-dir", b"file")
    os.makedirs(f"{d}/becomes-file/child")
    # names sorting before "." / ".." and above 0x7f: lookups binary-search
    # the sorted dirents, so the byte order must match the kernel's
    os.makedirs(f"{d}/names")
    for n in ["-dash", " space", "!bang", "#hash", "\u00e9t\u00e9", "\u65e5\u672c",
              "Z", "a", "~tilde", "..dots", ".hidden", "new\nline"]:
        write(f"{d}/names/{n}", n.encode())
    os.makedirs(f"{d}/big")
    for i in range(400):
        write(f"{d}/big/entry-{i:05d}-" + "x" * (i % 50), bytes([i % 256]) * (i % 7))
    os.utime(d, ns=(1700000000_000000000, 1700000000_000000000))


def make_layer2(d):
    os.makedirs(d)
    os.makedirs(f"{d}/opaque")
    write(f"{d}/opaque/.wh..wh..opq", b"")
    write(f"{d}/opaque/new", b"new")
    os.makedirs(f"{d}/wh")
    write(f"{d}/wh/.wh.gone", b"")
    write(f"{d}/wh/.wh.inner", b"")
    write(f"{d}/.wh.dangling", b"")
    os.makedirs(f"{d}/becomes-dir")
    write(f"{d}/becomes-dir/inside", b"inside")
    write(f"{d}/becomes-file", b"now a file", mode=0o600)
    write(f"{d}/mib", pattern(44, 1 << 20))  # replaces; the ping links stay
    os.makedirs(f"{d}/usr/bin")
    write(f"{d}/usr/bin/ping4", b"replaced: no longer a link", mode=0o755)
    os.utime(f"{d}/usr/bin", ns=(1700000001_000000000, 1700000001_000000000))
    os.chmod(d, 0o755)
    os.utime(d, ns=(1700000002_500000000, 1700000002_500000000))


def describe(path, key_prefix):
    """One entry of a tree model."""
    st = os.lstat(path)
    rec = {
        "fmt": stat.S_IFMT(st.st_mode),
        "mode": stat.S_IMODE(st.st_mode),
        "uid": st.st_uid,
        "gid": st.st_gid,
        "mtime": st.st_mtime_ns,
        "ino": (key_prefix, st.st_ino),
        "xattrs": {n: os.getxattr(path, n, follow_symlinks=False)
                   for n in os.listxattr(path, follow_symlinks=False)},
    }
    if stat.S_ISREG(st.st_mode):
        rec["size"] = st.st_size
        with open(path, "rb") as f:
            rec["sha"] = hashlib.sha256(f.read()).hexdigest()
    elif stat.S_ISLNK(st.st_mode):
        rec["target"] = os.readlink(path)
    elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
        rec["rdev"] = (os.major(st.st_rdev), os.minor(st.st_rdev))
    return rec, st.st_nlink


def walk(root):
    """Yields relative paths (top-down), "" for the root."""
    yield ""
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        rel = os.path.relpath(dirpath, root)
        rel = "" if rel == "." else rel
        for n in sorted(dirnames + filenames):
            yield f"{rel}/{n}" if rel else n


def remove_tree(model, path):
    for p in [p for p in model if p == path or p.startswith(path + "/")]:
        del model[p]


def apply_layer(model, root, tag):
    entries = list(walk(root))
    for rel in entries:  # whiteouts first: they only hide lower layers
        base = os.path.basename(rel)
        parent = os.path.dirname(rel)
        if base == ".wh..wh..opq":
            for p in [p for p in model if parent == "" or p.startswith(parent + "/")]:
                if p != parent:
                    del model[p]
        elif base.startswith(".wh."):
            remove_tree(model, os.path.join(parent, base[4:]))
    for rel in entries:
        if os.path.basename(rel).startswith(".wh."):
            continue
        rec, _ = describe(os.path.join(root, rel) if rel else root, tag)
        old = model.get(rel)
        if old and old["fmt"] == stat.S_IFDIR and rec["fmt"] == stat.S_IFDIR:
            model[rel] = rec
            continue
        if old:
            remove_tree(model, rel)
        model[rel] = rec


def with_nlink(model):
    count = {}
    for rec in model.values():
        if rec["fmt"] != stat.S_IFDIR:
            count[rec["ino"]] = count.get(rec["ino"], 0) + 1
    for p, rec in model.items():
        if rec["fmt"] == stat.S_IFDIR:
            prefix = p + "/" if p else ""
            subdirs = sum(1 for q, r in model.items()
                          if r["fmt"] == stat.S_IFDIR and q.startswith(prefix) and q != p
                          and "/" not in q[len(prefix):])
            rec["nlink"] = 2 + subdirs
        else:
            rec["nlink"] = count[rec["ino"]]
    return model


def mounted_model(mnt):
    model = {}
    for rel in walk(mnt):
        rec, nlink = describe(os.path.join(mnt, rel) if rel else mnt, "m")
        rec["nlink"] = nlink
        model[rel] = rec
    return model


def compare(want, got):
    errors = []
    for p in sorted(set(want) | set(got)):
        if p not in got:
            errors.append(f"missing in the mount: {p!r}")
            continue
        if p not in want:
            errors.append(f"unexpected in the mount: {p!r}")
            continue
        w, g = want[p], got[p]
        for k in w:
            if k != "ino" and w[k] != g.get(k):
                errors.append(f"{p!r}: {k} is {g.get(k)!r}, expected {w[k]!r}")
    # hard-link groups: same inode in the mount <=> same inode in the source
    groups_w, groups_g = {}, {}
    for p in want:
        if p in got and want[p]["fmt"] != stat.S_IFDIR:
            groups_w.setdefault(want[p]["ino"], set()).add(p)
            groups_g.setdefault(got[p]["ino"], set()).add(p)
    if sorted(map(sorted, groups_w.values())) != sorted(map(sorted, groups_g.values())):
        errors.append("hard-link groups differ")
    return errors


def main():
    if len(sys.argv) != 2:
        print("usage: mount_tree_test.py IMG_MKIMAGE", file=sys.stderr)
        return 2
    mkimage = sys.argv[1]
    if os.geteuid() != 0:
        skip("needs root (mknod, chown, mount)")
    if not shutil.which("tar"):
        skip("GNU tar not installed")
    work = tempfile.mkdtemp(prefix="strata-imgmount-")
    mnt = os.path.join(work, "mnt")
    os.makedirs(mnt)
    libc = ctypes.CDLL(None, use_errno=True)
    mounted = False
    try:
        l1, l2 = os.path.join(work, "l1"), os.path.join(work, "l2")
        make_layer1(l1)
        make_layer2(l2)
        tar = ["tar", "--xattrs", "--xattrs-include=*", "--format=pax", "--numeric-owner"]
        t1, t2 = os.path.join(work, "l1.tar.gz"), os.path.join(work, "l2.tar.zst")
        subprocess.run(tar + ["-C", l1, "-czf", t1, "."], check=True)
        subprocess.run(tar + ["-C", l2, "--zstd", "-cf", t2, "."], check=True)
        img = os.path.join(work, "meta.img")
        out = subprocess.run([mkimage, os.path.join(work, "store"), img, t1, t2],
                             check=True, capture_output=True, text=True)
        sys.stderr.write(out.stderr)
        devices = out.stdout.split()
        if shutil.which("fsck.erofs"):
            subprocess.run(["fsck.erofs"] + [f"--device={d}" for d in devices] + [img],
                           check=True)
        else:
            print("note: fsck.erofs not installed, image check skipped", file=sys.stderr)
        opts = ",".join(f"device={d}" for d in devices).encode()
        if libc.mount(img.encode(), mnt.encode(), b"erofs", MS_RDONLY, opts) != 0:
            err = ctypes.get_errno()
            if err in (19, 1):  # ENODEV, EPERM
                skip(f"the kernel cannot mount file-backed EROFS: {os.strerror(err)}")
            print(f"mount failed: {os.strerror(err)} (see dmesg)", file=sys.stderr)
            return 1
        mounted = True
        want = {}
        apply_layer(want, l1, "l1")
        apply_layer(want, l2, "l2")
        errors = compare(with_nlink(want), mounted_model(mnt))
        for e in errors[:50]:
            print(e, file=sys.stderr)
        if errors:
            print(f"mount_tree_test: {len(errors)} difference(s)", file=sys.stderr)
            return 1
        print(f"mount_tree_test: ok ({len(want)} paths compared)")
        return 0
    finally:
        if mounted:
            libc.umount2(mnt.encode(), MNT_DETACH)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
