"""bench/sandbox/vm_boot.py — the qemu backend's create to first exec output
beside the VMM's own floor, in one run (bench/sandbox/vm.sh runs it).

cold:     Sandbox.create(image, backend="qemu") + exec_stream("echo x") until
          its first output chunk, on a sandboxd without warm starts
          (STRATA_VM_SNAPSHOTS=0) (sandboxd: EROFS image and blob disks, the
          ext4 disk made, the VMM contained as a worker, the guest's agent
          mounting the image and the overlay, the protocol over virtio-serial)
restored: the same on a sandboxd with warm starts (its first create of the
          shape, done before the clock, saved the snapshot: each create
          restores it)
baseline: a plain `qemu-system-x86_64 -kernel vmlinuz -initrd initrd.img` of
          the same kernel and initramfs (same machine, accelerator, memory,
          no disks) to its first userspace line on the serial console ("strata-agent:
          guest init", the init's first write)

usage: vm_boot.py COLD_SOCKET WARM_SOCKET IMAGE GUEST_DIR ROUNDS
       (alternating, p50 of each; the goal of issue 16: restored <= 0.2 x cold)"""
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
    cold_sock, warm_sock, image, guest = sys.argv[1:5]
    rounds = int(sys.argv[5])
    ours(warm_sock, image)  # makes the warm-start snapshot
    cold, warm, base = [], [], []
    for i in range(rounds):
        order = [0, 1, 2] if i % 2 == 0 else [2, 1, 0]
        for k in order:
            if k == 0:
                cold.append(ours(cold_sock, image)[0])
            elif k == 1:
                warm.append(ours(warm_sock, image)[0])
            else:
                base.append(plain(guest))
        print("round %d: create to first output: cold %.2f s, restored %.2f s; plain qemu "
              "-kernel to first userspace line %.2f s" % (i + 1, cold[-1], warm[-1], base[-1]),
              flush=True)
    for name, sock in (("cold", cold_sock), ("restored", warm_sock)):
        sb = strata.Sandbox.create(image, backend="qemu", socket=sock, memory_mb=256,
                                   timeout=300)
        sb.exec("true")
        time.sleep(3)
        m = sb.metrics()
        print("RESULT idle_%s_vm_host_memory_mib %.1f guest_memory_mib 256 ratio %.2f"
              % (name, m.memory_bytes / 2**20, m.memory_bytes / 2**20 / 256))
        sb.kill()
    pc, pw, pb = statistics.median(cold), statistics.median(warm), statistics.median(base)
    print("RESULT cold_p50_s %.2f restored_p50_s %.2f plain_qemu_boot_p50_s %.2f "
          "cold/plain %.2f restored/plain %.2f restored/cold %.3f (goal <= 0.2)"
          % (pc, pw, pb, pc / pb, pw / pb, pw / pc))


if __name__ == "__main__":
    main()
