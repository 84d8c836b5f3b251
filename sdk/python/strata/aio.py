"""The asyncio SDK: :class:`AsyncSandbox`, with the methods of
:class:`~strata.Sandbox` as coroutines.

Each call runs the synchronous client in a worker thread
(``asyncio.to_thread``), so thousands of sandboxes can be driven from one
event loop without blocking it; ``exec_stream`` is an async iterator.

    async with await AsyncSandbox.create("busybox", backend="fncall") as sb:
        r = await sb.exec(["echo", "hi"])
"""
import asyncio

from . import errors
from .sandbox import PIPE, Sandbox, DEFAULT_TIMEOUT

_DONE = object()


class AsyncExecProcess:
    """The asyncio face of :class:`~strata.ExecProcess`. The exec starts at
    the first use (``await proc.start()``, ``write``, iteration); each call
    runs the synchronous one in a worker thread.

        proc = sb.exec_stream(["cat"], stdin=strata.PIPE)
        await proc.write(b"hi\\n")
        async for ev in proc:
            ...
    """

    def __init__(self, sync_sandbox, cmd, kw):
        self._sync = sync_sandbox
        self._cmd = cmd
        self._kw = dict(kw)
        self._ait = None
        if hasattr(self._kw.get("stdin"), "__aiter__"):
            self._ait = self._kw["stdin"]
            self._kw["stdin"] = PIPE
        self._starting = None
        self._feeder = None
        #: An exception raised by the async iterable given as stdin.
        self.stdin_error = None

    async def start(self):
        """Starts the exec (once); returns self."""
        if self._starting is None:
            self._starting = asyncio.ensure_future(
                asyncio.to_thread(self._sync.exec_stream, self._cmd, **self._kw))
        await self._starting
        if self._ait is not None and self._feeder is None:
            self._feeder = asyncio.ensure_future(self._feed())
        return self

    async def _proc(self):
        await self.start()
        return self._starting.result()

    async def _feed(self):
        try:
            async for c in self._ait:
                if c:
                    await self.write(c)
        except errors.StdinClosed:
            return
        except Exception as e:  # noqa: BLE001 -- kept for the caller
            self.stdin_error = e
        try:
            await self.close_stdin()
        except errors.StrataError:
            pass

    @property
    def exec_id(self):
        return self._starting.result().exec_id if self._starting and self._starting.done() \
            else None

    @property
    def result(self):
        return self._starting.result().result if self._starting and self._starting.done() \
            else None

    def __aiter__(self):
        return self

    async def __anext__(self):
        p = await self._proc()
        ev = await asyncio.to_thread(next, p, _DONE)
        if ev is _DONE:
            raise StopAsyncIteration
        return ev

    async def write(self, data):
        """See :meth:`ExecProcess.write`."""
        p = await self._proc()
        return await asyncio.to_thread(p.write, data)

    async def close_stdin(self):
        """See :meth:`ExecProcess.close_stdin`."""
        p = await self._proc()
        await asyncio.to_thread(p.close_stdin)

    async def wait(self):
        """See :meth:`ExecProcess.wait`."""
        p = await self._proc()
        return await asyncio.to_thread(p.wait)

    async def close(self):
        """Closes the stream; a command still running is killed."""
        if self._starting is not None:
            p = await self._proc()
            await asyncio.to_thread(p.close)
        if self._feeder is not None:
            self._feeder.cancel()

    aclose = close

    async def __aenter__(self):
        return await self.start()

    async def __aexit__(self, *exc):
        await self.close()
        return False


class AsyncFiles:
    """``sb.files`` of an :class:`AsyncSandbox`: the methods of
    :class:`~strata.sandbox.Files` as coroutines."""

    def __init__(self, files):
        self._f = files

    def __getattr__(self, name):
        fn = getattr(self._f, name)

        async def call(*a, **kw):
            return await asyncio.to_thread(fn, *a, **kw)
        call.__doc__ = fn.__doc__
        return call


class AsyncSandbox:
    """An asyncio handle on one sandbox; same methods as :class:`Sandbox`."""

    def __init__(self, sync):
        self._sync = sync
        self.id = sync.id
        self.files = AsyncFiles(sync.files)

    @classmethod
    async def create(cls, image, backend="container", **kw):
        """See :meth:`Sandbox.create`."""
        return cls(await asyncio.to_thread(Sandbox.create, image, backend, **kw))

    @classmethod
    async def create_many(cls, image, count, backend="container", **kw):
        """See :meth:`Sandbox.create_many`."""
        made = await asyncio.to_thread(Sandbox.create_many, image, count, backend, **kw)
        return [cls(s) for s in made]

    @classmethod
    async def connect(cls, sandbox_id, **kw):
        """See :meth:`Sandbox.connect`."""
        return cls(await asyncio.to_thread(Sandbox.connect, sandbox_id, **kw))

    @classmethod
    async def list(cls, labels=None, state=None, backend=None, **kw):
        """See :meth:`Sandbox.list`."""
        r = await asyncio.to_thread(Sandbox.list, labels, state, backend, **kw)
        return [cls(s) for s in r]

    @property
    def info(self):
        return self._sync.info

    @property
    def backend(self):
        return self._sync.backend

    @property
    def state(self):
        return self._sync.state

    @property
    def labels(self):
        return self._sync.labels

    async def refresh(self, timeout=DEFAULT_TIMEOUT):
        return await asyncio.to_thread(self._sync.refresh, timeout)

    async def exec(self, cmd=None, **kw):
        """See :meth:`Sandbox.exec`."""
        return await asyncio.to_thread(self._sync.exec, cmd, **kw)

    def exec_stream(self, cmd=None, **kw):
        """See :meth:`Sandbox.exec_stream`: returns an
        :class:`AsyncExecProcess` (``async for ev in proc``, ``await
        proc.write(b)``, ``await proc.close_stdin()``, ``await proc.wait()``).
        ``stdin`` may also be an async iterable of chunks."""
        return AsyncExecProcess(self._sync, cmd, kw)

    async def pause(self, timeout=DEFAULT_TIMEOUT):
        await asyncio.to_thread(self._sync.pause, timeout)

    async def resume(self, timeout=DEFAULT_TIMEOUT):
        await asyncio.to_thread(self._sync.resume, timeout)

    async def kill(self, timeout=DEFAULT_TIMEOUT):
        await asyncio.to_thread(self._sync.kill, timeout)

    delete = kill

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc):
        await self.kill()
        return False

    def __repr__(self):
        return "Async" + repr(self._sync)
