"""Keyed timers on a fake clock."""

from __future__ import annotations

from groupcoord.coordinator.clock import FakeClock
from groupcoord.coordinator.runtime.timers import TimerQueue


def test_fires_in_deadline_order_only_when_due() -> None:
    clock = FakeClock()
    timers = TimerQueue(clock)
    fired: list[str] = []
    timers.schedule("b", 2, lambda key: fired.append("b"))
    timers.schedule("a", 1, lambda key: fired.append("a"))
    assert timers.poll() == 0
    clock.advance(1.5)
    timers.poll()
    assert fired == ["a"]
    clock.advance(1)
    timers.poll()
    assert fired == ["a", "b"]


def test_same_key_replaces_and_cancel_stops() -> None:
    clock = FakeClock()
    timers = TimerQueue(clock)
    fired: list[str] = []
    timers.schedule("k", 5, lambda key: fired.append("old"))
    timers.schedule("k", 1, lambda key: fired.append("sooner"))
    timers.schedule("c", 1, lambda key: fired.append("cancelled"))
    assert timers.cancel("c") and not timers.cancel("c")
    clock.advance(10)
    timers.poll()
    assert fired == ["sooner"]


def test_pushing_a_timer_out_keeps_the_heap_small() -> None:
    clock = FakeClock()
    timers = TimerQueue(clock)
    fired: list[float] = []
    for _ in range(10_000):  # a member heartbeating: its session timer moves out each time
        clock.advance(0.001)
        timers.schedule("session/g/m", 3, lambda key: fired.append(clock.now()))
    assert len(timers) == 1
    last_beat = clock.now()
    clock.advance(2.9)
    assert timers.poll() == 0
    clock.advance(0.2)
    assert timers.poll() == 1
    assert fired and fired[0] >= last_beat + 3
