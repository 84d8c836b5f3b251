"""01 — create a sandbox, run a command, read its result, clean up."""
import sys

from strata import Sandbox

image = sys.argv[1] if len(sys.argv) > 1 else "busybox"
with Sandbox.create(image, backend="container", memory_mb=256, ttl=300) as sb:
    r = sb.exec(["sh", "-c", "echo hello from $(hostname); exit 3"], timeout=10)
    print("exit code:", r.exit_code)
    print("stdout:", r.stdout.strip())
