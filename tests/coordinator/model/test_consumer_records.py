"""The consumer part of a group record: the target's pairs are sorted once per target a member is
given, and the record still says exactly what the group holds (a round trip gives the same group)."""

from __future__ import annotations

from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.model.consumer_describe import group_state
from groupcoord.coordinator.model.consumer_group import ConsumerGroup, ConsumerMember
from groupcoord.coordinator.model.consumer_records import (
    consumer_from_record,
    consumer_to_record,
    member_entry,
    target_entry,
)
from groupcoord.coordinator.model.reconcile import MemberState, Reconciled
from groupcoord.v1 import groupcoord_pb2 as pb


def tasks(*ids: str) -> frozenset[TaskReplica]:
    return frozenset(TaskReplica(t, 0) for t in ids)


def group_of(targets: dict[str, frozenset[TaskReplica]]) -> ConsumerGroup:
    group = ConsumerGroup("g", "sticky", epoch=3, target_epoch=3, entry_of=member_entry)
    for member_id, target in targets.items():
        member = ConsumerMember(member_id, "", "c", "h", "", pb.MemberMetadata(rack="r1"), 45_000, 60_000)
        member.reconciled = Reconciled(MemberState.STABLE, 3, frozenset())
        group.add(member)
        group.hold(member, Reconciled(MemberState.STABLE, 3, target))
    group.target = dict(targets)
    return group


def test_a_members_pairs_are_rebuilt_only_when_its_target_changes() -> None:
    group = group_of({"a": tasks("t2", "t1"), "b": tasks("t3")})
    first = target_entry(group)
    assert first == {"a": [["t1", 0], ["t2", 0]], "b": [["t3", 0]]}
    group.target["a"] = tasks("t1")  # a new target for a; b's set is the same object
    second = target_entry(group)
    assert second == {"a": [["t1", 0]], "b": [["t3", 0]]}
    assert second["b"] is first["b"] and second["a"] is not first["a"]
    del group.target["b"]
    assert target_entry(group) == {"a": [["t1", 0]]} and set(group.target_pairs) == {"a"}


def test_the_record_round_trips_to_the_same_group() -> None:
    group = group_of({"a": tasks("t1", "t2"), "b": tasks("t3")})
    group.target["a"] = tasks("t1")
    back = consumer_from_record("g", consumer_to_record(group), None)
    assert back.target == group.target and back.epoch == 3 and back.target_epoch == 3
    assert {m: x.reconciled for m, x in back.members.items()} == {m: x.reconciled for m, x in group.members.items()}
    back.validate()


def test_the_state_says_assigning_reconciling_or_stable() -> None:
    assert group_state(ConsumerGroup("g", "sticky")) == pb.EMPTY
    group = group_of({"a": tasks("t1"), "b": tasks("t2")})
    assert group_state(group) == pb.STABLE
    group.bump()
    assert group_state(group) == pb.ASSIGNING  # the target is behind the group epoch
    group.target_epoch = group.epoch
    assert group_state(group) == pb.RECONCILING  # a and b are not at the new target epoch yet
    for member in group.members.values():
        group.hold(member, Reconciled(MemberState.STABLE, group.target_epoch, member.reconciled.assigned))
    group.members["b"].away = True
    group.hold(group.members["b"], Reconciled(MemberState.STABLE, 1, group.members["b"].reconciled.assigned))
    assert group_state(group) == pb.STABLE  # a static member away waits; it does not reconcile
