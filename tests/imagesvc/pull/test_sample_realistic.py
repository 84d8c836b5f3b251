#!/usr/bin/env python3
"""test_sample_realistic.py (label soak: minutes, needs root and the Debian
mirror) — builds the debian-python sample image with
scripts/build-sample-images.sh (cached in $STRATA_BUILD/sample-images),
imports it and checks the stage against the layout: three gzip layers, the
python3 entry point, every blob re-hashed."""
import os
import subprocess

from pulltest import SRC, check, check_stage, layout_expect, log, main, run_tool, skip


def test(ctx):
    if os.geteuid() != 0:
        skip("debootstrap needs root")
    out = os.path.join(os.environ.get("STRATA_BUILD", ctx.tmp), "sample-images")
    r = subprocess.run([os.path.join(SRC, "scripts", "build-sample-images.sh"), out,
                        "debian-python"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, timeout=1800)
    if r.returncode != 0:
        skip("cannot build the debian-python sample (no mirror?): " + r.stdout[-400:])
    lay = os.path.join(out, "debian-python")
    stage = os.path.join(ctx.tmp, "stage")
    run_tool(ctx, "import", lay, stage, timeout=600)
    s = check_stage(ctx, stage, layout_expect(lay))
    check(s["cmd"] == ["python3", "/app/main.py"], "cmd: %s" % s["cmd"])
    check([l["compression"] for l in s["layers"]] == ["gzip"] * 3, "three gzip layers")
    total = sum(l["size"] for l in s["layers"])
    check(total > 30 << 20, "the realistic image is only %d bytes" % total)
    log("  ok: debian-python staged, %.1f MB compressed" % (total / 1e6))


main(test)
