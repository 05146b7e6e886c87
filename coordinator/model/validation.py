"""Check a leader's assignment before the group accepts it.

Rules (SPEC §2): only current members are named, each at most once; every
replica of every catalog task is assigned exactly once, or reported unassigned
only when its pool has fewer members than its replication factor; replicas of
one task sit on distinct members; a task only goes to members of its pool.
Splits (a task replaced by its children) are applied to the catalog first, so
the assignment must cover the children, not the parent.

Cooperative generations (KIP-429) add one rule: a replica that another member may
still be running goes to nobody else in this generation. The assignment may leave
it unassigned instead (its owner revokes it and re-joins; the next generation gives
it to its new member): those replicas are returned as "revoking".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from itertools import chain
from operator import attrgetter

from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["AssignmentRejected", "apply_splits", "validate_assignment", "replicas_of"]


_replica_index, _task_id, _pool = attrgetter("replica"), attrgetter("task_id"), attrgetter("pool")


class AssignmentRejected(ValueError):
    """The assignment breaks a rule; the message says which, naming the task and members."""


def replicas_of(task: pb.Task) -> int:
    return task.replicas if task.replicas > 0 else 1


def apply_splits(tasks: dict[str, pb.Task], splits: Sequence[pb.TaskSplit]) -> dict[str, pb.Task]:
    """The catalog after the splits, or AssignmentRejected if a split is malformed; the catalog
    itself (not a copy: read only) when there are none."""
    if not splits:
        return tasks
    result = dict(tasks)
    for split in splits:
        if split.parent_task_id not in result:
            raise AssignmentRejected(f"split of unknown task {split.parent_task_id!r}")
        if not split.children:
            raise AssignmentRejected(f"split of {split.parent_task_id!r} has no children")
        del result[split.parent_task_id]
        for child in split.children:
            if not child.task_id or child.task_id in result:
                raise AssignmentRejected(
                    f"split of {split.parent_task_id!r}: child id {child.task_id!r} is empty or already in use"
                )
            result[child.task_id] = child
    return result


def validate_assignment(
    member_pools: Mapping[str, str],
    tasks: Mapping[str, pb.Task],
    assignments: Iterable[pb.MemberAssignment],
    unassigned: Iterable[pb.UnassignedReplica],
    owners: Mapping[tuple[str, int], frozenset[str]] | None = None,
    *,
    held: Sequence[Sequence[pb.TaskReplica]] | None = None,
) -> set[tuple[str, int]]:
    """Raise AssignmentRejected unless the assignment is complete and consistent; returns the
    replicas being revoked (cooperative: ``owners`` says who may still run each replica).

    ``held``: each assignment's replicas as a list, in the assignments' order, when the caller
    keeps them anyway (``assignment_check``): reading a protobuf repeated field makes a Python
    object per element each time, so one read that every pass shares is 2-3 times cheaper."""
    if owners is None and not unassigned and _plainly_valid(member_pools, tasks, assignments, held):
        return set()
    return _validate_closely(member_pools, tasks, assignments, unassigned, owners, held)


def _plainly_valid(member_pools: Mapping[str, str], tasks: Mapping[str, pb.Task],
                   assignments: Iterable[pb.MemberAssignment],
                   held: Sequence[Sequence[pb.TaskReplica]] | None = None) -> bool:
    """True when the assignment is of the plain kind and right: an eager generation, every task of one
    replica, each assigned exactly once to a member of its pool, nothing reported unassigned. False
    says nothing either way: ``_validate_closely`` then decides, and names what is wrong.

    The common case at scale (100,000 replicas): whole-list operations instead of a dozen
    interpreted steps per replica, each replica read from the request once, and the catalog
    compared with the assigned ids as one set; pools are looked at only when some member or task
    has one."""
    if any(task.replicas > 1 for task in tasks.values()):
        return False
    seen: set[str] = set()
    assigned: list[tuple[str, list[str]]] = []  # (the member's pool, its task ids)
    for index, assignment in enumerate(assignments):
        member_id = assignment.member_id
        pool = member_pools.get(member_id)
        if pool is None or member_id in seen:
            return False
        seen.add(member_id)
        replicas = held[index] if held is not None else list(assignment.tasks)
        if any(map(_replica_index, replicas)):
            return False
        assigned.append((pool, list(map(_task_id, replicas))))
    # as many ids as the catalog has tasks, and the same set: each task exactly once, nothing else
    every_id = list(chain.from_iterable(task_ids for _, task_ids in assigned))
    if len(every_id) != len(tasks) or set(every_id) != tasks.keys():
        return False
    if not any(member_pools.values()) and not any(map(_pool, tasks.values())):
        return True  # no pools anywhere: every member may run every task
    find = tasks.get
    return not any(set(map(_pool, map(find, task_ids))) - {pool} for pool, task_ids in assigned)


def _validate_closely(
    member_pools: Mapping[str, str],
    tasks: Mapping[str, pb.Task],
    assignments: Iterable[pb.MemberAssignment],
    unassigned: Iterable[pb.UnassignedReplica],
    owners: Mapping[tuple[str, int], frozenset[str]] | None,
    held: Sequence[Sequence[pb.TaskReplica]] | None = None,
) -> set[tuple[str, int]]:
    """Every rule, replica by replica (any assignment; the only one that explains a refusal)."""
    # one pass over the request's replicas, then one over the catalog: O(request + catalog), with
    # the common single-replica task kept off the per-task sets (a 100,000-replica assignment is
    # checked in a fraction of a second)
    owner, members_of_task = _check_assigned(member_pools, tasks, assignments, owners, held)
    return _check_covered(member_pools, tasks, unassigned, owners, owner, members_of_task)


def _check_assigned(
    member_pools: Mapping[str, str],
    tasks: Mapping[str, pb.Task],
    assignments: Iterable[pb.MemberAssignment],
    owners: Mapping[tuple[str, int], frozenset[str]] | None,
    held: Sequence[Sequence[pb.TaskReplica]] | None,
) -> tuple[dict[tuple[str, int], str], dict[str, set[str]]]:
    """The request's replicas, one by one: who is given each replica, and (tasks of several
    replicas only) which members hold a replica of each task."""
    owner: dict[tuple[str, int], str] = {}
    members_of_task: dict[str, set[str]] = {}  # tasks of several replicas only
    seen_members: set[str] = set()
    pairs = zip(assignments, held) if held is not None else ((a, a.tasks) for a in assignments)
    for assignment, replicas in pairs:
        member_id = assignment.member_id
        if member_id not in member_pools:
            raise AssignmentRejected(f"assignment names {member_id!r}, which is not a member of this generation")
        if member_id in seen_members:
            raise AssignmentRejected(f"member {member_id!r} appears twice in the assignment")
        seen_members.add(member_id)
        member_pool = member_pools[member_id]
        for replica in replicas:
            task_id, index = replica.task_id, replica.replica
            task = tasks.get(task_id)
            if task is None:
                raise AssignmentRejected(f"task {task_id!r} assigned to {member_id!r} is not in the catalog")
            count = task.replicas if task.replicas > 0 else 1
            if not 0 <= index < count:
                raise AssignmentRejected(
                    f"task {task_id!r} has {count} replica(s); replica {index} "
                    f"assigned to {member_id!r} does not exist"
                )
            key = (task_id, index)
            if key in owner:
                raise AssignmentRejected(
                    f"task {task_id}#{index} assigned twice: to {owner[key]!r} and {member_id!r}"
                )
            owner[key] = member_id
            if owners is not None:
                running = owners.get(key, frozenset()) - {member_id}
                if running:
                    raise AssignmentRejected(
                        f"task {task_id}#{index} assigned to {member_id!r} while "
                        f"{', '.join(sorted(running))} may still run it: in a cooperative rebalance its owner "
                        f"revokes it first and it moves in the next generation"
                    )
            if member_pool != task.pool:
                raise AssignmentRejected(
                    f"task {task_id!r} of pool {task.pool or '(default)'!r} assigned to {member_id!r} "
                    f"of pool {member_pool or '(default)'!r}"
                )
            if count > 1:
                holders = members_of_task.setdefault(task_id, set())
                if member_id in holders:
                    raise AssignmentRejected(f"two replicas of task {task_id!r} assigned to {member_id!r}")
                holders.add(member_id)
    return owner, members_of_task


def _check_covered(
    member_pools: Mapping[str, str],
    tasks: Mapping[str, pb.Task],
    unassigned: Iterable[pb.UnassignedReplica],
    owners: Mapping[tuple[str, int], frozenset[str]] | None,
    owner: Mapping[tuple[str, int], str],
    members_of_task: Mapping[str, set[str]],
) -> set[tuple[str, int]]:
    """The catalog, task by task: every replica assigned, reported unassigned or still being revoked,
    as far as its pool has members; returns the replicas being revoked."""
    pool_sizes: dict[str, int] = {}
    for pool in member_pools.values():
        pool_sizes[pool] = pool_sizes.get(pool, 0) + 1
    declared: set[tuple[str, int]] = set()
    for item in unassigned:
        key = (item.task.task_id, item.task.replica)
        task = tasks.get(item.task.task_id)
        if task is None:
            raise AssignmentRejected(f"unassigned task {item.task.task_id!r} is not in the catalog")
        if key in owner:
            raise AssignmentRejected(f"task {key[0]}#{key[1]} is both assigned and reported unassigned")
        declared.add(key)
    revoking = {
        key for key, who in (owners or {}).items()
        if key not in owner and who & member_pools.keys() and key[0] in tasks
    }
    for task in tasks.values():
        count = task.replicas if task.replicas > 0 else 1
        if count == 1 and (task.task_id, 0) in owner:
            continue  # the common case, settled
        placeable = min(count, pool_sizes.get(task.pool, 0))
        if count == 1:
            assigned = 0
        else:
            assigned = len(members_of_task.get(task.task_id, ()))
        held_back = sum(1 for r in range(count) if (task.task_id, r) in revoking) if revoking else 0
        if assigned + held_back < placeable:
            missing = [r for r in range(count) if (task.task_id, r) not in owner]
            raise AssignmentRejected(
                f"task {task.task_id!r}: replica(s) {missing} not assigned although pool "
                f"{task.pool or '(default)'!r} has {pool_sizes.get(task.pool, 0)} member(s)"
            )
        for r in range(count):
            key = (task.task_id, r)
            if key not in owner and key not in declared and key not in revoking:
                raise AssignmentRejected(f"task {task.task_id}#{r} is neither assigned nor reported unassigned")
    return revoking
