"""bench/sandbox/vm_boot.py — the qemu backend's create to first exec output
beside the VMM's own floor, in one run (bench/sandbox/vm.sh runs it).

ours:     Sandbox.create(image, backend="qemu") + exec_stream("echo x") until
          its first output chunk (sandboxd: EROFS image and blob disks, the
          ext4 disk made, the VMM contained as a worker, the guest's agent
          mounting the image and the overlay, the protocol over virtio-serial)
baseline: a plain `qemu-system-x86_64 -kernel vmlinuz -initrd initrd.img` of
          the same kernel and initramfs (same machine, accelerator, memory,
          no disks) to its first userspace line on the serial console ("strata-agent:
          guest init", the init's first write)

usage: vm_boot.py SOCKET IMAGE GUEST_DIR ROUNDS   (alternating, p50 of each)"""
import os
import statistics
import subprocess
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "sdk",
                                "python"))
import strata  # noqa: E402


def ours(sock, image):
    t0 = time.perf_counter()
    sb = strata.Sandbox.create(image, backend="qemu", socket=sock, memory_mb=256, timeout=300)
    t1 = time.perf_counter()
    for ev in sb.exec_stream("echo x", timeout=60):
        if ev.data:
            break
    t2 = time.perf_counter()
    sb.kill()
    return t2 - t0, t1 - t0


def plain(guest):
    args = ["qemu-system-x86_64", "-nodefaults", "-no-user-config", "-nographic", "-no-reboot",
            "-M", "q35", "-accel", "tcg,thread=multi,tb-size=64", "-cpu", "max", "-smp", "1",
            "-m", "256", "-kernel", os.path.join(guest, "vmlinuz"),
            "-initrd", os.path.join(guest, "initrd.img"),
            "-append", "console=ttyS0 quiet panic=-1 rdinit=/init", "-serial", "stdio"]
    t0 = time.perf_counter()
    p = subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                         stderr=subprocess.DEVNULL)
    buf = b""
    try:
        while b"strata-agent: guest init" not in buf:
            c = p.stdout.read1(4096)
            if not c:
                raise RuntimeError("qemu exited before the first userspace line")
            buf += c
        return time.perf_counter() - t0
    finally:
        p.kill()
        p.wait()


def main():
    sock, image, guest, rounds = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    a, c, b = [], [], []
    for i in range(rounds):
        if i % 2:
            b.append(plain(guest))
            t, tc = ours(sock, image)
        else:
            t, tc = ours(sock, image)
            b.append(plain(guest))
        a.append(t)
        c.append(tc)
        print("round %d: qemu sandbox create+first output %.2f s (create %.2f s), plain "
              "qemu -kernel to first userspace line %.2f s" % (i + 1, a[-1], c[-1], b[-1]),
              flush=True)
    pa, pb = statistics.median(a), statistics.median(b)
    print("RESULT qemu_create_to_first_output_p50_s %.2f plain_qemu_boot_to_userspace_p50_s %.2f "
          "ratio %.2f" % (pa, pb, pa / pb))


if __name__ == "__main__":
    main()
