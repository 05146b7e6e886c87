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
the fewest any within-one assignment needs from this previous one. Cost: O(members log members) in C
(a sort of ids per size), Python steps only for the members off their quota and the replicas that
move; the tasks that stay are never visited.

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
from itertools import compress, groupby, repeat
from operator import attrgetter, itemgetter, neg
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
    pool, a catalog that is not plain, or a previous target that does not account for every replica).

    Members are ranked by what they keep, most first, then by id; the first ``extra`` ranks have quota
    ``base + 1``, the rest ``base``. Ranking sorts ids within each size only, and only the members over
    or under their quota are visited in Python: one member joining 10,000 walks ten of them, not all
    (the rest is C: maps, a string sort, a dict built from pairs)."""
    members = change.members
    if not change.plain or not members or any(map(_pool_of, members)):
        return None
    kept = _kept(change)
    removed = change.removed
    if removed:
        for member_id, had in kept.items():
            if not removed.isdisjoint(had):
                kept[member_id] = had - removed
    homeless = list(change.homeless - removed)
    sizes = list(map(len, kept.values()))
    if sum(sizes) + len(homeless) != change.total:
        return None  # the previous target does not add up to the catalog: a full pass decides
    base, extra = divmod(change.total, len(kept))
    ranked = _ranked(list(kept), sizes)
    target = kept  # a copy of ours: only the members off their quota change
    over, under = _off_quota(ranked, base, extra)
    for member_id, limit in over:  # give up the highest replicas (deterministic, O(k log excess))
        had = target[member_id]
        surplus = heapq.nlargest(len(had) - limit, had)
        homeless += surplus
        target[member_id] = had.difference(surplus)
    homeless.sort()
    cursor = 0
    for member_id, limit in reversed(under):  # receive, the emptiest first
        need = limit - len(target[member_id])
        target[member_id] = target[member_id].union(homeless[cursor:cursor + need])
        cursor += need
    return target if cursor == len(homeless) else None


_NOTHING: frozenset[TaskReplica] = frozenset()


def _kept(change: TargetChange) -> Target:
    """Each member's previous target (none for a new one), as a dict of ours: a C copy of ``previous``
    (whose members are all still here) with the new members added."""
    kept = dict(change.previous)
    ids = list(map(_id_of, change.members))
    new = set(ids).difference(kept)
    if len(kept) + len(new) != len(ids):  # ``previous`` names a member not in ``members``: member by member
        return dict(zip(ids, map(change.previous.get, ids, repeat(_NOTHING))))
    kept.update(dict.fromkeys(new, _NOTHING))
    return kept
_pool_of = attrgetter("pool")
_id_of = attrgetter("member_id")


def _ranked(ids: list[str], sizes: list[int]) -> list[tuple[int, list[str]]]:
    """The members by what they keep, most first, each size's ids sorted: (size, ids) per size. A
    change leaves two or three sizes, each found by a C pass; many sizes sort (size, id) pairs."""
    distinct = sorted(set(sizes), reverse=True)
    if len(distinct) > 8:
        pairs = sorted(zip(map(neg, sizes), ids))
        return [(-size, [member_id for _, member_id in group]) for size, group in groupby(pairs, itemgetter(0))]
    return [(size, sorted(compress(ids, map(size.__eq__, sizes)))) for size in distinct]


def _off_quota(ranked: list[tuple[int, list[str]]], base: int, extra: int) -> tuple[list[tuple[str, int]],
                                                                                       list[tuple[str, int]]]:
    """The members over their quota and those under it, each with its quota, in rank order: the rank
    ``r`` member's quota is ``base + 1`` for ``r < extra``, else ``base``. Sizes fall as ranks rise, so
    in each size only a run of ranks before or after ``extra`` can be off quota."""
    over: list[tuple[str, int]] = []
    under: list[tuple[str, int]] = []
    rank = 0
    for size, bucket in ranked:
        split = min(max(extra - rank, 0), len(bucket))  # bucket[:split] have quota base + 1
        for members, quota in ((bucket[:split], base + 1), (bucket[split:], base)):
            if size > quota:
                over += zip(members, repeat(quota))
            elif size < quota:
                under += zip(members, repeat(quota))
        rank += len(bucket)
    return over, under
