"""Kafka replica shift: exact maps (seed 001, Kafka's own examples), errors, the assignor."""

from __future__ import annotations

import logging
import random

import pytest

from groupcoord.assignors.base import Assignment, AssignmentContext, AssignorError, MemberInfo, TaskReplica, TaskSpec
from groupcoord.assignors.kafka_replica import (
    IncompleteRackInfoError,
    InvalidPartitionCountError,
    InvalidReplicationFactorError,
    KafkaReplicaShiftAssignor,
    ReplicaAssignmentError,
    ReplicationFactorTooLargeError,
    assign_replicas_to_brokers,
    rack_alternated_brokers,
)
from groupcoord.assignors.registry import get_assignor

FIVE = [0, 1, 2, 3, 4]


class ScriptedRandom(random.Random):
    """A Random whose randrange answers from a script, recording the bounds asked for."""

    def __init__(self, *values: int) -> None:
        super().__init__(0)
        self.values = list(values)
        self.bounds: list[int] = []

    def randrange(self, start, stop=None, step=1):  # type: ignore[override]
        assert stop is None and step == 1
        self.bounds.append(start)
        value = self.values.pop(0)
        assert 0 <= value < start
        return value


# The seed's table, read column by column (broker) and row by row (replica index).
SEED_TABLE = {
    0: [0, 1, 2],
    1: [1, 2, 3],
    2: [2, 3, 4],
    3: [3, 4, 0],
    4: [4, 0, 1],
    5: [0, 2, 3],
    6: [1, 3, 4],
    7: [2, 4, 0],
    8: [3, 0, 1],
    9: [4, 1, 2],
}


def seed_table_rows(placement: dict[int, list[int]]) -> list[list[str]]:
    """Render a placement as the seed prints it: one row per (replica index, round), one column per broker."""
    rows = []
    for replica in range(3):
        for round_start in (0, 5):
            row = ["" for _ in FIVE]
            for pid in range(round_start, round_start + 5):
                row[placement[pid][replica]] = f"p{pid}"
            rows.append(row)
    return rows


def test_seed_example_table_exactly() -> None:
    placement = assign_replicas_to_brokers(FIVE, 10, 3, fixed_start_index=0)
    assert placement == SEED_TABLE
    assert seed_table_rows(placement) == [
        ["p0", "p1", "p2", "p3", "p4"],  # 1st replica
        ["p5", "p6", "p7", "p8", "p9"],  # 1st replica
        ["p4", "p0", "p1", "p2", "p3"],  # 2nd replica
        ["p8", "p9", "p5", "p6", "p7"],  # 2nd replica
        ["p3", "p4", "p0", "p1", "p2"],  # 3rd replica
        ["p7", "p8", "p9", "p5", "p6"],  # 3rd replica
    ]


def test_seed_example_from_random_draws_of_zero() -> None:
    rng = ScriptedRandom(0, 0)
    assert assign_replicas_to_brokers(FIVE, 10, 3, rng=rng) == SEED_TABLE
    assert rng.bounds == [5, 5]  # start index first, then shift, each over the broker count


def test_random_start_and_shift_are_drawn_separately() -> None:
    # start index 1, initial shift 3: p0 leads on broker 1, followers at +4 and +1 (shift wraps mod 4)
    placement = assign_replicas_to_brokers(FIVE, 6, 3, rng=ScriptedRandom(1, 3))
    assert placement == {0: [1, 0, 2], 1: [2, 1, 3], 2: [3, 2, 4], 3: [4, 3, 0], 4: [0, 4, 1], 5: [1, 2, 3]}


@pytest.mark.parametrize(
    ("brokers", "n", "rf", "start", "first_id", "expected"),
    [
        (FIVE, 6, 3, 2, -1, {0: [2, 0, 1], 1: [3, 1, 2], 2: [4, 2, 3], 3: [0, 3, 4], 4: [1, 4, 0], 5: [2, 1, 3]}),
        # partitions added later continue the pattern: ids 10-14 after a wrap at 10 use shift 1
        (FIVE, 5, 3, 0, 10, {10: [0, 2, 3], 11: [1, 3, 4], 12: [2, 4, 0], 13: [3, 0, 1], 14: [4, 1, 2]}),
        (FIVE, 4, 3, 0, 3, {3: [3, 4, 0], 4: [4, 0, 1], 5: [0, 2, 3], 6: [1, 3, 4]}),
        ([0, 1, 2, 3], 6, 2, 1, -1, {0: [1, 3], 1: [2, 0], 2: [3, 1], 3: [0, 2], 4: [1, 0], 5: [2, 1]}),
        ([7], 3, 1, 0, -1, {0: [7], 1: [7], 2: [7]}),
        (["b", "a", "c"], 3, 3, 0, -1, {0: ["b", "a", "c"], 1: ["a", "c", "b"], 2: ["c", "b", "a"]}),
    ],
)
def test_fixed_start_index_maps(brokers, n, rf, start, first_id, expected) -> None:
    assert assign_replicas_to_brokers(brokers, n, rf, start, first_id) == expected


def test_rack_alternated_broker_list() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    assert rack_alternated_brokers(racks) == [0, 3, 1, 5, 4, 2]
    del racks[5]
    assert rack_alternated_brokers(racks) == [0, 3, 1, 4, 2]


def test_rack_aware_kafka_example() -> None:
    racks = {0: "rack1", 1: "rack3", 2: "rack3", 3: "rack2", 4: "rack2", 5: "rack1"}
    placement = assign_replicas_to_brokers(list(range(6)), 7, 3, 0, 0, racks=racks)
    assert placement == {
        0: [0, 3, 1],
        1: [3, 1, 5],
        2: [1, 5, 4],
        3: [5, 4, 2],
        4: [4, 2, 0],
        5: [2, 0, 3],
        6: [0, 4, 2],  # second round: followers shifted instead of repeating partition 0
    }


def test_rack_aware_uneven_racks_exact() -> None:
    racks = {0: "rack1", 1: "rack1", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack1"}
    placement = assign_replicas_to_brokers(list(range(6)), 12, 3, 0, racks=racks)
    assert placement == {
        0: [0, 2, 3],
        1: [2, 3, 1],
        2: [3, 1, 2],
        3: [1, 4, 2],
        4: [4, 5, 2],
        5: [5, 2, 3],
        6: [0, 4, 2],
        7: [2, 5, 3],
        8: [3, 0, 2],
        9: [1, 2, 3],
        10: [4, 1, 2],
        11: [5, 4, 2],
    }
    for replicas in placement.values():
        assert len({racks[b] for b in replicas}) == 3


def test_rack_aware_skips_used_broker_once_racks_are_exhausted() -> None:
    racks = {0: "a", 1: "b", 2: "c", 3: "a", 4: "a"}
    placement = assign_replicas_to_brokers(FIVE, 6, 4, 2, racks=racks)
    assert placement == {
        0: [2, 0, 1, 3],
        1: [3, 1, 2, 4],
        2: [4, 2, 1, 3],
        3: [0, 1, 2, 3],
        4: [1, 4, 2, 3],
        5: [2, 4, 1, 3],
    }
    for replicas in placement.values():
        assert len(set(replicas)) == 4 and {racks[b] for b in replicas} == {"a", "b", "c"}


def test_rack_info_none_or_empty_means_rack_unaware() -> None:
    expected = assign_replicas_to_brokers(FIVE, 10, 3, 0)
    assert assign_replicas_to_brokers(FIVE, 10, 3, 0, racks={}) == expected
    assert assign_replicas_to_brokers(FIVE, 10, 3, 0, racks={b: "" for b in FIVE}) == expected


def test_more_replicas_than_racks_uses_every_rack() -> None:
    racks = {0: "rack1", 1: "rack2", 2: "rack2", 3: "rack3", 4: "rack3", 5: "rack2"}
    placement = assign_replicas_to_brokers(list(range(6)), 6, 5, rng=random.Random(7), racks=racks)
    for replicas in placement.values():
        assert len(set(replicas)) == 5 and len({racks[b] for b in replicas}) == 3


@pytest.mark.parametrize(
    ("n", "rf", "racks", "error", "text"),
    [
        (0, 3, None, InvalidPartitionCountError, "number of partitions must be larger than 0"),
        (-2, 3, None, InvalidPartitionCountError, "got -2"),
        (10, 0, None, InvalidReplicationFactorError, "replication factor must be larger than 0"),
        (10, -1, None, InvalidReplicationFactorError, "got -1"),
        (10, 6, None, ReplicationFactorTooLargeError, "replication factor 6 larger than the 5 available broker"),
        (10, 3, {0: "r1", 1: "r2"}, IncompleteRackInfoError, "not all brokers have rack information"),
    ],
)
def test_errors(n, rf, racks, error, text) -> None:
    with pytest.raises(error, match=text) as caught:
        assign_replicas_to_brokers(FIVE, n, rf, racks=racks, rng=random.Random(0))
    assert isinstance(caught.value, AssignorError) and isinstance(caught.value, ValueError)
    assert isinstance(caught.value, ReplicaAssignmentError)


def test_too_large_is_an_invalid_replication_factor_and_empty_brokers_fail() -> None:
    assert issubclass(ReplicationFactorTooLargeError, InvalidReplicationFactorError)
    with pytest.raises(ReplicationFactorTooLargeError, match="0 available"):
        assign_replicas_to_brokers([], 1, 1)
    with pytest.raises(ReplicaAssignmentError, match="duplicates"):
        assign_replicas_to_brokers([1, 1, 2], 1, 2)


# -- the assignor ---------------------------------------------------------------------------------


def ctx(members, tasks, rng=None) -> AssignmentContext:
    return AssignmentContext("g", 1, tuple(members), tuple(tasks), rng=rng or random.Random(0))


def as_lists(assignment: Assignment) -> dict[str, list[str]]:
    return {m: [str(r) for r in rs] for m, rs in assignment.members.items()}


def test_assignor_reproduces_the_seed_table() -> None:
    members = [MemberInfo(f"m{i}") for i in range(5)]
    tasks = [TaskSpec(f"t{i}", replicas=3) for i in range(10)]
    result = KafkaReplicaShiftAssignor().assign(ctx(members, tasks, ScriptedRandom(0, 0)))
    expected: dict[str, list[TaskReplica]] = {f"m{i}": [] for i in range(5)}
    for pid, brokers in SEED_TABLE.items():
        for replica, broker in enumerate(brokers):
            expected[f"m{broker}"].append(TaskReplica(f"t{pid}", replica))
    assert result.members == expected
    assert result.unassigned == {}
    assert as_lists(result)["m0"] == ["t0#0", "t3#2", "t4#1", "t5#0", "t7#2", "t8#1"]


def test_assignor_is_found_by_name() -> None:
    assignor = get_assignor("kafka-replica-shift")
    assert isinstance(assignor, KafkaReplicaShiftAssignor) and assignor.name == "kafka-replica-shift"


def test_assignor_mixed_replication_factors_keep_kafka_prefixes() -> None:
    members = [MemberInfo(f"m{i}") for i in range(5)]
    tasks = [TaskSpec(f"t{i}", replicas=1 + i % 3) for i in range(10)]
    result = KafkaReplicaShiftAssignor().assign(ctx(members, tasks, ScriptedRandom(0, 0)))
    owner = {r: m for m, rs in result.members.items() for r in rs}
    for pid, brokers in SEED_TABLE.items():
        task = tasks[pid]
        assert [owner[TaskReplica(task.task_id, r)] for r in range(task.replicas)] == [
            f"m{b}" for b in brokers[: task.replicas]
        ]


def test_assignor_pools_and_memberless_pool() -> None:
    members = [MemberInfo("a1", pool="a"), MemberInfo("a2", pool="a"), MemberInfo("d1"), MemberInfo("d2")]
    tasks = [TaskSpec("x", replicas=2, pool="a"), TaskSpec("y", replicas=2), TaskSpec("z", pool="gpu")]
    result = KafkaReplicaShiftAssignor().assign(ctx(members, tasks, ScriptedRandom(0, 0, 1, 0)))
    assert result.members == {
        "a1": [TaskReplica("x", 1)],
        "a2": [TaskReplica("x", 0)],  # pool "a" drew start index 1
        "d1": [TaskReplica("y", 0)],
        "d2": [TaskReplica("y", 1)],
    }
    assert result.unassigned == {TaskReplica("z", 0): "pool 'gpu' has no members"}


def test_assignor_refuses_a_task_with_more_replicas_than_pool_members() -> None:
    members = [MemberInfo("m1"), MemberInfo("m2"), MemberInfo("p1", pool="p")]
    tasks = [TaskSpec("fine", replicas=2), TaskSpec("greedy", replicas=2, pool="p")]
    with pytest.raises(AssignorError, match=r"task 'greedy' needs 2 replicas but pool 'p' has only 1 member"):
        KafkaReplicaShiftAssignor().assign(ctx(members, tasks))
    with pytest.raises(AssignorError, match="task 'none' has replication factor 0"):
        KafkaReplicaShiftAssignor().assign(ctx(members, [TaskSpec("none", replicas=0)]))


def test_assignor_rack_aware_matches_the_function() -> None:
    racks = {"m0": "rack1", "m1": "rack3", "m2": "rack3", "m3": "rack2", "m4": "rack2", "m5": "rack1"}
    members = [MemberInfo(m, rack=r) for m, r in racks.items()]
    tasks = [TaskSpec(f"t{i}", replicas=3) for i in range(7)]
    result = KafkaReplicaShiftAssignor().assign(ctx(members, tasks, ScriptedRandom(0, 0)))
    owner = {r: m for m, rs in result.members.items() for r in rs}
    placed = {pid: [owner[TaskReplica(f"t{pid}", r)] for r in range(3)] for pid in range(7)}
    assert placed == assign_replicas_to_brokers(sorted(racks), 7, 3, 0, racks=racks)
    assert placed[0] == ["m0", "m3", "m1"]


def test_assignor_partial_racks_fall_back_with_a_warning(caplog: pytest.LogCaptureFixture) -> None:
    members = [MemberInfo("m0", rack="r1"), MemberInfo("m1"), MemberInfo("m2", rack="r2")]
    tasks = [TaskSpec(f"t{i}", replicas=2) for i in range(3)]
    with caplog.at_level(logging.WARNING, logger="groupcoord.assignors.kafka_replica"):
        result = KafkaReplicaShiftAssignor().assign(ctx(members, tasks, ScriptedRandom(0, 0)))
    assert "1 of 3 member(s) have no rack (m1); placing this pool without racks" in caplog.text
    plain = KafkaReplicaShiftAssignor().assign(
        ctx([MemberInfo(m.member_id) for m in members], tasks, ScriptedRandom(0, 0))
    )
    assert result.members == plain.members
    with pytest.raises(IncompleteRackInfoError, match="rack-aware assignment needs racks on all or none"):
        KafkaReplicaShiftAssignor(strict_racks=True).assign(ctx(members, tasks))


def test_assignor_draws_per_pool_in_pool_order() -> None:
    members = [MemberInfo("a1", pool="a"), MemberInfo("b1", pool="b"), MemberInfo("b2", pool="b")]
    tasks = [TaskSpec("x", pool="b"), TaskSpec("y", pool="a")]
    rng = ScriptedRandom(0, 0, 1, 0)
    KafkaReplicaShiftAssignor().assign(ctx(members, tasks, rng))
    assert rng.bounds == [1, 1, 2, 2]  # pool "a" (1 member) first, then pool "b" (2 members)
