"""Sticky assignor: exact maps for the cases that matter, weights, pools, claims."""

from __future__ import annotations

import pytest

from groupcoord.assignors.base import Assignment, AssignmentContext, AssignorError, MemberInfo, TaskReplica, TaskSpec
from groupcoord.assignors.metrics import movement
from groupcoord.assignors.registry import get_assignor
from groupcoord.assignors.sticky import StickyAssignor, _previous_claims


def r(name: str) -> TaskReplica:
    task, _, replica = name.partition("#")
    return TaskReplica(task, int(replica or 0))


def member(member_id: str, owned: str = "", generation: int = 1, pool: str = "") -> MemberInfo:
    return MemberInfo(member_id, pool=pool, owned=tuple(r(x) for x in owned.split()), owned_generation=generation)


def assign(members, tasks) -> Assignment:
    return StickyAssignor().assign(AssignmentContext("g", 2, tuple(members), tuple(tasks)))


def names(assignment: Assignment) -> dict[str, str]:
    return {m: " ".join(sorted(str(x) for x in rs)) for m, rs in assignment.members.items()}


def single(*ids: str) -> list[TaskSpec]:
    return [TaskSpec(t) for t in ids]


def test_found_by_name() -> None:
    assert isinstance(get_assignor("sticky"), StickyAssignor) and StickyAssignor.name == "sticky"


def test_fresh_group_fills_floor_quotas_then_hands_out_the_extra() -> None:
    result = assign([member("a"), member("b"), member("c")], single(*(f"t{i}" for i in range(1, 8))))
    assert names(result) == {"a": "t1#0 t2#0 t7#0", "b": "t3#0 t4#0", "c": "t5#0 t6#0"}
    assert result.unassigned == {}


def test_docstring_example_join_moves_one() -> None:
    members = [member("m-a", "t1 t2 t3"), member("m-b", "t4"), member("m-c")]
    result = assign(members, single("t1", "t2", "t3", "t4"))
    assert names(result) == {"m-a": "t1#0 t2#0", "m-b": "t4#0", "m-c": "t3#0"}


def test_balanced_previous_assignment_is_kept_exactly() -> None:
    members = [member("a", "t1 t4"), member("b", "t2 t5"), member("c", "t3")]
    result = assign(members, single("t1", "t2", "t3", "t4", "t5"))
    assert names(result) == {"a": "t1#0 t4#0", "b": "t2#0 t5#0", "c": "t3#0"}


def test_member_leaving_only_its_tasks_move() -> None:
    before = {"a": "t1 t2", "b": "t3 t4", "c": "t5 t6"}
    result = assign([member("a", before["a"]), member("c", before["c"])], single("t1", "t2", "t3", "t4", "t5", "t6"))
    assert names(result) == {"a": "t1#0 t2#0 t3#0", "c": "t4#0 t5#0 t6#0"}


def test_new_and_removed_tasks() -> None:
    members = [member("a", "t1 gone"), member("b", "t2")]
    result = assign(members, single("t1", "t2", "t3"))
    assert names(result) == {"a": "t1#0 t3#0", "b": "t2#0"}


def test_leaver_replica_goes_to_a_member_without_its_task() -> None:
    # 3 replicas over 2 members: the extra slot must go to b, the member not running x already.
    members = [member("a", "x#1"), member("b", "y")]
    result = assign(members, [TaskSpec("x", replicas=2), TaskSpec("y")])
    assert names(result) == {"a": "x#1", "b": "x#0 y#0"}


def test_extra_slot_goes_to_the_member_keeping_most() -> None:
    # 5 tasks over 2 members: quotas 3 and 2; b keeps 3 so b gets the 3-slot and nothing moves off b.
    members = [member("a", "t1"), member("b", "t2 t3 t4")]
    result = assign(members, single("t1", "t2", "t3", "t4", "t5"))
    assert names(result) == {"a": "t1#0 t5#0", "b": "t2#0 t3#0 t4#0"}


def test_overloaded_member_sheds_its_newest_tasks() -> None:
    members = [member("a", "t1 t2 t3 t4 t5 t6"), member("b")]
    result = assign(members, single("t1", "t2", "t3", "t4", "t5", "t6"))
    assert names(result) == {"a": "t1#0 t2#0 t3#0", "b": "t4#0 t5#0 t6#0"}


def test_highest_generation_claim_wins_and_tie_goes_to_first_member() -> None:
    members = [member("a", "t1 t2", generation=3), member("b", "t1", generation=4), member("c", "t2", generation=3)]
    context = AssignmentContext("g", 5, tuple(members), tuple(single("t1", "t2", "t3")))
    assert {k: v[0] for k, v in _previous_claims(context).items()} == {
        (k.task_id, k.replica): v for k, v in context.previous_owners().items()
    }
    assert names(StickyAssignor().assign(context)) == {"a": "t2#0", "b": "t1#0", "c": "t3#0"}


def test_replicas_of_a_task_on_distinct_members() -> None:
    # a claims both replicas of x (a stale, impossible claim): one stays, the other moves.
    members = [member("a", "x#0 x#1"), member("b")]
    result = assign(members, [TaskSpec("x", replicas=2)])
    assert names(result) == {"a": "x#0", "b": "x#1"}


def test_swap_when_the_only_member_with_room_holds_the_task() -> None:
    # Only a has room, but a already runs x#0: b hands a one of its tasks and takes x#1.
    members = [member("a", "x#0"), member("b", "s1 s2"), member("c", "s3 s4")]
    result = assign(members, [TaskSpec("x", replicas=2), *single("s1", "s2", "s3", "s4")])
    assert names(result) == {"a": "s2#0 x#0", "b": "s1#0 x#1", "c": "s3#0 s4#0"}


def test_pools_are_kept_apart() -> None:
    members = [member("a", "t1 g1", pool=""), member("gpu-1", "t2", pool="gpu"), member("gpu-2", pool="gpu")]
    tasks = [TaskSpec("t1"), TaskSpec("t2"), TaskSpec("g1", pool="gpu"), TaskSpec("g2", pool="gpu")]
    result = assign(members, tasks)
    # t2 left the gpu member (wrong pool), g1 left a; each pool balanced on its own.
    assert names(result) == {"a": "t1#0 t2#0", "gpu-1": "g1#0", "gpu-2": "g2#0"}


def test_unplaceable_replicas_are_reported() -> None:
    members = [member("a"), member("b")]
    tasks = [TaskSpec("big", replicas=3), TaskSpec("orphan", pool="nobody")]
    result = assign(members, tasks)
    assert names(result) == {"a": "big#0", "b": "big#1"}
    assert result.unassigned == {
        r("big#2"): "replication factor 3 exceeds the 2 member(s) of pool (default)",
        r("orphan"): "pool 'nobody' has no members",
    }


def test_no_members_at_all() -> None:
    result = assign([], single("t1"))
    assert result.members == {} and result.unassigned == {r("t1"): "pool (default) has no members"}


def test_negative_weight_is_refused() -> None:
    with pytest.raises(AssignorError, match="task 'w' has negative weight -1"):
        assign([member("a")], [TaskSpec("w", weight=-1)])


def test_weights_balance_within_the_heaviest_task() -> None:
    tasks = [TaskSpec("big", weight=6.0), *(TaskSpec(f"s{i}", weight=1.0) for i in range(6))]
    result = assign([member("a"), member("b")], tasks)
    loads = {m: sum(t.weight for t in tasks for x in rs if x.task_id == t.task_id) for m, rs in result.members.items()}
    assert loads == {"a": 6.0, "b": 6.0}
    assert names(result) == {"a": "big#0", "b": "s0#0 s1#0 s2#0 s3#0 s4#0 s5#0"}


def test_weights_keep_an_assignment_within_tolerance() -> None:
    tasks = [TaskSpec("h", weight=3.0), TaskSpec("l1"), TaskSpec("l2")]
    members = [member("a", "h"), member("b", "l1 l2")]  # loads 3 and 2: spread 1 <= 3, nothing moves
    assert names(assign(members, tasks)) == {"a": "h#0", "b": "l1#0 l2#0"}


def test_weights_move_the_replica_that_best_halves_the_gap() -> None:
    tasks = [TaskSpec("h", weight=2.0), TaskSpec("l1"), TaskSpec("l2"), TaskSpec("l3", weight=4.0)]
    members = [member("a", "h l1 l2 l3"), member("b")]  # loads 8 and 0: moving l3 (4) evens it in one move
    result = assign(members, tasks)
    assert names(result) == {"a": "h#0 l1#0 l2#0", "b": "l3#0"}


def test_equal_non_unit_weights_use_exact_counts() -> None:
    tasks = [TaskSpec(f"t{i}", weight=2.5) for i in range(5)]
    result = assign([member("a", "t0 t1 t2 t3 t4"), member("b")], tasks)
    assert [len(v) for v in result.members.values()] == [3, 2]
    assert movement({"a": [r(f"t{i}") for i in range(5)]}, result.members) == 2
