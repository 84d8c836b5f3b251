"""SDK tests of the firecracker backend (ctest sdk_python_firecracker).

Where this node lacks what Firecracker needs (/dev/kvm, a firecracker
binary), creating a sandbox raises the typed BackendUnavailable carrying
exactly that reason, and capabilities() says the same. The live test (a VM
booted by Firecracker) skips with the reason where either is missing."""
import os
import shutil

import pytest

import strata
from strata import Sandbox


def kvm_usable():
    try:
        fd = os.open("/dev/kvm", os.O_RDWR)
    except OSError as ex:
        return False, ex
    os.close(fd)
    return True, None


def test_unavailable_reason(daemon):
    kvm, _ = kvm_usable()
    binary = shutil.which("firecracker")
    if kvm and binary:
        pytest.skip("this node has /dev/kvm and firecracker (%s): see test_live" % binary)
    caps = strata.capabilities("firecracker", socket=daemon.socket)
    assert not caps["available"]
    with pytest.raises(strata.BackendUnavailable) as ei:
        Sandbox.create("busybox", backend="firecracker", socket=daemon.socket)
    msg = str(ei.value)
    if not kvm:
        want = ("/dev/kvm is missing on this node" if not os.path.exists("/dev/kvm")
                else "/dev/kvm cannot be opened")
        assert want in msg and want in caps["reason"], (msg, caps)
    if not binary:
        want = "no firecracker binary on PATH (sandboxd --firecracker PATH)"
        assert want in msg and want in caps["reason"], (msg, caps)


def test_live(daemon):
    kvm, why = kvm_usable()
    if not kvm:
        pytest.skip("no usable /dev/kvm: %s" % why)
    if not shutil.which("firecracker"):
        pytest.skip("no firecracker binary on PATH")
    with Sandbox.create("busybox", backend="firecracker", socket=daemon.socket,
                        memory_mb=256, timeout=60) as sb:
        r = sb.exec("echo", "hi")
        assert r.stdout == b"hi\n" and r.exit_code == 0
