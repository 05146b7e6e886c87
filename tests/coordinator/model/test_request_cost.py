"""Every per-request step of the model costs O(1) in the group's size (issue 27).

Counted, not timed: the members of a group of 10,000 are instrumented so that each step reports
how many distinct members it read and how many entries of the member table it iterated. A join,
heartbeat, sync or leave may touch a handful; only the step that completes a phase (the last
re-join, the leader's assignment) and the one that starts it (its record is written) may touch
every member. A member leaving while the group prepares writes nothing (as in Kafka): a record
holds every member, and a fleet leaving one by one would write it once per member. A regression to a scan per request (``all(... for m in members)`` per join, a
vote per join) makes one of these counts 10,000 and fails here.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from groupcoord.coordinator.clock import FakeClock
from groupcoord.coordinator.config import CoordinatorConfig
from groupcoord.coordinator.model.effects import Effect, Reply
from groupcoord.coordinator.model.group import Group, Member
from groupcoord.coordinator.model.model import CoordinatorModel
from groupcoord.coordinator.model.records import group_to_record
from groupcoord.v1 import groupcoord_pb2 as pb

G = "g"
N = 10_000
BOUND = 5  # members (or member-table entries) one request may touch, whatever the group's size


class Meter:
    """Counts member reads and member-table iteration between two ``reset`` calls."""

    def __init__(self) -> None:
        self.touched: set[int] = set()
        self.iterated = 0

    def reset(self) -> None:
        self.touched.clear()
        self.iterated = 0

    def counted(self, entries: Iterator[Any]) -> Iterator[Any]:
        for entry in entries:
            self.iterated += 1
            yield entry


def instrument(group: Group, meter: Meter) -> None:
    """Every current member reports its reads; the member table reports its iteration."""

    class CountedMember(Member):
        def __getattribute__(self, name: str) -> Any:
            meter.touched.add(id(self))
            return object.__getattribute__(self, name)

    class CountedTable(dict[str, Member]):
        def __iter__(self) -> Iterator[str]:
            return meter.counted(super().__iter__())

        def keys(self) -> Any:
            return list(meter.counted(iter(super().keys())))

        def values(self) -> Any:
            return list(meter.counted(iter(super().values())))

        def items(self) -> Any:
            return list(meter.counted(iter(super().items())))

    for member in group.members.values():
        member.__class__ = CountedMember
    group.members = CountedTable(group.members)


def stable_group(model: CoordinatorModel, size: int) -> list[str]:
    """A Stable group of ``size`` members at generation 1, loaded as a restarted coordinator would."""
    draft = Group(G, generation=1, protocol="round-robin")
    ids = [f"m{i:05d}" for i in range(size)]
    for member_id in ids:
        draft.add(Member(member_id=member_id, group_id=G, client_id="w", instance_id="", host="h",
                         session_timeout_ms=60_000, rebalance_timeout_ms=60_000, protocols=("round-robin",),
                         metadata=pb.MemberMetadata()))
        draft.assignment[member_id] = []
    record = group_to_record(draft)
    record["state"] = "Stable"
    model.load({G: record})
    return ids


class Driver:
    """Requests to the model, each one measured."""

    def __init__(self) -> None:
        self.model = CoordinatorModel(CoordinatorConfig(group_initial_rebalance_delay_ms=0), clock=FakeClock())
        self.ids = stable_group(self.model, N)
        self.meter = Meter()
        instrument(self.model.groups[G], self.meter)
        self.token = 0

    def step(self, call: Any, request: Any) -> tuple[list[Effect], int, int]:
        """The step's effects, the members it touched and the table entries it iterated."""
        self.token += 1
        self.meter.reset()
        effects = call(request, self.token)
        return effects, len(self.meter.touched), self.meter.iterated

    def join(self, member_id: str = "", protocols: tuple[str, ...] = ("round-robin",)) -> tuple[list[Effect], int, int]:
        return self.step(self.model.join, pb.JoinGroupRequest(
            group_id=G, member_id=member_id, client_id="w", session_timeout_ms=60_000,
            rebalance_timeout_ms=60_000, protocols=list(protocols)))

    def heartbeat(self, member_id: str, generation: int) -> tuple[list[Effect], int, int]:
        return self.step(self.model.heartbeat, pb.HeartbeatRequest(group_id=G, member_id=member_id,
                                                                    generation=generation))

    def sync(self, member_id: str, generation: int) -> tuple[list[Effect], int, int]:
        return self.step(self.model.sync, pb.SyncGroupRequest(group_id=G, member_id=member_id, generation=generation))

    def leave(self, member_id: str) -> tuple[list[Effect], int, int]:
        return self.step(self.model.leave, pb.LeaveGroupRequest(group_id=G, member_id=member_id))

    @property
    def group(self) -> Group:
        return self.model.groups[G]


def replies(effects: list[Effect]) -> list[Any]:
    return [e.response for e in effects if isinstance(e, Reply)]


@pytest.fixture(scope="module")
def driver() -> Driver:
    return Driver()


def assert_bounded(what: str, measured: tuple[list[Effect], int, int]) -> list[Any]:
    _effects, touched, iterated = measured
    assert touched <= BOUND and iterated <= BOUND, \
        f"{what} touched {touched} members and iterated {iterated} entries of a group of {N}"
    return replies(_effects)


def test_a_whole_rebalance_of_10000_costs_each_request_a_bounded_number_of_members(driver: Driver) -> None:
    d = driver
    # Stable: heartbeats, a late SyncGroup, a newcomer's first step
    assert assert_bounded("a heartbeat in Stable", d.heartbeat(d.ids[7], 1))[0].error.code == pb.NONE
    d.meter.reset()
    assert d.model.quick_heartbeat(pb.HeartbeatRequest(group_id=G, member_id=d.ids[9], generation=1)) is not None
    assert len(d.meter.touched) <= 1 and d.meter.iterated == 0, "the quick heartbeat touched other members"
    assert assert_bounded("a late SyncGroup", d.sync(d.ids[8], 1))[0].error.code == pb.NONE
    first = assert_bounded("a new member's first join", d.join())[0]
    assert first.error.code == pb.MEMBER_ID_REQUIRED
    newcomer = first.member_id

    # the newcomer's second join starts the phase: it may write the whole group once (not bounded)
    d.join(newcomer)
    assert d.group.state.value == "PreparingRebalance"

    # PreparingRebalance: re-joins, a re-join with other assignors, heartbeats, a pending id given and left
    for member_id in d.ids[:200]:
        assert assert_bounded("a re-join while preparing", d.join(member_id)) == []  # held
    assert assert_bounded("a re-join offering one more assignor",
                          d.join(d.ids[200], ("round-robin", "sticky"))) == []
    code = assert_bounded("a heartbeat while preparing", d.heartbeat(d.ids[-1], 1))[0].error.code
    assert code == pb.REBALANCE_IN_PROGRESS
    pending = assert_bounded("a first join while preparing", d.join())[0].member_id
    assert assert_bounded("a pending id leaving", d.leave(pending))[0].error.code == pb.NONE

    # members leaving while the others re-join (a fleet shutting down): each one costs O(1) too
    for member_id in d.ids[-51:-1]:
        assert assert_bounded("a leave while preparing", d.leave(member_id))[0].error.code == pb.NONE
    d.ids = d.ids[:-51] + d.ids[-1:]

    # the rest re-join; the last one completes the phase (allowed to touch everyone, once)
    for member_id in d.ids[201:-1]:
        assert_bounded("a re-join while preparing", d.join(member_id))
    effects, touched, _ = d.join(d.ids[-1])
    assert d.group.state.value == "AwaitingSync" and d.group.generation == 2
    assert len(replies(effects)) == len(d.ids) + 1 and touched == len(d.ids)  # every held join answered, each once

    # AwaitingSync: followers' SyncGroups are held, each touching the member alone
    leader = d.group.leader_id
    followers = [m for m in d.ids[:300] if m != leader]
    for member_id in followers:
        assert assert_bounded("a follower's SyncGroup", d.sync(member_id, 2)) == []  # held
    code = assert_bounded("a heartbeat while awaiting sync", d.heartbeat(d.ids[-2], 2))[0].error.code
    assert code == pb.REBALANCE_IN_PROGRESS


def test_protocol_support_is_answered_from_counts() -> None:
    """The counts agree with a recount after adds, re-joins with other assignors and removals."""
    group = Group(G)
    for i, offered in enumerate([("a", "b"), ("b", "c"), ("b",)]):
        group.add(Member(member_id=f"m{i}", group_id=G, client_id="", instance_id="", host="",
                         session_timeout_ms=1, rebalance_timeout_ms=1, protocols=offered,
                         metadata=pb.MemberMetadata()))
    assert group.candidate_protocols() == {"b"}
    assert group.supports_protocols("", ("x", "b")) and not group.supports_protocols("", ("a", "c"))
    m0 = group.members["m0"]
    # without m0, "c" is still not common (m2 offers only b); m0 switching to ("c",) would break "b"
    assert not group.supports_protocols("", ("c",), excluding=m0)
    assert group.supports_protocols("", ("b", "z"), excluding=m0)
    group.set_protocols(m0, ("b", "c"))
    assert group.protocol_support == {"b": 3, "c": 2}
    group.remove("m2")
    assert group.candidate_protocols() == {"b", "c"} and group.protocol_support == {"b": 2, "c": 2}
    group.remove("m0")
    group.remove("m1")
    assert not group.protocol_support and group.supports_protocols("anything", ("q",))
