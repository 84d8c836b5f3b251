"""strata — the Python SDK of the strata sandbox runtime (standard library
only).

    from strata import Sandbox
    with Sandbox.create("sample:latest", backend="container", memory_mb=512, ttl=600) as sb:
        r = sb.exec(["python3", "-c", "print(2+2)"], timeout=10)
        print(r.exit_code, r.stdout)
        sb.files.write("/tmp/x", b"data")
        assert sb.files.read("/tmp/x") == b"data"

One parameter, ``backend=``, chooses among "container" (alias "docker"),
"fncall", "firecracker" and "qemu"; what a backend cannot do raises a typed
error (:class:`Unsupported`, :class:`BackendUnavailable`) before anything
runs. :func:`capabilities` says what each backend offers on the node.

Interactive input: ``proc = sb.exec_stream(cmd, stdin=strata.PIPE)``, then
``proc.write(b"...")``, ``proc.close_stdin()`` while iterating ``proc``
for output events (see :class:`ExecProcess`).

sandboxd is reached through its unix socket: ``socket=`` on every
constructor, else ``$STRATA_SANDBOXD_SOCKET``, else
``$STRATA_HOME/run/sandboxd.sock`` (TCP: ``url=``/``$STRATA_SANDBOXD_URL``
with a bearer ``token``).

Tenants: ``token=`` (or ``$STRATA_SANDBOXD_TOKEN``) is sent on either
transport; a tenant's token (``strata tenant add``) makes every call that
tenant's: it sees its own sandboxes only, within its quotas
(:class:`QuotaExceeded`; :func:`tenant_info`).
"""
from .errors import (StrataError, NotFound, ImageNotFound, Timeout, NoCapacity,
                     BackendUnavailable, Unsupported, Exited, InvalidRequest, Conflict,
                     StdinClosed)
from .errors import DiskFull
from .errors import PermissionDenied, QuotaExceeded, Unauthorized
from .errors import StoreUnavailable
from .errors import SandboxLost
from .sandbox import (Sandbox, ExecResult, ExecEvent, ExecProcess, FileInfo, Metrics, PIPE,
                      capabilities, node_metrics, health, BackgroundExec)
from .sandbox import tenant_info
from .aio import AsyncSandbox, AsyncExecProcess
from .aio import AsyncBackgroundExec

__all__ = [
    "Sandbox", "AsyncSandbox", "ExecResult", "ExecEvent", "ExecProcess", "AsyncExecProcess",
    "FileInfo", "Metrics", "PIPE", "capabilities", "node_metrics", "health", "StrataError", "NotFound",
    "ImageNotFound", "Timeout", "NoCapacity", "BackendUnavailable", "Unsupported", "Exited",
    "InvalidRequest", "Conflict", "StdinClosed", "BackgroundExec",
]
__all__ += ["DiskFull"]
__all__ += ["SandboxLost"]
__all__ += ["AsyncBackgroundExec"]
__all__ += ["PermissionDenied", "QuotaExceeded", "Unauthorized", "tenant_info"]
__all__ += ["StoreUnavailable"]
__version__ = "0.1.0"
