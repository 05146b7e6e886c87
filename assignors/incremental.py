"""Incremental targets: a new assignment from the previous one and what changed, without a full pass.

The consumer protocol's coordinator computes a group's target after every batch of changes (a member
in or out, a catalog edit). A full ``assign`` reads every task (100,000 at scale) although one member
joined; an assignor that can do better offers ``assign_incremental(change)`` beside ``assign``
(``IncrementalAssignor``, optional: the coordinator falls back to ``assign`` when it is missing or
answers ``None``). ``TargetChange`` holds only what moved: the previous target of the members still
here, the replicas that lost their member or are new to the catalog, the replicas gone from it.

``rebalance_counts`` is the sticky assignor's count rule done that way (``StickyAssignor`` uses it for
a catalog of plain tasks: default pool, one replica, equal weights): replica counts per member within
one, quotas ``ceil`` for the members that keep the most, every replica that need not move stays. A
member gives up only what is over its quota and one under its quota only receives, so the moves are
the fewest any within-one assignment needs from this previous one. Cost: O(members log members) plus
the replicas that move; the tasks that stay are never visited.

Round-robin has no incremental form: its answer is a function of member order, so one member in
shifts nearly every deal. ``balanced`` (``balanced.incremental``) and the Pulsar assignors
(``pulsar.incremental``) have one while no load snapshot is in force (``loaded``): their round from
the previous target, the same answer as their full pass from it. Under a snapshot the Pulsar ones go on
only for members joining under the snapshot their last full pass judged; ``balanced`` for a membership
change under the snapshot its last full pass read. ``kafka-replica-shift`` deals tasks added after every
placed one on from where it stopped (``kafka_replica_incremental``).
"""

from __future__ import annotations

import heapq
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol, runtime_checkable

from groupcoord.assignors.base import MemberInfo, TaskReplica

__all__ = ["IncrementalAssignor", "PlainSplit", "TargetChange", "plain_split", "rebalance_counts"]

Target = dict[str, frozenset[TaskReplica]]


@dataclass(frozen=True, slots=True)
class TargetChange:
    """What changed since the previous target (nothing here is the whole catalog)."""

    previous: Mapping[str, frozenset[TaskReplica]]
    """The previous target of each member that had one and is still in the group."""
    members: tuple[MemberInfo, ...]
    """Every member now (the new ones have no entry in ``previous``); the coordinator leaves their
    ``owned`` empty: ``previous`` is what they hold."""
    homeless: frozenset[TaskReplica]
    """Replicas without a member: those of members gone since, and those new to the catalog."""
    removed: frozenset[TaskReplica]
    """Replicas of tasks deleted from the catalog since (still in ``previous``, maybe)."""
    total: int
    """Replicas in the catalog now."""
    plain: bool
    """Every task of the catalog in the default pool, with one replica and the same weight."""
    group_id: str = ""
    """The group (assignors that keep state between rounds keep it per group)."""
    weight: float = 1.0
    """The weight every task has when ``plain`` (unset counts 1.0): what the load-aware ones place by."""
    snapshot_key: tuple[str, int] | None = None
    """The load snapshot in force for the group, as ``(snapshot_id, created_ms)`` (``None``: none): a
    load-aware assignor that has read that one may go on from what it learnt, else it declines."""

    @property
    def loaded(self) -> bool:
        """A load snapshot is in force."""
        return self.snapshot_key is not None


@runtime_checkable
class IncrementalAssignor(Protocol):
    """An assignor that may compute a target from the previous one (``None``: it cannot; use ``assign``)."""

    name: str

    def assign_incremental(self, change: TargetChange) -> Mapping[str, frozenset[TaskReplica]] | None: ...


@dataclass
class PlainSplit:
    """A change of plain tasks read from the previous target: what each default-pool member keeps (in
    member id order), the pooled members (which run none of a default-pool catalog) and the replicas
    nobody keeps, sorted."""

    kept: dict[str, frozenset[TaskReplica]]
    pooled: list[str]
    unowned: list[TaskReplica]


def plain_split(change: TargetChange) -> PlainSplit | None:
    """``None`` when the change is not of plain tasks, no member is in the default pool, or the
    previous target does not account for every replica of the catalog."""
    if not change.plain:
        return None
    removed = change.removed
    unowned = set(change.homeless - removed)
    kept: dict[str, frozenset[TaskReplica]] = {}
    pooled: list[str] = []
    for member in sorted(change.members, key=lambda m: m.member_id):
        had = change.previous.get(member.member_id, frozenset())
        if removed and not removed.isdisjoint(had):
            had = had - removed
        if member.pool:  # the catalog is all in the default pool: a pooled member runs none of it
            unowned |= had
            pooled.append(member.member_id)
        else:
            kept[member.member_id] = had
    if not kept or sum(map(len, kept.values())) + len(unowned) != change.total:
        return None
    return PlainSplit(kept, pooled, sorted(unowned))


def rebalance_counts(change: TargetChange) -> Target | None:
    """The sticky count rule from the previous target; ``None`` when it does not apply (members in a
    pool, a catalog that is not plain, or a previous target that does not account for every replica)."""
    if not change.plain or not change.members or any(m.pool for m in change.members):
        return None
    removed = change.removed
    kept: Target = {}
    for member in change.members:
        had = change.previous.get(member.member_id, frozenset())
        kept[member.member_id] = had - removed if removed and not removed.isdisjoint(had) else had
    homeless = list(change.homeless - removed)
    if sum(map(len, kept.values())) + len(homeless) != change.total:
        return None  # the previous target does not add up to the catalog: a full pass decides
    base, extra = divmod(change.total, len(kept))
    order = sorted(kept, key=lambda member_id: (-len(kept[member_id]), member_id))
    quota = {member_id: base + 1 if rank < extra else base for rank, member_id in enumerate(order)}
    target: Target = {}
    for member_id in order:  # over quota: give up the highest replicas (deterministic, O(k log excess))
        had, limit = kept[member_id], quota[member_id]
        if len(had) > limit:
            surplus = heapq.nlargest(len(had) - limit, had)
            homeless += surplus
            target[member_id] = had.difference(surplus)
        else:
            target[member_id] = had
    homeless.sort()
    cursor = 0
    for member_id in reversed(order):  # under quota: receive, the emptiest first
        need = quota[member_id] - len(target[member_id])
        if need > 0:
            target[member_id] = target[member_id].union(homeless[cursor:cursor + need])
            cursor += need
    return target if cursor == len(homeless) else None
