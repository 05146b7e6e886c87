"""The difference shedders: move a share of the gap between two members (UniformLoad, Avg).

Both compare members with each other rather than with a line: ``UniformLoadShedder`` the busiest
with the idlest, ``AvgShedder`` (PIP-364) pairs of members by score. Past a threshold they move
``(max - min) x max_unload_percentage`` of msg rate or throughput off the busier member,
heaviest tasks first, each task no larger than what is still to move. The contract and the
shared selection are in ``shedding_base``.
"""

from __future__ import annotations

import logging
import random
import zlib
from collections.abc import Mapping, Sequence

from groupcoord.assignors.pulsar.config import LoadBalancerConfig
from groupcoord.assignors.pulsar.data import LoadData, LocalBrokerData
from groupcoord.assignors.pulsar.shedding_base import EPS, local_msg_rate, local_throughput, sheddable, warn_few_bundles

__all__ = [
    "AvgShedder",
    "UniformLoadShedder",
]

# One logger for the shedding family, whichever module a strategy lives in.
log = logging.getLogger("groupcoord.assignors.pulsar.shedding")


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
        max_rate_broker = max_tp_broker = ""
        max_rate = max_tp = -1.0
        min_rate = min_tp = float(2**31 - 1)
        for broker in sorted(load_data.broker_data):
            local = load_data.broker_data[broker].local_data
            rate, tp = local_msg_rate(local), local_throughput(local)
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
        for name, value in sheddable(load_data, local, traffic):
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
        msg_required = (local_msg_rate(max_local) - local_msg_rate(min_local)) * conf.max_unload_percentage
        tp_required = (local_throughput(max_local) - local_throughput(min_local)) * conf.max_unload_percentage
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
            warn_few_bundles(over, max_local)
        for name, value in sheddable(load_data, max_local, traffic):
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
