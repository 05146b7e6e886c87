"""The ``pulsar-*`` assignors: Pulsar's shedding and placement run by the group's leader.

Each round (``assign``):

1. **sticky** — every replica stays with its previous owner while that member is present, in
   the task's pool and not already holding another replica of the task;
2. **split** — tasks over a split limit are replaced by their children (``Assignment.splits``;
   the coordinator swaps them in the catalog atomically with the assignment);
3. **place** — replicas without an owner go to the member the placement strategy picks among the
   eligible ones, each choice recorded as a preallocation so one round's tasks spread out;
4. **shed** — the shedder's picks are re-placed by the placement strategy (AvgShedder: to the
   member it paired them with); a pick the strategy would leave where it is stays, as Pulsar does.

Steps 2-4 need the load snapshot; without one the assignor is sticky round-robin and logs so.
The shedder runs per pool (pools never exchange tasks). Its state — histories, AvgShedder's
hit counts, the recently-unloaded times — lives in this instance keyed by group, with time from
the injected ``clock`` (monotonic seconds by default). The leader also calls
``needs_rebalance(context)`` every ``recheck_interval_s``: it runs the shedder on the newest
snapshot (once per snapshot: ``assign`` on the same snapshot reuses that decision rather than
counting AvgShedder's hits twice) and answers whether it would move something.

Worked example (two members, three tasks, no snapshot -> sticky round-robin)::

    ctx = AssignmentContext(group_id="g", generation=1,
                            members=(MemberInfo("a"), MemberInfo("b")),
                            tasks=(TaskSpec("t1"), TaskSpec("t2"), TaskSpec("t3")))
    PulsarUniformAssignor().assign(ctx).members   # {"a": [t1#0, t3#0], "b": [t2#0]}
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import cast

from assignors.base import Assignment, AssignmentContext, MemberInfo, TaskReplica, TaskSpec, TaskSplit
from assignors.pulsar.config import LoadBalancerConfig
from assignors.pulsar.convert import load_data_from_context
from assignors.pulsar.data import BundleData, LoadData
from assignors.pulsar.placement import (
    LeastLongTermMessageRate,
    LeastResourceUsageWithWeight,
    ModularLoadManagerStrategy,
    filter_candidates,
)
from assignors.pulsar.shedding import (
    AvgShedder,
    LoadSheddingStrategy,
    OverloadShedder,
    ThresholdShedder,
    UniformLoadShedder,
)
from assignors.pulsar.split import child_share, estimate_children, find_bundles_to_split, split_task

__all__ = [
    "PulsarAssignor",
    "PulsarAvgAssignor",
    "PulsarOverloadAssignor",
    "PulsarThresholdAssignor",
    "PulsarUniformAssignor",
]

log = logging.getLogger(__name__)

Clock = Callable[[], float]


@dataclass
class _PoolState:
    shedder: LoadSheddingStrategy
    placement: ModularLoadManagerStrategy
    plan_key: object = None
    plan: dict[str, list[str]] = field(default_factory=dict)


@dataclass
class _GroupState:
    recently_unloaded: dict[str, float] = field(default_factory=dict)
    pools: dict[str, _PoolState] = field(default_factory=dict)


@dataclass
class RoundStats:
    """What the last ``assign`` did (for logs, the simulator and tests)."""

    placed: int = 0
    unloaded: int = 0
    unload_skipped: int = 0
    split: int = 0
    moves: list[tuple[str, str, str]] = field(default_factory=list)
    """(task, from member, to member) of every shedding move."""


class PulsarAssignor:
    """A shedder plus a placement strategy; see the module docstring for the round."""

    name = "pulsar"

    def __init__(
        self,
        config: LoadBalancerConfig | None = None,
        *,
        clock: Clock = time.monotonic,
        shedder_factory: Callable[[], LoadSheddingStrategy] = ThresholdShedder,
        # Pulsar's defaults: loadBalancerLoadSheddingStrategy=ThresholdShedder,
        # loadBalancerLoadPlacementStrategy=LeastLongTermMessageRate.
        placement_factory: Callable[[], ModularLoadManagerStrategy] | None = LeastLongTermMessageRate,
        name: str | None = None,
    ) -> None:
        self.config = config or LoadBalancerConfig()
        self.clock = clock
        self._shedder_factory = shedder_factory
        # None: the shedder places too (AvgShedder binds shedding and placement).
        self._placement_factory = placement_factory
        if name is not None:
            self.name = name
        self.recheck_interval_s: float = self.config.shedding_interval_s
        self._groups: dict[str, _GroupState] = {}
        self.last_round = RoundStats()

    # ---- state ---------------------------------------------------------------------------------
    def _group(self, group_id: str) -> _GroupState:
        state = self._groups.get(group_id)
        if state is None:
            state = self._groups[group_id] = _GroupState()
        grace_start = self.clock() - self.config.grace_period_s
        for task in [t for t, at in state.recently_unloaded.items() if at < grace_start]:
            del state.recently_unloaded[task]
        return state

    def _pool(self, state: _GroupState, pool: str) -> _PoolState:
        pstate = state.pools.get(pool)
        if pstate is None:
            shedder = self._shedder_factory()
            if self._placement_factory is not None:
                placement = self._placement_factory()
            else:  # a shedder that places what it moves (AvgShedder) is both strategies
                placement = cast(ModularLoadManagerStrategy, shedder)
            pstate = state.pools[pool] = _PoolState(shedder=shedder, placement=placement)
        return pstate

    def _plan(self, pstate: _PoolState, load_data: LoadData) -> dict[str, list[str]]:
        """The shedder's answer for this snapshot, computed once per snapshot."""
        if load_data.round_id is not None and pstate.plan_key == load_data.round_id:
            return pstate.plan
        pstate.plan = pstate.shedder.find_bundles_for_unloading(load_data, self.config)
        pstate.plan_key = load_data.round_id
        return pstate.plan

    # ---- steps ---------------------------------------------------------------------------------
    @staticmethod
    def _sticky(context: AssignmentContext, tasks: tuple[TaskSpec, ...]) -> dict[TaskReplica, str]:
        previous = context.previous_owners()
        members = {m.member_id: m for m in context.members}
        owners: dict[TaskReplica, str] = {}
        for task in tasks:
            used: set[str] = set()
            for replica in task.replica_ids() if task.replicas > 1 else (TaskReplica(task.task_id),):
                member = members.get(previous.get(replica, ""))
                if member is not None and member.pool == task.pool and member.member_id not in used:
                    owners[replica] = member.member_id
                    used.add(member.member_id)
        return owners

    @staticmethod
    def _round_robin(
        tasks: list[TaskSpec], members: list[MemberInfo], owners: dict[TaskReplica, str], result: Assignment
    ) -> int:
        """Place unowned replicas on the eligible member with the fewest replicas, rotating through ties."""
        ids = [m.member_id for m in members]
        count = {m: 0 for m in ids}
        for member in owners.values():
            if member in count:
                count[member] += 1
        cursor, placed = 0, 0
        for task in tasks:
            for replica in task.replica_ids():
                if replica in owners:
                    continue
                holding = {owners[r] for r in task.replica_ids() if r in owners}
                order = [ids[(cursor + k) % len(ids)] for k in range(len(ids))] if ids else []
                free = [m for m in order if m not in holding]
                if not free:
                    result.unassigned[replica] = _no_member_reason(task, len(ids))
                    continue
                target = min(free, key=lambda m: count[m])
                owners[replica] = target
                count[target] += 1
                cursor = (ids.index(target) + 1) % len(ids)
                placed += 1
        return placed

    def _split(
        self,
        context: AssignmentContext,
        tasks: list[TaskSpec],
        owners: dict[TaskReplica, str],
        load_data: LoadData,
        stats: RoundStats,
    ) -> tuple[list[TaskSpec], list[TaskSplit], dict[str, BundleData]]:
        """Replace tasks over a split limit by their children; returns the new catalog and estimates."""
        conf = self.config
        names = find_bundles_to_split(load_data, conf, len(tasks))
        if not names:
            return tasks, [], {}
        by_id = {t.task_id: t for t in tasks}
        splits: list[TaskSplit] = []
        estimates: dict[str, BundleData] = {}
        for name in names:
            parent = by_id[name]
            try:
                split = split_task(parent, conf)
            except ValueError as exc:
                log.warning("group %s: cannot split %s: %s", context.group_id, name, exc)
                continue
            if split is None:
                log.info("group %s: %s is over a split limit but has no cut point", context.group_id, name)
                continue
            if any(c.task_id in by_id for c in split.children):
                log.warning("group %s: split of %s would clash with an existing task", context.group_id, name)
                continue
            splits.append(split)
            del by_id[name]
            shares = {c.task_id: child_share(parent, c) for c in split.children}
            estimates.update(estimate_children(load_data.bundle_data[name], shares))
            for child in split.children:
                by_id[child.task_id] = child
                if not conf.load_balancer_auto_unload_split_bundles_enabled:
                    for replica in parent.replica_ids():
                        if replica in owners:
                            owners[TaskReplica(child.task_id, replica.replica)] = owners[replica]
            for replica in parent.replica_ids():
                owners.pop(replica, None)
            stats.split += 1
            log.info("group %s: split %s into %s", context.group_id, name, [c.task_id for c in split.children])
        return sorted(by_id.values(), key=lambda t: t.task_id), splits, estimates

    def _place(
        self,
        context: AssignmentContext,
        pstate: _PoolState,
        load_data: LoadData,
        tasks: list[TaskSpec],
        member_ids: list[str],
        owners: dict[TaskReplica, str],
        result: Assignment,
    ) -> int:
        placed = 0
        everyone = filter_candidates(member_ids, load_data, self.config)
        for task in tasks:
            replicas = task.replica_ids()
            for replica in replicas:
                if replica in owners:
                    continue
                holding = {owners[r] for r in replicas if r in owners}
                candidates = [m for m in everyone if m not in holding] if holding else everyone
                target = pstate.placement.select_broker(
                    candidates, task.task_id, load_data, self.config, rng=context.rng
                )
                if target is None:
                    result.unassigned[replica] = _no_member_reason(task, len(member_ids))
                    continue
                owners[replica] = target
                load_data.preallocate(target, task.task_id)
                placed += 1
        return placed

    def _shed(
        self,
        context: AssignmentContext,
        state: _GroupState,
        pstate: _PoolState,
        load_data: LoadData,
        tasks: list[TaskSpec],
        member_ids: list[str],
        owners: dict[TaskReplica, str],
        stats: RoundStats,
    ) -> None:
        plan = self._plan(pstate, load_data)
        pstate.plan = {}  # consumed: a second rebalance on the same snapshot does not repeat it
        by_id = {t.task_id: t for t in tasks}
        everyone = filter_candidates(member_ids, load_data, self.config)
        now = self.clock()
        for member in sorted(plan):
            for task_id in plan[member]:
                task = by_id.get(task_id)
                if task is None:
                    continue
                replica = next((r for r in task.replica_ids() if owners.get(r) == member), None)
                if replica is None:
                    continue  # moved or gone since the shedder looked
                others = {owners[r] for r in task.replica_ids() if r in owners and r != replica}
                candidates = [m for m in everyone if m not in others] if others else everyone
                target = pstate.placement.select_broker(candidates, task_id, load_data, self.config, rng=context.rng)
                if target is None or target == member:
                    # Pulsar's doLoadShedding skips an unload whose destination is the current owner.
                    stats.unload_skipped += 1
                    continue
                owners[replica] = target
                load_data.preallocate(target, task_id)
                state.recently_unloaded[task_id] = now
                stats.unloaded += 1
                stats.moves.append((task_id, member, target))
                log.info("group %s: unloading %s from %s to %s", context.group_id, replica, member, target)

    # ---- the contract ---------------------------------------------------------------------------
    def assign(self, context: AssignmentContext) -> Assignment:
        conf = self.config
        state = self._group(context.group_id)
        stats = RoundStats()
        self.last_round = stats
        result = Assignment(members={m.member_id: [] for m in context.members})
        tasks = list(context.tasks)
        owners = self._sticky(context, context.tasks)
        snapshot = context.load_snapshot
        if snapshot is None or not conf.load_balancer_enabled:
            log.info(
                "group %s generation %d: %s, so %s runs as sticky round-robin",
                context.group_id,
                context.generation,
                "no load snapshot" if snapshot is None else "load_balancer_enabled is off",
                self.name,
            )
            for pool in sorted({t.pool for t in tasks}):
                members = [m for m in context.members if m.pool == pool]
                stats.placed += self._round_robin([t for t in tasks if t.pool == pool], members, owners, result)
        else:
            estimates: dict[str, BundleData] = {}
            pool_data = self._pool_load_data(context, tasks, owners, state)
            if conf.load_balancer_auto_bundle_split_enabled:
                tasks, result.splits, estimates = self._split(
                    context, tasks, owners, _merged(pool_data.values()), stats
                )
                if result.splits:  # the catalog changed: rebuild the views with the children
                    pool_data = self._pool_load_data(context, tasks, owners, state, estimates)
            for pool in sorted({t.pool for t in tasks}):
                pstate = self._pool(state, pool)
                member_ids = [m.member_id for m in context.members if m.pool == pool]
                pool_tasks = [t for t in tasks if t.pool == pool]
                load_data = pool_data[pool]
                if isinstance(pstate.shedder, AvgShedder):
                    pstate.shedder.forget(load_data.broker_data)
                stats.placed += self._place(context, pstate, load_data, pool_tasks, member_ids, owners, result)
                if conf.load_balancer_shedding_enabled:
                    self._shed(context, state, pstate, load_data, pool_tasks, member_ids, owners, stats)
        for replica, member in sorted(owners.items()):
            result.members[member].append(replica)
        log.info(
            "group %s generation %d (%s): placed %d, unloaded %d, split %d",
            context.group_id,
            context.generation,
            self.name,
            stats.placed,
            stats.unloaded,
            stats.split,
        )
        return result

    def needs_rebalance(self, context: AssignmentContext) -> bool:
        """Would the shedder (or the splitter) move something on this context's snapshot now?"""
        conf = self.config
        snapshot = context.load_snapshot
        if snapshot is None or not conf.load_balancer_enabled:
            return False
        state = self._group(context.group_id)
        owners = self._sticky(context, context.tasks)
        pool_data = self._pool_load_data(context, list(context.tasks), owners, state)
        if conf.load_balancer_auto_bundle_split_enabled:
            by_id = {t.task_id: t for t in context.tasks}
            for name in find_bundles_to_split(_merged(pool_data.values()), conf, len(context.tasks)):
                try:
                    if split_task(by_id[name], conf) is not None:
                        return True
                except ValueError:
                    continue
        if not conf.load_balancer_shedding_enabled:
            return False
        wants = False
        for pool, load_data in sorted(pool_data.items()):
            wants = bool(self._plan(self._pool(state, pool), load_data)) or wants
        return wants

    @staticmethod
    def _pool_load_data(
        context: AssignmentContext,
        tasks: list[TaskSpec],
        owners: dict[TaskReplica, str],
        state: _GroupState,
        estimates: dict[str, BundleData] | None = None,
    ) -> dict[str, LoadData]:
        """One ``LoadData`` per pool: its members and tasks only (pools never exchange tasks)."""
        out: dict[str, LoadData] = {}
        for pool in sorted({t.pool for t in tasks}):
            out[pool] = load_data_from_context(
                context,
                owners,
                members=[m for m in context.members if m.pool == pool],
                tasks=[t for t in tasks if t.pool == pool],
                recently_unloaded=state.recently_unloaded,
                bundle_overrides=estimates,
            )
        return out


def _merged(views: Iterable[LoadData]) -> LoadData:
    """All pools' views as one (the split limit counts the whole group)."""
    merged = LoadData()
    for view in views:
        merged.broker_data.update(view.broker_data)
        merged.bundle_data.update(view.bundle_data)
    return merged


def _no_member_reason(task: TaskSpec, n_members: int) -> str:
    return (
        f"replication factor {task.replicas} exceeds the {n_members} member(s) of pool {task.pool or '(default)'}"
        if n_members
        else f"no member in pool {task.pool or '(default)'}"
    )


class PulsarThresholdAssignor(PulsarAssignor):
    """``pulsar-threshold``: ThresholdShedder + LeastResourceUsageWithWeight (resource based; heterogeneity-aware)."""

    name = "pulsar-threshold"

    def __init__(self, config: LoadBalancerConfig | None = None, *, clock: Clock = time.monotonic) -> None:
        super().__init__(
            config, clock=clock, shedder_factory=ThresholdShedder, placement_factory=LeastResourceUsageWithWeight
        )


class PulsarUniformAssignor(PulsarAssignor):
    """``pulsar-uniform``: UniformLoadShedder + LeastLongTermMessageRate (msg-rate based; homogeneous members)."""

    name = "pulsar-uniform"

    def __init__(self, config: LoadBalancerConfig | None = None, *, clock: Clock = time.monotonic) -> None:
        super().__init__(
            config, clock=clock, shedder_factory=UniformLoadShedder, placement_factory=LeastLongTermMessageRate
        )


class PulsarAvgAssignor(PulsarAssignor):
    """``pulsar-avg``: PIP-364's AvgShedder, which also places (paired receiver, else hash).

    Default config differs from ``LoadBalancerConfig()`` in one setting: ``max_unload_percentage``
    is 0.5, as PIP-364 prescribes for AvgShedder (move half the difference of a pair).
    """

    name = "pulsar-avg"

    def __init__(self, config: LoadBalancerConfig | None = None, *, clock: Clock = time.monotonic) -> None:
        super().__init__(
            config or replace(LoadBalancerConfig(), max_unload_percentage=0.5),
            clock=clock,
            shedder_factory=AvgShedder,
            placement_factory=None,
        )


class PulsarOverloadAssignor(PulsarAssignor):
    """``pulsar-overload``: OverloadShedder + LeastLongTermMessageRate (Pulsar's original default pair)."""

    name = "pulsar-overload"

    def __init__(self, config: LoadBalancerConfig | None = None, *, clock: Clock = time.monotonic) -> None:
        super().__init__(
            config, clock=clock, shedder_factory=OverloadShedder, placement_factory=LeastLongTermMessageRate
        )
