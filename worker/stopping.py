"""Run a worker client until the process is asked to stop (SIGTERM, SIGINT), then leave the group.

Containers, systemd and Kubernetes stop a process with SIGTERM. Without a handler Python dies at once
(status 143) and the member stays in the group until its session times out, holding its tasks; with
these, the client closes: tasks revoked, LeaveGroup sent, and the group rebalances at once.
``WorkerClient.run_until_signal()`` and ``AsyncWorkerClient.run_until_signal()`` call them.
"""

from __future__ import annotations

import asyncio
import signal
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Protocol

__all__ = ["STOP_SIGNALS", "block_until_signal", "wait_for_signal"]

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGTERM, signal.SIGINT)


class _Threaded(Protocol):
    @property
    def fatal_error(self) -> BaseException | None: ...
    def wait_until(self, predicate: Callable[[Any], bool], timeout: float) -> bool: ...
    def close(self, timeout: float = ..., *, leave_group: bool | None = ...) -> None: ...


class _OnALoop(Protocol):
    @property
    def fatal_error(self) -> BaseException | None: ...
    def close(self, *, leave_group: bool | None = ...) -> Awaitable[None]: ...


def block_until_signal(client: _Threaded, signals: Sequence[int] = STOP_SIGNALS, *,
                       leave_group: bool | None = None) -> int:
    """Block the main thread until one of ``signals`` arrives or the client stops on a fatal error, then
    close the client; the signal's number, or 0 when the client stopped on its own. The previous handlers
    are put back. The handler only appends to a list: one that took a lock could deadlock with the main
    thread interrupted while holding that lock."""
    received: list[int] = []
    previous = {sig: signal.signal(sig, lambda signum, _frame: received.append(signum)) for sig in signals}
    try:
        while not received and client.fatal_error is None:
            client.wait_until(lambda c: bool(received) or c.fatal_error is not None, 0.2)
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    client.close(leave_group=leave_group)
    return received[0] if received else 0


async def wait_for_signal(client: _OnALoop, signals: Sequence[int] = STOP_SIGNALS, *,
                          leave_group: bool | None = None) -> int:
    """``block_until_signal`` on the running loop (``loop.add_signal_handler``: Unix), the loop free meanwhile."""
    loop = asyncio.get_running_loop()
    got: asyncio.Future[int] = loop.create_future()

    def arrived(signum: int) -> None:
        if not got.done():
            got.set_result(signum)

    for sig in signals:
        loop.add_signal_handler(sig, arrived, sig)
    try:
        while not got.done() and client.fatal_error is None:
            await asyncio.wait({got}, timeout=0.5)
    finally:
        for sig in signals:
            loop.remove_signal_handler(sig)
    await client.close(leave_group=leave_group)
    return got.result() if got.done() else 0
