"""``balanced``: a load-aware assignor of our own (goals, a move cost, hit counters).

Each ``assign``:

1. **sticky** — every replica stays with the member that runs it (present, same pool, not holding
   another replica of the task);
2. **estimate** — the load snapshot goes through ``LoadEstimator`` (spike-resistant per-task load,
   per-member capacity and background; task weights and member capacities without a snapshot);
3. **place** — replicas without an owner go, heaviest first, to the member they leave least
   utilized (under the capacity goal), or to the member a move planned for them (see below);
4. **rebalance** — when membership changed, when a member is over the capacity goal, when the
   imbalance (busiest member with tasks / mean) is above ``urgent_ratio``, or when it has been
   above ``trigger_ratio`` for ``hit_count`` snapshots in a row (AvgShedder's hit counters, so a
   spike alone never moves anything), the optimizer moves tasks until the imbalance is at most
   ``target_ratio`` (see ``optimizer``).

Cooperative groups: the leader holds back what moves (``cooperative_step``); the moved replicas
come back unowned in the next generation and step 3 puts them where this round planned. Each
snapshot is judged once (``needs_rebalance`` and ``assign`` share the verdict), so a second
generation on the same snapshot does not count a hit twice nor re-plan. State (estimator, hit
counts, planned destinations, the no-return record) is per group, time from ``clock``.

On the consumer protocol's coordinator ``assign_incremental`` runs the same round from the previous
target, without reading every task, when it can (``balanced.incremental``): no snapshot, or members
in and out under the snapshot the last full pass read.

Worked example (no snapshot: weights and capacities)::

    ctx = AssignmentContext(group_id="g", generation=1,
                            members=(MemberInfo("a", capacity=2.0), MemberInfo("b")),
                            tasks=(TaskSpec("t1", weight=2.0), TaskSpec("t2"), TaskSpec("t3")))
    BalancedAssignor().assign(ctx).members   # {"a": [t1#0, t3#0], "b": [t2#0]}
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field

from groupcoord.assignors.balanced.config import BalancedConfig
from groupcoord.assignors.balanced.incremental import LoadCache, count_basis, count_plan, load_plan
from groupcoord.assignors.balanced.model import LoadEstimator
from groupcoord.assignors.balanced.optimizer import Bands, Move, PoolPlan, place_unowned, rebalance
from groupcoord.assignors.base import Assignment, AssignmentContext, MemberInfo, TaskReplica, TaskSpec, replica_of
from groupcoord.assignors.collector import collector_paused
from groupcoord.assignors.group_states import GroupStates
from groupcoord.assignors.incremental import TargetChange
from groupcoord.assignors.snapshot import LoadSnapshot

__all__ = ["BalancedAssignor"]

log = logging.getLogger(__name__)

Clock = Callable[[], float]


@dataclass
class _PoolVerdict:
    act: bool = False
    consumed: bool = False


@dataclass
class _GroupState:
    estimator: LoadEstimator
    hits: dict[str, int] = field(default_factory=dict)
    verdicts: dict[str, _PoolVerdict] = field(default_factory=dict)
    verdict_key: object = None
    planned: dict[TaskReplica, str] = field(default_factory=dict)
    moved_off: dict[tuple[str, str], float] = field(default_factory=dict)
    members: frozenset[str] | None = None
    cache: LoadCache | None = None


class BalancedAssignor:
    """See the module docstring. ``last_moves`` lists the previous ``assign``'s moves."""

    name = "balanced"

    def __init__(self, config: BalancedConfig | None = None, *, clock: Clock = time.monotonic) -> None:
        self.config = config or BalancedConfig()
        self.clock = clock
        self.recheck_interval_s: float = self.config.recheck_interval_s
        self._groups: GroupStates[_GroupState] = GroupStates(lambda: _GroupState(LoadEstimator(self.config.window)))
        self.last_moves: list[Move] = []

    # ---- state -----------------------------------------------------------------------------------
    def _group(self, group_id: str, snapshot: LoadSnapshot | None, members: Iterable[MemberInfo]) -> _GroupState:
        state = self._groups.get(group_id)
        if snapshot is not None:
            state.estimator.observe(snapshot)
        state.estimator.forget({m.member_id: m for m in members})
        horizon = self.clock() - self.config.no_return_s
        state.moved_off = {k: at for k, at in state.moved_off.items() if at >= horizon}
        return state

    def _allowed(self, state: _GroupState) -> Callable[[str, str], bool]:
        return lambda task_id, member: (task_id, member) not in state.moved_off

    @staticmethod
    def _sticky(context: AssignmentContext) -> dict[TaskReplica, str]:
        previous = context.previous_owners()
        members = {m.member_id: m for m in context.members}
        pool_size: dict[str, int] = {}
        for m in context.members:
            pool_size[m.pool] = pool_size.get(m.pool, 0) + 1
        owners: dict[TaskReplica, str] = {}
        for task in context.tasks:
            if task.replicas == 1:  # the common case, without the per-task set and slice (100,000 tasks)
                replica = replica_of((task.task_id, 0))
                member = members.get(previous.get(replica, ""))
                if member is not None and member.pool == task.pool:
                    owners[replica] = member.member_id
                continue
            used: set[str] = set()
            # A replica beyond the pool's size is never kept: it would take a lower one's place.
            for replica in task.replica_ids()[: pool_size.get(task.pool, 0)]:
                member = members.get(previous.get(replica, ""))
                if member is not None and member.pool == task.pool and member.member_id not in used:
                    owners[replica] = member.member_id
                    used.add(member.member_id)
        return owners

    def _plans(
        self, context: AssignmentContext, state: _GroupState, owners: dict[TaskReplica, str]
    ) -> dict[str, tuple[PoolPlan, list[TaskReplica]]]:
        """Per pool: the plan with the owned replicas, and the replicas still to place."""
        out: dict[str, tuple[PoolPlan, list[TaskReplica]]] = {}
        for pool in sorted({t.pool for t in context.tasks}):
            members = [m for m in context.members if m.pool == pool]
            tasks: list[TaskSpec] = [t for t in context.tasks if t.pool == pool]
            view = state.estimator.view(members, tasks, use_load=context.load_snapshot is not None)
            replicas = [r for t in tasks
                        for r in (t.replica_ids() if t.replicas != 1 else (replica_of((t.task_id, 0)),))]
            owned = {r: owners[r] for r in replicas if r in owners}
            plan = PoolPlan(view, [m.member_id for m in members], owned)
            out[pool] = (plan, [r for r in replicas if r not in owned])
        return out

    def _verdict(self, key: object, state: _GroupState, pool: str, plan: PoolPlan) -> _PoolVerdict:
        """Judge the pool once per snapshot (``key``; None: none): should it rebalance? (hit counters
        advance here)."""
        if key is None or key != state.verdict_key:
            state.verdict_key, state.verdicts = key, {}
        verdict = state.verdicts.get(pool)
        if verdict is not None:
            return verdict
        conf = self.config
        bands = Bands.of(plan, conf.target_ratio, conf.trigger_ratio, conf.urgent_ratio)
        busiest, mean = plan.busiest(), plan.mean_util()
        over = mean < conf.capacity_threshold and busiest > conf.capacity_threshold
        hits = state.hits.get(pool, 0)
        if over or busiest > bands.urgent:
            hits = conf.hit_count
        elif busiest > bands.trigger:
            hits += 1
        else:
            hits = 0
        state.hits[pool] = hits
        verdict = state.verdicts[pool] = _PoolVerdict(act=hits >= conf.hit_count)
        return verdict

    def _optimize(self, plan: PoolPlan, state: _GroupState, *, provisional: bool = False) -> list[Move]:
        """Move towards the goal (``provisional``: estimates too young to tell a spike, a looser one)."""
        conf = self.config
        return rebalance(
            plan,
            target_ratio=conf.provisional_ratio if provisional else conf.target_ratio,
            capacity_threshold=conf.capacity_threshold,
            min_gain=conf.min_gain,
            allowed=self._allowed(state),
            max_moves=conf.max_moves_per_round,
        )

    # ---- the contract ----------------------------------------------------------------------------
    def assign(self, context: AssignmentContext) -> Assignment:
        with collector_paused():  # millions of short-lived objects at 10k x 100k (``assignors.collector``)
            return self._assign(context)

    def _round(self, state: _GroupState, pool: str, plan: PoolPlan, unowned: list[TaskReplica], *, changed: bool,
               key: object, now: float, young: Callable[[], bool]) -> dict[TaskReplica, str]:
        """One pool's round on its plan (changed in place): place what has no owner, then rebalance after
        a membership change or when the verdict says so; returns the replicas no member could take."""
        unassigned = place_unowned(plan, unowned, state.planned, self.config.capacity_threshold)
        verdict = self._verdict(key, state, pool, plan)
        if changed or (verdict.act and not verdict.consumed):
            verdict.consumed = True
            moves = self._optimize(plan, state, provisional=young())
            state.hits[pool] = 0
            for move in moves:
                state.moved_off[(move.replica.task_id, move.source)] = now
                state.planned[move.replica] = move.destination
            self.last_moves.extend(moves)
        return unassigned

    def _assign(self, context: AssignmentContext) -> Assignment:
        snapshot = context.load_snapshot
        state = self._group(context.group_id, snapshot, context.members)
        member_ids = frozenset(m.member_id for m in context.members)
        changed = state.members != member_ids
        owners = self._sticky(context)
        # A planned destination matters only while its replica is unowned (held back between the
        # two generations of a cooperative move); once someone runs it, forget the plan.
        state.planned = {r: m for r, m in state.planned.items() if r not in owners}
        result = Assignment(members={m.member_id: [] for m in context.members})
        self.last_moves = []
        now = self.clock()
        key = _key(snapshot)
        plans = self._plans(context, state, owners)
        state.cache = _cache(key, state.estimator, plans) if snapshot is not None else None
        for pool, (plan, unowned) in plans.items():
            def young(pool: str = pool) -> bool:
                young = snapshot is not None and not state.estimator.mature(t for t in context.tasks if t.pool == pool)
                if state.cache is not None:
                    state.cache.young = young
                return young

            result.unassigned.update(self._round(state, pool, plan, unowned, changed=changed, key=key,
                                                 now=now, young=young))
            for replica, member in plan.owners.items():
                result.members[member].append(replica)
            if state.cache is not None:
                state.cache.settle(plan.owned, plan.members)
        state.members = member_ids
        for replicas in result.members.values():
            replicas.sort()
        self._log(context.group_id, context.generation, changed)
        return result

    def _log(self, group_id: str, generation: int, changed: bool) -> None:
        log.info("group %s generation %d (balanced): %d move(s)%s", group_id, generation, len(self.last_moves),
                 " after a membership change" if changed else "")

    def assign_incremental(self, change: TargetChange) -> dict[str, frozenset[TaskReplica]] | None:
        """The same round from the previous target alone (``balanced.incremental``) for a plain catalog:
        without a snapshot, or under the one the last full pass read with the same tasks; ``None``
        otherwise (the full pass)."""
        basis = count_basis(change)
        if basis is None or (change.loaded and change.group_id not in self._groups):
            return None
        state = self._group(change.group_id, None, change.members)  # a snapshot here was taken in already
        if change.loaded:
            plan = load_plan(change, basis, state.cache, state.estimator)
            if plan is None:
                return None
        else:
            state.cache = None
            plan = count_plan(basis, {m.member_id: m.capacity for m in change.members}, change.weight)
        member_ids = frozenset(m.member_id for m in change.members)
        changed = state.members != member_ids
        held = plan.holds(state.planned, basis.unowned)
        state.planned = {r: m for r, m in state.planned.items() if r not in held}
        self.last_moves = []
        now = self.clock()
        if change.total:  # the full pass has no pool to go through in an empty catalog
            self._round(state, "", plan, basis.unowned, changed=changed, key=change.snapshot_key, now=now,
                        young=lambda: _young(state))
            if state.cache is not None:
                state.cache.settle(plan.owned, plan.touched)
        state.members = member_ids
        self._log(change.group_id, 0, changed)
        target = plan.target()
        return {m.member_id: target.get(m.member_id, frozenset()) for m in change.members}

    def needs_rebalance(self, context: AssignmentContext) -> bool:
        """Would ``assign`` move something on this context's snapshot (membership unchanged)?"""
        if context.load_snapshot is None:
            return False
        state = self._group(context.group_id, context.load_snapshot, context.members)
        wants = False
        for pool, (plan, unowned) in self._plans(context, state, self._sticky(context)).items():
            place_unowned(plan, unowned, state.planned, self.config.capacity_threshold)
            verdict = self._verdict(_key(context.load_snapshot), state, pool, plan)
            if verdict.act and not verdict.consumed:
                young = not state.estimator.mature(t for t in context.tasks if t.pool == pool)
                wants = bool(self._optimize(plan, state, provisional=young)) or wants
        return wants


def _key(snapshot: LoadSnapshot | None) -> object:
    return None if snapshot is None else (snapshot.snapshot_id, snapshot.created_ms)


def _cache(key: object, estimator: LoadEstimator, plans: dict[str, tuple[PoolPlan, list[TaskReplica]]]) -> LoadCache | None:
    """What an incremental round under this snapshot needs, taken before the round changes the plan
    (only for a catalog all in the default pool, the one an incremental round takes)."""
    if not plans:  # an empty catalog
        return LoadCache(key, estimator.by_load(True), {}, {})
    if list(plans) != [""]:
        return None
    plan = plans[""][0]
    base = {m: (frozenset(plan.owned[m]), plan.load[m]) for m in plan.members}
    return LoadCache(key, estimator.by_load(True), plan.view.task_load, dict(plan.view.background), base)


def _young(state: _GroupState) -> bool:
    """An incremental round's ``young``: under a snapshot, the full pass's answer (once per snapshot)."""
    cache = state.cache
    if cache is None:
        return False
    if cache.young is None:
        cache.young = not state.estimator.mature_ids(list(cache.task_load))
    return cache.young
