"""Noticing that this process stood still: the pause detector both elections use.

A process paused (SIGSTOP, a stalled VM, swapping) longer than part of its ZooKeeper session may
have lost the session without knowing it yet: after the resume our threads may run before kazoo
hears that the session is gone. So a thread ticks every ``pause_tick`` seconds, and whoever asks
"may I still act?" first compares the clock with the last tick: a gap over ``max_pause`` ends the
process's terms at once (``coordinator.ha.election`` says why half the session timeout).
"""

from __future__ import annotations

from collections.abc import Callable

__all__ = ["PauseDetector"]


class PauseDetector:
    """Not thread-safe on its own: its owner calls it under the lock that guards its terms."""

    def __init__(self, monotonic: Callable[[], float], max_pause: float) -> None:
        self._monotonic = monotonic
        self.max_pause = max_pause
        self._last_tick = monotonic()

    def tick(self) -> None:
        """A sign of life (the ticking thread, and ``start``)."""
        self._last_tick = self._monotonic()

    def paused_for(self) -> float | None:
        """The pause just noticed (seconds), once per pause; None when the process kept running."""
        now = self._monotonic()
        gap = now - self._last_tick
        if gap <= self.max_pause:
            return None
        self._last_tick = now  # report each pause once
        return gap
