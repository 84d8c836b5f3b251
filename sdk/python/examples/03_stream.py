"""03 — stream output as it comes, feed stdin, survive timeouts."""
import sys
import time

import strata
from strata import Sandbox

image = sys.argv[1] if len(sys.argv) > 1 else "busybox"
with Sandbox.create(image, backend="container") as sb:
    t0 = time.time()
    for ev in sb.exec_stream("for i in 1 2 3; do echo tick $i; sleep 0.5; done; cat >&2",
                             stdin=b"bye\n"):
        if ev.kind == "exit":
            print("[%.1fs] exit %s" % (time.time() - t0, ev.result.exit_code))
        else:
            print("[%.1fs] %s: %s" % (time.time() - t0, ev.kind, ev.text.strip()))
    try:
        sb.exec(["sleep", "60"], timeout=1)
    except strata.Timeout as e:
        print("killed after its timeout, signal", e.result.signal)
    r = sb.exec("yes", timeout=2, output_cap=1000) if False else sb.exec(
        "yes | head -c 10000000", output_cap=1000)
    print("output capped:", r.truncated, len(r.stdout_raw), "bytes kept")
