"""The quick pass over a leader's assignment never accepts what the close look refuses (issue 27).

``validate_assignment`` first tries ``_plainly_valid`` (whole-list operations, for the common eager
assignment of single-replica tasks) and falls back to ``_validate_closely`` (every rule, replica by
replica, the one that names what is wrong). Hypothesis breaks plain assignments in every way a
leader could (a replica dropped, doubled, moved to another pool, an unknown task or member, a
second replica index, a member named twice, a task given twice or an unknown one in place of another) and checks
both paths give the same verdict.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from groupcoord.coordinator.model.validation import (
    AssignmentRejected,
    _plainly_valid,
    _validate_closely,
    validate_assignment,
)
from groupcoord.v1 import groupcoord_pb2 as pb

BREAKS = ("none", "drop", "double", "other_pool", "unknown_task", "unknown_member", "replica_1", "member_twice",
          "two_replicas_task", "twice_instead", "unknown_instead")


def plain_case(members: int, tasks: int, pools: int) -> tuple[dict[str, str], dict[str, pb.Task], pb.SyncGroupRequest]:
    """Members spread over ``pools`` pools, tasks too, each task given round-robin within its pool; the
    first pool is the default one ("": with one pool, no member or task names a pool at all)."""
    def pool(i: int) -> str:
        return f"p{i % pools}" if i % pools else ""

    member_pools = {f"m{i}": pool(i) for i in range(members)}
    catalog = {f"t{j}": pb.Task(task_id=f"t{j}", pool=pool(j)) for j in range(tasks)}
    request = pb.SyncGroupRequest()
    by_member = {m: request.assignments.add(member_id=m) for m in member_pools}
    in_pool = {p: [m for m, q in member_pools.items() if q == p] for p in set(member_pools.values())}
    for j, task in enumerate(catalog.values()):
        owners = in_pool[task.pool]
        by_member[owners[j % len(owners)]].tasks.add(task_id=task.task_id)
    return member_pools, catalog, request


def verdict(run: object) -> str:
    try:
        run()  # type: ignore[operator]
    except AssignmentRejected as rejected:
        return f"rejected: {rejected}"
    return "accepted"


@settings(max_examples=150, deadline=None)
@given(members=st.integers(2, 12), tasks=st.integers(1, 60), pools=st.integers(1, 3), broken=st.sampled_from(BREAKS),
       pick=st.integers(0, 10_000))
def test_quick_and_close_agree(members: int, tasks: int, pools: int, broken: str, pick: int) -> None:
    pools = min(pools, members)
    member_pools, catalog, request = plain_case(members, max(tasks, pools * members), pools)
    busy = [a for a in request.assignments if a.tasks]
    victim = busy[pick % len(busy)]
    replica = victim.tasks[pick % len(victim.tasks)]
    if broken == "drop":
        del victim.tasks[pick % len(victim.tasks)]
    elif broken == "double":
        busy[(pick + 1) % len(busy)].tasks.add(task_id=replica.task_id)
    elif broken == "other_pool":
        stranger = next((a for a in request.assignments if member_pools[a.member_id] != member_pools[victim.member_id]),
                        None)
        if stranger is not None:
            del victim.tasks[pick % len(victim.tasks)]
            stranger.tasks.add(task_id=replica.task_id)
    elif broken == "unknown_task":
        victim.tasks.add(task_id="nowhere")
    elif broken in ("twice_instead", "unknown_instead"):  # as many replicas as tasks, but not each task once
        other = next((r for a in busy for r in a.tasks if r.task_id != replica.task_id), None)
        if other is not None:
            other.task_id = replica.task_id if broken == "twice_instead" else "nowhere"
    elif broken == "unknown_member":
        request.assignments.add(member_id="ghost")
    elif broken == "replica_1":
        replica.replica = 1
    elif broken == "member_twice":
        request.assignments.add(member_id=victim.member_id)
    elif broken == "two_replicas_task":
        catalog[replica.task_id] = pb.Task(task_id=replica.task_id, pool=catalog[replica.task_id].pool, replicas=2)
    close = verdict(lambda: _validate_closely(member_pools, catalog, request.assignments, request.unassigned, None))
    either = verdict(lambda: validate_assignment(member_pools, catalog, request.assignments, request.unassigned))
    assert either == close
    if _plainly_valid(member_pools, catalog, request.assignments):
        assert close == "accepted", f"the quick pass accepted what the close look refuses ({broken}): {close}"
    if broken == "none":
        assert _plainly_valid(member_pools, catalog, request.assignments), "a plain assignment took the slow path"


def test_a_plain_assignment_of_100000_replicas_is_accepted_without_the_close_look(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """The large case the quick pass is for (10,000 members): it decides alone."""
    member_pools, catalog, request = plain_case(10_000, 100_000, 1)

    def not_called(*args: object) -> set[tuple[str, int]]:
        raise AssertionError("the close look ran on a plain assignment")

    monkeypatch.setattr("groupcoord.coordinator.model.validation._validate_closely", not_called)
    assert validate_assignment(member_pools, catalog, request.assignments, request.unassigned) == set()
