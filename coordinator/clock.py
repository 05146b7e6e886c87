"""Time as the coordinator sees it: injectable so tests move it by hand.

Deadlines use a monotonic clock (never wall time, which jumps); ``FakeClock``
only moves when a test calls ``advance``.
"""

from __future__ import annotations

import time
from typing import Protocol

__all__ = ["Clock", "SystemClock", "FakeClock"]


class Clock(Protocol):
    def now(self) -> float:
        """Seconds on a monotonic scale."""
        ...

    def wall_ms(self) -> int:
        """Milliseconds since the epoch (only to judge timestamps clients send, never for deadlines)."""
        ...


class SystemClock:
    now = staticmethod(time.monotonic)  # not a method around it: every heartbeat reads it twice

    def wall_ms(self) -> int:
        return int(time.time() * 1000)


class FakeClock:
    """A clock that stands still until told to move."""

    stands_still = True
    """No event loop runs late against it: a jump of ``advance`` is the test's, not a stalled loop's, so
    nothing measures lag on it (``runtime.lag``)."""

    def __init__(self, start: float = 1000.0, wall_start_ms: int = 1_700_000_000_000) -> None:
        self._now = start
        self._wall_offset_ms = wall_start_ms - int(start * 1000)

    def now(self) -> float:
        return self._now

    def wall_ms(self) -> int:
        return self._wall_offset_ms + int(self._now * 1000)

    def advance(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError("time does not go backwards")
        self._now += seconds
