"""The checker threads: request checks and answer completions too heavy for the event loop.

Two threads bound how many large requests are looked at, and held in memory, at once; the pool
starts on first use so a coordinator that never sees a large request never starts a thread. Each
job is a burst (``coordinator.runtime.heap``): the cycle collector waits for it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from functools import partial
from typing import Any, TypeVar

from groupcoord.coordinator.runtime.heap import bulk_job

__all__ = ["CheckerPool"]

T = TypeVar("T")


class CheckerPool:
    """A lazily started pool of two threads (``groupcoord-check``)."""

    def __init__(self, threads: int = 2) -> None:
        self._threads = threads
        self._pool: ThreadPoolExecutor | None = None

    def _executor(self) -> ThreadPoolExecutor:
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=self._threads, thread_name_prefix="groupcoord-check")
        return self._pool

    async def run(self, check: Callable[..., T], *args: Any) -> T:
        """``check(*args)`` on a checker thread: the loop answers other requests meanwhile."""
        return await asyncio.get_running_loop().run_in_executor(self._executor(), bulk_job(partial(check, *args)))

    def start(self, loop: asyncio.AbstractEventLoop, job: Callable[[], None]) -> asyncio.Future[None]:
        """``job()`` on a checker thread, as a future of ``loop``."""
        return loop.run_in_executor(self._executor(), bulk_job(job))

    def submit(self, job: Callable[[], T]) -> Future[T]:
        return self._executor().submit(bulk_job(job))

    def close(self) -> None:
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
