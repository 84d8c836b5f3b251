"""bench/sandbox/sdk_create.py — creations through the Python SDK, for
bench/sandbox/sdk.sh: the operation of `sandbox_bench api` (create with
memory_mb=64 and pids=32, exec `true`, delete), looped for SECS seconds,
with the latency of the create step alone recorded.

    sdk_create.py sync  SOCK IMAGE SECS        strata.Sandbox, one after another
    sdk_create.py async SOCK IMAGE CONC SECS   strata.AsyncSandbox, CONC in flight
                                               on one event loop

Prints the line sandbox_bench prints:
    RESULT <name> <ops/s> <p50 ms> <p99 ms> <ops> <errors>
"""
import asyncio
import os
import sys
import threading
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk",
                                "python"))
import strata  # noqa: E402

SPEC = dict(backend="container", memory_mb=64, pids=32)


def report(name, lat, errors, took):
    lat.sort()
    pct = (lambda p: lat[int(p * (len(lat) - 1))] * 1e3) if lat else (lambda p: 0.0)
    print("RESULT %s %.1f %.3f %.3f %d %d" % (name, len(lat) / took, pct(0.5), pct(0.99),
                                              len(lat), errors))


def run_sync(sock, image, secs):
    lat, errors = [], 0
    t_end = time.monotonic() + secs
    t0 = time.monotonic()
    while time.monotonic() < t_end:
        try:
            a = time.monotonic()
            sb = strata.Sandbox.create(image, socket=sock, **SPEC)
            lat.append(time.monotonic() - a)
            sb.exec(["true"])
            sb.kill()
        except strata.StrataError as e:
            errors += 1
            print("error: %s" % e, file=sys.stderr)
    report("sdk_sync_c1", lat, errors, time.monotonic() - t0)


async def run_async(sock, image, conc, secs):
    lat, errors = [], [0]
    loop = asyncio.get_running_loop()
    t_end = loop.time() + secs

    async def worker():
        while loop.time() < t_end:
            try:
                a = loop.time()
                sb = await strata.AsyncSandbox.create(image, socket=sock, **SPEC)
                lat.append(loop.time() - a)
                await sb.exec(["true"])
                await sb.kill()
            except strata.StrataError as e:
                errors[0] += 1
                print("error: %s" % e, file=sys.stderr)
    t0 = loop.time()
    await asyncio.gather(*(worker() for _ in range(conc)))
    if threading.active_count() != 1:
        print("error: %d threads" % threading.active_count(), file=sys.stderr)
    report("sdk_async_c%d" % conc, lat, errors[0], loop.time() - t0)


def main(argv):
    if len(argv) == 5 and argv[1] == "sync":
        run_sync(argv[2], argv[3], float(argv[4]))
    elif len(argv) == 6 and argv[1] == "async":
        asyncio.run(run_async(argv[2], argv[3], int(argv[4]), float(argv[5])))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv)
