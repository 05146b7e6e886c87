"""Where store jobs run: inline (tests, tools) or on a small thread pool whose completions hop back
onto the event loop. One job of the runtime, kept apart so the write ordering in ``runtime`` reads alone."""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Protocol

__all__ = ["Done", "InlineWriter", "ThreadWriter", "Writer"]

Done = Callable[[BaseException | None], None]


class Writer(Protocol):
    """Runs store jobs away from the caller; ``done`` comes back on the caller's thread."""

    def submit(self, job: Callable[[], None], done: Done) -> None: ...

    def close(self) -> None: ...


class InlineWriter:
    """Runs each job at once, on the caller's thread (tests, tools)."""

    def submit(self, job: Callable[[], None], done: Done) -> None:
        try:
            job()
        except Exception as failure:  # noqa: BLE001 - handed to ``done``, which decides
            done(failure)
            return
        done(None)

    def close(self) -> None:
        pass


class ThreadWriter:
    """Runs jobs on a small thread pool; ``call_back`` hops completions onto the event loop."""

    def __init__(self, call_back: Callable[[Callable[[], None]], object], threads: int = 4) -> None:
        self._pool = ThreadPoolExecutor(max_workers=threads, thread_name_prefix="groupcoord-store")
        self._call_back = call_back

    def submit(self, job: Callable[[], None], done: Done) -> None:
        def run() -> None:
            try:
                job()
            except BaseException as failure:  # noqa: BLE001 - handed to ``done`` on the loop
                caught = failure  # ``failure`` is unbound once the except block ends
                self._call_back(lambda: done(caught))
                return
            self._call_back(lambda: done(None))

        self._pool.submit(run)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
