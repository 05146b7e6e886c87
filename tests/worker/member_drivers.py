"""Either worker client behind one small face, so a scenario runs through both drivers of the member core.

``Threaded`` is ``WorkerClient`` as a service uses it; ``OnALoop`` is ``AsyncWorkerClient`` on an event
loop of its own thread (as a service's loop), reached from the test's thread.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Callable, Coroutine
from typing import Any, Protocol

from groupcoord.worker import AsyncWorkerClient, WorkerClient, WorkerConfig
from groupcoord.worker.member import Member
from groupcoord.worker.view import MemberView

__all__ = ["DRIVERS", "Driven", "OnALoop", "Threaded"]


class Driven(Protocol):
    client: MemberView

    def start(self) -> None: ...
    def wait(self, predicate: Callable[[Any], bool], timeout: float) -> bool: ...
    def close(self, leave_group: bool | None = None) -> None: ...
    @property
    def member(self) -> Member: ...
    @property
    def fatal_error(self) -> BaseException | None: ...


class Threaded:
    def __init__(self, config: WorkerConfig, listener: object, **options: Any) -> None:
        self.client = WorkerClient(config, listener, **options)  # type: ignore[arg-type]

    @property
    def member(self) -> Member:
        return self.client._member

    @property
    def fatal_error(self) -> BaseException | None:
        return self.client.fatal_error

    def start(self) -> None:
        self.client.start()

    def wait(self, predicate: Callable[[Any], bool], timeout: float) -> bool:
        return self.client.wait_until(predicate, timeout)

    def close(self, leave_group: bool | None = None) -> None:
        self.client.close(leave_group=leave_group)


class OnALoop:
    def __init__(self, config: WorkerConfig, listener: object, **options: Any) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name="service-loop", daemon=True)
        self.thread.start()
        self.client = AsyncWorkerClient(config, listener, **options)

    @property
    def member(self) -> Member:
        return self.client._member

    @property
    def fatal_error(self) -> BaseException | None:
        return self.client.fatal_error

    def _on_loop(self, coroutine: Coroutine[Any, Any, Any], timeout: float = 30.0) -> Any:
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def start(self) -> None:
        self._on_loop(self.client.start())

    def wait(self, predicate: Callable[[Any], bool], timeout: float) -> bool:
        return bool(self._on_loop(self.client.wait_until(predicate, timeout), timeout + 30))

    def close(self, leave_group: bool | None = None) -> None:
        try:
            self._on_loop(self.client.close(leave_group=leave_group))
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(10)
            self.loop.close()


DRIVERS: dict[str, Callable[..., Driven]] = {"threaded": Threaded, "asyncio": OnALoop}
