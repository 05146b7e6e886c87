"""``balanced``'s incremental round: its own place-then-rebalance on a plan built from counts.

Without a load snapshot, and over a plain catalog (one weight, one replica, the default pool), a
member's load is its replica count times the weight: ``CountPlan`` is built from each member's
previous target in O(members) — where ``PoolPlan`` reads every owned replica — and the same
``place_unowned`` and ``rebalance`` run on it, so the answer is the one the full pass gives from
that previous target (same loads to the bit: the sums are built by the same additions). Only the
members a placement or a move touches get a new set; the others keep their previous one.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from groupcoord.assignors.balanced.model import LoadView
from groupcoord.assignors.balanced.optimizer import PoolPlan
from groupcoord.assignors.base import TaskReplica
from groupcoord.assignors.incremental import TargetChange

__all__ = ["CountBasis", "CountPlan", "count_basis"]

Target = dict[str, frozenset[TaskReplica]]


class _SameLoad(dict[str, float]):
    """Every task's load is the catalog's one weight (no entry per task: 100,000 at scale)."""

    def __init__(self, weight: float) -> None:
        super().__init__()
        self.weight = weight

    def get(self, key: str, default: object = None) -> float:
        return self.weight


@dataclass(frozen=True, slots=True)
class CountBasis:
    """The default pool's members (by id), what each keeps, and the replicas without a member."""

    ids: list[str]
    kept: dict[str, frozenset[TaskReplica]]
    unowned: list[TaskReplica]


def count_basis(change: TargetChange) -> CountBasis | None:
    """What the round starts from; ``None`` when a count cannot stand for the load (a snapshot, a
    catalog that is not plain, no member in the default pool, or a previous target that does not
    account for every replica of the catalog)."""
    if change.loaded or not change.plain:
        return None
    removed = change.removed
    unowned = set(change.homeless - removed)
    kept: dict[str, frozenset[TaskReplica]] = {}
    for member in sorted(change.members, key=lambda m: m.member_id):
        had = change.previous.get(member.member_id, frozenset())
        if removed and not removed.isdisjoint(had):
            had = had - removed
        if member.pool:  # the catalog is all in the default pool: a pooled member runs none of it
            unowned |= had
        else:
            kept[member.member_id] = had
    if not kept or sum(map(len, kept.values())) + len(unowned) != change.total:
        return None
    return CountBasis(list(kept), kept, sorted(unowned))


class CountPlan(PoolPlan):
    """A ``PoolPlan`` of equal task loads whose members' sets are the previous target's until
    a placement or a move changes them (copied then)."""

    def __init__(self, basis: CountBasis, capacity: Mapping[str, float], weight: float) -> None:
        counts = {member: len(replicas) for member, replicas in basis.kept.items()}
        sums = [0.0]
        for _ in range(max(counts.values(), default=0)):
            sums.append(sums[-1] + weight)  # what PoolPlan's per-replica additions reach, to the bit
        view = LoadView(task_load=_SameLoad(weight), capacity={m: max(capacity[m], 1e-9) for m in basis.ids})
        # the previous sets stand in until touched (``_mine``): PoolPlan reads them, never writes them
        super().__init__(view, basis.ids, {}, load={m: sums[counts[m]] for m in basis.ids},
                         owned=dict(basis.kept))  # type: ignore[arg-type]
        self.kept = basis.kept
        self.touched: set[str] = set()

    def __post_init__(self) -> None:
        """Nothing to read: the loads and sets are given (``PoolPlan``'s reads every owned replica)."""

    def _mine(self, member: str) -> set[TaskReplica]:
        if member not in self.touched:
            self.touched.add(member)
            self.owned[member] = set(self.owned[member])
        return self.owned[member]

    def add(self, replica: TaskReplica, member: str) -> None:
        self._mine(member).add(replica)
        self.owners[replica] = member
        self.load[member] += self.view.task_load.get(replica.task_id, 0.0)

    def remove(self, replica: TaskReplica, owner: str | None = None) -> str:
        member = self.owners.pop(replica, owner)
        if member is None:
            raise KeyError(replica)
        self._mine(member).discard(replica)
        self.load[member] -= self.view.task_load.get(replica.task_id, 0.0)
        return member

    def holds(self, replicas: set[TaskReplica]) -> set[TaskReplica]:
        """Which of ``replicas`` some member keeps (C set operations per member)."""
        return set().union(*(kept & replicas for kept in self.kept.values() if not kept.isdisjoint(replicas)))

    def target(self) -> Target:
        """Each member's set: the previous one's object where nothing changed."""
        return {m: frozenset(self.owned[m]) if m in self.touched else self.kept[m] for m in self.members}
