"""A consumer group's records: its own, and one per member and per member's target. A change of k
members writes k members' records; the records read back into the same group; a record written whole
(format 1, before per-member records) still loads, and its first write rewrites it per member."""

from __future__ import annotations

from typing import Any

import pytest

from groupcoord.assignors.base import TaskReplica
from groupcoord.coordinator.model.consumer_describe import group_state
from groupcoord.coordinator.model.consumer_group import ConsumerGroup, ConsumerMember
from groupcoord.coordinator.model.consumer_records import (
    changed_parts,
    consumer_from_record,
    consumer_head,
    member_entry,
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


class Stored:
    """What a store holds of the group after each write (its own record's consumer part, its parts)."""

    def __init__(self) -> None:
        self.head: dict[str, Any] = {}
        self.parts: dict[str, Any] = {}

    def write(self, group: ConsumerGroup) -> dict[str, Any]:
        written = changed_parts(group)
        self.head = consumer_head(group)
        for key, value in written.items():
            if value is None:
                self.parts.pop(key, None)
            else:
                self.parts[key] = value
        return written

    def load(self) -> ConsumerGroup:
        return consumer_from_record("g", self.head, self.parts, None)


def states(group: ConsumerGroup) -> dict[str, Reconciled]:
    return {member_id: m.reconciled for member_id, m in group.members.items()}


def test_a_change_writes_the_members_it_touched_and_no_other() -> None:
    group = group_of({f"m{i}": tasks(f"t{i}") for i in range(50)})
    first = changed_parts(group)
    assert len(first) == 100 and first["t:m7"] == [["t7", 0]] and first["m:m7"]["assigned"] == [["t7", 0]]
    assert changed_parts(group) == {}  # nothing changed since
    a, b = group.members["m1"], group.members["m2"]
    group.hold(a, Reconciled(MemberState.UNREVOKED_TASKS, 3, frozenset(), tasks("t1")))
    group.target["m2"] = tasks("t2", "t1")  # b's target: its target and its record (its epoch exactly)
    group.remove(group.members["m3"])
    del group.target["m3"]
    parts = changed_parts(group)
    assert set(parts) == {"m:m1", "m:m2", "t:m2", "m:m3", "t:m3"}
    assert parts["m:m1"]["revoking"] == [["t1", 0]] and parts["t:m2"] == [["t1", 0], ["t2", 0]]
    assert parts["m:m3"] is None and parts["t:m3"] is None  # gone: deleted
    assert parts["m:m2"] == member_entry(b)


def test_a_new_target_writes_only_the_members_whose_target_changed() -> None:
    group = group_of({"a": tasks("t1", "t2"), "b": tasks("t3")})
    changed_parts(group)
    group.target = {"a": group.target["a"], "b": tasks("t3"), "c": tasks("t4")}  # a and b the same sets
    assert set(changed_parts(group)) == {"t:c"}  # c is no member yet: its target alone
    with pytest.raises(TypeError, match="item by item"):
        group.target.update({"a": tasks()})


def test_an_epoch_taken_alone_is_not_written_and_loads_as_implied() -> None:
    group = group_of({"a": tasks("t1"), "b": tasks("t2")})
    store = Stored()
    store.write(group)
    group.target_epoch = group.epoch = 5  # a new target that leaves a and b their tasks
    a = group.members["a"]
    assert group.hold(a, Reconciled(MemberState.STABLE, 5, a.reconciled.assigned)) is False
    assert store.write(group) == {}  # a took epoch 5: nothing to write but the group's figures
    back = store.load()
    assert back.members["a"].epoch == 5 and back.members["a"].accepts_from == 3  # told 5, or still at 3
    assert back.members["b"].epoch == 5 and back.members["b"].accepts_from == 3
    group.target["a"] = tasks("t1", "t9")  # a new target for a: its record is written, epoch 5 and all
    assert changed_parts(group)["m:a"]["epoch"] == 5
    back.validate()


def test_the_records_read_back_into_the_same_group() -> None:
    group = group_of({"a": tasks("t1", "t2"), "b": tasks("t3")})
    group.target["a"] = tasks("t1")
    group.hold(group.members["a"], Reconciled(MemberState.UNREVOKED_TASKS, 3, tasks("t1"), tasks("t2")))
    store = Stored()
    store.write(group)
    back = store.load()
    assert back.target == group.target and back.epoch == 3 and back.target_epoch == 3
    assert states(back) == states(group) and back.holder == group.holder
    assert changed_parts(back) == {}  # as stored: nothing to write
    back.validate()


def test_a_group_written_whole_before_still_loads_and_is_rewritten_per_member() -> None:
    group = group_of({"a": tasks("t1", "t2"), "b": tasks("t3")})
    whole = {"epoch": 3, "target_epoch": 3, "assignor": "sticky", "last_error": "",
             "target": {"a": [["t1", 0], ["t2", 0]], "b": [["t3", 0]]},
             "members": [member_entry(m) for m in group.members.values()]}  # format 1: no "format" key
    back = consumer_from_record("g", whole, None, None)
    assert states(back) == states(group) and back.target == group.target
    assert set(changed_parts(back)) == {"m:a", "m:b", "t:a", "t:b"}  # its first write: every member
    with pytest.raises(ValueError, match="format 3 is newer than this groupcoord reads"):
        consumer_from_record("g", {**consumer_head(group), "format": 3}, {}, None)


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
