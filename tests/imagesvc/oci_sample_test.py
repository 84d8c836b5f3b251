#!/usr/bin/env python3
"""oci_sample_test.py — the busybox sample OCI image (scripts/build-sample-
images.sh: a gzip, a zstd and a plain layer with a whiteout and an opaque
directory) converted by img-mkimage, checked by fsck.erofs, mounted by the
kernel and compared with what Python's own tarfile module reads from the same
layers (OCI rules applied in Python): paths, types, modes, owners, mtimes
(seconds), sizes, contents, symlink targets, hard-link groups. Finally the
static busybox from the mounted image runs in a chroot, so real executable
pages come through the chunk-based inodes.

Usage: oci_sample_test.py IMG_MKIMAGE SAMPLES_DIR. Exit 0 pass, 1 fail,
77 skip (not root, sample image cannot be built here, no EROFS)."""
import ctypes
import gzip
import hashlib
import io
import json
import os
import shutil
import stat
import subprocess
import sys
import tarfile
import tempfile

MS_RDONLY = 1
MNT_DETACH = 2


def skip(why):
    print(f"skip: {why}", file=sys.stderr)
    sys.exit(77)


def oci_layers(layout):
    with open(os.path.join(layout, "index.json")) as f:
        index = json.load(f)

    def blob(digest):
        algo, hexd = digest.split(":", 1)
        return os.path.join(layout, "blobs", algo, hexd)

    with open(blob(index["manifests"][0]["digest"])) as f:
        manifest = json.load(f)
    return [blob(layer["digest"]) for layer in manifest["layers"]]


def open_layer(path):
    with open(path, "rb") as f:
        data = f.read()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    elif data[:4] == b"\x28\xb5\x2f\xfd":
        data = subprocess.run(["zstd", "-dc"], input=data, capture_output=True,
                              check=True).stdout
    return tarfile.open(fileobj=io.BytesIO(data), mode="r:")


def norm(name):
    parts = [p for p in name.split("/") if p not in ("", ".")]
    assert ".." not in parts, name
    return "/".join(parts)


def remove_tree(model, path):
    for p in [p for p in model if p == path or p.startswith(path + "/")]:
        del model[p]


def ensure_parents(model, path):
    parts = path.split("/")[:-1]
    for i in range(1, len(parts) + 1):
        p = "/".join(parts[:i])
        if p not in model:
            model[p] = {"fmt": stat.S_IFDIR, "mode": 0o755, "uid": 0, "gid": 0, "mtime": 0,
                        "ino": ("dir", p)}


def apply_layer(model, tf, tag):
    members = tf.getmembers()
    for m in members:  # whiteouts hide lower layers only
        path = norm(m.name)
        base, parent = os.path.basename(path), os.path.dirname(path)
        if base == ".wh..wh..opq":
            for p in [p for p in model if (parent == "" and p) or p.startswith(parent + "/")]:
                del model[p]
        elif base.startswith(".wh."):
            remove_tree(model, os.path.join(parent, base[4:]))
    for m in members:
        path = norm(m.name)
        if os.path.basename(path).startswith(".wh."):
            continue
        if m.islnk():
            rec = dict(model[norm(m.linkname)])
        else:
            rec = {"mode": m.mode & 0o7777, "uid": m.uid, "gid": m.gid, "mtime": int(m.mtime),
                   "ino": (tag, path)}
            if m.isdir():
                rec["fmt"] = stat.S_IFDIR
            elif m.issym():
                rec["fmt"], rec["target"] = stat.S_IFLNK, m.linkname
            elif m.ischr() or m.isblk():
                rec["fmt"] = stat.S_IFCHR if m.ischr() else stat.S_IFBLK
                rec["rdev"] = (m.devmajor, m.devminor)
            elif m.isfifo():
                rec["fmt"] = stat.S_IFIFO
            else:
                rec["fmt"] = stat.S_IFREG
                rec["size"] = m.size
                rec["sha"] = hashlib.sha256(tf.extractfile(m).read()).hexdigest()
        if path == "":
            model[""] = rec
            continue
        old = model.get(path)
        if old and old["fmt"] == stat.S_IFDIR and rec["fmt"] == stat.S_IFDIR:
            model[path] = rec
            continue
        if old:
            remove_tree(model, path)
        ensure_parents(model, path)
        model[path] = rec


def mounted(mnt):
    model = {}
    for dirpath, dirnames, filenames in os.walk(mnt):
        names = dirnames + filenames
        rel = os.path.relpath(dirpath, mnt)
        rel = "" if rel == "." else rel
        paths = ([""] if rel == "" else []) + [f"{rel}/{n}" if rel else n for n in names]
        for p in paths:
            full = os.path.join(mnt, p) if p else mnt
            st = os.lstat(full)
            rec = {"fmt": stat.S_IFMT(st.st_mode), "mode": stat.S_IMODE(st.st_mode),
                   "uid": st.st_uid, "gid": st.st_gid, "mtime": st.st_mtime_ns // 10**9,
                   "ino": ("m", st.st_ino)}
            if stat.S_ISREG(st.st_mode):
                rec["size"] = st.st_size
                with open(full, "rb") as f:
                    rec["sha"] = hashlib.sha256(f.read()).hexdigest()
            elif stat.S_ISLNK(st.st_mode):
                rec["target"] = os.readlink(full)
            elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
                rec["rdev"] = (os.major(st.st_rdev), os.minor(st.st_rdev))
            model[p] = rec
    return model


def compare(want, got):
    errors = []
    for p in sorted(set(want) | set(got)):
        if p not in got or p not in want:
            errors.append(f"{p!r}: {'missing in the mount' if p not in got else 'unexpected'}")
            continue
        for k, v in want[p].items():
            if k != "ino" and got[p].get(k) != v:
                errors.append(f"{p!r}: {k} is {got[p].get(k)!r}, expected {v!r}")
    gw, gg = {}, {}
    for p in want:
        if p in got and want[p]["fmt"] == stat.S_IFREG:
            gw.setdefault(want[p]["ino"], set()).add(p)
            gg.setdefault(got[p]["ino"], set()).add(p)
    if sorted(map(sorted, gw.values())) != sorted(map(sorted, gg.values())):
        errors.append("hard-link groups differ")
    return errors


def main():
    mkimage, samples = sys.argv[1], sys.argv[2]
    if os.geteuid() != 0:
        skip("needs root (mount, chroot)")
    script = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts",
                          "build-sample-images.sh")
    if not os.path.exists(script):
        skip("scripts/build-sample-images.sh not present")
    r = subprocess.run(["bash", script, samples, "busybox"], capture_output=True, text=True)
    if r.returncode != 0:
        skip(f"the busybox sample image cannot be built here: {r.stderr.strip()[-300:]}")
    layers = oci_layers(os.path.join(samples, "busybox"))
    work = tempfile.mkdtemp(prefix="strata-ocisample-")
    mnt = os.path.join(work, "mnt")
    os.makedirs(mnt)
    libc = ctypes.CDLL(None, use_errno=True)
    is_mounted = False
    try:
        img = os.path.join(work, "meta.img")
        out = subprocess.run([mkimage, os.path.join(work, "store"), img] + layers,
                             capture_output=True, text=True)
        sys.stderr.write(out.stderr)
        if out.returncode != 0:
            return 1
        devices = out.stdout.split()
        if shutil.which("fsck.erofs"):
            subprocess.run(["fsck.erofs"] + [f"--device={d}" for d in devices] + [img],
                           check=True)
        opts = ",".join(f"device={d}" for d in devices).encode()
        if libc.mount(img.encode(), mnt.encode(), b"erofs", MS_RDONLY, opts) != 0:
            err = ctypes.get_errno()
            if err in (19, 1):
                skip(f"the kernel cannot mount file-backed EROFS: {os.strerror(err)}")
            print(f"mount failed: {os.strerror(err)} (see dmesg)", file=sys.stderr)
            return 1
        is_mounted = True
        # a root the layers do not describe is 0755 root:root, mtime 0
        want = {"": {"fmt": stat.S_IFDIR, "mode": 0o755, "uid": 0, "gid": 0, "mtime": 0,
                     "ino": ("dir", "")}}
        for i, layer in enumerate(layers):
            with open_layer(layer) as tf:
                apply_layer(want, tf, f"l{i}")
        errors = compare(want, mounted(mnt))
        busybox = [p for p in ("bin/busybox", "usr/bin/busybox") if p in want]
        if busybox:
            r = subprocess.run(["chroot", mnt, "/" + busybox[0], "echo", "hello-from-erofs"],
                               capture_output=True, text=True)
            if r.stdout.strip() != "hello-from-erofs":
                errors.append(f"busybox in the mounted image failed: {r.returncode} {r.stderr}")
        else:
            errors.append("no busybox binary in the sample image")
        for e in errors[:50]:
            print(e, file=sys.stderr)
        if errors:
            print(f"oci_sample_test: {len(errors)} difference(s)", file=sys.stderr)
            return 1
        print(f"oci_sample_test: ok ({len(want)} paths, {len(layers)} layers, busybox ran)")
        return 0
    finally:
        if is_mounted:
            libc.umount2(mnt.encode(), MNT_DETACH)
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    sys.exit(main())
