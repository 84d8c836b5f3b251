#!/usr/bin/env python3
"""test_registry.py — pulls from Debian's docker-registry on 127.0.0.1, the
busybox sample pushed to it with `skopeo copy --preserve-digests`, so the
pulled stage must carry the layout's exact digests:

  * plain http (--insecure falls back from https; http:// forces it), by tag
    and by digest, an unknown tag; a Docker v2 schema 2 manifest (skopeo
    --format v2s2) with Docker media types;
  * a multi-platform index (amd64 + arm64) resolved to linux/amd64, and an
    arm64-only one refused;
  * https with a self-signed certificate and htpasswd basic auth: trusted via
    --ca-file, or --insecure; untrusted, no credentials, wrong password;
  * bearer-token auth: the registry's `auth: token:` with tokenserver.py,
    which wants basic credentials (and without them, a clear refusal).
Each registry gets its own temporary config and storage and is stopped at
the end."""
import base64
import gzip
import hashlib
import json
import os
import shutil
import subprocess

from pulltest import (check, check_stage, expect_failure, free_port, layout_expect, log, main,
                      run_tool, skip, spawn, stop, wait_port)

try:
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        import crypt
except ImportError:  # python >= 3.13
    crypt = None


def need_tools():
    for t in ["docker-registry", "skopeo", "openssl"]:
        if not shutil.which(t):
            skip("%s is not installed (scripts/install-deps.sh installs it)" % t)


def start_registry(ctx, name, tls=None, htpasswd=None, token=None):
    d = os.path.join(ctx.tmp, name)
    os.makedirs(os.path.join(d, "data"))
    port = free_port()
    cfg = ["version: 0.1", "log:", "  level: error", "  accesslog:", "    disabled: true",
           "storage:", "  filesystem:", "    rootdirectory: %s/data" % d,
           "http:", "  addr: 127.0.0.1:%d" % port, "  secret: strata-test"]
    if tls:
        cfg += ["  tls:", "    certificate: %s" % tls[0], "    key: %s" % tls[1]]
    if htpasswd:
        cfg += ["auth:", "  htpasswd:", "    realm: strata-test", "    path: %s" % htpasswd]
    if token:
        cfg += ["auth:", "  token:", "    realm: %s" % token["realm"],
                "    service: strata-registry", "    issuer: strata-test-issuer",
                "    rootcertbundle: %s" % token["cert"]]
    with open(os.path.join(d, "config.yml"), "w") as f:
        f.write("\n".join(cfg) + "\n")
    log_f = open(os.path.join(d, "registry.log"), "w")
    p = spawn(["docker-registry", "serve", os.path.join(d, "config.yml")], stdout=log_f,
              stderr=subprocess.STDOUT)
    try:
        wait_port(port, p)
    except RuntimeError as e:
        raise AssertionError("%s: %s" % (e, open(os.path.join(d, "registry.log")).read()[-500:]))
    return "127.0.0.1:%d" % port, p


def push(layout, tag, dest, creds=None, all_=False, extra=()):
    argv = ["skopeo", "copy", "--quiet", "--dest-tls-verify=false"]
    argv += list(extra) or ["--preserve-digests"]
    if all_:
        argv.append("--all")
    if creds:
        argv += ["--dest-creds", creds]
    argv += ["oci:%s:%s" % (layout, tag), "docker://" + dest]
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                       timeout=120)
    if r.returncode != 0:
        raise AssertionError("skopeo push to %s failed: %s" % (dest, r.stdout[-800:]))


def cert(ctx, name):
    key = os.path.join(ctx.tmp, name + ".key")
    crt = os.path.join(ctx.tmp, name + ".crt")
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-keyout", key,
                    "-out", crt, "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1"],
                   stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=True)
    return crt, key


def put_blob(layout, data):
    d = hashlib.sha256(data).hexdigest()
    with open(os.path.join(layout, "blobs", "sha256", d), "wb") as f:
        f.write(data)
    return {"digest": "sha256:" + d, "size": len(data)}


def multi_layout(ctx, src, expect, with_amd64):
    """A copy of src whose index.json tag 'multi' is a nested index of an
    arm64 image (same layers, arm64 config) and, optionally, the amd64 one."""
    lay = os.path.join(ctx.tmp, "multi-%s" % with_amd64)
    shutil.copytree(src, lay)
    blobs = os.path.join(lay, "blobs", "sha256")
    with open(os.path.join(blobs, expect["manifest_digest"][7:])) as f:
        man = json.load(f)
    with open(os.path.join(blobs, expect["config_digest"][7:])) as f:
        cfg = json.load(f)
    cfg["architecture"] = "arm64"
    cfg["variant"] = "v8"
    arm = dict(man)
    arm["config"] = dict(man["config"], **put_blob(lay, json.dumps(cfg).encode()))
    arm_desc = dict(mediaType=man["mediaType"], platform={"os": "linux", "architecture": "arm64",
                                                           "variant": "v8"},
                    **put_blob(lay, json.dumps(arm).encode()))
    entries = [arm_desc]
    if with_amd64:
        entries.append({"mediaType": man["mediaType"], "digest": expect["manifest_digest"],
                        "size": os.path.getsize(os.path.join(blobs, expect["manifest_digest"][7:])),
                        "platform": {"os": "linux", "architecture": "amd64"}})
    idx = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json",
           "manifests": entries}
    idx_desc = dict(mediaType=idx["mediaType"], annotations={
        "org.opencontainers.image.ref.name": "multi"}, **put_blob(lay, json.dumps(idx).encode()))
    with open(os.path.join(lay, "index.json"), "w") as f:
        json.dump({"schemaVersion": 2, "mediaType": idx["mediaType"], "manifests": [idx_desc]}, f)
    return lay


def gzip_layout(ctx, src, expect):
    """A copy of src with every layer gzip'd (Docker v2 has no zstd); the
    config, and so the diff_ids, stay the same."""
    lay = os.path.join(ctx.tmp, "gzip-only")
    shutil.copytree(src, lay)
    blobs = os.path.join(lay, "blobs", "sha256")
    with open(os.path.join(blobs, expect["manifest_digest"][7:])) as f:
        man = json.load(f)
    for l in man["layers"]:
        with open(os.path.join(blobs, l["digest"][7:]), "rb") as f:
            data = f.read()
        if l["mediaType"].endswith("+zstd"):
            data = subprocess.run(["zstd", "-dc"], input=data, stdout=subprocess.PIPE,
                                  check=True).stdout
        if not l["mediaType"].endswith("+gzip"):
            data = gzip.compress(data, mtime=0)
            l.update(mediaType="application/vnd.oci.image.layer.v1.tar+gzip", **put_blob(lay, data))
    d = put_blob(lay, json.dumps(man).encode())
    with open(os.path.join(lay, "index.json")) as f:
        index = json.load(f)
    index["manifests"][0].update(d)
    with open(os.path.join(lay, "index.json"), "w") as f:
        json.dump(index, f)
    return lay


def docker_v2(ctx, host, expect):
    """skopeo --format v2s2: a Docker schema 2 manifest with Docker media types."""
    lay = gzip_layout(ctx, ctx.busybox, expect)
    push(lay, "latest", host + "/strata/dockerv2:latest", extra=["--format", "v2s2"])
    st = os.path.join(ctx.tmp, "st-v2")
    run_tool(ctx, "pull", "--insecure", host + "/strata/dockerv2:latest", st)
    s = json.loads(run_tool(ctx, "show", st, "--verify").stdout)
    with open(os.path.join(st, "manifest.json")) as f:
        check(json.load(f)["mediaType"] == "application/vnd.docker.distribution.manifest.v2+json",
              "not a Docker v2 manifest")
    check(s["config_digest"] == expect["config_digest"], "config differs")
    with open(os.path.join(st, "config.json")) as f:
        diff_ids = json.load(f)["rootfs"]["diff_ids"]
    for l, want in zip(s["layers"], diff_ids):
        check(l["media_type"] == "application/vnd.docker.image.rootfs.diff.tar.gzip", l["media_type"])
        with open(l["path"], "rb") as f:
            got = "sha256:" + hashlib.sha256(gzip.decompress(f.read())).hexdigest()
        check(got == want, "layer content differs from the source")
    log("  ok: Docker v2 schema 2 manifest and media types; layer contents match diff_ids")


def plain(ctx, expect):
    host, p = start_registry(ctx, "plain")
    push(ctx.busybox, "latest", host + "/strata/busybox:latest")
    stage = os.path.join(ctx.tmp, "st-plain")
    run_tool(ctx, "pull", "--insecure", host + "/strata/busybox:latest", stage)
    s = check_stage(ctx, stage, expect)
    check(s["cmd"] == ["/app/hello.sh"], "config")
    check(s["name"] == host + "/strata/busybox:latest", "name: %s" % s["name"])
    log("  ok: pulled over http (--insecure fallback), digests match the layout")
    run_tool(ctx, "pull", "http://%s/strata/busybox@%s" % (host, expect["manifest_digest"]),
             stage + "-digest")
    check_stage(ctx, stage + "-digest", expect)
    log("  ok: by digest over http://")
    expect_failure(ctx, ["pull", "--insecure", host + "/strata/busybox:nope", stage + "-x"],
                   "ENOENT", ["nope", "404"], stage + "-x")
    expect_failure(ctx, ["pull", host + "/strata/busybox:latest", stage + "-y", "--attempts", "1"],
                   "EPROTO", ["TLS"], stage + "-y")

    for with_amd64 in (True, False):
        lay = multi_layout(ctx, ctx.busybox, expect, with_amd64)
        push(lay, "multi", "%s/strata/multi%d:multi" % (host, with_amd64), all_=True)
        st = os.path.join(ctx.tmp, "st-multi%d" % with_amd64)
        if with_amd64:
            run_tool(ctx, "pull", "--insecure", "%s/strata/multi1:multi" % host, st)
            check_stage(ctx, st, expect)
            run_tool(ctx, "import", lay, st + "-layout", "--tag", "multi")
            check_stage(ctx, st + "-layout", expect)
            log("  ok: multi-platform index resolved to linux/amd64 (registry and layout)")
        else:
            expect_failure(ctx, ["pull", "--insecure", "%s/strata/multi0:multi" % host, st],
                           "ENOENT", ["linux/amd64", "linux/arm64/v8"], st)
    docker_v2(ctx, host, expect)
    stop(p)


def https_basic(ctx, expect):
    if crypt is None:
        log("  (skipped https+htpasswd: python3 lacks crypt for bcrypt)")
        return
    crt, key = cert(ctx, "registry")
    htpasswd = os.path.join(ctx.tmp, "htpasswd")
    with open(htpasswd, "w") as f:
        f.write("tester:%s\n" % crypt.crypt("s3cret", crypt.mksalt(crypt.METHOD_BLOWFISH)))
    host, p = start_registry(ctx, "https", tls=(crt, key), htpasswd=htpasswd)
    push(ctx.busybox, "latest", host + "/strata/busybox:v1", creds="tester:s3cret")
    ref = host + "/strata/busybox:v1"
    st = os.path.join(ctx.tmp, "st-https")
    run_tool(ctx, "pull", "--ca-file", crt, "--user", "tester:s3cret", ref, st)
    check_stage(ctx, st, expect)
    auth = os.path.join(ctx.tmp, "docker-config.json")
    with open(auth, "w") as f:
        json.dump({"auths": {"https://" + host: {
            "auth": base64.b64encode(b"tester:s3cret").decode()}}}, f)
    run_tool(ctx, "pull", "--insecure", "--auth-file", auth, ref, st + "-k")
    check_stage(ctx, st + "-k", expect)
    log("  ok: https (self-signed, trusted by --ca-file or --insecure) with basic auth "
        "(--user, or a Docker config.json)")
    expect_failure(ctx, ["pull", "--user", "tester:s3cret", ref, st + "-x", "--attempts", "1"],
                   "EPROTO", ["not trusted", "--insecure"], st + "-x")
    expect_failure(ctx, ["pull", "--ca-file", crt, ref, st + "-x"], "EACCES",
                   ["credentials"], st + "-x")
    expect_failure(ctx, ["pull", "--ca-file", crt, "--user", "tester:wrong", ref, st + "-x"],
                   "EACCES", ["authentication failed"], st + "-x")
    stop(p)


def bearer(ctx, expect):
    crt, key = cert(ctx, "token")
    tport_file = os.path.join(ctx.tmp, "token.port")
    tp = spawn(["python3", os.path.join(os.path.dirname(__file__), "tokenserver.py"),
                "--key", key, "--cert", crt, "--user", "tester:tok3n", "--port-file", tport_file])
    for _ in range(200):
        if os.path.exists(tport_file):
            break
        import time
        time.sleep(0.05)
    tport = int(open(tport_file).read())
    wait_port(tport, tp)
    host, p = start_registry(ctx, "token", token={"realm": "http://127.0.0.1:%d/token" % tport,
                                                  "cert": crt})
    push(ctx.busybox, "latest", host + "/strata/busybox:tok", creds="tester:tok3n")
    st = os.path.join(ctx.tmp, "st-token")
    run_tool(ctx, "pull", "--insecure", "--user", "tester:tok3n", host + "/strata/busybox:tok", st)
    check_stage(ctx, st, expect)
    log("  ok: bearer token from the realm (basic credentials to the token server)")
    expect_failure(ctx, ["pull", "--insecure", host + "/strata/busybox:tok", st + "-x"],
                   "EACCES", ["token server refused"], st + "-x")
    stop(p)
    stop(tp)


def test(ctx):
    need_tools()
    expect = layout_expect(ctx.busybox)
    plain(ctx, expect)
    https_basic(ctx, expect)
    bearer(ctx, expect)


main(test)
