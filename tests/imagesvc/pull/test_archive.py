#!/usr/bin/env python3
"""test_archive.py — importing `docker save` tarballs made from the busybox
sample: the classic form (manifest.json, <id>/layer.tar, <hex>.json, a
symlinked duplicate layer as Docker writes them), the same gzip'd, and the
OCI-in-docker-save form of Docker 25+. Bad cases: a tampered layer.tar, a
config whose name is not its digest, a link pointing out of the archive, a
".." entry name, an unknown tag; each a clear error, nothing left behind."""
import gzip
import hashlib
import io
import json
import os
import subprocess
import tarfile

from pulltest import (check, check_stage, expect_failure, layout_expect, log, main,
                      run_tool, sha256_file)


def uncompressed(path, media_type):
    with open(path, "rb") as f:
        data = f.read()
    if media_type.endswith("+gzip"):
        return gzip.decompress(data)
    if media_type.endswith("+zstd"):
        return subprocess.run(["zstd", "-dc"], input=data, stdout=subprocess.PIPE, check=True).stdout
    return data


def add_bytes(tar, name, data):
    ti = tarfile.TarInfo(name)
    ti.size = len(data)
    ti.mtime = 1700000000
    tar.addfile(ti, io.BytesIO(data))


def add_link(tar, name, target, kind=tarfile.SYMTYPE):
    ti = tarfile.TarInfo(name)
    ti.type = kind
    ti.linkname = target
    tar.addfile(ti)


def classic_parts(ctx):
    """Files of a classic docker-save archive of the busybox sample."""
    lay = ctx.busybox
    with open(os.path.join(lay, "index.json")) as f:
        md = json.load(f)["manifests"][0]["digest"]
    with open(os.path.join(lay, "blobs", "sha256", md[7:])) as f:
        man = json.load(f)
    cd = man["config"]["digest"][7:]
    with open(os.path.join(lay, "blobs", "sha256", cd), "rb") as f:
        config = f.read()
    files, layers = {}, []
    for i, l in enumerate(man["layers"]):
        tar = uncompressed(os.path.join(lay, "blobs", "sha256", l["digest"][7:]), l["mediaType"])
        lid = hashlib.sha256(b"layer-id-%d" % i).hexdigest()
        files["%s/layer.tar" % lid] = tar
        files["%s/VERSION" % lid] = b"1.0"
        layers.append("%s/layer.tar" % lid)
    files[cd + ".json"] = config
    return files, layers, cd, json.loads(config)["rootfs"]["diff_ids"]


def write_classic(path, files, layers, cd, links=(), extra=(), gz=False):
    manifest = [{"Config": cd + ".json", "RepoTags": ["strata/busybox:latest"], "Layers": layers}]
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            add_bytes(tar, name, data)
        for name, target in links:
            add_link(tar, name, target)
        for name, data in extra:
            add_bytes(tar, name, data)
        add_bytes(tar, "manifest.json", json.dumps(manifest).encode())
        add_bytes(tar, "repositories", b'{"strata/busybox":{"latest":"x"}}')
    data = raw.getvalue()
    with open(path, "wb") as f:
        f.write(gzip.compress(data, mtime=0) if gz else data)


def classic(ctx):
    files, layers, cd, diff_ids = classic_parts(ctx)
    # Docker links a duplicate layer to the first copy: layer 1 via a symlink
    layers = list(layers)
    real1 = layers[1]
    layers[1] = "dup/layer.tar"
    links = [("dup/layer.tar", "../" + real1)]
    arc = os.path.join(ctx.tmp, "classic.tar")
    write_classic(arc, files, layers, cd, links)
    stage = os.path.join(ctx.tmp, "stage-classic")
    run_tool(ctx, "import", arc, stage)
    expect = {"config_digest": "sha256:" + cd, "manifest_digest": None,
              "layers": [(d, "application/vnd.oci.image.layer.v1.tar", len(files[p]))
                         for d, p in zip(diff_ids, [x if x != "dup/layer.tar" else real1 for x in layers])]}
    s = run_tool(ctx, "show", stage, "--verify").stdout
    expect["manifest_digest"] = json.loads(s)["manifest_digest"]
    check(sha256_file(os.path.join(stage, "manifest.json")) == expect["manifest_digest"], "manifest")
    got = check_stage(ctx, stage, expect)
    check(got["cmd"] == ["/app/hello.sh"], "config survives")
    check(got["name"] == "strata/busybox:latest", "name from RepoTags: %s" % got["name"])
    log("  ok: classic docker-save archive, %d layers, diff_ids verified" % len(layers))
    # gzip'd, by tag: the same stage (our manifest is written deterministically)
    stage2 = os.path.join(ctx.tmp, "stage-classic-gz")
    write_classic(arc + ".gz", files, layers, cd, links, gz=True)
    run_tool(ctx, "import", arc + ".gz", stage2, "--tag", "strata/busybox:latest")
    check_stage(ctx, stage2, expect)
    log("  ok: gzip'd archive, by tag")
    return files, layers, cd


def oci_in_docker(ctx):
    lay = ctx.busybox
    expect = layout_expect(lay)
    arc = os.path.join(ctx.tmp, "oci.tar")
    with open(os.path.join(lay, "index.json")) as f:
        index = json.load(f)
    # as Docker 25+ writes it
    index["manifests"][0]["annotations"]["io.containerd.image.name"] = \
        "docker.io/strata/busybox:latest"
    with tarfile.open(arc, "w") as tar:
        tar.add(os.path.join(lay, "oci-layout"), "oci-layout")
        add_bytes(tar, "index.json", json.dumps(index).encode())
        tar.add(os.path.join(lay, "blobs"), "blobs")
        man = [{"Config": "blobs/sha256/" + expect["config_digest"][7:],
                "RepoTags": ["strata/busybox:latest"],
                "Layers": ["blobs/sha256/" + d[7:] for d, _, _ in expect["layers"]]}]
        add_bytes(tar, "manifest.json", json.dumps(man).encode())
    stage = os.path.join(ctx.tmp, "stage-oci-in-docker")
    run_tool(ctx, "import", arc, stage, "--tag", "strata/busybox:latest")
    s = check_stage(ctx, stage, expect)
    check(s["name"] == "docker.io/strata/busybox:latest", "name: %s" % s["name"])
    log("  ok: OCI-in-docker-save archive staged with the layout's manifest digest")


def bad(ctx, files, layers, cd):
    stage = os.path.join(ctx.tmp, "stage-bad")
    arc = os.path.join(ctx.tmp, "bad.tar")
    tampered = dict(files)
    p = layers[0]
    tampered[p] = tampered[p][:5000] + b"X" + tampered[p][5001:]
    write_classic(arc, tampered, layers, cd)
    expect_failure(ctx, ["import", arc, stage], "EBADMSG", ["layer 0", "content has digest"], stage)

    renamed = dict(files)
    other = "0" * 64
    renamed[other + ".json"] = renamed.pop(cd + ".json")
    write_classic(arc, renamed, layers, other)
    expect_failure(ctx, ["import", arc, stage], "EBADMSG", ["config", "content has digest"], stage)

    write_classic(arc, files, layers, cd, links=[("evil/layer.tar", "../../../etc/passwd")])
    expect_failure(ctx, ["import", arc, stage], "EINVAL", ["points outside"], stage)

    outside = os.path.join(os.path.dirname(ctx.tmp), "imagepull-escape-%d" % os.getpid())
    write_classic(arc, files, layers, cd, extra=[("../" + os.path.basename(outside), b"x")])
    r = run_tool(ctx, "import", arc, stage, ok=False)
    check(not os.path.exists(outside), "an entry was written outside the scratch directory")
    check("'..'" in r.stderr or ".." in r.stderr, "unclear error: " + r.stderr)
    log("  ok: '..' entry refused: " + r.stderr.strip())

    write_classic(arc, files, layers, cd)
    expect_failure(ctx, ["import", arc, stage, "--tag", "other:tag"], "ENOENT", ["other:tag"], stage)
    with open(arc, "wb") as f:
        f.write(b"this is not a tarball" * 100)
    r = run_tool(ctx, "import", arc, stage, ok=False)
    log("  ok: garbage refused: " + r.stderr.strip())


def test(ctx):
    files, layers, cd = classic(ctx)
    oci_in_docker(ctx)
    bad(ctx, files, layers, cd)


main(test)
