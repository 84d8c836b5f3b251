"""An image built by umoci, seen from inside a VM sandbox: its tree equals
umoci's own unpacking of the same image, entry by entry.

Run by test_image_store.sh beside test_image_store.py (a cluster with a
store, strata-sandboxd on it). umoci builds two layers: the first holds
static busybox and mount_tree_test's tree of edge cases (sizes around 4 KiB
and 1 MiB, holes, hard links, symlinks of every kind, suid and sgid, ids
past 65535, 255-byte names, 40 levels of directories, a fifo and devices),
the second removes, replaces and retypes entries (umoci writes the
whiteouts). `strata image import` stores the layout; a qemu sandbox boots
it (EROFS from the read-only disks, an overlay over the guest's disk); the
guest's own busybox walks the root filesystem (find -xdev, stat, sha256sum,
readlink), so what is checked is what a program in the VM sees.

What is compared: the set of paths, type, mode, uid, gid, mtime (seconds),
size, content (SHA-256), symlink target, device numbers, and which paths
are one file (hard links). Xattrs are not: busybox does not read them
(imagesvc_mount_tree checks them on the node's mount). The first run of
this test found that `strata image import` refused umoci's layers: umoci
writes a replaced directory's children's whiteouts after the file that
replaced it (imagesvc/tree.c now takes them as the no-ops they are).
"""
import hashlib
import os
import shutil
import stat
import subprocess
import sys

import pytest

if os.environ.get("STRATA_IMAGE_TEST") != "1":
    pytest.skip("run by test_image_store.sh (needs a cluster with a store)",
                allow_module_level=True)

import strata  # noqa: E402
from strata import Sandbox  # noqa: E402

sys.path.insert(0, os.path.join(os.environ["STRATA_SRC"], "tests", "imagesvc"))
import mount_tree_test as tree  # noqa: E402

HOME = os.environ.get("STRATA_HOME", "")
TAG = "t"
NAME = "umoci-tree:1"
# What the guest has that the image does not: the agent's mount points for
# the kernel's filesystems and the writable scratch it makes.
GUEST_ONLY = {"dev", "proc", "sys", "tmp", "run"}


def umoci(*args):
    subprocess.run(["umoci", "--log", "error"] + list(args), check=True)


def first_layer(rootfs):
    """busybox (the guest's exec needs a shell) and the edge-case tree."""
    os.makedirs(os.path.join(rootfs, "bin"), exist_ok=True)
    shutil.copy2("/bin/busybox", os.path.join(rootfs, "bin", "busybox"))
    os.symlink("busybox", os.path.join(rootfs, "bin", "sh"))
    tree.make_layer1(os.path.join(rootfs, "t"))


def second_layer(rootfs):
    """Removals, replacements and changes of type: umoci turns each into
    whiteouts or new entries of the second layer."""
    t = os.path.join(rootfs, "t")
    os.unlink(f"{t}/wh/gone")
    shutil.rmtree(f"{t}/wh/inner")
    os.unlink(f"{t}/dangling")
    shutil.rmtree(f"{t}/opaque")
    os.makedirs(f"{t}/opaque")
    tree.write(f"{t}/opaque/new", b"new")
    os.unlink(f"{t}/becomes-dir")
    os.makedirs(f"{t}/becomes-dir")
    tree.write(f"{t}/becomes-dir/inside", b"inside")
    shutil.rmtree(f"{t}/becomes-file")
    tree.write(f"{t}/becomes-file", b"now a file", mode=0o600)
    tree.write(f"{t}/mib", tree.pattern(44, 1 << 20))
    os.unlink(f"{t}/usr/bin/ping4")
    tree.write(f"{t}/usr/bin/ping4", b"replaced: no longer a link", mode=0o755)
    os.utime(f"{t}/usr/bin", ns=(1700000001_000000000, 1700000001_000000000))


def build_layout(work):
    """Builds the two-layer image with umoci; returns (layout, the rootfs of
    umoci's unpacking of the final image)."""
    layout = os.path.join(work, "oci")
    ref = f"{layout}:{TAG}"
    umoci("init", "--layout", layout)
    umoci("new", "--image", ref)
    for i, change in enumerate([first_layer, second_layer]):
        bundle = os.path.join(work, f"bundle{i}")
        umoci("unpack", "--image", ref, bundle)
        change(os.path.join(bundle, "rootfs"))
        umoci("repack", "--image", ref, bundle)
        shutil.rmtree(bundle)
    unpacked = os.path.join(work, "unpacked")
    umoci("unpack", "--image", ref, unpacked)
    return layout, os.path.join(unpacked, "rootfs")


def reference_model(rootfs):
    """umoci's unpacking as the API's tar would describe it."""
    model = {}
    for rel in tree.walk(rootfs):
        path = os.path.join(rootfs, rel) if rel else rootfs
        st = os.lstat(path)
        rec = {"fmt": stat.S_IFMT(st.st_mode), "mode": stat.S_IMODE(st.st_mode),
               "uid": st.st_uid, "gid": st.st_gid, "ino": st.st_ino}
        if stat.S_ISREG(st.st_mode):
            with open(path, "rb") as f:
                rec["sha"] = hashlib.sha256(f.read()).hexdigest()
            rec["size"] = st.st_size
        elif stat.S_ISLNK(st.st_mode):
            rec["target"] = os.readlink(path)
        elif stat.S_ISCHR(st.st_mode) or stat.S_ISBLK(st.st_mode):
            rec["rdev"] = (os.major(st.st_rdev), os.minor(st.st_rdev))
        # seconds (what busybox stat prints); not a symlink's own mtime (not
        # every unpacker keeps it), nor the root's: the guest's agent makes
        # its mount points there
        if rel and not stat.S_ISLNK(st.st_mode):
            rec["mtime"] = st.st_mtime_ns // 10**9
        model[rel] = rec
    return model


def guest_exec(sb, argv):
    r = sb.exec(argv, timeout=120)
    assert r.exit_code == 0, r
    return r.stdout


def batches(paths, n=200):
    return [paths[i:i + n] for i in range(0, len(paths), n)]


def guest_model(sb):
    """The tree as the guest's own busybox sees it: find on the root
    filesystem (-xdev: not the kernel's filesystems the agent mounted), stat
    for the attributes, sha256sum for contents and readlink for targets."""
    bb = "/bin/busybox"
    names = guest_exec(sb, [bb, "find", "/", "-xdev", "-print0"]).split("\0")
    paths = sorted(p for p in names if p and p != "/")
    model = {}
    for part in batches(["/"] + paths):
        lines = guest_exec(sb, [bb, "stat", "-c", "%f|%u|%g|%s|%Y|%i|%t|%T"] + part)
        for p, line in zip(part, lines.splitlines()):
            raw, uid, gid, size, mtime, ino, major, minor = line.split("|")
            mode = int(raw, 16)
            rec = {"fmt": stat.S_IFMT(mode), "mode": stat.S_IMODE(mode), "uid": int(uid),
                   "gid": int(gid), "ino": int(ino)}
            if stat.S_ISREG(mode):
                rec["size"] = int(size)
            elif stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
                rec["rdev"] = (int(major, 16), int(minor, 16))
            if not stat.S_ISLNK(mode):
                rec["mtime"] = int(mtime)
            model[p.lstrip("/")] = rec
    of = lambda f: [p for p in paths if model[p.lstrip("/")]["fmt"] == f]  # noqa: E731
    for key, cmd in (("sha", "sha256sum <"), ("target", "readlink")):
        for part in batches(of(stat.S_IFREG if key == "sha" else stat.S_IFLNK)):
            out = guest_exec(sb, [bb, "sh", "-c", 'for f; do %s %s "$f"; done' % (bb, cmd),
                                  "sh"] + part)
            for p, line in zip(part, out.splitlines()):
                model[p.lstrip("/")][key] = line.split()[0] if key == "sha" else line
    return model


def differences(want, got):
    errors = []
    for p in sorted(set(want) | set(got)):
        if p not in got:
            errors.append("missing in the guest: %r" % p)
        elif p not in want:
            errors.append("only in the guest: %r" % p)
        else:
            errors += ["%r: %s is %r in the guest, %r in umoci's unpacking"
                       % (p, k, got[p].get(k), v)
                       for k, v in want[p].items() if k != "ino" and got[p].get(k) != v]
    return errors


def link_groups(model, paths):
    groups = {}
    for p in paths:
        groups.setdefault(model[p]["ino"], []).append(p)
    return sorted(sorted(g) for g in groups.values())


def test_umoci_image_tree_in_vm(tmp_path):
    caps = strata.capabilities("qemu")
    if not caps["available"]:
        pytest.skip("qemu backend unavailable: %s" % caps.get("reason"))
    if not shutil.which("umoci"):
        pytest.skip("umoci is not installed (apt-get install umoci)")
    layout, rootfs = build_layout(str(tmp_path))
    cli = os.path.join(os.environ["STRATA_BIN"], "strata")
    subprocess.run([cli, "image", "import", layout, "--tag", TAG, "--name", NAME,
                    "--home", HOME], check=True, stdout=subprocess.DEVNULL)
    want = reference_model(rootfs)
    with Sandbox.create(NAME, backend="qemu", memory_mb=128, ttl=300, timeout=180) as sb:
        got = guest_model(sb)
    extra = {p for p in got if p.split("/")[0] in GUEST_ONLY and p not in want}
    for p in extra:
        del got[p]
    errors = differences(want, got)
    files = [p for p in want if want[p]["fmt"] == stat.S_IFREG and p in got]
    if link_groups(want, files) != link_groups(got, files):
        errors.append("hard-link groups differ: %r in the guest, %r in umoci's unpacking"
                      % ([g for g in link_groups(got, files) if len(g) > 1],
                         [g for g in link_groups(want, files) if len(g) > 1]))
    assert not errors, "%d difference(s) (guest-only, not compared: %s):\n%s" % (
        len(errors), sorted(extra), "\n".join(errors[:40]))
    print("umoci image in a VM: %d paths equal (guest-only: %s)" % (len(want), sorted(extra)))
