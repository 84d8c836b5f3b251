"""bench/sandbox/files_bench.py — file transfer MB/s of a large file into and
out of a container sandbox through strata-sandboxd (the Python SDK's
upload_file/download_file, and curl on the same API), beside `cp` of the
same file into and out of that sandbox's root on the host (the overlay,
reached as /proc/<agent>/root: its staging root with the upper dir is
detached, sandbox/agent/agent_stage.c): the copy a transfer could at best
match. Rounds alternate ours and the baseline, the
order swapped every round; the best round of each is printed (the machine
is shared), with every round's figures below it.

usage: python3 files_bench.py BUILD_DIR SIZE_MB ROUNDS   (run by files.sh)"""
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
sys.path.insert(0, os.path.join(SRC, "sdk", "python"))
sys.path.insert(0, os.path.join(SRC, "tests", "sdk"))

build, size_mb, rounds = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
os.environ["STRATA_BIN"] = os.path.join(build, "bin")

from sandboxd_harness import Daemon, make_busybox_rootfs  # noqa: E402
import strata  # noqa: E402

MiB = 1 << 20


def timed(fn):
    t = time.monotonic()
    fn()
    return time.monotonic() - t


def agent_pid(state, sid):
    for p in (state,):
        for dirpath, _, files in os.walk(p):
            if os.path.basename(dirpath) == sid and "state.json" in files:
                with open(os.path.join(dirpath, "state.json")) as f:
                    st = json.load(f)
                b = st.get("backend_state") or st.get("bstate")
                if isinstance(b, str):
                    b = json.loads(b)
                return b["agent_pid"]
    raise RuntimeError("no state.json for %s" % sid)


def curl(d, method, sid, path, infile=None, outfile=None):
    url = "http://x/v1/sandboxes/%s/files?path=%s" % (sid, path)
    args = ["curl", "-sf", "--unix-socket", d.socket, "-X", method]
    args += ["-T", infile] if infile else ["-o", outfile]
    subprocess.run(args + [url], check=True, stdout=subprocess.DEVNULL)


def main():
    base = tempfile.mkdtemp(prefix="strata-filebench-", dir="/dev/shm")
    d = None
    try:
        root = make_busybox_rootfs(os.path.join(base, "rootfs"))
        state = os.path.join(base, "state")
        d = Daemon(os.path.join(base, "d"), {"busybox": root},
                   ["--log-level", "warn", "--state-dir", state])
        os.makedirs(d.base)
        d.start()
        src = os.path.join(base, "src.bin")
        with open(src, "wb") as f:
            for _ in range(size_mb):
                f.write(os.urandom(MiB))
        sb = strata.Sandbox.create("busybox", backend="container", socket=d.socket,
                                   disk_mb=3 * size_mb + 64, memory_mb=256)
        upper = "/proc/%d/root" % agent_pid(state, sb.id)
        if not os.path.isdir(os.path.join(upper, "tmp")):
            os.makedirs(os.path.join(upper, "tmp"), exist_ok=True)
        dst = os.path.join(base, "dst.bin")
        best = {}
        table = []

        def run(name, fn, cleanup):
            t = timed(fn)
            cleanup()
            mbs = size_mb / t
            best[name] = max(best.get(name, 0), mbs)
            return mbs

        def rm(*paths):
            for p in paths:
                if os.path.exists(p):
                    os.unlink(p)

        in_sb = os.path.join(upper, "tmp", "f.bin")  # /tmp/f.bin inside
        for r in range(rounds):
            row = {}
            ours_first = r % 2 == 0
            steps = [
                ("sdk in", lambda: sb.files.upload_file(src, "/tmp/f.bin", timeout=600),
                 lambda: None),
                ("sdk out", lambda: sb.files.download_file("/tmp/f.bin", dst, timeout=600),
                 lambda: rm(dst, in_sb)),
                ("curl in", lambda: curl(d, "PUT", sb.id, "/tmp/f.bin", infile=src),
                 lambda: None),
                ("curl out", lambda: curl(d, "GET", sb.id, "/tmp/f.bin", outfile=dst),
                 lambda: rm(dst, in_sb)),
            ]
            base_steps = [
                ("cp in", lambda: subprocess.run(["cp", src, in_sb], check=True), lambda: None),
                ("cp out", lambda: subprocess.run(["cp", in_sb, dst], check=True),
                 lambda: rm(dst, in_sb)),
            ]
            for name, fn, cl in (steps + base_steps if ours_first else base_steps + steps):
                row[name] = run(name, fn, cl)
            table.append(row)
        sb.kill()
        print("file transfer, %d MiB file, best of %d rounds (MB/s; 1 MB = 1 MiB)"
              % (size_mb, rounds))
        print("| direction | SDK | curl | cp (upper dir) | SDK/cp | curl/cp |")
        print("|---|---:|---:|---:|---:|---:|")
        for dirn in ("in", "out"):
            s, c, b = best["sdk " + dirn], best["curl " + dirn], best["cp " + dirn]
            print("| %s | %.0f | %.0f | %.0f | %.2f | %.2f |" % (dirn, s, c, b, s / b, c / b))
        print("rounds:")
        for i, row in enumerate(table):
            print("  %d: " % i + ", ".join("%s %.0f" % kv for kv in row.items()))
        ok = all(best["sdk " + k] / best["cp " + k] >= 0.5 for k in ("in", "out"))
        print("goal SDK/cp >= 0.5 both ways: %s" % ("MET" if ok else "NOT MET"))
    finally:
        if d:
            d.stop()
        shutil.rmtree(base, ignore_errors=True)


main()
