"""An assignor's per-group state is kept for a bounded number of groups (a tenant can make many)."""

from __future__ import annotations

import pytest

from groupcoord.assignors.balanced.assignor import BalancedAssignor
from groupcoord.assignors.base import AssignmentContext, MemberInfo, TaskSpec
from groupcoord.assignors.group_states import DEFAULT_GROUPS_KEPT, GroupStates


def test_the_least_recently_used_group_is_dropped_past_the_limit() -> None:
    made: list[str] = []

    def make() -> list[int]:
        made.append("one")
        return []

    states: GroupStates[list[int]] = GroupStates(make, limit=2)
    a = states.get("a")
    states.get("b")
    assert states.get("a") is a  # used again: now the most recent
    states.get("c")  # over the limit: "b" goes, not "a"
    assert "a" in states and "c" in states and "b" not in states
    assert len(states) == 2 and len(made) == 3
    states.get("b")  # a dropped group starts afresh
    assert len(made) == 4


def test_a_limit_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 1"):
        GroupStates(list, limit=0)


def test_one_balanced_instance_serving_many_groups_keeps_a_bounded_state() -> None:
    assignor = BalancedAssignor()
    members = tuple(MemberInfo(member_id=f"m{i}") for i in range(2))
    tasks = tuple(TaskSpec(task_id=f"t{i}") for i in range(4))
    for group in range(DEFAULT_GROUPS_KEPT + 50):
        context = AssignmentContext(group_id=f"g{group}", generation=1, members=members, tasks=tasks)
        assert sum(len(replicas) for replicas in assignor.assign(context).members.values()) == 4
    assert len(assignor._groups) == DEFAULT_GROUPS_KEPT
