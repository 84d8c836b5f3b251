"""05 — many sandboxes from one asyncio loop, with labels and an
idempotency key (a retry of create_many returns the same sandboxes)."""
import asyncio
import sys
import time

from strata import AsyncSandbox

image = sys.argv[1] if len(sys.argv) > 1 else "busybox"
backend = sys.argv[2] if len(sys.argv) > 2 else "container"


async def main(n=20):
    t0 = time.time()
    boxes = await AsyncSandbox.create_many(image, n, backend, idempotency_key="example-05",
                                           labels={"example": "05"}, ttl=120)
    t1 = time.time()
    results = await asyncio.gather(*[b.exec(["echo", str(i)]) for i, b in enumerate(boxes)])
    t2 = time.time()
    print("created %d in %.2fs, ran %d commands in %.2fs" % (n, t1 - t0, n, t2 - t1))
    print("labelled:", len(await AsyncSandbox.list(labels={"example": "05"})))
    await asyncio.gather(*[b.kill() for b in boxes])
    assert [r.stdout for r in results] == ["%d\n" % i for i in range(n)]

asyncio.run(main())
