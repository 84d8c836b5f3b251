#!/usr/bin/env python3
"""test_layout.py — importing OCI image layouts: the busybox sample staged
intact (digests, media types, config fields), by tag and without; and the
bad cases, each a clear error with nothing left behind: a tampered layer
blob, a blob shorter than its descriptor, an unknown tag, an index that only
has an arm64 image, a config for another platform, a blob that is a symlink,
an oversized manifest, an existing stage."""
import hashlib
import json
import os
import shutil

from pulltest import check, check_stage, expect_failure, log, main, run_tool


def copy_layout(ctx, name):
    dst = os.path.join(ctx.tmp, name)
    shutil.copytree(ctx.busybox, dst, symlinks=True)
    return dst


def put_blob(layout, data):
    d = hashlib.sha256(data).hexdigest()
    with open(os.path.join(layout, "blobs", "sha256", d), "wb") as f:
        f.write(data)
    return "sha256:" + d, len(data)


def manifest_of(layout):
    with open(os.path.join(layout, "index.json")) as f:
        index = json.load(f)
    d = index["manifests"][0]["digest"]
    with open(os.path.join(layout, "blobs", "sha256", d[7:])) as f:
        return index, json.load(f)


def write_index(layout, index):
    with open(os.path.join(layout, "index.json"), "w") as f:
        json.dump(index, f)


def good(ctx, expect):
    stage = os.path.join(ctx.tmp, "stage-good")
    run_tool(ctx, "import", ctx.busybox, stage)
    s = check_stage(ctx, stage, expect)
    check(s["cmd"] == ["/app/hello.sh"] and s["working_dir"] == "/app", "config fields")
    check(s["name"] is None, "a layout without io.containerd.image.name has no name")
    check("STRATA_SAMPLE=busybox" in s["env"] and s["user"] == "0:0", "config env/user")
    check([l["compression"] for l in s["layers"]] == ["gzip", "zstd", "none"], "compressions")
    check(os.listdir(os.path.join(stage, "layers")) and
          open(os.path.join(stage, "source")).read().startswith("oci-layout:"), "source")
    stage2 = os.path.join(ctx.tmp, "stage-tag")
    run_tool(ctx, "import", ctx.busybox, stage2, "--tag", "latest")
    check_stage(ctx, stage2, expect)
    log("  ok: busybox layout staged, %d layers" % len(s["layers"]))
    expect_failure(ctx, ["import", ctx.busybox, stage], "EEXIST", ["exists"])


def tampered(ctx):
    lay = copy_layout(ctx, "tampered")
    _, man = manifest_of(lay)
    blob = os.path.join(lay, "blobs", "sha256", man["layers"][0]["digest"][7:])
    with open(blob, "r+b") as f:
        f.seek(1000)
        b = f.read(1)
        f.seek(1000)
        f.write(bytes([b[0] ^ 0xFF]))
    stage = os.path.join(ctx.tmp, "stage-tampered")
    expect_failure(ctx, ["import", lay, stage], "EBADMSG",
                   ["layer 0", "content has digest", man["layers"][0]["digest"]], stage)
    with open(blob, "r+b") as f:
        f.truncate(100)
    expect_failure(ctx, ["import", lay, stage], "EBADMSG", ["100 bytes"], stage)


def platform(ctx):
    lay = copy_layout(ctx, "arm64")
    index, man = manifest_of(lay)
    index["manifests"][0]["platform"] = {"os": "linux", "architecture": "arm64", "variant": "v8"}
    write_index(lay, index)
    stage = os.path.join(ctx.tmp, "stage-arm")
    expect_failure(ctx, ["import", lay, stage], "ENOENT", ["linux/amd64", "linux/arm64/v8"], stage)
    # a single manifest whose config says arm64
    with open(os.path.join(lay, "blobs", "sha256", man["config"]["digest"][7:])) as f:
        cfg = json.load(f)
    cfg["architecture"] = "arm64"
    man["config"]["digest"], man["config"]["size"] = put_blob(lay, json.dumps(cfg).encode())
    md, ms = put_blob(lay, json.dumps(man).encode())
    index["manifests"][0].update(digest=md, size=ms)
    del index["manifests"][0]["platform"]
    write_index(lay, index)
    expect_failure(ctx, ["import", lay, stage], "ENOENT", ["linux/arm64", "not linux/amd64"], stage)


def other_bad(ctx):
    stage = os.path.join(ctx.tmp, "stage-bad")
    expect_failure(ctx, ["import", ctx.busybox, stage, "--tag", "nope"], "ENOENT", ["'nope'"], stage)
    lay = copy_layout(ctx, "symlink")
    _, man = manifest_of(lay)
    blob = os.path.join(lay, "blobs", "sha256", man["layers"][1]["digest"][7:])
    os.rename(blob, blob + ".real")
    os.symlink(blob + ".real", blob)
    expect_failure(ctx, ["import", lay, stage], "ELOOP", ["layer 1"], stage)
    lay = copy_layout(ctx, "bigmanifest")
    index, man = manifest_of(lay)
    man["annotations"] = {"padding": "x" * (5 << 20)}
    md, ms = put_blob(lay, json.dumps(man).encode())
    index["manifests"][0].update(digest=md, size=ms)
    write_index(lay, index)
    expect_failure(ctx, ["import", lay, stage], "EFBIG", ["over the limit"], stage)
    os.makedirs(os.path.join(ctx.tmp, "notalayout"))
    expect_failure(ctx, ["import", os.path.join(ctx.tmp, "notalayout"), stage], "ENOENT",
                   ["oci-layout"], stage)


def test(ctx):
    from pulltest import layout_expect
    expect = layout_expect(ctx.busybox)
    good(ctx, expect)
    tampered(ctx)
    platform(ctx)
    other_bad(ctx)


main(test)
