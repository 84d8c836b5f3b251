#!/usr/bin/env python3
"""test_hostile.py — registry pulls against fakereg.py, which serves the
busybox sample and misbehaves on purpose:

  * chunked bodies (tiny chunks, extensions, trailers), blob redirects to
    another port (no credentials follow them) and anonymous bearer tokens:
    the pull succeeds with the layout's digests;
  * the connection dropped mid-blob once: resumed with a Range request, or
    restarted when the server ignores Range; dropped every time: retried
    with backoff, then a clear error;
  * a tampered layer, oversized headers (in all and one line), headers
    trickling in a byte at a time (cut at the stall limit), an oversized manifest (with a
    Content-Length and chunked), a manifest list with only arm64, a
    registry nobody listens on: clear errors, and no stage left behind."""
import json
import os
import time

from pulltest import (check, check_stage, expect_failure, free_port, layout_expect, log, main,
                      run_tool, spawn, stop, wait_port)

HERE = os.path.dirname(os.path.abspath(__file__))
FAST = ["--backoff-ms", "10", "--timeout-ms", "5000"]


class Fake:
    def __init__(self, ctx, name, **cfg):
        self.dir = os.path.join(ctx.tmp, "fake-" + name)
        os.makedirs(self.dir)
        cfgfile = os.path.join(self.dir, "config.json")
        with open(cfgfile, "w") as f:
            json.dump(cfg, f)
        self.logfile = os.path.join(self.dir, "requests.log")
        portfile = os.path.join(self.dir, "port")
        self.p = spawn(["python3", os.path.join(HERE, "fakereg.py"), "--layout", ctx.busybox,
                        "--config", cfgfile, "--port-file", portfile, "--log", self.logfile])
        for _ in range(400):
            if os.path.exists(portfile):
                break
            time.sleep(0.025)
        self.port, self.redirect_port = map(int, open(portfile).read().split())
        wait_port(self.port, self.p)
        self.ref = "http://127.0.0.1:%d/strata/busybox:latest" % self.port

    def requests(self):
        with open(self.logfile) as f:
            return [l.split() for l in f]

    def stop(self):
        stop(self.p)


def layer_requests(fake, digest):
    return [r for r in fake.requests() if r[1].endswith(digest)]


def good_paths(ctx, expect):
    f = Fake(ctx, "good", chunked=True, redirect=True, bearer=True)
    st = os.path.join(ctx.tmp, "st-good")
    run_tool(ctx, "pull", f.ref, st, *FAST)
    check_stage(ctx, st, expect)
    reqs = f.requests()
    redirected = [r for r in reqs if r[1].startswith("/redirected/")]
    check(len(redirected) == 4, "config + 3 layers fetched after a redirect: %s" % reqs)
    check(all(r[3] == "-" for r in redirected), "credentials followed a redirect: %s" % redirected)
    check(any(r[3] == "Bearer" for r in reqs if r[1].startswith("/v2/strata")), "no bearer token used")
    log("  ok: chunked bodies, redirected blobs, bearer token: digests match")
    f.stop()


def drops(ctx, expect):
    l0 = expect["layers"][0][0]
    f = Fake(ctx, "drop-once", drop={"layer": 0, "after": 100000, "times": 1, "range": True})
    st = os.path.join(ctx.tmp, "st-drop1")
    run_tool(ctx, "pull", f.ref, st, *FAST)
    check_stage(ctx, st, expect)
    rs = layer_requests(f, l0)
    check(len(rs) == 2 and rs[1][2] == "bytes=100000-", "expected a resume: %s" % rs)
    log("  ok: dropped mid-blob once, resumed with Range: bytes=100000-")
    f.stop()

    f = Fake(ctx, "drop-norange", drop={"layer": 0, "after": 70000, "times": 2, "range": False})
    st = os.path.join(ctx.tmp, "st-drop2")
    run_tool(ctx, "pull", f.ref, st, *FAST)
    check_stage(ctx, st, expect)
    check(len(layer_requests(f, l0)) == 3, "expected two retries")
    log("  ok: dropped twice, server ignores Range: restarted from 0 and verified")
    f.stop()

    f = Fake(ctx, "drop-always", drop={"layer": 0, "after": 50000, "times": -1, "range": True})
    st = os.path.join(ctx.tmp, "st-drop3")
    expect_failure(ctx, ["pull", f.ref, st, "--attempts", "3", *FAST], "ECONNRESET",
                   ["layer 0", "gave up after 3 attempts", "closed"], st)
    check(len(layer_requests(f, l0)) == 3, "expected exactly 3 attempts")
    f.stop()

    f = Fake(ctx, "stall", drop={"layer": 0, "after": 30000, "times": -1, "stall": 5})
    st = os.path.join(ctx.tmp, "st-stall")
    t0 = time.time()
    expect_failure(ctx, ["pull", f.ref, st, "--attempts", "2", "--timeout-ms", "300",
                         "--backoff-ms", "10"], "ETIMEDOUT", ["layer 0", "gave up after 2"], st)
    check(time.time() - t0 < 4, "the stall limit did not cut the stalled transfers short")
    f.stop()


def bad_content(ctx, expect):
    f = Fake(ctx, "tamper", tamper=2)
    st = os.path.join(ctx.tmp, "st-tamper")
    expect_failure(ctx, ["pull", f.ref, st, *FAST], "EBADMSG",
                   ["layer 2", "content has digest", expect["layers"][2][0]], st)
    f.stop()

    f = Fake(ctx, "arm", only_platform="arm64")
    expect_failure(ctx, ["pull", f.ref, st, *FAST], "ENOENT", ["linux/amd64", "linux/arm64"], st)
    f.stop()


def limits(ctx, expect):
    st = os.path.join(ctx.tmp, "st-limits")
    f = Fake(ctx, "headers", huge_headers=100000)
    expect_failure(ctx, ["pull", f.ref, st, *FAST], "EFBIG", ["headers over the limit"], st)
    run_tool(ctx, "pull", f.ref, st, "--max-header-bytes", "300000", *FAST)
    check_stage(ctx, st, expect)
    log("  ok: the same headers pass under a raised --max-header-bytes")
    os.system("rm -rf '%s'" % st)
    f.stop()

    f = Fake(ctx, "trickle", trickle=True)
    t0 = time.time()
    expect_failure(ctx, ["pull", f.ref, st, "--attempts", "2", "--timeout-ms", "600",
                         "--backoff-ms", "10"], "ETIMEDOUT", ["reading the response"], st)
    check(time.time() - t0 < 5, "a trickling server held the client for %.1f s" % (time.time() - t0))
    f.stop()

    f = Fake(ctx, "line", header_line=9000)
    expect_failure(ctx, ["pull", f.ref, st, *FAST], "EFBIG", ["8192 bytes a line"], st)
    f.stop()

    f = Fake(ctx, "manifest", huge_manifest=5 << 20)
    expect_failure(ctx, ["pull", f.ref, st, *FAST], "EFBIG", ["over the limit"], st)
    f.stop()
    f = Fake(ctx, "manifest-chunked", huge_manifest=5 << 20, chunked=True)
    expect_failure(ctx, ["pull", f.ref, st, *FAST], "EFBIG", ["over the limit"], st)
    f.stop()
    f = Fake(ctx, "small-limit")
    expect_failure(ctx, ["pull", f.ref, st, "--max-manifest", "100", *FAST], "EFBIG",
                   ["over the limit of 100"], st)
    f.stop()

    port = free_port()
    t0 = time.time()
    expect_failure(ctx, ["pull", "http://127.0.0.1:%d/x/y:z" % port, st, "--attempts", "3", *FAST],
                   "ECONNREFUSED", ["cannot connect"], st)
    check(time.time() - t0 < 10, "retries took too long")


def test(ctx):
    expect = layout_expect(ctx.busybox)
    good_paths(ctx, expect)
    drops(ctx, expect)
    bad_content(ctx, expect)
    limits(ctx, expect)


main(test)
