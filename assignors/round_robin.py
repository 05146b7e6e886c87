"""Round-robin: Datalink's only strategy, deterministic and pool-aware.

Replicas are dealt in (task id, replica) order to the eligible members in
member-id order, continuing where the previous task stopped so counts stay
within one. Replicas of one task land on distinct members because consecutive
deals go to consecutive members; a replica with fewer eligible members than
its index is reported unassigned.
"""

from __future__ import annotations

from collections import defaultdict

from assignors.base import Assignment, AssignmentContext, MemberInfo, TaskReplica, eligible_members

__all__ = ["RoundRobinAssignor"]


class RoundRobinAssignor:
    name = "round-robin"

    def assign(self, context: AssignmentContext) -> Assignment:
        result = Assignment(members={m.member_id: [] for m in context.members})
        cursor: dict[str, int] = defaultdict(int)  # one cursor per pool keeps each pool balanced
        pools: dict[str, tuple[MemberInfo, ...]] = {}
        for task in context.tasks:
            if task.pool not in pools:
                pools[task.pool] = eligible_members(task, context.members)
            members = pools[task.pool]
            for replica in task.replica_ids():
                if replica.replica >= len(members):
                    result.unassigned[replica] = (
                        f"replication factor {task.replicas} exceeds the {len(members)} member(s)"
                        f" of pool {task.pool or '(default)'}"
                    )
                    continue
                start = cursor[task.pool]
                result.members[members[(start + replica.replica) % len(members)].member_id].append(replica)
            if members:
                cursor[task.pool] = (cursor[task.pool] + min(task.replicas, len(members))) % len(members)
        return result
