"""``AsyncWorkerClient.changes()``: assignment changes as an async iterator, one queue per iterator.

The client offers each change to every live iterator and waits (within the rebalance timeout) until
each has taken it and finished with it, i.e. asked for the next one, as it awaits a listener. An
iterator that is dropped (a loop left with ``break``) releases what it held, so nothing waits on it.
"""

from __future__ import annotations

import asyncio
from typing import Self

from groupcoord.worker.ownership import Notice

__all__ = ["ChangeStream"]


class ChangeStream:
    """One ``changes()`` iterator: a queue the client fills and waits on until each change is taken
    and finished with (the next ``__anext__``)."""

    def __init__(self) -> None:
        self._queue: asyncio.Queue[Notice | None] = asyncio.Queue()
        self._holding = False
        self._ended = False

    def offer(self, notice: Notice) -> asyncio.Queue[Notice | None]:
        self._queue.put_nowait(notice)
        return self._queue

    def end(self) -> None:
        if not self._ended:
            self._ended = True
            self._queue.put_nowait(None)

    def __aiter__(self) -> Self:
        return self

    async def __anext__(self) -> Notice:
        self._done_with_last()
        item = await self._queue.get()
        if item is None:
            self._queue.task_done()
            raise StopAsyncIteration
        self._holding = True
        return item

    def _done_with_last(self) -> None:
        if self._holding:
            self._holding = False
            self._queue.task_done()

    def __del__(self) -> None:
        # a loop that broke out: nothing waits on what it held or never took
        self._done_with_last()
        while not self._queue.empty():
            self._queue.get_nowait()
            self._queue.task_done()
