"""``kafka-replica-shift`` from the previous target: partitions added at the end, as Kafka adds them.

The replica shift numbers a pool's tasks in id order and deals partition ``p``'s leader to the
``(p + start)``-th member of the pool (``start`` drawn from the context's random source); the
followers' shift also depends on the member count. So a member in or out changes the broker list and
moves nearly every replica, and a task deleted, or added with an id sorting among the others,
renumbers every partition after it: those are full passes, with nothing to save (the answer itself
touches nearly every task). Kafka's own incremental case is the one left: partitions added after the
existing ones (``assignReplicasToBrokers`` with ``startPartitionId``), which keeps every existing
partition where it is. Here that is a catalog of plain tasks (one replica, so no follower shift),
the same members in the same order with the same racks, and only tasks whose ids sort after every
task the last round placed: the new ones are dealt from partition id = the tasks already placed,
with the random draws that round made. The coordinator's contexts all start from the same seed
(``AssignmentContext``'s default), so its next full pass would draw the same start and give the same
answer; that is what the tests compare. Cost: O(members + new tasks).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from random import Random
from typing import Any

from groupcoord.assignors.base import AssignmentContext, MemberInfo, TaskReplica
from groupcoord.assignors.incremental import TargetChange

__all__ = ["Placed", "placed_by", "added_at_the_end"]

Target = dict[str, frozenset[TaskReplica]]
Roster = tuple[tuple[str, str, str], ...]  # (member id, pool, rack) in the order the pass dealt to


def roster(members: Sequence[MemberInfo]) -> Roster:
    return tuple((m.member_id, m.pool, m.rack) for m in members)


@dataclass(frozen=True, slots=True)
class Placed:
    """What one round of a group placed, when its catalog was plain: who it dealt to, how many tasks
    and the last id, and the random source's state before its draws."""

    members: Roster
    count: int
    last_id: str
    rng_state: Any


def placed_by(context: AssignmentContext, rng_state: Any) -> Placed | None:
    """The record of a full pass over ``context`` (``rng_state``: the source's, before it drew); None
    when the catalog is not plain (pools or replicas: no incremental form)."""
    if any(task.pool or task.replicas != 1 for task in context.tasks):
        return None
    last = max((task.task_id for task in context.tasks), default="")
    return Placed(roster(context.members), len(context.tasks), last, rng_state)


Deal = Callable[[list[MemberInfo], int, int, Random], dict[int, list[str]]]


def added_at_the_end(change: TargetChange, placed: Placed | None, deal: Deal) -> tuple[Target, Placed] | None:
    """The target with the new tasks dealt from where the last round stopped, and the new record; None
    when that is not the full pass's answer. ``deal(members, n, first_id, rng)``: the replica shift's
    placement of ``n`` partitions from ``first_id``."""
    if placed is None or not change.plain or change.removed or roster(change.members) != placed.members:
        return None
    added = sorted(replica.task_id for replica in change.homeless)
    kept = sum(map(len, change.previous.values()))
    if kept != placed.count or kept + len(added) != change.total or any(r.replica for r in change.homeless):
        return None
    if added and added[0] <= placed.last_id:
        return None  # among the placed ids: it renumbers the partitions after it
    members = [m for m in change.members if not m.pool]
    target: Target = {m.member_id: change.previous.get(m.member_id, frozenset()) for m in change.members}
    if added:
        if not members:
            return None  # the full pass reports them unassigned
        rng = Random()
        rng.setstate(placed.rng_state)
        dealt: dict[str, list[TaskReplica]] = {}
        for pid, owners in deal(members, len(added), placed.count, rng).items():
            dealt.setdefault(owners[0], []).append(TaskReplica(added[pid - placed.count], 0))
        for member_id, replicas in dealt.items():
            target[member_id] = target[member_id].union(replicas)
    last = added[-1] if added else placed.last_id
    return target, Placed(placed.members, placed.count + len(added), last, placed.rng_state)
