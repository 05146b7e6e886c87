"""The coordinator paces the cycle collector; assignors hold it off while they run (issue 27)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator

import pytest

from groupcoord.assignors.collector import collector_paused
from groupcoord.coordinator.runtime.heap import YOUNG_THRESHOLD, pace_collector


@pytest.fixture
def thresholds() -> Iterator[None]:
    before, enabled = gc.get_threshold(), gc.isenabled()
    yield
    gc.set_threshold(*before)
    if enabled:
        gc.enable()


def test_pacing_raises_only_the_young_threshold_and_never_lowers_one(thresholds: None) -> None:
    gc.set_threshold(700, 10, 10)
    assert pace_collector() == (700, 10, 10)
    assert gc.get_threshold() == (YOUNG_THRESHOLD, 10, 10)
    gc.set_threshold(4 * YOUNG_THRESHOLD, 5, 5)  # someone paced it further: left alone
    pace_collector()
    assert gc.get_threshold() == (4 * YOUNG_THRESHOLD, 5, 5)


def test_the_collector_comes_back_after_the_last_assignment_of_several_threads(thresholds: None) -> None:
    gc.enable()
    inside, release = threading.Event(), threading.Event()

    def other_leader() -> None:
        with collector_paused():
            inside.set()
            release.wait(10)

    thread = threading.Thread(target=other_leader)
    thread.start()
    assert inside.wait(10)
    with collector_paused(), collector_paused():
        assert not gc.isenabled()
    assert not gc.isenabled(), "the other thread's assignment still runs"
    release.set()
    thread.join(10)
    assert gc.isenabled()


def test_a_collector_that_was_off_stays_off(thresholds: None) -> None:
    gc.disable()
    with collector_paused():
        pass
    assert not gc.isenabled()
