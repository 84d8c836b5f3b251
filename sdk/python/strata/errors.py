"""Typed exceptions of the strata SDK.

Every error the SDK raises is a :class:`StrataError`. The API's error codes
map to subclasses, so callers can catch exactly what they handle::

    try:
        sb = Sandbox.create("python:3.11", backend="container")
    except NoCapacity:
        ...   # try another node later
"""


class StrataError(Exception):
    """Base class. ``code`` is the API's error code (or None), ``status`` the
    HTTP status (or None)."""

    def __init__(self, message, code=None, status=None):
        super().__init__(message)
        self.message = message
        self.code = code
        self.status = status


class NotFound(StrataError):
    """The sandbox (or file) does not exist."""


class ImageNotFound(NotFound):
    """The image is not known on the node."""


class Timeout(StrataError):
    """A wait ran out of time: an exec past its timeout (``result`` holds what
    it printed), or no answer from sandboxd in time."""

    def __init__(self, message, result=None, **kw):
        super().__init__(message, **kw)
        self.result = result


class NoCapacity(StrataError):
    """The node has no room (memory, pids or sandbox count), or the sandbox
    runs as many execs as it may (``code`` "too_many_execs"); the message
    says which."""


class BackendUnavailable(StrataError):
    """The backend cannot run on this node (the message says why)."""


class Unsupported(StrataError):
    """The backend does not offer this feature (e.g. files on fncall); raised
    before anything runs."""


class Exited(StrataError):
    """The sandbox is gone (deleted, its TTL or idle timeout expired) while it
    was used."""


class InvalidRequest(StrataError, ValueError):
    """The request was refused as malformed (bad field, unknown field, path
    traversal, body too large)."""


class Conflict(StrataError):
    """The sandbox is in the wrong state for this (e.g. exec while paused)."""


class SandboxLost(Conflict):
    """The sandbox's node left the cluster (its lease lapsed): the cluster
    gave the sandbox up (``info["state"]`` is "lost"), and the node removes
    it if it comes back. Create another."""


class StdinClosed(Conflict):
    """Input written to an exec whose stdin is closed: ``close_stdin()`` was
    called, the command closed it or has finished (``code`` is
    "stdin_closed" or "exec_finished")."""


class DiskFull(StrataError):
    """A write did not fit the sandbox's disk (``disk_mb``): HTTP 507
    ``disk_full``, or 413 ``too_large`` when the size was known up front."""


class Unauthorized(StrataError):
    """sandboxd refused the request's token (HTTP 401 ``unauthorized``): none
    where one is needed (TCP; the unix socket for a user other than root),
    a wrong one, or a tenant's that was removed or rotated."""


class PermissionDenied(StrataError):
    """Not allowed (HTTP 403): ``code`` "admin_only" for what only an admin
    may do (``network="host"``, :func:`strata.node_metrics` as a tenant), or
    "forbidden" for a permission denied inside the sandbox."""


class QuotaExceeded(StrataError):
    """A create past the tenant's quota (HTTP 429 ``quota_exceeded``): of
    sandboxes at once, total cpu or total memory_mb; the message names the
    limit and the usage (:func:`strata.tenant_info` has both). Not a
    :class:`NoCapacity`: another node does not help, deleting a sandbox
    does."""


class StoreUnavailable(StrataError):
    """The cluster's image store did not answer (HTTP 503
    ``store_unavailable``): sandboxd looks images up on the store, and
    strata-fuse is stopped, hung or restarting (``strata status``,
    ``strata up``), so the create (or image listing) that needed it gave up
    after sandboxd's ``--store-timeout`` (5 s by default); or too many
    look-ups are already waiting for it. Nothing was created; running
    sandboxes are not affected. Retry once the store is back: it is not a
    :class:`NoCapacity` (another node's store is the same store)."""


_BY_CODE = {
    "not_found": NotFound,
    "image_not_found": ImageNotFound,
    "no_capacity": NoCapacity,
    "too_many_execs": NoCapacity,
    "overloaded": NoCapacity,
    "backend_unavailable": BackendUnavailable,
    "unsupported": Unsupported,
    "bad_request": InvalidRequest,
    "unknown_field": InvalidRequest,
    "invalid_path": InvalidRequest,
    "too_large": InvalidRequest,
    "paused": Conflict,
    "not_paused": Conflict,
    "busy": Conflict,
    "stdin_closed": StdinClosed,
    "exec_finished": StdinClosed,
    "timeout": Timeout,
    "disk_full": DiskFull,
    "too_many_transfers": Conflict,
    "too_many_attached": Conflict,
    "unavailable": Conflict,
    "gone": NotFound,
    "unauthorized": Unauthorized,
    "forbidden": PermissionDenied,
    "admin_only": PermissionDenied,
    "quota_exceeded": QuotaExceeded,
    "store_unavailable": StoreUnavailable,
    "lost": SandboxLost,
}


def from_response(status, body):
    """Returns the exception for an error response (status, parsed body)."""
    code, message = None, "HTTP %d" % status
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        code = body["error"].get("code")
        message = body["error"].get("message") or message
    cls = _BY_CODE.get(code, StrataError)
    return cls(message, code=code, status=status)
