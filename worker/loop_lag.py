"""Is the service blocking its event loop? One probe per loop, shared by its asyncio worker clients.

``AsyncWorkerClient`` heartbeats from a task on the service's own loop, so a service that blocks
the loop (a synchronous call, a CPU-bound step) delays every heartbeat by as long. Blocked for
longer than the session timeout, the member is expelled by the coordinator and its tasks move to
another member while this process still thinks it runs them. The probe makes that visible, as the
coordinator's lag monitor does for its own loop: a tick scheduled every ``interval_s`` notes how
late it ran, each client adds the stalls to its own figures (``AsyncWorkerClient.loop_lag``) and
logs a warning (a stall of a heartbeat interval or more) or an error (a session or more).

One probe per loop (not per client), so a process with 100 members wakes up for it no more often
than with one.
"""

from __future__ import annotations

import asyncio
import logging
import weakref
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["LoopLag", "LoopProbe", "probe_for"]

log = logging.getLogger("groupcoord.worker")

INTERVAL_S = 0.25
"""How often the probe ticks: well under any heartbeat interval worth having."""
SLACK_S = 0.05
"""Lateness below this is scheduling noise, not a blocked loop."""


@dataclass
class LoopLag:
    """One client's view of its loop: stalls seen since it started (seconds)."""

    stalls: int = 0
    """Ticks that ran at least a heartbeat interval late."""
    worst_s: float = 0.0
    """The longest single stall."""
    lost_s: float = 0.0
    """Seconds the loop ran behind, in total (each late tick's delay above the slack)."""


class LoopProbe:
    """The ticking task of one loop; clients ``watch`` it with a callback fed every late tick."""

    def __init__(self, loop: asyncio.AbstractEventLoop, monotonic: Callable[[], float]) -> None:
        self._loop = loop
        self._monotonic = monotonic
        # weak: a client dropped without close() must still be collected (and warn that it was unclosed)
        self._watchers: dict[int, weakref.WeakMethod[Callable[[float], None]]] = {}
        self._next_key = 0
        self._task: asyncio.Task[None] | None = None

    def watch(self, on_late: Callable[[float], None]) -> int:
        """Start feeding ``on_late(seconds)`` (a bound method, held weakly); returns the key to ``unwatch`` with."""
        key = self._next_key
        self._next_key += 1
        self._watchers[key] = weakref.WeakMethod(on_late)
        if self._task is None:
            self._task = self._loop.create_task(self._run(), name="groupcoord-worker-loop-probe")
        return key

    def unwatch(self, key: int) -> None:
        self._watchers.pop(key, None)
        if not self._watchers and self._task is not None:
            self._task.cancel()
            self._task = None

    async def _run(self) -> None:
        expected = self._monotonic() + INTERVAL_S
        while True:
            await asyncio.sleep(max(0.0, expected - self._monotonic()))
            now = self._monotonic()
            late = now - expected
            expected = now + INTERVAL_S
            if late > SLACK_S:
                for ref in list(self._watchers.values()):
                    on_late = ref()
                    if on_late is not None:
                        on_late(late)


_PROBES: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, LoopProbe] = weakref.WeakKeyDictionary()


def probe_for(loop: asyncio.AbstractEventLoop, monotonic: Callable[[], float]) -> LoopProbe:
    """The loop's probe (made on first use)."""
    probe = _PROBES.get(loop)
    if probe is None:
        probe = _PROBES[loop] = LoopProbe(loop, monotonic)
    return probe
