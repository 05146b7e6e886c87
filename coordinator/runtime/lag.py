"""How late the coordinator's event loop runs: the time it could not do its job.

A tick is scheduled every ``interval_s``; when it runs ``delay`` late (the loop was busy: a
flood of requests, a long step, a paused process), the part of the delay above ``slack_s``
is added to ``lost()``. The model discounts that time from sessions: a member whose
heartbeats were waiting in line behind the coordinator's own backlog is not expelled for it.
An overloaded coordinator then stays correct and slower, instead of expelling live members,
rebalancing, and getting more overloaded (congestion collapse).

The total is logged (event ``loop_lost``, field ``lost_s``) each time it has grown by
``LOGGED_EVERY_S`` since the last line, and with each stall over a second (``loop_late``): what the
process lost, and so how much later than its bounds it may act, can be read from its log
afterwards, to within ``LOGGED_EVERY_S`` (the fault suite's checker does).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from groupcoord.coordinator.clock import Clock

__all__ = ["LOGGED_EVERY_S", "LagMonitor", "lag_monitor_for"]

LOGGED_EVERY_S = 1.0  # at most one ``loop_lost`` line per second lost

log = logging.getLogger("groupcoord.lag")


class LagMonitor:
    def __init__(self, monotonic: Callable[[], float], *, interval_s: float = 0.05, slack_s: float = 0.02,
                 ticking: bool = True) -> None:
        """``ticking=False``: never start the tick (a clock that only tests move; ``note`` still counts)."""
        self._monotonic = monotonic
        self._ticking = ticking
        self.interval_s = interval_s
        self.slack_s = slack_s
        self._lost = 0.0
        self._logged = 0.0  # the total the last line said
        self.worst_s = 0.0  # the longest single stall seen
        self._task: asyncio.Task[None] | None = None

    def lost(self) -> float:
        """Seconds lost so far (monotonic, never decreases)."""
        return self._lost

    def note(self, late_s: float) -> None:
        """The loop ran ``late_s`` seconds behind schedule once (called by the tick; tests may too)."""
        if late_s > self.slack_s:
            self._lost += late_s - self.slack_s
            self.worst_s = max(self.worst_s, late_s)
            if late_s > 1.0:
                log.warning("the coordinator's event loop ran %.1fs late: sessions are extended by that much", late_s,
                            extra={"event": "loop_late", "late_s": round(late_s, 3), "lost_s": round(self._lost, 3)})
                self._logged = self._lost
            elif self._lost - self._logged >= LOGGED_EVERY_S:
                log.info("the coordinator's event loop has lost %.1fs in all: sessions and rebalance deadlines "
                         "are extended by what it loses", self._lost,
                         extra={"event": "loop_lost", "lost_s": round(self._lost, 3)})
                self._logged = self._lost

    def start(self, loop: asyncio.AbstractEventLoop) -> None:
        if self._task is None and self._ticking:
            self._task = loop.create_task(self._run(), name="lag-monitor")

    async def stop(self) -> None:
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def _run(self) -> None:
        expected = self._monotonic() + self.interval_s
        while True:
            await asyncio.sleep(max(0.0, expected - self._monotonic()))
            now = self._monotonic()
            self.note(now - expected)
            expected = now + self.interval_s


def lag_monitor_for(clock: Clock) -> LagMonitor:
    """The monitor of a runtime on ``clock``; on a clock that stands still until a test moves it
    (``FakeClock``), a moved clock would read as a stalled loop, and sessions would be extended."""
    return LagMonitor(clock.now, ticking=not getattr(clock, "stands_still", False))
