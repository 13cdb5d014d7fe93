"""The asyncio client: :class:`AsyncPandaStack`, the same surface as :class:`~pandastack.PandaStack`
with every call awaited.

How it never blocks the event loop: each call runs the synchronous SDK's code (its http.client
transport, retries and error mapping) in a worker thread of the client's own thread pool
(``loop.run_in_executor``); the loop only awaits the result. That way the async client is the sync
one, call for call, and cannot drift from it (a second HTTP/1.1 client on asyncio streams would
have to redo chunked bodies, TLS, timeouts and retries). The cost is a thread per call in flight:
the pool has ``max_workers`` threads (default 32), so that many calls (streams count: a watch, an
events feed or a followed output holds one while open) run at once and the rest queue.

- Results that are SDK objects (a Sandbox, a process handle, a watch…) come back wrapped, so their
  methods are awaited too; plain data (ids, states, dicts, lists of those) as it is.
- Iterators (``client.events()``, ``sb.files.watch(...)``, ``handle.output(...)``,
  ``sb.exec_stream(...)``) come back as async iterators: ``async for ev in client.events():``
  (or ``it = await ...`` first). Each step reads in a worker; ``aclose()`` (or leaving the loop
  with ``break``) closes the stream, waking a read blocked on it.
- Callbacks (``exec(on_stdout=...)``) run in the worker thread; an ``async def`` callback is run on
  the event loop instead (the worker waits for it).
- A cancelled call stops being awaited at once; its request finishes in its worker.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import inspect
from typing import Any, Optional

from .client import PandaStack

__all__ = ["AsyncPandaStack"]

_PLAIN = (str, bytes, bytearray, int, float, bool, type(None), dict)


def _is_sdk_object(v: Any) -> bool:
    mod = type(v).__module__ or ""
    return mod.startswith("pandastack.") and not isinstance(v, BaseException)


def _is_iterator(v: Any) -> bool:
    return hasattr(v, "__next__") or (
        _is_sdk_object(v) and hasattr(v, "__iter__") and not isinstance(v, _PLAIN + (list, tuple))
    )


class _Runner:
    """Runs blocking calls in the client's pool and wraps what they return."""

    def __init__(self, executor: concurrent.futures.Executor) -> None:
        self.executor = executor

    async def run(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        loop = asyncio.get_running_loop()
        kwargs = {k: self._callback(loop, v) for k, v in kwargs.items()}
        return await loop.run_in_executor(self.executor, functools.partial(fn, *args, **kwargs))

    @staticmethod
    def _callback(loop: asyncio.AbstractEventLoop, v: Any) -> Any:
        if inspect.iscoroutinefunction(v):
            def on_loop(*a: Any, **kw: Any) -> Any:
                return asyncio.run_coroutine_threadsafe(v(*a, **kw), loop).result()
            return on_loop
        return v

    def wrap(self, v: Any) -> Any:
        if isinstance(v, _PLAIN):
            return v
        if isinstance(v, list):
            return [self.wrap(x) for x in v]
        if isinstance(v, tuple):
            return tuple(self.wrap(x) for x in v)
        if _is_iterator(v):
            return _AsyncIterator(self, v)
        if _is_sdk_object(v):
            return _AsyncProxy(self, v)
        return v


class _Call:
    """A pending call: await it for the result, or ``async for`` over it when it yields an
    iterator."""

    def __init__(self, runner: _Runner, fn: Any, args: Any, kwargs: Any) -> None:
        self._runner, self._fn, self._args, self._kwargs = runner, fn, args, kwargs

    async def _result(self) -> Any:
        return self._runner.wrap(await self._runner.run(self._fn, *self._args, **self._kwargs))

    def __await__(self) -> Any:
        return self._result().__await__()

    def __aiter__(self) -> "_LazyIterator":
        return _LazyIterator(self)


class _LazyIterator:
    """``async for`` straight over a call that returns an iterator."""

    def __init__(self, call: _Call) -> None:
        self._call = call
        self._it: Optional[_AsyncIterator] = None

    def __aiter__(self) -> "_LazyIterator":
        return self

    async def __anext__(self) -> Any:
        if self._it is None:
            it = await self._call
            if not isinstance(it, _AsyncIterator):
                raise TypeError("this call returns %s, not an iterator: await it" % type(it).__name__)
            self._it = it
        return await self._it.__anext__()

    async def aclose(self) -> None:
        if self._it is not None:
            await self._it.aclose()


class _AsyncProxy:
    """An SDK object whose methods are awaited; its data attributes read as they are."""

    def __init__(self, runner: _Runner, obj: Any) -> None:
        object.__setattr__(self, "_runner", runner)
        object.__setattr__(self, "_obj", obj)

    def __getattr__(self, name: str) -> Any:
        v = getattr(self._obj, name)
        if callable(v) and not isinstance(v, type):
            @functools.wraps(v)
            def call(*args: Any, **kwargs: Any) -> _Call:
                return _Call(self._runner, v, args, kwargs)
            return call
        return self._runner.wrap(v) if _is_sdk_object(v) else v

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self._obj, name, value)

    @property
    def sync(self) -> Any:
        """The synchronous object behind this one."""
        return self._obj

    async def __aenter__(self) -> "_AsyncProxy":
        if hasattr(self._obj, "__enter__"):
            await self._runner.run(self._obj.__enter__)
        return self

    async def __aexit__(self, *exc: Any) -> None:
        if hasattr(self._obj, "__exit__"):
            await self._runner.run(self._obj.__exit__, *exc)

    def __eq__(self, other: object) -> bool:
        return self._obj == (other._obj if isinstance(other, _AsyncProxy) else other)

    def __hash__(self) -> int:
        return hash(self._obj)

    def __repr__(self) -> str:
        return "Async" + repr(self._obj)


_DONE = object()


class _AsyncIterator:
    """A blocking iterator read step by step in a worker thread."""

    def __init__(self, runner: _Runner, source: Any) -> None:
        self._runner = runner
        self._source = source  # what close() is called on (a handle, a stream)
        self._it = source if hasattr(source, "__next__") else iter(source)
        self.closed = False

    def __aiter__(self) -> "_AsyncIterator":
        return self

    async def __anext__(self) -> Any:
        if self.closed:
            raise StopAsyncIteration
        v = await self._runner.run(next, self._it, _DONE)
        if v is _DONE:
            self.closed = True
            raise StopAsyncIteration
        return self._runner.wrap(v)

    async def aclose(self) -> None:
        """Close the stream (safe while a read is blocked in a worker: it wakes)."""
        if self.closed:
            return
        self.closed = True
        close = getattr(self._source, "close", None)
        if close is not None:
            try:
                close()
            except ValueError:  # a generator still running in its worker: it ends at its next step
                pass

    def __getattr__(self, name: str) -> Any:
        # The handle's own methods and data (wait(), path, pid…), awaited like a proxy's.
        return getattr(_AsyncProxy(self._runner, self._source), name)

    async def __aenter__(self) -> "_AsyncIterator":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.aclose()


class AsyncPandaStack(_AsyncProxy):
    """The asyncio client: ``AsyncPandaStack(...)`` takes :class:`~pandastack.PandaStack`'s
    arguments (plus ``max_workers``, the size of its thread pool, or your own ``executor``) and
    offers the same attributes and methods, each awaited::

        async with AsyncPandaStack() as client:
            sb = await client.sandboxes.create(template="base")
            print((await sb.exec("echo hi")).stdout)
            async with await sb.files.watch("/home/user", recursive=True) as w:
                async for ev in w:
                    print(ev.type, ev.path)
    """

    def __init__(self, *args: Any, max_workers: int = 32,
                 executor: Optional[concurrent.futures.Executor] = None, **kwargs: Any) -> None:
        own = executor is None
        pool = executor or concurrent.futures.ThreadPoolExecutor(max_workers=max_workers,
                                                                 thread_name_prefix="pandastack")
        super().__init__(_Runner(pool), PandaStack(*args, **kwargs))
        object.__setattr__(self, "_own_pool", own)

    async def close(self) -> None:
        """Release the thread pool (when the client made it); calls in flight finish."""
        self._obj.close()
        if self._own_pool:
            self._runner.executor.shutdown(wait=False)

    async def __aenter__(self) -> "AsyncPandaStack":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.close()

    def __repr__(self) -> str:
        return "AsyncPandaStack(base_url=%r)" % self._obj.base_url
