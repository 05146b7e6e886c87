"""Assignment metrics: balance, movement, rack spread, summaries."""

from __future__ import annotations

import dataclasses

import pytest

from groupcoord.assignors.base import Assignment, AssignmentContext, MemberInfo, TaskReplica, TaskSpec
from groupcoord.assignors.metrics import (
    AssignmentQuality,
    balance,
    moved_replicas,
    movement,
    owners,
    rack_spread,
    summarize,
    summarize_context,
)


def reps(*names: str) -> list[TaskReplica]:
    out = []
    for name in names:
        task, _, replica = name.partition("#")
        out.append(TaskReplica(task, int(replica or 0)))
    return out


def test_balance_counts() -> None:
    b = balance({"a": reps("t1", "t2", "t3"), "b": reps("t4"), "c": reps("t5", "t6")})
    assert (b.members, b.replicas, b.count_max, b.count_min, b.count_mean) == (3, 6, 3, 1, 2.0)
    assert b.count_max_over_mean == pytest.approx(1.5)
    assert b.count_min_over_max == pytest.approx(1 / 3)
    assert b.weight_max_over_mean == pytest.approx(1.5)  # without weights, weight is the count


def test_balance_weights() -> None:
    b = balance({"a": reps("big"), "b": reps("s1", "s2")}, weights={"big": 4.0, "s1": 1.0})  # s2 defaults to 1
    assert (b.weight_max, b.weight_min, b.weight_mean) == (4.0, 2.0, 3.0)
    assert b.weight_max_over_mean == pytest.approx(4 / 3)
    assert b.weight_min_over_max == pytest.approx(0.5)
    assert b.count_max_over_mean == pytest.approx(2 / 1.5)


@pytest.mark.parametrize("assignment", [{}, {"a": [], "b": []}])
def test_balance_of_nothing_is_perfect(assignment) -> None:
    b = balance(assignment)
    assert (b.count_max_over_mean, b.count_min_over_max, b.weight_max_over_mean, b.weight_min_over_max) == (1, 1, 1, 1)


def test_idle_member_shows_in_min_over_max() -> None:
    assert balance({"a": reps("t1", "t2"), "b": []}).count_min_over_max == 0.0


def test_movement_counts_only_replicas_that_changed_owner() -> None:
    before = {"a": reps("t1", "t2", "x#0"), "b": reps("t3", "x#1"), "gone": reps("t4")}
    after = {"a": reps("t1", "x#1"), "b": reps("t3", "t2", "x#0"), "c": reps("t4", "t5")}
    # t2, x#0, x#1 and t4 changed owner; t5 is new and not counted.
    assert movement(before, after) == 4
    assert moved_replicas(before, after) == reps("t2", "t4", "x#0", "x#1")
    assert movement(after, after) == 0
    assert owners(after)[TaskReplica("t5")] == "c"


def test_rack_spread() -> None:
    racks = {"a": "r1", "b": "r1", "c": "r2", "d": ""}
    spread = {"a": reps("x#0", "y#0"), "c": reps("x#1"), "b": reps("y#1")}
    # x on r1+r2 (best possible), y on r1 twice although r2 was free.
    assert rack_spread(spread, racks) == 0.5
    assert rack_spread({"a": reps("x#0"), "c": reps("x#1")}, racks) == 1.0
    assert rack_spread({"d": reps("x")}, racks) == 1.0  # no racked holder: nothing to judge


def test_rack_spread_counts_only_racks_of_the_task_pool() -> None:
    racks = {"a": "r1", "b": "r1", "g": "r2"}
    pools = {"a": "", "b": "", "g": "gpu"}
    one_rack_pool = {"a": reps("x#0"), "b": reps("x#1"), "g": []}
    assert rack_spread(one_rack_pool, racks, pools) == 1.0  # pool "" has only r1
    assert rack_spread(one_rack_pool, racks) == 0.0  # ignoring pools, r2 looked free


def test_summarize_and_as_dict() -> None:
    current = {"a": reps("t1", "t2"), "b": reps("t3")}
    quality = summarize(
        current, previous={"a": reps("t1"), "b": reps("t2")}, racks={"a": "r1", "b": "r2"}, unassigned=2
    )
    assert quality.as_dict() == {
        "members": 2,
        "replicas": 3,
        "unassigned": 2,
        "count_max_over_mean": pytest.approx(4 / 3),
        "count_min_over_max": 0.5,
        "weight_max_over_mean": pytest.approx(4 / 3),
        "weight_min_over_max": 0.5,
        "moved": 1,
        "rack_spread": 1.0,
    }
    bare = summarize(current)
    assert bare.moved is None and bare.rack_spread is None
    with pytest.raises(dataclasses.FrozenInstanceError):
        bare.moved = 3  # type: ignore[misc]


def test_summarize_context_reads_weights_claims_and_racks() -> None:
    members = (
        MemberInfo("a", rack="r1", owned=tuple(reps("t1", "t2")), owned_generation=1),
        MemberInfo("b", rack="r2"),
    )
    tasks = (TaskSpec("t1", weight=3.0), TaskSpec("t2"), TaskSpec("t3", pool="none"))
    context = AssignmentContext("g", 2, members, tasks)
    result = Assignment(members={"a": reps("t1"), "b": reps("t2")}, unassigned={TaskReplica("t3"): "no members"})
    quality = summarize_context(context, result)
    assert isinstance(quality, AssignmentQuality)
    assert (quality.moved, quality.unassigned, quality.rack_spread) == (1, 1, 1.0)
    assert quality.weight_max_over_mean == pytest.approx(3 / 2)
    assert quality.count_max_over_mean == 1.0
