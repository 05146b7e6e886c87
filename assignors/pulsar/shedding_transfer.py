"""TransferShedder: the shedder of Pulsar 3's extensible load manager (PIP-192).

Each member's load is an exponential moving average of its weighted max resource usage
(cpu, heap memory, direct memory, bandwidth in/out, each x its weight; the first report counts
as it is, then ``ema = x * ema + (1 - x) * usage`` with x = ``load_balancer_history_resource_percentage``),
and its throughput likewise. A round:

1. **skip** when a member has no report (NoLoadData), or when a member that gave or took a task
   less than ``load_balance_shedding_delay_in_seconds`` ago is in the view (CoolDown);
2. **condition** — the std of the loads is above ``load_balancer_broker_load_target_std``
   (0.25), or the least loaded member is underloaded (below ``avg x m`` or its throughput EMA
   below the busiest member's ``x m``, m = min(0.5, target/2)), or the busiest is overloaded
   (above the overload threshold and ``avg + target``). It must hold for more than
   ``load_balancer_shedding_condition_hit_count_threshold`` (3) consecutive rounds;
3. **pairs** — members sorted by load; the busiest gives to the least loaded, the next busiest
   to the next least, up to ``load_balancer_max_number_of_broker_shedding_per_cycle`` (3) pairs.
   The giver offloads ``(max - min) / 2`` of load, turned into throughput through its own
   throughput/load ratio, taking its top-k tasks lightest first while the total stays within
   that figure and at least one task stays. A task that would overshoot may still go if tasks
   of the receiver can come back (a swap) that leave the giver below 75% of its throughput and
   no lighter than the receiver. The std is recomputed after each pair and the loop stops once
   no rule above holds.

Decisions name the receiver (``load_balancer_transfer_enabled``, the default): the assignor asks
``select_broker`` and gets it back, so this class is both shedding and placement strategy, as
AvgShedder is. New tasks are placed by ``LeastResourceUsageWithWeight`` (the extensible manager's
default placement). Time comes from the injected ``clock`` (report times are "now").
"""

from __future__ import annotations

import logging
import math
import random
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from groupcoord.assignors.pulsar.config import LoadBalancerConfig
from groupcoord.assignors.pulsar.data import LoadData, LocalBrokerData
from groupcoord.assignors.pulsar.placement import LeastResourceUsageWithWeight
from groupcoord.assignors.pulsar.shedding_base import EPS, local_throughput

__all__ = ["TransferShedder", "Unload"]

log = logging.getLogger("groupcoord.assignors.pulsar.shedding")

SWAP_TARGET = 0.75
"""A swap must leave the giver below this share of its throughput."""


@dataclass(frozen=True, slots=True)
class Unload:
    """One decision: ``task`` leaves ``source`` for ``destination`` ("" = placement chooses)."""

    source: str
    task: str
    destination: str
    reason: str


def weighted_max(local: LocalBrokerData, conf: LoadBalancerConfig) -> float:
    """The extensible manager's weighted max usage (heap memory included), as a fraction."""
    return (
        max(
            local.cpu.percent_usage() * conf.load_balancer_cpu_resource_weight,
            local.memory.percent_usage() * conf.load_balancer_memory_resource_weight,
            local.direct_memory.percent_usage() * conf.load_balancer_direct_memory_resource_weight,
            local.bandwidth_in.percent_usage() * conf.load_balancer_bandwidth_in_resource_weight,
            local.bandwidth_out.percent_usage() * conf.load_balancer_bandwidth_out_resource_weight,
        )
        / 100.0
    )


def _has_report(local: LocalBrokerData) -> bool:
    resources = (local.cpu, local.memory, local.direct_memory, local.bandwidth_in, local.bandwidth_out)
    return any(r.limit > 0 for r in resources)


class TransferShedder:
    """PIP-192's shedder (see the module docstring); ``decisions`` holds the last round's answer."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.clock = clock
        self.load_ema: dict[str, float] = {}
        self.throughput_ema: dict[str, float] = {}
        self.recently_unloaded_brokers: dict[str, float] = {}
        self.unload_condition_hit_count = 0
        self.decisions: list[Unload] = []
        self.skip_reason = ""
        self.std = 0.0
        self.load_std = 0.0
        self.avg = 0.0
        self._last_round: object = object()
        self._destinations: dict[str, str] = {}
        self._placement = LeastResourceUsageWithWeight()

    # ---- state -----------------------------------------------------------------------------------
    def _update_emas(self, load_data: LoadData, conf: LoadBalancerConfig) -> None:
        """Advance each member's EMAs once per report (``load_data.round_id``)."""
        if load_data.round_id is not None and load_data.round_id == self._last_round:
            return
        self._last_round = load_data.round_id if load_data.round_id is not None else object()
        x = conf.load_balancer_history_resource_percentage
        for broker in sorted(load_data.broker_data):
            local = load_data.broker_data[broker].local_data
            if not _has_report(local):
                continue
            usage, throughput = weighted_max(local, conf), local_throughput(local)
            old = self.load_ema.get(broker)
            self.load_ema[broker] = usage if old is None else old * x + (1 - x) * usage
            old = self.throughput_ema.get(broker)
            self.throughput_ema[broker] = throughput if old is None else old * x + (1 - x) * throughput
        for gone in set(self.load_ema) - set(load_data.broker_data):
            self.load_ema.pop(gone, None)
            self.throughput_ema.pop(gone, None)

    def _skip(self, load_data: LoadData, conf: LoadBalancerConfig, now: float) -> str:
        if not load_data.broker_data:
            return "NoBrokers"
        for broker in sorted(load_data.broker_data):
            given = self.recently_unloaded_brokers.get(broker)
            if given is not None:
                if now - given < conf.load_balance_shedding_delay_in_seconds:
                    return "CoolDown"
                del self.recently_unloaded_brokers[broker]
        if any(not _has_report(d.local_data) for d in load_data.broker_data.values()):
            return "NoLoadData"
        return ""

    # ---- the rules -------------------------------------------------------------------------------
    def _underloaded(self, broker: str, busiest: str, conf: LoadBalancerConfig) -> bool:
        multiplier = min(0.5, max(0.0, conf.load_balancer_broker_load_target_std / 2.0))
        if self.load_ema[broker] < self.avg * multiplier:
            return True
        return self.throughput_ema[broker] < self.throughput_ema[busiest] * multiplier

    def _overloaded(self, broker: str, conf: LoadBalancerConfig) -> bool:
        load = self.load_ema[broker]
        return (
            load > conf.load_balancer_broker_overloaded_threshold_percentage / 100.0
            and load > self.avg + conf.load_balancer_broker_load_target_std
        )

    def find_bundles_for_unloading(self, load_data: LoadData, conf: LoadBalancerConfig) -> dict[str, list[str]]:
        """``{giver: [task, ...]}`` of this round's decisions (``decisions`` has the receivers)."""
        self.decisions = []
        self._destinations = {}
        now = self.clock()
        self._update_emas(load_data, conf)
        self.skip_reason = self._skip(load_data, conf, now)
        if self.skip_reason:
            return {}
        order = sorted(load_data.broker_data, key=lambda b: (self.load_ema[b], b))
        loads = [self.load_ema[b] for b in order]
        n = len(order)
        total, sq_total = sum(loads), sum(v * v for v in loads)
        self.avg = total / n
        self.std = math.sqrt(max(0.0, sq_total / n - self.avg * self.avg))
        self.load_std = self.std  # the std before this round's moves (Pulsar's counter reports it)
        target = conf.load_balancer_broker_load_target_std
        lo, hi = 0, n - 1
        if self.std > target + EPS or self._underloaded(order[lo], order[hi], conf) or self._overloaded(order[hi], conf):
            self.unload_condition_hit_count += 1
        else:
            self.unload_condition_hit_count = 0
        if self.unload_condition_hit_count <= conf.load_balancer_shedding_condition_hit_count_threshold:
            self.skip_reason = "HitCount"
            return {}
        pairs = 0
        while pairs < conf.load_balancer_max_number_of_broker_shedding_per_cycle and lo < hi:
            if self.std > target + EPS:
                reason = "Overloaded"
            elif self._underloaded(order[lo], order[hi], conf):
                reason = "Underloaded"
            elif self._overloaded(order[hi], conf):
                reason = "Overloaded"
            else:
                break
            giver, taker = order[hi], order[lo]
            hi -= 1
            marked, moved = self._transfer(load_data, conf, giver, taker, reason)
            if marked <= 0:
                continue  # nothing movable here: Pulsar moves on to the next busiest, same receiver
            max_load, min_load = self.load_ema[giver], self.load_ema[taker]
            sq_total -= max_load * max_load + min_load * min_load
            sq_total += max(0.0, max_load - moved) ** 2 + (min_load + moved) ** 2
            self.std = math.sqrt(abs(sq_total / n - self.avg * self.avg))
            pairs += 1
            lo += 1
        selected: dict[str, list[str]] = {}
        for decision in self.decisions:
            selected.setdefault(decision.source, []).append(decision.task)
            self._destinations[decision.task] = decision.destination
            self.recently_unloaded_brokers[decision.source] = now
            if decision.destination:
                self.recently_unloaded_brokers[decision.destination] = now
        if self.decisions:
            self.unload_condition_hit_count = 0
        elif not self.skip_reason:
            self.skip_reason = "NoBundles"
        return selected

    def _top_tasks(self, load_data: LoadData, broker: str, conf: LoadBalancerConfig) -> list[tuple[str, float]]:
        """The member's top-k tasks by throughput, lightest of them first (as Pulsar's report lists them)."""
        bundles = load_data.bundle_data
        local = load_data.broker_data[broker].local_data
        found = []
        for name in local.bundles:
            bd = bundles.get(name)
            if bd is not None:
                found.append((name, bd.short_term_data.msg_throughput_in + bd.short_term_data.msg_throughput_out))
        found.sort(key=lambda e: (-e[1], e[0]))
        top = found[: conf.load_balancer_max_number_of_bundles_in_bundle_load_report]
        return top[::-1]

    def _transfer(
        self, load_data: LoadData, conf: LoadBalancerConfig, giver: str, taker: str, reason: str
    ) -> tuple[float, float]:
        """Decide what moves from ``giver`` to ``taker``; returns (throughput marked, net load moved)."""
        max_load, min_load = self.load_ema[giver], self.load_ema[taker]
        giver_tp = local_throughput(load_data.broker_data[giver].local_data)
        taker_tp = local_throughput(load_data.broker_data[taker].local_data)
        if max_load <= 0 or giver_tp <= 0:
            return 0.0, 0.0
        offload_tp = giver_tp * ((max_load - min_load) / 2) / max_load
        top = self._top_tasks(load_data, giver, conf)
        if len(top) <= 1:
            return 0.0, 0.0
        transfer = conf.load_balancer_transfer_enabled
        taker_top: Iterator[tuple[str, float]] = iter(self._top_tasks(load_data, taker, conf) if transfer else [])
        marked = gained = 0.0
        remaining = len(top)
        recently = load_data.recently_unloaded_bundles
        for name, throughput in top:
            if name in recently or throughput <= 0:
                continue  # (a task without traffic moves no load)
            if remaining <= 1:
                break
            swaps: list[str] = []
            if marked - gained + throughput > offload_tp:
                swaps, swapped_tp = self._swap(taker_top, giver_tp, taker_tp, marked, gained, throughput)
                if not swaps:
                    break
                gained += swapped_tp
            for back in swaps:
                self.decisions.append(Unload(taker, back, giver, reason))
            self.decisions.append(Unload(giver, name, taker if transfer else "", reason))
            marked += throughput
            remaining -= 1
        return marked, (marked - gained) * max_load / giver_tp

    @staticmethod
    def _swap(
        taker_top: Iterator[tuple[str, float]],
        giver_tp: float,
        taker_tp: float,
        marked: float,
        gained: float,
        throughput: float,
    ) -> tuple[list[str], float]:
        """Tasks of the receiver that may come back so that ``throughput`` can still go."""
        giver_new = giver_tp - marked + gained - throughput
        taker_new = taker_tp + marked - gained + throughput
        chosen: list[str] = []
        swapped = 0.0
        for name, tp in taker_top:
            if giver_new + tp < giver_tp and taker_new - tp < giver_tp:
                chosen.append(name)
                giver_new, taker_new = giver_new + tp, taker_new - tp
                swapped += tp
                if taker_new <= giver_new < giver_tp * SWAP_TARGET:
                    return chosen, swapped
        return [], 0.0

    # ---- placement -------------------------------------------------------------------------------
    def select_broker(
        self,
        candidates: Sequence[str],
        bundle: str,
        load_data: LoadData,
        conf: LoadBalancerConfig,
        *,
        rng: random.Random | None = None,
    ) -> str | None:
        """The receiver this round decided for ``bundle``; otherwise LeastResourceUsageWithWeight's pick."""
        planned = self._destinations.get(bundle)
        if planned and planned in candidates:
            return planned
        return self._placement.select_broker(candidates, bundle, load_data, conf, rng=rng)
