"""strata.usrbio — the native client (sdk/c, ``strata_usrbio.h``) from Python
through ctypes: reads and writes of files on the strata mount through
strata-fuse's shared-memory rings, into one registered buffer.

    from strata.usrbio import NativeClient
    with NativeClient() as nc:                  # $STRATA_USRBIO_SOCKET or
        f = nc.register("/mnt/strata/data")     # $STRATA_HOME/run/usrbio.sock
        data = nc.pread(f, 4096, 0)             # bytes
        nc.pwrite(f, b"new", 10)                # needs mode="r+b" or "wb"
        nc.fsync(f)

The library is ``libstrata_usrbio.so`` (built into ``<build>/lib``): found
through ``$STRATA_USRBIO_LIB``, else next to the source tree's
``build-release/lib`` and ``build/lib``, else by the dynamic loader. One
operation at a time; the buffer (``buf_size``) bounds one read or write
(and the protocol 1 MiB). Errors raise :class:`OSError` with the errno.
"""
import ctypes
import errno
import os

__all__ = ["NativeClient", "load_library"]

_MAX_IO = 1 << 20


def load_library(path=None):
    """Returns the loaded ``libstrata_usrbio.so`` (ctypes.CDLL)."""
    here = os.path.dirname(os.path.abspath(__file__))
    root = os.path.abspath(os.path.join(here, "..", "..", ".."))
    cands = [path, os.environ.get("STRATA_USRBIO_LIB")]
    cands += [os.path.join(root, b, "lib", "libstrata_usrbio.so") for b in ("build-release", "build")]
    cands.append("libstrata_usrbio.so")
    last = None
    for c in cands:
        if not c or (os.sep in c and not os.path.exists(c)):
            continue
        try:
            lib = ctypes.CDLL(c)
            break
        except OSError as e:
            last = e
    else:
        raise OSError(errno.ENOENT, "libstrata_usrbio.so not found (set STRATA_USRBIO_LIB)") from last
    vp, c_int, c_u32, c_u64 = ctypes.c_void_p, ctypes.c_int, ctypes.c_uint32, ctypes.c_uint64
    lib.strata_usrbio_open.argtypes = [ctypes.c_char_p, ctypes.c_uint, ctypes.POINTER(vp)]
    lib.strata_usrbio_close.argtypes = [vp]
    lib.strata_usrbio_close.restype = None
    lib.strata_usrbio_buf_new.argtypes = [vp, ctypes.c_size_t, ctypes.POINTER(vp)]
    lib.strata_usrbio_buf_base.argtypes = [vp]
    lib.strata_usrbio_buf_base.restype = vp
    lib.strata_usrbio_reg_fd.argtypes = [vp, c_int, ctypes.POINTER(c_u64)]
    lib.strata_usrbio_unreg_fd.argtypes = [vp, c_int]
    lib.strata_usrbio_pread.argtypes = [vp, c_int, vp, vp, c_u32, c_u64]
    lib.strata_usrbio_pread.restype = ctypes.c_ssize_t
    lib.strata_usrbio_pwrite.argtypes = [vp, c_int, vp, vp, c_u32, c_u64]
    lib.strata_usrbio_pwrite.restype = ctypes.c_ssize_t
    lib.strata_usrbio_fsync.argtypes = [vp, c_int]
    return lib


def _check(r, what):
    if r < 0:
        raise OSError(-r, "%s: %s" % (what, os.strerror(-r)))
    return r


class NativeClient:
    """One connection to strata-fuse's native-client socket with one
    registered buffer of ``buf_size`` bytes."""

    def __init__(self, socket=None, buf_size=_MAX_IO, lib=None):
        self._lib = lib or load_library()
        self._u = ctypes.c_void_p()
        _check(self._lib.strata_usrbio_open(socket.encode() if socket else None, 8,
                                            ctypes.byref(self._u)), "connecting")
        self._buf = ctypes.c_void_p()
        self._size = min(buf_size, _MAX_IO)
        try:
            _check(self._lib.strata_usrbio_buf_new(self._u, self._size, ctypes.byref(self._buf)),
                   "registering the buffer")
        except OSError:
            self.close()
            raise
        self._base = self._lib.strata_usrbio_buf_base(self._buf)

    def close(self):
        if self._u:
            self._lib.strata_usrbio_close(self._u)
            self._u = ctypes.c_void_p()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def register(self, path, mode="rb"):
        """Opens path on the mount (the kernel checks permissions) with
        mode ("rb", "r+b" or "wb"-like flags as open()), registers it and
        returns its file id; the descriptor is closed again."""
        flags = {"rb": os.O_RDONLY, "r+b": os.O_RDWR, "wb": os.O_WRONLY | os.O_CREAT}[mode]
        fd = os.open(path, flags, 0o644)
        try:
            return _check(self._lib.strata_usrbio_reg_fd(self._u, fd, None), "registering " + path)
        finally:
            os.close(fd)

    def unregister(self, file_id):
        _check(self._lib.strata_usrbio_unreg_fd(self._u, file_id), "unregistering")

    def pread(self, file_id, length, offset):
        """Returns up to length bytes at offset (fewer at the end of the file)."""
        if length > self._size:
            raise ValueError("length exceeds the registered buffer")
        n = _check(self._lib.strata_usrbio_pread(self._u, file_id, self._buf, self._base,
                                                 length, offset), "reading")
        return ctypes.string_at(self._base, n)

    def pwrite(self, file_id, data, offset):
        """Writes data at offset; returns its length."""
        if len(data) > self._size:
            raise ValueError("data exceeds the registered buffer")
        ctypes.memmove(self._base, data, len(data))
        return _check(self._lib.strata_usrbio_pwrite(self._u, file_id, self._buf, self._base,
                                                     len(data), offset), "writing")

    def fsync(self, file_id):
        _check(self._lib.strata_usrbio_fsync(self._u, file_id), "fsync")
