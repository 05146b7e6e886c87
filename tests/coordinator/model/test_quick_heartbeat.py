"""The quick heartbeat (issue 27, item 4): a current member's heartbeat in a Stable group is answered
at once, with no step, token or reply to route. It must answer exactly as the full step would, and
leave every other heartbeat to that step: any group state, stale generation, unknown or fenced
member, out of office, loading, or a write of the group still in flight."""

from __future__ import annotations

from collections.abc import Callable

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model.effects import ArmTimer, Reply
from groupcoord.coordinator.testing import FakeOffice, Harness
from groupcoord.v1 import groupcoord_pb2 as pb

STATIC = "instance-1"


def _stable(h: Harness, group: str, *, instance_id: str = "") -> list[str]:
    """Two members (the first static when ``instance_id``), Stable at generation 1."""
    if instance_id:  # a static member joins in one step (KIP-345)
        ja = h.join(group, instance_id=instance_id)
    else:
        _, ja = h.join_new(group)
    b, jb = h.join_new(group)
    h.advance(2.5)  # the initial delay, extended once for the second member
    assert ja.done and jb.done and h.state(group) == "AwaitingSync"
    a = ja.response.member_id
    h.sync(group, b, 1)
    assert h.sync(group, a, 1).code == pb.NONE and h.state(group) == "Stable"
    return [a, b]


def _groups() -> tuple[Harness, dict[str, list[str]]]:
    """A group in each state that has members, and one Stable group with a static member."""
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=1000))
    members = {"stable": _stable(h, "stable"), "static": _stable(h, "static", instance_id=STATIC)}
    members["preparing"] = _stable(h, "preparing")
    h.join_new("preparing")  # a new member: PreparingRebalance
    members["awaiting"] = _stable(h, "awaiting")
    waiting = [h.join("awaiting", m) for m in members["awaiting"]]  # every member re-joins: AwaitingSync
    assert all(w.done for w in waiting) and h.state("awaiting") == "AwaitingSync"
    assert h.state("preparing") == "PreparingRebalance"
    return h, members


@pytest.fixture(scope="module")
def groups() -> tuple[Harness, dict[str, list[str]]]:
    return _groups()


@settings(max_examples=400, deadline=None)
@given(group=st.sampled_from(["stable", "static", "preparing", "awaiting", "missing", ""]),
       member=st.integers(0, 2), generation=st.sampled_from([-1, 0, 1, 2, 3]),
       instance_id=st.sampled_from(["", STATIC, "instance-2"]))
def test_answers_as_the_full_step_or_leaves_the_request_to_it(
    groups: tuple[Harness, dict[str, list[str]]], group: str, member: int, generation: int, instance_id: str
) -> None:
    h, members = groups
    ids = members.get(group, [])
    member_id = ids[member] if member < len(ids) else "ghost"
    request = pb.HeartbeatRequest(group_id=group, member_id=member_id, generation=generation,
                                  instance_id=instance_id)
    model = h.model
    quick = model.quick_heartbeat(request)
    effects = model.heartbeat(request, 1)  # the clock stands still: the member's fields come out the same
    full = next(e.response for e in effects if isinstance(e, Reply))
    if quick is None:
        assert full.error.code != pb.NONE, f"the quick path declined a heartbeat answered NONE: {request}"
        return
    timer, answer = quick
    assert answer == full and answer.error.code == pb.NONE
    assert [timer] == [e for e in effects if isinstance(e, ArmTimer)]
    h.check()


def test_renews_the_session_as_the_full_step_does() -> None:
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=1000))
    a, b = _stable(h, "g")
    for _ in range(5):  # 5 x 8 s, sessions of 10 s: kept alive by quick heartbeats alone
        h.advance(8)
        assert h.heartbeat("g", a, 1) == h.heartbeat("g", b, 1) == pb.NONE
        assert h.effects == []  # answered at once: no step ran
    assert h.group("g").members[a].last_seen == h.clock.now()
    h.advance(8)
    assert h.heartbeat("g", a, 1) == pb.NONE
    h.advance(3)  # b silent for 11 s: expired; a's next heartbeat is the full step's REBALANCE_IN_PROGRESS
    assert b not in h.group("g").members
    assert h.heartbeat("g", a, 1) == pb.REBALANCE_IN_PROGRESS


def test_counts_its_answers_in_the_request_latency_histogram() -> None:
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=1000))
    a, _ = _stable(h, "g")
    for _ in range(3):
        assert h.heartbeat("g", a, 1) == pb.NONE
    count = h.runtime.metrics.registry.get_sample_value(
        "groupcoord_request_duration_seconds_count", {"rpc": "Heartbeat", "code": "NONE"})
    assert count == 3


class HeldWriter:
    """Writes wait until the test lets them finish (a slow store)."""

    def __init__(self) -> None:
        self.held: list[tuple[Callable[[], None], Callable[[BaseException | None], None]]] = []

    def submit(self, job: Callable[[], None], done: Callable[[BaseException | None], None]) -> None:
        self.held.append((job, done))

    def finish(self) -> None:
        while self.held:
            job, done = self.held.pop(0)
            job()
            done(None)

    def close(self) -> None:
        pass


def _beat(h: Harness, member_id: str) -> tuple[pb.HeartbeatResponse | None, pb.HeartbeatRequest]:
    request = pb.HeartbeatRequest(group_id="g", member_id=member_id, generation=1)
    return h.runtime.quick_heartbeat(request), request


def test_a_write_in_flight_sends_the_heartbeat_to_the_full_step_which_waits_for_it() -> None:
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=1000))
    a, ja = h.join_new("g")
    b, jb = h.join_new("g")
    h.advance(2.5)
    assert ja.done and jb.done
    writer = h.runtime.writer = HeldWriter()
    synced = [h.sync("g", b, 1), h.sync("g", a, 1)]
    assert h.state("g") == "Stable" and writer.held  # Stable, its record being written
    assert not any(s.done for s in synced)
    quick, request = _beat(h, a)
    assert quick is None
    pending = h.run(lambda token: h.model.heartbeat(request, token), pb.HeartbeatResponse)
    assert not pending.done  # a reply never overtakes its group's write
    writer.finish()
    assert [s.code for s in synced] == [pending.code] * 2 == [pb.NONE] * 2
    assert _beat(h, a)[0] is not None  # nothing in flight any more: quick again


@pytest.mark.parametrize("change", ["out of office", "new term"])
def test_out_of_office_or_loading_leaves_the_heartbeat_to_the_full_step(change: str) -> None:
    office = FakeOffice(term=1)
    h = Harness(CoordinatorConfig(group_initial_rebalance_delay_ms=1000), office=office)
    h.runtime.load()
    a, _ = _stable(h, "g")
    assert _beat(h, a)[0] is not None
    if change == "out of office":
        office.change(in_office=False, address="10.0.0.2:9092")
        expected = pb.NOT_COORDINATOR
    else:
        h.runtime.loading = True  # re-elected, its groups being loaded again: nobody is answered meanwhile
        office.change(term=2)
        expected = pb.COORDINATOR_LOAD_IN_PROGRESS
    quick, request = _beat(h, a)
    assert quick is None
    assert h.run(lambda token: h.model.heartbeat(request, token), pb.HeartbeatResponse).code == expected
