"""Round-robin: Datalink's only strategy, deterministic and pool-aware.

Replicas are dealt in (task id, replica) order to the eligible members in
member-id order, continuing where the previous task stopped so counts stay
within one. Replicas of one task land on distinct members because consecutive
deals go to consecutive members; a replica with fewer eligible members than
its index is reported unassigned.
"""

from __future__ import annotations

from groupcoord.assignors.base import Assignment, AssignmentContext, TaskReplica, eligible_members

__all__ = ["RoundRobinAssignor"]

_new_replica = tuple.__new__  # TaskReplica(task_id, r) without the NamedTuple constructor's call overhead


class _Pool:
    """The deal state of one pool: its members' assignment lists, in member-id order, and the cursor."""

    __slots__ = ("cursor", "size", "targets")

    def __init__(self, targets: list[list[TaskReplica]]) -> None:
        self.targets = targets
        self.size = len(targets)
        self.cursor = 0  # one cursor per pool keeps each pool balanced


class RoundRobinAssignor:
    name = "round-robin"

    def assign(self, context: AssignmentContext) -> Assignment:
        result = Assignment(members={m.member_id: [] for m in context.members})
        pools: dict[str, _Pool] = {}
        for task in context.tasks:
            pool = pools.get(task.pool)
            if pool is None:
                members = eligible_members(task, context.members)
                pool = pools[task.pool] = _Pool([result.members[m.member_id] for m in members])
            size, start, replicas = pool.size, pool.cursor, task.replicas
            if replicas == 1 and size:  # the common case, kept lean: 100k tasks go through here
                pool.targets[start].append(_new_replica(TaskReplica, (task.task_id, 0)))
                pool.cursor = start + 1 if start + 1 < size else 0
                continue
            for r in range(replicas):
                replica = _new_replica(TaskReplica, (task.task_id, r))
                if r >= size:
                    result.unassigned[replica] = (
                        f"replication factor {replicas} exceeds the {size} member(s)"
                        f" of pool {task.pool or '(default)'}"
                    )
                    continue
                pool.targets[(start + r) % size].append(replica)
            if size:
                pool.cursor = (start + min(replicas, size)) % size
        return result
