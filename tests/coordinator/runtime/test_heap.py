"""The coordinator paces the cycle collector and holds it off for a rebalance's bursts; assignors hold it
off while they run (issue 27)."""

from __future__ import annotations

import gc
import threading
from collections.abc import Iterator
from typing import Any

import pytest

from groupcoord.assignors.collector import collector_paused
from groupcoord.coordinator.runtime.heap import YOUNG_THRESHOLD, pace_collector
from groupcoord.v1 import groupcoord_pb2 as pb


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


def test_a_rebalance_completes_and_is_written_with_the_collector_held_off(
        thresholds: None, monkeypatch: pytest.MonkeyPatch) -> None:
    """The bursts of a rebalance (the join phase's completion, the leader's assignment accepted,
    each record written) run with the collector off; every other step, and the time between
    steps, with it on."""
    from groupcoord.coordinator.model import phases, sync
    from groupcoord.coordinator.storage.store import MemoryStore
    from groupcoord.coordinator.testing import Harness

    gc.enable()
    seen: list[tuple[str, bool]] = []

    class WatchedStore(MemoryStore):
        def save(self, group_id: str, record: Any) -> None:
            seen.append(("save", gc.isenabled()))
            super().save(group_id, record)

    def watched(name: str, module: Any, function: Any) -> None:
        def run(*args: Any) -> None:
            seen.append((name, gc.isenabled()))
            function(*args)
        monkeypatch.setattr(module, function.__name__, run)

    watched("join completed", phases, phases._complete_join)
    watched("assignment accepted", sync, sync._accept_leader_sync)
    watched("session armed", phases, phases.arm_session)
    h = Harness(store=WatchedStore())
    h.put_tasks("g", "t1", "t2")
    first, held = h.join_new("g")
    assert held.code == pb.NONE
    generation = h.group("g").generation
    h.sync("g", first, generation, {first: ["t1", "t2"]})
    assert h.state("g") == "Stable"
    assert gc.isenabled()
    bursts = {"join completed", "assignment accepted", "save"}
    assert {name for name, _ in seen} >= bursts, seen
    assert not [enabled for name, enabled in seen if name in bursts and enabled], seen
    # sessions armed inside a burst (by the completion) and outside (the newcomer's first join, its SyncGroup)
    assert {enabled for name, enabled in seen if name == "session armed"} == {True, False}, seen
