"""pulltest.py — what the imagepull tests share: the busybox sample image,
running pull_tool, comparing a stage with its source, and services on
127.0.0.1 (Debian's docker-registry, the fake registry of fakereg.py) that
are stopped and removed again however the test ends.

A test calls main(fn): fn(ctx) runs with ctx.tool (pull_tool), ctx.tmp (a
scratch directory removed at the end) and ctx.busybox (the OCI layout);
skip(reason) exits 77, check(cond, msg) fails with exit 1."""
import atexit
import hashlib
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.environ.get("STRATA_SRC", os.path.abspath(os.path.join(HERE, "..", "..", "..")))
_procs = []


class Skip(Exception):
    pass


def skip(reason):
    raise Skip(reason)


def check(cond, msg):
    if not cond:
        raise AssertionError(msg)


def log(msg):
    print(msg, flush=True)


def _cleanup():
    for p in reversed(_procs):
        if p.poll() is None:
            p.terminate()
            try:
                p.wait(5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
    _procs.clear()


def _on_signal(sig, frame):
    _cleanup()
    sys.exit(1)


def spawn(argv, **kw):
    """Starts a service that is stopped when the test ends."""
    p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, **kw)
    _procs.append(p)
    return p


def stop(p):
    if p.poll() is None:
        p.terminate()
        p.wait(10)
    if p in _procs:
        _procs.remove(p)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port, proc, timeout=20):
    end = time.time() + timeout
    while time.time() < end:
        if proc.poll() is not None:
            raise RuntimeError("service exited with %d before listening" % proc.returncode)
        try:
            with socket.create_connection(("127.0.0.1", port), 0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError("nothing listens on 127.0.0.1:%d" % port)


def sha256_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return "sha256:" + h.hexdigest()


class Ctx:
    pass


def sample_busybox(tmp):
    build = os.environ.get("STRATA_BUILD")
    out = os.path.join(build, "sample-images") if build else os.path.join(tmp, "samples")
    r = subprocess.run([os.path.join(SRC, "scripts", "build-sample-images.sh"), out, "busybox"],
                       stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if r.returncode != 0:
        skip("cannot build the busybox sample image: " + r.stdout.strip()[-300:])
    return os.path.join(out, "busybox")


def layout_expect(layout, tag="latest"):
    """What a stage of the layout must hold: digests of manifest, config, layers."""
    with open(os.path.join(layout, "index.json")) as f:
        index = json.load(f)
    desc = [m for m in index["manifests"]
            if m.get("annotations", {}).get("org.opencontainers.image.ref.name") == tag][0]
    with open(os.path.join(layout, "blobs", "sha256", desc["digest"][7:]), "rb") as f:
        manifest = json.load(f)
    return {
        "manifest_digest": desc["digest"],
        "config_digest": manifest["config"]["digest"],
        "layers": [(l["digest"], l["mediaType"], l["size"]) for l in manifest["layers"]],
    }


def run_tool(ctx, *args, ok=True, timeout=120):
    r = subprocess.run([ctx.tool] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, text=True, timeout=timeout)
    if ok and r.returncode != 0:
        raise AssertionError("pull_tool %s failed: %s" % (" ".join(map(str, args)), r.stderr.strip()))
    if not ok and r.returncode == 0:
        raise AssertionError("pull_tool %s succeeded, expected a failure" % " ".join(map(str, args)))
    return r


def show(ctx, stage):
    return json.loads(run_tool(ctx, "show", stage, "--verify").stdout)


def check_stage(ctx, stage, expect):
    """The stage has the expected digests, and its files hash to them."""
    s = show(ctx, stage)
    check(s["manifest_digest"] == expect["manifest_digest"],
          "manifest digest %s != %s" % (s["manifest_digest"], expect["manifest_digest"]))
    check(s["config_digest"] == expect["config_digest"], "config digest differs")
    got = [(l["digest"], l["media_type"], l["size"]) for l in s["layers"]]
    check(got == expect["layers"], "layers differ: %s != %s" % (got, expect["layers"]))
    for l in s["layers"]:
        check(sha256_file(l["path"]) == l["digest"], "%s does not hash to %s" % (l["path"], l["digest"]))
    check(sha256_file(os.path.join(stage, "config.json")) == expect["config_digest"], "config.json")
    return s


def expect_failure(ctx, args, errname, words, stage=None):
    """pull_tool fails with errname and a message containing words; no stage."""
    r = run_tool(ctx, *args, ok=False)
    err = r.stderr.strip()
    check(("pull_tool: %s:" % errname) in err, "expected %s, got: %s" % (errname, err))
    for w in words:
        check(w in err, "expected '%s' in: %s" % (w, err))
    if stage:
        parent = os.path.dirname(stage) or "."
        left = [n for n in os.listdir(parent) if n.startswith(os.path.basename(stage))]
        check(not left, "a failed import left %s behind" % left)
    log("  ok: %s" % err)
    return err


def main(fn):
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    atexit.register(_cleanup)
    if len(sys.argv) < 2 or not os.access(sys.argv[1], os.X_OK):
        print("usage: %s PULL_TOOL" % sys.argv[0], file=sys.stderr)
        sys.exit(2)
    ctx = Ctx()
    ctx.tool = sys.argv[1]
    ctx.tmp = tempfile.mkdtemp(prefix="imagepull-")
    rc = 0
    try:
        ctx.busybox = sample_busybox(ctx.tmp)
        fn(ctx)
        log("PASS")
    except Skip as e:
        print("SKIP: %s" % e, file=sys.stderr)
        rc = 77
    except Exception as e:  # noqa: BLE001 — report anything as a failure
        import traceback
        traceback.print_exc()
        print("FAIL: %s" % e, file=sys.stderr)
        rc = 1
    finally:
        _cleanup()
        shutil.rmtree(ctx.tmp, ignore_errors=True)
    sys.exit(rc)
