"""Placement strategies on the seeds' examples."""

from __future__ import annotations

import math
import random

from groupcoord.assignors.pulsar.config import LoadBalancerConfig
from groupcoord.assignors.pulsar.placement import (
    LeastLongTermMessageRate,
    LeastResourceUsageWithWeight,
    RoundRobinBrokerSelector,
)
from groupcoord.assignors.pulsar.testing import broker, bundle, load_data

CONF = LoadBalancerConfig()


def usage_cluster(usages: list[float]) -> dict:
    return {f"b{i + 1}": broker(cpu=u, bundles={f"b{i + 1}-t": bundle(rate=100)}) for i, u in enumerate(usages)}


def picks(strategy_factory, usages: list[float], n: int = 200) -> set[str]:
    chosen: set[str] = set()
    ld = load_data(usage_cluster(usages), round_id=1)
    names = sorted(ld.broker_data)
    for seed in range(n):
        chosen.add(strategy_factory().select_broker(names, "new", ld, CONF, rng=random.Random(seed)))
    return chosen


def test_least_resource_usage_10_30_80_picks_the_two_under_average() -> None:
    """PIP-364: avg 40; 10+10 <= 40 and 30+10 <= 40, so b1 and b2, never b3."""
    assert picks(LeastResourceUsageWithWeight, [10, 30, 80]) == {"b1", "b2"}


def test_least_resource_usage_40x4_69_70_falls_back_to_everyone() -> None:
    """PIP-364: avg 49.83; 40+10 > 49.83 so no candidate: random over all, overloaded ones included."""
    assert picks(LeastResourceUsageWithWeight, [40, 40, 40, 40, 69, 70]) == {"b1", "b2", "b3", "b4", "b5", "b6"}


def test_least_resource_usage_zero_threshold_includes_near_average() -> None:
    """PIP-364: 10,60,70,80,80 with threshold 0: avg 60, so b1 and b2 (the latter likely to overload)."""
    conf = LoadBalancerConfig(load_balancer_average_resource_usage_difference_threshold_percentage=0)
    ld = load_data(usage_cluster([10, 60, 70, 80, 80]), round_id=1)
    names = sorted(ld.broker_data)
    chosen = {
        LeastResourceUsageWithWeight().select_broker(names, "t", ld, conf, rng=random.Random(s)) for s in range(100)
    }
    assert chosen == {"b1", "b2"}


def test_least_resource_usage_history_advances_once_per_round() -> None:
    strategy = LeastResourceUsageWithWeight()
    first = load_data(usage_cluster([90, 10]), round_id=1)
    strategy.select_broker(["b1", "b2"], "t", first, CONF, rng=random.Random(0))
    strategy.select_broker(["b1", "b2"], "t", first, CONF, rng=random.Random(0))
    assert strategy.broker_avg_resource_usage_with_weight["b1"] == 0.9
    second = load_data(usage_cluster([50, 50]), round_id=2)
    strategy.select_broker(["b1", "b2"], "t", second, CONF, rng=random.Random(0))
    assert math.isclose(strategy.broker_avg_resource_usage_with_weight["b1"], 0.86)


def test_least_long_term_message_rate_preallocation_spreads_a_round() -> None:
    """PIP-364: b1 100, b2 110; two 20 msg/s tasks: b1 first, then b2 (b1 scores 100 + 20 = 120)."""
    ld = load_data(
        {
            "b1": broker(cpu=10, bundles={"x": bundle(rate=100)}),
            "b2": broker(cpu=10, bundles={"y": bundle(rate=110)}),
        }
    )
    ld.bundle_data["n1"] = bundle(rate=20)
    ld.bundle_data["n2"] = bundle(rate=20)
    strategy = LeastLongTermMessageRate()
    first = strategy.select_broker(["b1", "b2"], "n1", ld, CONF, rng=random.Random(0))
    assert first == "b1"
    ld.preallocate(first, "n1")
    assert LeastLongTermMessageRate.get_score(ld.broker_data["b1"], CONF) == 120
    assert strategy.select_broker(["b1", "b2"], "n2", ld, CONF, rng=random.Random(0)) == "b2"


def test_least_long_term_message_rate_overload_cutoff() -> None:
    ld = load_data(
        {
            "idle-but-hot": broker(cpu=90, bundles={"x": bundle(rate=1)}),  # 90% > 85%: score inf
            "busy": broker(cpu=50, bundles={"y": bundle(rate=5000)}),
        }
    )
    assert LeastLongTermMessageRate.get_score(ld.broker_data["idle-but-hot"], CONF) == math.inf
    assert LeastLongTermMessageRate().select_broker(["idle-but-hot", "busy"], "t", ld, CONF) == "busy"
    all_hot = load_data({"a": broker(cpu=95), "b": broker(cpu=99)})
    chosen = {
        LeastLongTermMessageRate().select_broker(["a", "b"], "t", all_hot, CONF, rng=random.Random(s))
        for s in range(50)
    }
    assert chosen == {"a", "b"}  # all overloaded: random among all


def test_least_long_term_message_rate_random_among_ties() -> None:
    ld = load_data({n: broker(cpu=10, bundles={f"{n}-t": bundle(rate=0.1 + 0.2)}) for n in ("a", "b", "c")})
    ld.broker_data["c"].time_average_data.long_term_msg_rate_in += 1e-13  # a float-noise "difference"
    chosen = {
        LeastLongTermMessageRate().select_broker(["a", "b", "c"], "t", ld, CONF, rng=random.Random(s))
        for s in range(60)
    }
    assert chosen == {"a", "b", "c"}


def test_round_robin_cycles_through_candidates_in_the_given_order() -> None:
    rr = RoundRobinBrokerSelector()
    ld = load_data(usage_cluster([1, 2, 3]))
    assert [rr.select_broker(["b3", "b1", "b2"], "t", ld, CONF) for _ in range(4)] == ["b3", "b1", "b2", "b3"]
    assert rr.select_broker([], "t", ld, CONF) is None
