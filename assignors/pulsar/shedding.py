"""Shedding strategies: which tasks to take off which members (Pulsar's ``LoadSheddingStrategy``).

Each strategy's ``find_bundles_for_unloading(load_data, conf)`` returns ``{member: [task, ...]}``
and never touches the assignment; the assignor re-places what it returns. All skip tasks in
``load_data.recently_unloaded_bundles`` (the assignor keeps only those still inside the grace
period there) and do nothing with fewer than two members (Pulsar's ``LoadSheddingTask`` check).
Members are visited in id order, so a seed gives one answer (Pulsar walks a HashMap).

Floats are compared with a small tolerance (``EPS``): scores like ``0.7*100 - 0.3*100`` are
39.999999999999993, and a threshold of 40 must count as reached.
"""

from __future__ import annotations

import logging
import random
import zlib
from collections.abc import Mapping, Sequence
from typing import Protocol

from assignors.pulsar.config import MB, LoadBalancerConfig
from assignors.pulsar.data import BundleData, LoadData, LocalBrokerData

__all__ = [
    "EPS",
    "AvgShedder",
    "LoadSheddingStrategy",
    "OverloadShedder",
    "ThresholdShedder",
    "UniformLoadShedder",
]

log = logging.getLogger(__name__)

EPS = 1e-9
"""Tolerance for comparing usages (fractions), rates and AvgShedder scores."""
ADDITIONAL_THRESHOLD_PERCENT_MARGIN = 0.05
"""Overload/ThresholdShedder unload 5 points more than strictly needed, to get clear of the edge."""
LOWER_BOUNDARY_THRESHOLD_MARGIN = 0.5


class LoadSheddingStrategy(Protocol):
    def find_bundles_for_unloading(self, load_data: LoadData, conf: LoadBalancerConfig) -> dict[str, list[str]]: ...


def _short_term_throughput(bd: BundleData) -> float:
    return bd.short_term_data.msg_throughput_in + bd.short_term_data.msg_throughput_out


def _short_term_msg_rate(bd: BundleData) -> float:
    return bd.short_term_data.msg_rate_in + bd.short_term_data.msg_rate_out


def _sheddable(load_data: LoadData, local: LocalBrokerData, traffic: str) -> list[tuple[str, float]]:
    """The member's tasks not recently unloaded, heaviest first (ties by task id), with their traffic."""
    key = _short_term_msg_rate if traffic == "msg_rate" else _short_term_throughput
    bundles = load_data.bundle_data_for_load_shedding()
    found = [
        (name, key(bundles[name]))
        for name in local.bundles
        if name in bundles and name not in load_data.recently_unloaded_bundles
    ]
    found.sort(key=lambda e: (-e[1], e[0]))
    return found


def _select_at_least(load_data: LoadData, local: LocalBrokerData, minimum: float) -> list[str]:
    """Heaviest tasks by short-term throughput until at least ``minimum`` bytes/s (and at least one)."""
    chosen: list[str] = []
    marked = 0.0
    for name, throughput in _sheddable(load_data, local, "throughput"):
        if marked < minimum or not chosen:
            chosen.append(name)
            marked += throughput
    return chosen


def _local_throughput(local: LocalBrokerData) -> float:
    return local.msg_throughput_in + local.msg_throughput_out


def _local_msg_rate(local: LocalBrokerData) -> float:
    return local.msg_rate_in + local.msg_rate_out


def _warn_few_bundles(broker: str, local: LocalBrokerData) -> None:
    if len(local.bundles) == 1:
        log.warning(
            "high usage: sole task %s is overloading member %s; not shedding it", next(iter(local.bundles)), broker
        )
    else:
        log.warning("member %s is overloaded despite having no tasks", broker)


class OverloadShedder:
    """Unload from every member whose max resource usage reaches the overload threshold.

    Offloads ``(usage - threshold + 5%) x its throughput``, heaviest tasks first. It ignores
    underloaded members altogether (PIP-364: useless when all are overloaded, blind to scale-out).
    """

    def find_bundles_for_unloading(self, load_data: LoadData, conf: LoadBalancerConfig) -> dict[str, list[str]]:
        selected: dict[str, list[str]] = {}
        if len(load_data.broker_data) <= 1:
            return selected
        overload_threshold = conf.load_balancer_broker_overloaded_threshold_percentage / 100.0
        for broker in sorted(load_data.broker_data):
            local = load_data.broker_data[broker].local_data
            current = local.max_resource_usage()
            if current < overload_threshold - EPS:
                continue
            percent = current - overload_threshold + ADDITIONAL_THRESHOLD_PERCENT_MARGIN
            minimum = _local_throughput(local) * percent
            if len(local.bundles) > 1:
                chosen = _select_at_least(load_data, local, minimum)
                if chosen:
                    selected[broker] = chosen
            else:
                _warn_few_bundles(broker, local)
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
        usage = local.max_resource_usage_with_weight(*weights)
        if usage > 1.0:
            log.error(
                "member %s resource usage is above 100%%: a limit is mis-set; ignoring signals above 100%%", broker
            )
            usage = local.max_resource_usage_with_weight_within_limit(*weights)
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
        if len(load_data.broker_data) <= 1:
            return selected
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
            minimum = _local_throughput(local) * percent
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
                _warn_few_bundles(broker, local)
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
        minimum = _local_throughput(local) * threshold * LOWER_BOUNDARY_THRESHOLD_MARGIN
        if min_throughput > minimum:
            return
        chosen = _select_at_least(load_data, local, minimum)
        if chosen:
            selected[max_broker] = chosen


class UniformLoadShedder:
    """Even out msg rate (first) or throughput between the busiest and the idlest member.

    Triggers when ``(max - min) / min x 100 > load_balancer_msg_rate_difference_shedder_threshold``
    or ``max / min > ..._multiplier_difference_shedder_threshold`` (a min of 0 counts as 1), then
    moves up to ``(max - min) x max_unload_percentage`` of that figure off the busiest member,
    heaviest tasks first, each task no larger than what is still to move. Only one member pair per
    run (PIP-364's "slow load balancing").
    """

    def find_bundles_for_unloading(self, load_data: LoadData, conf: LoadBalancerConfig) -> dict[str, list[str]]:
        selected: dict[str, list[str]] = {}
        if len(load_data.broker_data) <= 1:
            return selected
        max_rate_broker = max_tp_broker = ""
        max_rate = max_tp = -1.0
        min_rate = min_tp = float(2**31 - 1)
        for broker in sorted(load_data.broker_data):
            local = load_data.broker_data[broker].local_data
            rate, tp = _local_msg_rate(local), _local_throughput(local)
            if rate > max_rate + EPS:
                max_rate_broker, max_rate = broker, rate
            if tp > max_tp + EPS:
                max_tp_broker, max_tp = broker, tp
            if rate < min_rate - EPS:
                min_rate = rate
            if tp < min_tp - EPS:
                min_tp = tp
        if abs(min_rate) <= 1e-6:
            min_rate = 1.0
        if abs(min_tp) <= 1e-6:
            min_tp = 1.0
        rate_diff_pct = (max_rate - min_rate) * 100 / min_rate
        tp_multiplier = max_tp / min_tp
        rate_threshold = conf.load_balancer_msg_rate_difference_shedder_threshold
        tp_threshold = conf.load_balancer_msg_throughput_multiplier_difference_shedder_threshold
        rate_exceeded = rate_threshold > 0 and rate_diff_pct > rate_threshold + EPS
        tp_exceeded = tp_threshold > 0 and tp_multiplier > tp_threshold + EPS
        if not (rate_exceeded or tp_exceeded):
            return selected
        # Pulsar holds the amounts in a MutableInt: the initial amount is truncated to an int.
        # We subtract each task's rate exactly (Pulsar truncates it too), so the total moved
        # never exceeds the amount asked.
        if rate_exceeded:
            broker, traffic, minimum = max_rate_broker, "msg_rate", conf.min_unload_message
            required = float(int((max_rate - min_rate) * conf.max_unload_percentage))
        else:
            broker, traffic, minimum = max_tp_broker, "throughput", conf.min_unload_message_throughput
            required = float(int((max_tp - min_tp) * conf.max_unload_percentage))
        local = load_data.broker_data[broker].local_data
        if len(local.bundles) <= 1 or required < minimum - EPS:
            return selected
        limit = conf.max_unload_bundle_num_per_shedding
        for name, value in _sheddable(load_data, local, traffic):
            if limit != -1 and sum(len(v) for v in selected.values()) >= limit:
                break
            if value <= required + EPS:
                selected.setdefault(broker, []).append(name)
                required -= value
        return selected


class AvgShedder:
    """PIP-364: pair members by score, move half the difference, and place what it moves itself.

    score = weighted max resource usage x 100 (no history). Members sorted by score are paired
    highest with lowest, second with second-lowest, ... A pair differing by at least the low
    threshold counts a low hit for both, by at least the high threshold a high hit too; a pair
    below the low threshold resets both members' counts. A pair sheds once either member has
    ``hit_count_low`` low hits or ``hit_count_high`` high hits: ``(max - min) x max_unload_percentage``
    of msg rate (if above ``min_unload_message``) else of throughput (if above
    ``min_unload_message_throughput``), heaviest-first, each task no larger than what remains,
    and the pair's low member is remembered as the task's next owner (``select_broker``).
    """

    def __init__(self) -> None:
        self.bundle_broker_map: dict[str, str] = {}
        self.broker_score_map: dict[str, float] = {}
        self.broker_hit_count_for_high: dict[str, int] = {}
        self.broker_hit_count_for_low: dict[str, int] = {}

    @staticmethod
    def calculate_score(local: LocalBrokerData, conf: LoadBalancerConfig) -> float:
        return local.max_resource_usage_with_weight_conf(conf) * 100.0

    def _scores_sorted(self, load_data: LoadData, conf: LoadBalancerConfig) -> list[str]:
        self.broker_score_map = {b: self.calculate_score(d.local_data, conf) for b, d in load_data.broker_data.items()}
        # Pulsar sorts with an (int)(a - b) comparator, which calls scores within 1 point equal
        # (and is not transitive); we sort by the exact score, ties by member id.
        return sorted(self.broker_score_map, key=lambda b: (self.broker_score_map[b], b))

    def _find_broker_pairs(self, brokers: Sequence[str], low: float, high: float) -> list[tuple[str, str]]:
        pairs: list[tuple[str, str]] = []
        i, j = 0, len(brokers) - 1
        while i <= j:
            max_b, min_b = brokers[j], brokers[i]
            diff = self.broker_score_map[max_b] - self.broker_score_map[min_b]
            if diff < low - 1e-6:
                for b in (max_b, min_b):
                    self.broker_hit_count_for_high.pop(b, None)
                    self.broker_hit_count_for_low.pop(b, None)
            else:
                pairs.append((min_b, max_b))
                for b in {min_b, max_b}:
                    self.broker_hit_count_for_low[b] = self.broker_hit_count_for_low.get(b, 0) + 1
                if diff < high - 1e-6:
                    for b in (max_b, min_b):
                        self.broker_hit_count_for_high.pop(b, None)
                else:
                    for b in {min_b, max_b}:
                        self.broker_hit_count_for_high[b] = self.broker_hit_count_for_high.get(b, 0) + 1
            i += 1
            j -= 1
        return pairs

    def find_bundles_for_unloading(self, load_data: LoadData, conf: LoadBalancerConfig) -> dict[str, list[str]]:
        selected: dict[str, list[str]] = {}
        if len(load_data.broker_data) <= 1:
            return selected
        brokers = self._scores_sorted(load_data, conf)
        # Members that left keep no counts.
        for counts in (self.broker_hit_count_for_high, self.broker_hit_count_for_low):
            for gone in set(counts) - set(brokers):
                del counts[gone]
        pairs = self._find_broker_pairs(
            brokers, conf.load_balancer_avg_shedder_low_threshold, conf.load_balancer_avg_shedder_high_threshold
        )
        if not pairs:
            self.broker_hit_count_for_high.clear()
            self.broker_hit_count_for_low.clear()
            return selected
        hit_high = conf.load_balancer_avg_shedder_hit_count_high_threshold
        hit_low = conf.load_balancer_avg_shedder_hit_count_low_threshold
        for under, over in pairs:
            hit = (
                self.broker_hit_count_for_high.get(under, 0) >= hit_high
                or self.broker_hit_count_for_high.get(over, 0) >= hit_high
                or self.broker_hit_count_for_low.get(under, 0) >= hit_low
                or self.broker_hit_count_for_low.get(over, 0) >= hit_low
            )
            if not hit:
                continue
            for b in (under, over):
                self.broker_hit_count_for_high.pop(b, None)
                self.broker_hit_count_for_low.pop(b, None)
            self._select_bundle_for_unloading(load_data, over, under, conf, selected)
        return selected

    def _select_bundle_for_unloading(
        self, load_data: LoadData, over: str, under: str, conf: LoadBalancerConfig, selected: dict[str, list[str]]
    ) -> None:
        min_local = load_data.broker_data[under].local_data
        max_local = load_data.broker_data[over].local_data
        msg_required = (_local_msg_rate(max_local) - _local_msg_rate(min_local)) * conf.max_unload_percentage
        tp_required = (_local_throughput(max_local) - _local_throughput(min_local)) * conf.max_unload_percentage
        if msg_required > conf.min_unload_message + EPS:
            traffic, remaining = "msg_rate", msg_required
        elif tp_required > conf.min_unload_message_throughput + EPS:
            traffic, remaining = "throughput", tp_required
        else:
            log.info(
                "member %s would shed to %s, but msg rate %.1f and throughput %.0f are below the minimums",
                over,
                under,
                msg_required,
                tp_required,
            )
            return
        if len(max_local.bundles) <= 1:
            _warn_few_bundles(over, max_local)
        for name, value in _sheddable(load_data, max_local, traffic):
            if value > 0 and value <= remaining + EPS:
                selected.setdefault(over, []).append(name)
                self.bundle_broker_map[name] = under
                remaining -= value

    def select_broker(
        self,
        candidates: Sequence[str],
        bundle: str,
        load_data: LoadData,
        conf: LoadBalancerConfig,
        *,
        rng: random.Random | None = None,
    ) -> str | None:
        """The receiver chosen when shedding; otherwise a hash of a random number over the sorted candidates.

        Hashing a random number rather than the task keeps the tasks of a member that leaves from
        all landing on one member (PIP-364). Pulsar hashes with CRC32, so do we.
        """
        if not candidates:
            return None
        expected = self.bundle_broker_map.get(bundle)
        if expected is not None and expected in candidates:
            return expected
        rng = rng or random.Random(0)
        ordered = sorted(candidates)
        code = zlib.crc32(str(rng.randint(-(2**31), 2**31 - 1)).encode())
        broker = ordered[code % len(ordered)]
        self.bundle_broker_map[bundle] = broker
        return broker

    def forget(self, brokers: Mapping[str, object]) -> None:
        """Drop receivers that are no longer members."""
        for bundle in [b for b, m in self.bundle_broker_map.items() if m not in brokers]:
            del self.bundle_broker_map[bundle]
