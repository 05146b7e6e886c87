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
counting AvgShedder's hits twice) and answers whether it would move something. The steps are
functions in ``steps``; this module keeps the state between rounds and runs them in order.
Without a snapshot, ``assign_incremental`` gives the round from the previous target alone
(``pulsar.incremental``), for the consumer protocol's coordinator.

Worked example (two members, three tasks, no snapshot -> sticky round-robin)::

    ctx = AssignmentContext(group_id="g", generation=1,
                            members=(MemberInfo("a"), MemberInfo("b")),
                            tasks=(TaskSpec("t1"), TaskSpec("t2"), TaskSpec("t3")))
    PulsarUniformAssignor().assign(ctx).members   # {"a": [t1#0, t3#0], "b": [t2#0]}
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import cast

from groupcoord.assignors.base import Assignment, AssignmentContext, TaskReplica
from groupcoord.assignors.collector import collector_paused
from groupcoord.assignors.group_states import GroupStates
from groupcoord.assignors.incremental import TargetChange
from groupcoord.assignors.pulsar.config import LoadBalancerConfig
from groupcoord.assignors.pulsar.convert import snapshot_key
from groupcoord.assignors.pulsar.data import BundleData, LoadData
from groupcoord.assignors.pulsar.incremental import settled_round, sticky_round_robin
from groupcoord.assignors.pulsar.placement import (
    LeastLongTermMessageRate,
    LeastResourceUsageWithWeight,
    ModularLoadManagerStrategy,
)
from groupcoord.assignors.pulsar.shedding_base import LoadSheddingStrategy
from groupcoord.assignors.pulsar.shedding_difference import AvgShedder, UniformLoadShedder
from groupcoord.assignors.pulsar.shedding_threshold import OverloadShedder, ThresholdShedder
from groupcoord.assignors.pulsar.shedding_transfer import TransferShedder
from groupcoord.assignors.pulsar.split import find_bundles_to_split, split_task
from groupcoord.assignors.pulsar.steps import (
    Clock,
    GroupState,
    PoolState,
    RoundStats,
    merged,
    place,
    pool_load_data,
    round_robin,
    shed,
    split_tasks,
    sticky_owners,
)
from groupcoord.assignors.snapshot import LoadSnapshot

__all__ = [
    "PulsarAssignor",
    "PulsarAvgAssignor",
    "PulsarOverloadAssignor",
    "PulsarThresholdAssignor",
    "PulsarTransferAssignor",
    "PulsarUniformAssignor",
    # what they hand out and take (defined in ``steps``)
    "Clock",
    "RoundStats",
]

log = logging.getLogger(__name__)


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
        self._groups: GroupStates[GroupState] = GroupStates(GroupState)
        self.last_round = RoundStats()

    # ---- state ---------------------------------------------------------------------------------
    def _group(self, group_id: str) -> GroupState:
        state = self._groups.get(group_id)
        grace_start = self.clock() - self.config.grace_period_s
        for task in [t for t, at in state.recently_unloaded.items() if at < grace_start]:
            del state.recently_unloaded[task]
        return state

    def _pool(self, state: GroupState, pool: str) -> PoolState:
        pstate = state.pools.get(pool)
        if pstate is None:
            shedder = self._shedder_factory()
            if self._placement_factory is not None:
                placement = self._placement_factory()
            else:  # a shedder that places what it moves (AvgShedder) is both strategies
                placement = cast(ModularLoadManagerStrategy, shedder)
            pstate = state.pools[pool] = PoolState(shedder=shedder, placement=placement)
        return pstate

    def _plan(self, pstate: PoolState, load_data: LoadData) -> dict[str, list[str]]:
        """The shedder's answer for this snapshot, computed once per snapshot."""
        if load_data.round_id is not None and pstate.plan_key == load_data.round_id:
            return pstate.plan
        pstate.plan = pstate.shedder.find_bundles_for_unloading(load_data, self.config)
        pstate.plan_key = load_data.round_id
        return pstate.plan

    # ---- steps (in ``steps``) ------------------------------------------------------------------
    # The first one stays a method: benchmarks/pulsar_bench.py calls it on an instance.
    _sticky = staticmethod(sticky_owners)

    # ---- the contract ---------------------------------------------------------------------------
    def assign(self, context: AssignmentContext) -> Assignment:
        with collector_paused():  # millions of short-lived objects at 10k x 100k (``assignors.collector``)
            return self._assign(context)

    def _assign(self, context: AssignmentContext) -> Assignment:
        conf = self.config
        state = self._group(context.group_id)
        stats = RoundStats()
        self.last_round = stats
        result = Assignment(members={m.member_id: [] for m in context.members})
        tasks = list(context.tasks)
        owners = self._sticky(context, context.tasks)
        snapshot = context.load_snapshot
        state.settled = None
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
                stats.placed += round_robin([t for t in tasks if t.pool == pool], members, owners, result)
        else:
            estimates: dict[str, BundleData] = {}
            pool_data = pool_load_data(context, tasks, owners, state)
            if conf.load_balancer_auto_bundle_split_enabled:
                tasks, result.splits, estimates = split_tasks(
                    context, tasks, owners, merged(pool_data.values()), stats, conf=conf
                )
                if result.splits:  # the catalog changed: rebuild the views with the children
                    pool_data = pool_load_data(context, tasks, owners, state, estimates)
            for pool in sorted({t.pool for t in tasks}):
                pstate = self._pool(state, pool)
                member_ids = [m.member_id for m in context.members if m.pool == pool]
                pool_tasks = [t for t in tasks if t.pool == pool]
                load_data = pool_data[pool]
                if isinstance(pstate.shedder, AvgShedder):
                    pstate.shedder.forget(load_data.broker_data)
                stats.placed += place(context, pstate, load_data, pool_tasks, member_ids, owners, result, conf=conf)
                # Pulsar's doLoadShedding: "only 1 broker available" -> no shedding (and the
                # strategy is not called, so its history does not advance). Per pool here.
                if conf.load_balancer_shedding_enabled and len(member_ids) > 1:
                    plan = self._plan(pstate, load_data)
                    pstate.plan = {}  # consumed: a second rebalance on the same snapshot does not repeat it
                    shed(
                        context,
                        state,
                        pstate,
                        plan,
                        load_data,
                        pool_tasks,
                        member_ids,
                        owners,
                        stats,
                        conf=conf,
                        clock=self.clock,
                    )
        for replica, member in sorted(owners.items()):
            result.members[member].append(replica)
        if snapshot is not None and conf.load_balancer_enabled and not result.splits:
            self._settle(state, context, snapshot)
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

    @staticmethod
    def _settle(state: GroupState, context: AssignmentContext, snapshot: LoadSnapshot) -> None:
        """Remember that this pass read ``snapshot`` with more than one default-pool member (the splitter
        and the shedder judged it): members joining under it are then the previous target (``settled_round``)."""
        if (snapshot.snapshot_id or snapshot.created_ms) and sum(1 for m in context.members if not m.pool) > 1:
            key = (snapshot.snapshot_id, snapshot.created_ms)
            state.settled = (snapshot_key(snapshot), key, len(context.tasks))

    def assign_incremental(self, change: TargetChange) -> dict[str, frozenset[TaskReplica]] | None:
        """Without a snapshot the round is sticky round-robin, the same from the previous target alone;
        under the snapshot the last full pass read, members joining get nothing and nothing moves
        (``pulsar.incremental``); else ``None``: placement and shedding read every task's load."""
        if change.loaded and self.config.load_balancer_enabled:
            state = self._group(change.group_id)
            target = settled_round(change, state, self.config.load_balancer_shedding_enabled)
            if target is not None:
                self.last_round = RoundStats()
                log.info("group %s (%s, incremental): members joined under snapshot %s: nothing moves",
                         change.group_id, self.name, state.settled[1][0] if state.settled else "")
            return target
        self._group(change.group_id)  # the full pass's bookkeeping (the grace period's expiry)
        done = sticky_round_robin(change)
        if done is None:
            return None
        target, placed = done
        self.last_round = RoundStats(placed=placed)
        log.info("group %s (%s, incremental): placed %d", change.group_id, self.name, placed)
        return target

    def needs_rebalance(self, context: AssignmentContext) -> bool:
        """Would the shedder (or the splitter) move something on this context's snapshot now?"""
        conf = self.config
        snapshot = context.load_snapshot
        if snapshot is None or not conf.load_balancer_enabled:
            return False
        state = self._group(context.group_id)
        owners = self._sticky(context, context.tasks)
        pool_data = pool_load_data(context, list(context.tasks), owners, state)
        if conf.load_balancer_auto_bundle_split_enabled:
            by_id = {t.task_id: t for t in context.tasks}
            for name in find_bundles_to_split(merged(pool_data.values()), conf, len(context.tasks)):
                try:
                    if split_task(by_id[name], conf) is not None:
                        return True
                except ValueError:
                    continue
        if not conf.load_balancer_shedding_enabled:
            return False
        wants = False
        for pool, load_data in sorted(pool_data.items()):
            if len(load_data.broker_data) <= 1:
                continue  # the "only 1 broker available" guard, as in ``assign``
            wants = bool(self._plan(self._pool(state, pool), load_data)) or wants
        return wants


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

    Default config differs from ``LoadBalancerConfig()`` in two settings: ``max_unload_percentage``
    is 0.5, as PIP-364 prescribes for AvgShedder (move half the difference of a pair), and
    namespace spreading is off, as Pulsar sets it with AvgShedder (spreading would filter out the
    member a shed task was paired with).
    """

    name = "pulsar-avg"

    def __init__(self, config: LoadBalancerConfig | None = None, *, clock: Clock = time.monotonic) -> None:
        super().__init__(
            config
            or replace(
                LoadBalancerConfig(), max_unload_percentage=0.5, load_balancer_distribute_bundles_evenly_enabled=False
            ),
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


class PulsarTransferAssignor(PulsarAssignor):
    """``pulsar-transfer``: PIP-192's TransferShedder, which names each task's receiver (it places too).

    New tasks go by LeastResourceUsageWithWeight, the extensible load manager's default. Default
    config differs from ``LoadBalancerConfig()`` in one setting: namespace spreading is off (the
    extensible manager transfers to the member the shedder chose; spreading is the modular
    manager's placement filter).
    """

    name = "pulsar-transfer"

    def __init__(self, config: LoadBalancerConfig | None = None, *, clock: Clock = time.monotonic) -> None:
        super().__init__(
            config or replace(LoadBalancerConfig(), load_balancer_distribute_bundles_evenly_enabled=False),
            clock=clock,
            shedder_factory=lambda: TransferShedder(clock=lambda: self.clock()),
            placement_factory=None,
        )
