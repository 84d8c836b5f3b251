"""02 — move files in and out: write, read, list, and whole directories."""
import os
import sys
import tempfile

from strata import Sandbox

image = sys.argv[1] if len(sys.argv) > 1 else "busybox"
with Sandbox.create(image, backend="container") as sb:
    sb.files.mkdir("/work/in", parents=True)
    sb.files.write("/work/in/numbers.txt", "\n".join(str(i) for i in range(10)) + "\n")
    r = sb.exec("sort -rn /work/in/numbers.txt | head -3 > /work/out.txt")
    print("top three:", sb.files.read_text("/work/out.txt").split())
    print("listing:", [(e.name, e.type, e.size) for e in sb.files.list("/work")])
    with tempfile.TemporaryDirectory() as d:
        n = sb.files.download("/work", d)
        print("downloaded %d files:" % n, sorted(os.listdir(d)))
