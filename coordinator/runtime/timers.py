"""Keyed, replaceable timers on an injected clock (after Kafka's CoordinatorTimer).

Scheduling a key that is already scheduled replaces the old timer, so
``session/<group>/<member>`` always has one deadline. Nothing fires by itself:
the owner calls ``poll()`` (the server's timer task does so at each deadline;
tests call it after ``FakeClock.advance``). Cancelled or replaced timers are
dropped lazily from the heap. Pushing a timer further out (every heartbeat
does this to its session timer) only moves the entry's due time: the heap
entry is re-armed when it surfaces, so the heap holds about one entry per key
however many heartbeats arrive.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Generic, TypeVar

from groupcoord.coordinator.clock import Clock

__all__ = ["TimerQueue"]

K = TypeVar("K", bound=Hashable)


@dataclass(order=True)
class _Entry(Generic[K]):
    deadline: float  # position in the heap; never later than ``due``
    seq: int
    key: K = field(compare=False)
    callback: Callable[[K], None] = field(compare=False)
    due: float = field(default=0.0, compare=False)  # when it really fires
    live: bool = field(default=True, compare=False)


class TimerQueue(Generic[K]):
    """Timers keyed by any hashable key; a callback is called with its key when it fires."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock
        self._heap: list[_Entry[K]] = []
        self._by_key: dict[K, _Entry[K]] = {}
        self._seq = itertools.count()
        self.on_schedule: Callable[[], None] = lambda: None  # lets a driver wake up early

    def schedule(self, key: K, delay_s: float, callback: Callable[[K], None]) -> None:
        """Run ``callback`` ``delay_s`` seconds from now, replacing any timer with this key."""
        due = self.clock.now() + max(0.0, delay_s)
        existing = self._by_key.get(key)
        if existing is not None and existing.deadline <= due:
            existing.due = due  # later than its heap position: re-armed when it surfaces
            existing.callback = callback
            return
        self.cancel(key)
        entry = _Entry(due, next(self._seq), key, callback, due)
        self._by_key[key] = entry
        heapq.heappush(self._heap, entry)
        self.on_schedule()

    def cancel(self, key: K) -> bool:
        entry = self._by_key.pop(key, None)
        if entry is None:
            return False
        entry.live = False
        return True

    def clear(self) -> None:
        """Cancel every timer."""
        for entry in self._by_key.values():
            entry.live = False
        self._by_key.clear()
        self._heap.clear()

    def deadline(self, key: K) -> float | None:
        entry = self._by_key.get(key)
        return entry.due if entry else None

    def __len__(self) -> int:
        return len(self._heap)

    def __contains__(self, key: object) -> bool:
        return key in self._by_key

    def next_deadline(self) -> float | None:
        while self._heap and not self._heap[0].live:
            heapq.heappop(self._heap)
        return self._heap[0].deadline if self._heap else None

    def poll(self) -> int:
        """Fire every timer whose deadline has passed, in deadline order; returns how many fired."""
        fired = 0
        now = self.clock.now()
        while self._heap and self._heap[0].deadline <= now:
            entry = heapq.heappop(self._heap)
            if not entry.live:
                continue
            if entry.due > now:  # pushed out since it was queued
                entry.deadline = entry.due
                heapq.heappush(self._heap, entry)
                continue
            del self._by_key[entry.key]
            entry.live = False
            entry.callback(entry.key)
            fired += 1
        return fired
