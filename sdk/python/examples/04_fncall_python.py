"""04 — fncall: stateless calls on warm sandboxes, Python source in a warm
interpreter. The image needs /usr/bin/python3 for python= calls."""
import sys
import time

import strata
from strata import Sandbox

image = sys.argv[1] if len(sys.argv) > 1 else "busybox"
print("fncall can:", {k: v for k, v in strata.capabilities("fncall").items() if v is True})
with Sandbox.create(image, backend="fncall") as sb:
    print(sb.exec(["echo", "a command"]).stdout.strip())
    try:
        t0 = time.time()
        n = 200
        for i in range(n):
            r = sb.exec(python="print(sum(range(%d)))" % i)
        print("python calls: %.2f ms each, last printed %s" % ((time.time() - t0) / n * 1e3,
                                                              r.stdout.strip()))
    except strata.Unsupported as e:
        print("no python here:", e)
    try:
        sb.files.write("/tmp/x", b"y")
    except strata.Unsupported as e:
        print("as documented, fncall has no files:", e)
