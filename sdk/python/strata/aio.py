"""The asyncio SDK: :class:`AsyncSandbox`, with the methods of
:class:`~strata.Sandbox` as coroutines.

Each call runs the synchronous client in a worker thread
(``asyncio.to_thread``), so thousands of sandboxes can be driven from one
event loop without blocking it; ``exec_stream`` is an async iterator.

    async with await AsyncSandbox.create("busybox", backend="fncall") as sb:
        r = await sb.exec(["echo", "hi"])
"""
import asyncio

from .sandbox import Sandbox, DEFAULT_TIMEOUT


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

    async def exec_stream(self, cmd=None, **kw):
        """See :meth:`Sandbox.exec_stream`; an async iterator of events."""
        it = self._sync.exec_stream(cmd, **kw)
        done = object()
        try:
            while True:
                ev = await asyncio.to_thread(next, it, done)
                if ev is done:
                    return
                yield ev
        finally:
            await asyncio.to_thread(it.close)

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
