"""``balanced``'s incremental round: its own place-then-rebalance on a plan built per member.

``PoolPlan`` reads every owned replica to sum each member's load; ``SetPlan`` is built per member
from the previous target instead, and the same ``place_unowned`` and ``rebalance`` run on it, so the
answer is the one the full pass gives from that previous target (the same loads to the bit: each is
summed by the same additions in the same order). Only the members a placement or a move touches get
a new set; the others keep their previous one. Two ways to know a member's load without its tasks:

- no load snapshot, a plain catalog (one weight, one replica, the default pool): its replica count
  times the weight (``count_plan``);
- under the snapshot the last full pass read (``LoadCache``, kept by it), with no task added or
  deleted since: that pass's per-task estimate, and each member's sum as it was then when its set is
  the same, else summed again (``load_plan``). A new snapshot is a full pass: the estimate reads it all.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field
from functools import reduce
from operator import add

from groupcoord.assignors.balanced.model import LoadEstimator, LoadView
from groupcoord.assignors.balanced.optimizer import PoolPlan
from groupcoord.assignors.base import MemberInfo, TaskReplica
from groupcoord.assignors.incremental import TargetChange, plain_split

__all__ = ["CountBasis", "LoadCache", "SetPlan", "count_basis", "count_plan", "load_plan"]

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


@dataclass
class LoadCache:
    """What the last full pass under a snapshot estimated (one pool, the default one)."""

    key: object
    """The snapshot's ``(snapshot_id, created_ms)``."""
    by_load: bool
    """The estimate came from the snapshots (else from weights and capacities: too few reports)."""
    task_load: dict[str, float]
    background: dict[str, float]
    base: dict[str, tuple[frozenset[TaskReplica], float]] = field(default_factory=dict)
    """Per member: the replicas it kept, and their load with its background, summed in task order."""
    young: bool | None = None
    """The estimate is too young to tell a spike (computed once per snapshot, when first asked)."""

    def load_of(self, member: str, replicas: Iterable[TaskReplica]) -> float:
        """A member's load as ``PoolPlan`` sums it: its background, then its tasks in task order."""
        task_load = self.task_load
        return reduce(add, [task_load[r.task_id] for r in sorted(replicas)], self.background.get(member, 0.0))

    def settle(self, owned: Mapping[str, AbstractSet[TaskReplica]], members: Iterable[str]) -> None:
        """After a round: keep ``members``' sums as the next round will need them (their sets now)."""
        base = self.base
        for member in members:
            now, known = owned[member], base.get(member)
            if known is None or known[0] != now:
                kept = frozenset(now)
                base[member] = (kept, self.load_of(member, kept))

    def forget(self, members: Mapping[str, MemberInfo]) -> None:
        """Drop the members gone (their background is forgotten by the estimator too)."""
        for gone in self.base.keys() - members.keys():
            del self.base[gone]
        for gone in self.background.keys() - members.keys():
            del self.background[gone]


def count_basis(change: TargetChange) -> CountBasis | None:
    """What the round starts from; ``None`` when the change is not of plain tasks (a catalog that is
    not plain, no member in the default pool, or a previous target that does not account for every
    replica of the catalog)."""
    split = plain_split(change)
    return None if split is None else CountBasis(list(split.kept), split.kept, split.unowned)


class SetPlan(PoolPlan):
    """A ``PoolPlan`` of one replica per task whose members' sets are the previous target's until a
    placement or a move changes them (copied then); the loads are given."""

    def __init__(self, view: LoadView, basis: CountBasis, load: dict[str, float]) -> None:
        # the previous sets stand in until touched (``_mine``): PoolPlan reads them, never writes them
        super().__init__(view, basis.ids, {}, load=load, owned=dict(basis.kept))  # type: ignore[arg-type]
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

    def holds(self, planned: Mapping[TaskReplica, str], unowned: list[TaskReplica]) -> set[TaskReplica]:
        """Which of the ``planned`` replicas some member keeps: mostly the member it was planned for (the
        last round's moves), the rest looked for in every member's set."""
        free = set(unowned)
        held: set[TaskReplica] = set()
        elsewhere: set[TaskReplica] = set()
        for replica, member in planned.items():
            if replica in free:
                continue
            kept = self.kept.get(member)
            (held if kept is not None and replica in kept else elsewhere).add(replica)
        if elsewhere:
            held.update(*(kept & elsewhere for kept in self.kept.values() if not kept.isdisjoint(elsewhere)))
        return held

    def target(self) -> Target:
        """Each member's set: the previous one's object where nothing changed."""
        return {m: frozenset(self.owned[m]) if m in self.touched else self.kept[m] for m in self.members}


def count_plan(basis: CountBasis, capacity: Mapping[str, float], weight: float) -> SetPlan:
    """Without a snapshot: a member's load is its count times the one weight, over its capacity."""
    counts = {member: len(replicas) for member, replicas in basis.kept.items()}
    sums = [0.0]
    for _ in range(max(counts.values(), default=0)):
        sums.append(sums[-1] + weight)  # what PoolPlan's per-replica additions reach, to the bit
    view = LoadView(task_load=_SameLoad(weight), capacity={m: max(capacity[m], 1e-9) for m in basis.ids})
    return SetPlan(view, basis, {m: sums[counts[m]] for m in basis.ids})


def load_plan(change: TargetChange, basis: CountBasis, cache: LoadCache | None,
              estimator: LoadEstimator) -> SetPlan | None:
    """Under the snapshot ``cache`` was estimated from, with the same tasks; ``None`` otherwise."""
    if cache is None or cache.key != change.snapshot_key or estimator.seen != change.snapshot_key:
        return None
    task_load = cache.task_load
    if change.removed or len(task_load) != change.total or any(r.task_id not in task_load for r in basis.unowned):
        return None  # tasks added or deleted: the estimate of a task never reported is their median
    members = {m.member_id: m for m in change.members}
    cache.forget(members)
    capacity = estimator.capacities([members[m] for m in basis.ids], by_load=cache.by_load)
    background = cache.background
    load: dict[str, float] = {}
    for member_id in basis.ids:
        kept, known = basis.kept[member_id], cache.base.get(member_id)
        if known is not None and known[0] == kept:
            load[member_id] = known[1]
            continue
        if cache.by_load and member_id not in background:
            background[member_id] = estimator.background_of(member_id)
        try:
            total = cache.load_of(member_id, kept)
        except KeyError:
            return None  # a task the estimate does not know
        load[member_id] = total
        cache.base[member_id] = (kept, total)
    view = LoadView(task_load=task_load, capacity=capacity,
                    background={m: background[m] for m in basis.ids} if cache.by_load else {})
    return SetPlan(view, basis, load)
