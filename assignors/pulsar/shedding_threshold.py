"""The threshold shedders: a member over a usage line offloads its excess (Overload, Threshold).

Both measure how far a member's usage is past a line — a fixed overload threshold
(``OverloadShedder``) or the members' average plus a margin, over a usage history
(``ThresholdShedder``) — and unload that excess, plus ``ADDITIONAL_THRESHOLD_PERCENT_MARGIN``,
as a share of the member's throughput, heaviest tasks first. The contract and the shared
selection are in ``shedding_base``.
"""

from __future__ import annotations

import logging

from groupcoord.assignors.pulsar.config import MB, LoadBalancerConfig
from groupcoord.assignors.pulsar.data import LoadData, LocalBrokerData
from groupcoord.assignors.pulsar.shedding_base import EPS, local_throughput, sheddable, warn_few_bundles

__all__ = [
    "ADDITIONAL_THRESHOLD_PERCENT_MARGIN",
    "LOWER_BOUNDARY_THRESHOLD_MARGIN",
    "OverloadShedder",
    "ThresholdShedder",
]

# One logger for the shedding family, whichever module a strategy lives in.
log = logging.getLogger("groupcoord.assignors.pulsar.shedding")

ADDITIONAL_THRESHOLD_PERCENT_MARGIN = 0.05
"""Overload/ThresholdShedder unload 5 points more than strictly needed, to get clear of the edge."""
LOWER_BOUNDARY_THRESHOLD_MARGIN = 0.5


def _select_at_least(load_data: LoadData, local: LocalBrokerData, minimum: float) -> list[str]:
    """Heaviest tasks by short-term throughput until at least ``minimum`` bytes/s (and at least one)."""
    chosen: list[str] = []
    marked = 0.0
    for name, throughput in sheddable(load_data, local, "throughput"):
        if marked < minimum or not chosen:
            chosen.append(name)
            marked += throughput
    return chosen


class OverloadShedder:
    """Unload from every member whose max resource usage reaches the overload threshold.

    Offloads ``(usage - threshold + 5%) x its throughput``, heaviest tasks first. It ignores
    underloaded members altogether (PIP-364: useless when all are overloaded, blind to scale-out).
    """

    def find_bundles_for_unloading(self, load_data: LoadData, conf: LoadBalancerConfig) -> dict[str, list[str]]:
        selected: dict[str, list[str]] = {}
        overload_threshold = conf.load_balancer_broker_overloaded_threshold_percentage / 100.0
        for broker in sorted(load_data.broker_data):
            local = load_data.broker_data[broker].local_data
            current = local.max_resource_usage()
            if current < overload_threshold - EPS:
                continue
            percent = current - overload_threshold + ADDITIONAL_THRESHOLD_PERCENT_MARGIN
            minimum = local_throughput(local) * percent
            if len(local.bundles) > 1:
                chosen = _select_at_least(load_data, local, minimum)
                if chosen:
                    selected[broker] = chosen
            else:
                warn_few_bundles(broker, local)
        return selected


class ThresholdShedder:
    """Unload from members whose history-weighted usage is above the average by the threshold.

    usage = max(weighted cpu, direct memory, bandwidth in/out); history = x * history + (1 - x) * usage
    (x = ``load_balancer_history_resource_percentage``, first value = usage). A member at or above
    ``avg + threshold`` offloads ``(usage - avg - threshold + 5%) x its throughput`` if that is at
    least ``load_balancer_bundle_unload_min_throughput_threshold`` MB/s. The history advances once
    per ``load_data.round_id`` (Pulsar advances it once per shedding run; so do we, also when the
    lower-boundary pass needs the average again — Pulsar recomputes and so advances it twice there).
    """

    def __init__(self) -> None:
        self.broker_avg_resource_usage: dict[str, float] = {}
        self._last_round: object = object()
        self._last_avg = 0.0

    def _update_avg_resource_usage(self, broker: str, local: LocalBrokerData, conf: LoadBalancerConfig) -> float:
        weights = (
            conf.load_balancer_cpu_resource_weight,
            conf.load_balancer_direct_memory_resource_weight,
            conf.load_balancer_bandwidth_in_resource_weight,
            conf.load_balancer_bandwidth_out_resource_weight,
        )
        # A usage above 100% counts as it is (Pulsar reverted the "within limit" figure of PR #16937
        # in PR #18645): a member at 140% CPU is the most loaded one, not an idle one.
        usage = local.max_resource_usage_with_weight(*weights)
        if usage > 1.0:
            log.warning("member %s resource usage is %.0f%%, above its limit", broker, usage * 100)
        history = self.broker_avg_resource_usage.get(broker)
        x = conf.load_balancer_history_resource_percentage
        history = usage if history is None else history * x + (1 - x) * usage
        self.broker_avg_resource_usage[broker] = history
        return history

    def broker_avg_usage(self, load_data: LoadData, conf: LoadBalancerConfig) -> float:
        """Advance every member's history (once per round) and return the average."""
        if load_data.round_id is None or load_data.round_id != self._last_round:
            total = 0.0
            for broker in sorted(load_data.broker_data):
                total += self._update_avg_resource_usage(broker, load_data.broker_data[broker].local_data, conf)
            # Forget members that left so a returning member starts afresh.
            for gone in set(self.broker_avg_resource_usage) - set(load_data.broker_data):
                del self.broker_avg_resource_usage[gone]
            self._last_avg = total / len(load_data.broker_data) if load_data.broker_data else 0.0
            self._last_round = load_data.round_id if load_data.round_id is not None else object()
        return self._last_avg

    def find_bundles_for_unloading(self, load_data: LoadData, conf: LoadBalancerConfig) -> dict[str, list[str]]:
        selected: dict[str, list[str]] = {}
        threshold = conf.load_balancer_broker_threshold_shedder_percentage / 100.0
        min_throughput = conf.load_balancer_bundle_unload_min_throughput_threshold * MB
        avg = self.broker_avg_usage(load_data, conf)
        if abs(avg) < EPS:
            log.warning("average max resource usage is 0")
            return selected
        for broker in sorted(load_data.broker_data):
            local = load_data.broker_data[broker].local_data
            current = self.broker_avg_resource_usage.get(broker, 0.0)
            if current < avg + threshold - EPS:
                continue
            percent = current - avg - threshold + ADDITIONAL_THRESHOLD_PERCENT_MARGIN
            minimum = local_throughput(local) * percent
            if minimum < min_throughput:
                log.debug(
                    "member %s would shed %.3f MB/s < %.3f MB/s; skipping", broker, minimum / MB, min_throughput / MB
                )
                continue
            if len(local.bundles) > 1:
                chosen = _select_at_least(load_data, local, minimum)
                if chosen:
                    selected[broker] = chosen
            else:
                warn_few_bundles(broker, local)
        if not selected and conf.lower_boundary_shedding_enabled:
            self._try_lower_boundary_shedding(load_data, conf, avg, threshold, min_throughput, selected)
        return selected

    def _try_lower_boundary_shedding(
        self,
        load_data: LoadData,
        conf: LoadBalancerConfig,
        avg: float,
        threshold: float,
        min_throughput: float,
        selected: dict[str, list[str]],
    ) -> None:
        """Some member is under ``avg - threshold``: unload ``throughput x threshold x 0.5`` from the busiest.

        The busiest member with more than one task must be at or above the average here. Pulsar
        starts its search at ``avg - threshold``, so when the top members each run a single task it
        can pick a member *below* the average and move load off it; we never do.
        """
        max_broker = ""
        max_usage = avg - EPS
        below = False
        for broker in sorted(load_data.broker_data):
            local = load_data.broker_data[broker].local_data
            current = self.broker_avg_resource_usage.get(broker, 0.0)
            if current > max_usage + EPS and len(local.bundles) > 1:
                max_usage, max_broker = current, broker
            if current < avg - threshold - EPS:
                below = True
        if not max_broker or not below:
            return
        local = load_data.broker_data[max_broker].local_data
        minimum = local_throughput(local) * threshold * LOWER_BOUNDARY_THRESHOLD_MARGIN
        if min_throughput > minimum:
            return
        chosen = _select_at_least(load_data, local, minimum)
        if chosen:
            selected[max_broker] = chosen
