"""An asyncio face of the client, on the standard library: the blocking client runs in threads.

``leader()`` and ``history()`` run in the default executor; a watch has a thread of its own
that hands changes to the event loop, so any number of watches leave the executor free::

    async with AsyncClient(["http://10.0.0.1:7070", "http://10.0.0.2:7070"]) as client:
        print(await client.leader())
        async with client.watch() as changes:
            async for change in changes:
                print(change.term, change.leader)

For :meth:`Client.lead`, whose work runs in a thread anyway, use
``await asyncio.to_thread(client.sync.lead, work, stop=stop)``.
"""

from __future__ import annotations

import asyncio
import ssl
import threading
from types import TracebackType
from typing import (
    Any,
    AsyncIterator,
    Generic,
    Iterable,
    Iterator,
    List,
    Optional,
    Protocol,
    Type,
    TypeVar,
    Union,
)

from ._client import Client, Observe, Watch
from ._model import Leader, LeaderChange, Observation

T = TypeVar("T")
T_co = TypeVar("T_co", covariant=True)

_END = object()


class AsyncClient:
    """:class:`Client` for asyncio code; the same arguments and behaviour."""

    def __init__(
        self,
        member_urls: Union[str, Iterable[str]],
        timeout: float = 2.0,
        *,
        ssl_context: Optional[ssl.SSLContext] = None,
        group: Optional[str] = None,
        observer: Optional[str] = None,
    ) -> None:
        self.sync = Client(
            member_urls, timeout, ssl_context=ssl_context, group=group, observer=observer
        )
        """The blocking client underneath."""

    async def leader(self, consistent: bool = False) -> Optional[Leader]:
        """As :meth:`Client.leader`."""
        return await asyncio.to_thread(self.sync.leader, consistent)

    async def history(self) -> List[LeaderChange]:
        """As :meth:`Client.history`."""
        return await asyncio.to_thread(self.sync.history)

    def watch(self, **options: Any) -> "AsyncWatch":
        """As :meth:`Client.watch` (the same keyword options), iterated with ``async for``."""
        return AsyncWatch(self.sync.watch(**options))

    def observe(self, **options: Any) -> "AsyncObserve":
        """As :meth:`Client.observe` (the same keyword options), iterated with ``async for``."""
        return AsyncObserve(self.sync.observe(**options))

    async def close(self) -> None:
        self.sync.close()

    async def __aenter__(self) -> "AsyncClient":
        return self

    async def __aexit__(
        self,
        exc_type: Optional[type],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.close()


class _Pumped(AsyncIterator[T], Generic[T]):
    """A blocking iterator with ``close()`` read by a thread of its own; ``aclose()`` or
    ``async with`` stops it."""

    def __init__(self, source: "_Closable[T]", kind: Type[T]) -> None:
        self._source = source
        self._kind = kind
        self._queue: Optional["asyncio.Queue[object]"] = None
        self._thread: Optional[threading.Thread] = None

    def _start(self) -> "asyncio.Queue[object]":
        if self._queue is None:
            loop = asyncio.get_running_loop()
            queue: "asyncio.Queue[object]" = asyncio.Queue()
            self._queue = queue

            def pump() -> None:
                try:
                    for item in self._source:
                        loop.call_soon_threadsafe(queue.put_nowait, item)
                except BaseException as e:  # noqa: BLE001 - raised in the loop
                    _put(loop, queue, e)
                _put(loop, queue, _END)

            self._thread = threading.Thread(target=pump, name="pilot-election-watch", daemon=True)
            self._thread.start()
        return self._queue

    async def __anext__(self) -> T:
        item = await self._start().get()
        if item is _END:
            self._queue = asyncio.Queue()
            self._queue.put_nowait(_END)
            raise StopAsyncIteration
        if isinstance(item, BaseException):
            raise item
        assert isinstance(item, self._kind)
        return item

    async def aclose(self) -> None:
        self._source.close()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)

    async def __aexit__(
        self,
        exc_type: Optional[type],
        exc: Optional[BaseException],
        tb: Optional[TracebackType],
    ) -> None:
        await self.aclose()


class _Closable(Iterator[T_co], Protocol):
    def close(self) -> None: ...


class AsyncWatch(_Pumped[LeaderChange]):
    """A :class:`Watch` read by a thread of its own; ``aclose()`` or ``async with`` stops it."""

    def __init__(self, watch: Watch) -> None:
        super().__init__(watch, LeaderChange)
        self.watch = watch

    def __aiter__(self) -> "AsyncWatch":
        return self

    async def __aenter__(self) -> "AsyncWatch":
        return self


class AsyncObserve(_Pumped[Observation]):
    """An :class:`Observe` read by a thread of its own; ``aclose()`` or ``async with`` stops it."""

    def __init__(self, observe: Observe) -> None:
        super().__init__(observe, Observation)
        self.observe = observe

    def __aiter__(self) -> "AsyncObserve":
        return self

    async def __aenter__(self) -> "AsyncObserve":
        return self


def _put(loop: asyncio.AbstractEventLoop, queue: "asyncio.Queue[object]", item: object) -> None:
    try:
        loop.call_soon_threadsafe(queue.put_nowait, item)
    except RuntimeError:
        pass  # the loop is closed: nobody is listening any more
