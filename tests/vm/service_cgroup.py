"""In the test VM (cgroup2 only): strata-sandboxd run as systemd runs a
service, alone in a cgroup below the root (Delegate=yes). A cgroup that
holds a process cannot enable controllers for children, so sandboxd must
move itself into a leaf of its cgroup and build below it: container
sandboxes and fncall's Python workers in the service's cgroup with their
limits, nothing at the hierarchy's root, and again after a restart in the
leaf (which re-adopts the container sandbox). Exit 0 when all holds.
usage: service_cgroup.py  (STRATA_BIN, STRATA_SRC set)"""
import os
import signal
import subprocess
import sys
import tempfile
import time

SRC = os.environ["STRATA_SRC"]
sys.path.insert(0, os.path.join(SRC, "sdk", "python"))
import strata  # noqa: E402

ROOT = "/sys/fs/cgroup"
SLICE = ROOT + "/system.slice"
SVC = SLICE + "/strata-test.service"


def cgroup_of(pid):
    with open("/proc/%d/cgroup" % pid) as f:
        return f.read().strip().split("::", 1)[1]


def write(path, text):
    with open(path, "w") as f:
        f.write(text)


def start(base, cgroup=SVC):
    """sandboxd, placed in cgroup before its exec (as systemd does)."""
    args = ["sh", "-c", 'echo $$ > "$0/cgroup.procs" && exec "$@"', cgroup,
            os.path.join(os.environ["STRATA_BIN"], "strata-sandboxd"),
            "--home", base + "/home", "--socket", base + "/sd.sock",
            "--image", "hostroot=/", "--log-level", "debug", "--fncall-pool", "1"]
    proc = subprocess.Popen(args, stdout=open(base + "/log", "ab"), stderr=subprocess.STDOUT)
    for _ in range(400):
        try:
            if strata.health(socket=base + "/sd.sock"):
                return proc
        except strata.StrataError:
            pass
        if proc.poll() is not None:
            break
        time.sleep(0.05)
    sys.exit("sandboxd did not start:\n" + open(base + "/log").read()[-3000:])


def agents():
    """pid -> cgroup of every strata-agent process."""
    out = {}
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if open("/proc/%s/comm" % pid).read().strip() == "strata-agent":
                out[int(pid)] = cgroup_of(int(pid))
        except OSError:
            pass
    return out


def check_layout(proc, sock):
    svc = SVC[len(ROOT):]
    assert cgroup_of(proc.pid) == svc + "/strata-self", cgroup_of(proc.pid)
    caps = strata.capabilities(socket=sock)
    assert caps["container"]["available"] and caps["fncall"]["python"], caps
    placed = agents()
    assert placed and all(c.startswith(svc + "/strata-sandbox/sbx-") for c in placed.values()), \
        placed
    assert not os.path.exists(ROOT + "/strata-sandbox"), "a subtree at the root"
    assert not os.path.exists(ROOT + "/strata-fncall"), "a subtree at the root"


def fncall_limits(sock):
    f = strata.Sandbox.create("hostroot", backend="fncall", socket=sock)
    r = f.exec(python="import os; print(os.getpid())", timeout=60)
    assert r.exit_code == 0 and r.stdout.strip(), r
    workers = [d for d in os.listdir(SVC + "/strata-fncall") if d.startswith("w")]
    limits = {open("%s/strata-fncall/%s/pids.max" % (SVC, d)).read().strip() for d in workers}
    # the sandbox's 256, 4 ready call processes and the template's 8: on v2
    # the calls share the template's cgroup
    assert workers and limits == {"268"}, (workers, limits)
    f.kill()


def main():
    os.makedirs(SVC, exist_ok=True)
    write(SLICE + "/cgroup.subtree_control", "+cpu +memory +pids")
    base = tempfile.mkdtemp(prefix="strata-svc-")
    sock = base + "/sd.sock"
    proc = start(base)
    sb = strata.Sandbox.create("hostroot", backend="container", socket=sock)
    assert sb.exec(cmd=["true"], timeout=60).exit_code == 0
    check_layout(proc, sock)
    fncall_limits(sock)
    print("service cgroup: sandboxd in %s, sandboxes below %s" % (cgroup_of(proc.pid), SVC))

    # A restart: the sandboxes stay, and with them the controllers SVC
    # enables for its children, so SVC takes no process any more: the
    # supervisor starts sandboxd in its leaf (systemd >= 254:
    # DelegateSubgroup=strata-self).
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)
    proc = start(base, SVC + "/strata-self")
    again = strata.Sandbox.connect(sb.id, socket=sock)
    assert again.exec(cmd=["true"], timeout=60).exit_code == 0
    check_layout(proc, sock)
    again.kill()
    proc.send_signal(signal.SIGTERM)
    proc.wait(30)
    print("service cgroup: ok, also after a restart (sandbox %s re-adopted)" % sb.id)


if __name__ == "__main__":
    main()
