"""The four shedders on the seeds' hand-computed cases."""

from __future__ import annotations

import pytest

from groupcoord.assignors.pulsar.config import MB, LoadBalancerConfig
from groupcoord.assignors.pulsar.shedding import AvgShedder, OverloadShedder, ThresholdShedder, UniformLoadShedder
from groupcoord.assignors.pulsar.testing import broker, bundle, load_data

CONF = LoadBalancerConfig()


def mb_bundles(prefix: str, sizes: list[float], rate: float = 0.0) -> dict:
    return {f"{prefix}{i}": bundle(rate=rate, mbytes=s) for i, s in enumerate(sizes)}


# ---- ThresholdShedder -----------------------------------------------------------------------------


def threshold_cluster(usages: list[float], sizes: list[float]) -> dict:
    return {f"b{i + 1}": broker(cpu=u, bundles=mb_bundles(f"b{i + 1}-", sizes)) for i, u in enumerate(usages)}


def test_threshold_shedder_seed_example_avg_71_threshold_10() -> None:
    """Seed 000 §2.3.2: avg 71, threshold 10: b4 (89) is overloaded, b2/b3 balanced, b1 underloaded."""
    sizes = [8, 6, 30, 4, 2]  # MB/s each, 50 MB/s per member
    ld = load_data(threshold_cluster([50, 70, 75, 89], sizes))
    shedder = ThresholdShedder()
    result = shedder.find_bundles_for_unloading(ld, CONF)
    assert shedder.broker_avg_usage(ld, CONF) == pytest.approx(0.71)
    # 0.89 - 0.71 - 0.10 + 0.05 = 0.13 of 50 MB/s = 6.5 MB/s < 10 MB/s minimum: nothing yet
    assert result == {}
    big = [40, 30, 20, 10]  # 100 MB/s: 13 MB/s to offload, heaviest first until reached
    ld = load_data(threshold_cluster([50, 70, 75, 89], big))
    result = ThresholdShedder().find_bundles_for_unloading(ld, CONF)
    assert result == {"b4": ["b4-0"]}


def test_threshold_shedder_selects_until_minimum_reached() -> None:
    ld = load_data(threshold_cluster([50, 70, 75, 89], [8, 6, 5, 5, 4, 2] * 8))  # 240 MB/s, 13% = 31.2
    result = ThresholdShedder().find_bundles_for_unloading(ld, CONF)
    chosen = result["b4"]
    sizes = {f"b4-{i}": s for i, s in enumerate([8, 6, 5, 5, 4, 2] * 8)}
    assert sum(sizes[c] for c in chosen) >= 0.13 * 240
    assert sum(sizes[c] for c in chosen[:-1]) < 0.13 * 240  # never a task more than needed


def test_threshold_shedder_lower_boundary_shedding() -> None:
    conf = LoadBalancerConfig(lower_boundary_shedding_enabled=True)
    ld = load_data(threshold_cluster([55, 78, 78, 73], [50, 50, 50, 50]))  # avg 71, nobody >= 81
    assert ThresholdShedder().find_bundles_for_unloading(ld, CONF) == {}
    result = ThresholdShedder().find_bundles_for_unloading(ld, conf)
    # b1 (55) is under 61: take 10% x 0.5 of the busiest member's 200 MB/s (10 MB/s) off b2
    assert result == {"b2": ["b2-0"]}


def test_threshold_shedder_history_over_unloading_example() -> None:
    """PIP-364: 90/10, then both truly 50: scores 86/14, so b1 keeps unloading (over unloading)."""
    shedder = ThresholdShedder()
    sizes = [20] * 10
    round1 = load_data(threshold_cluster([90, 10], sizes), round_id=1)
    assert "b1" in shedder.find_bundles_for_unloading(round1, CONF)
    round2 = load_data(threshold_cluster([50, 50], sizes), round_id=2)
    assert "b1" in shedder.find_bundles_for_unloading(round2, CONF)
    assert shedder.broker_avg_resource_usage["b1"] == pytest.approx(0.86)
    assert shedder.broker_avg_resource_usage["b2"] == pytest.approx(0.14)
    round3 = load_data(threshold_cluster([14, 86], sizes), round_id=3)
    shedder.find_bundles_for_unloading(round3, CONF)
    assert shedder.broker_avg_resource_usage["b1"] == pytest.approx(0.788)
    assert shedder.broker_avg_resource_usage["b2"] == pytest.approx(0.212)
    # the history advances once per round, however often the same round is looked at
    shedder.find_bundles_for_unloading(round3, CONF)
    assert shedder.broker_avg_resource_usage["b1"] == pytest.approx(0.788)


# ---- OverloadShedder ------------------------------------------------------------------------------


def test_overload_shedder_offloads_usage_minus_threshold_plus_5_points() -> None:
    ld = load_data(
        {
            "b1": broker(cpu=90, memory=99, bundles=mb_bundles("b1-", [3, 5, 4, 2, 6])),  # 20 MB/s
            "b2": broker(cpu=84.9, memory=99, bundles=mb_bundles("b2-", [3, 5])),
        }
    )
    result = OverloadShedder().find_bundles_for_unloading(ld, CONF)
    # (0.90 - 0.85 + 0.05) x 20 MB/s = 2 MB/s: the heaviest task alone covers it
    assert result == {"b1": ["b1-4"]}


def test_overload_shedder_ignores_heap_memory() -> None:
    ld = load_data({"b1": broker(cpu=10, memory=100, bundles=mb_bundles("x", [1, 1])), "b2": broker(cpu=10)})
    assert OverloadShedder().find_bundles_for_unloading(ld, CONF) == {}


# ---- UniformLoadShedder ---------------------------------------------------------------------------


def test_uniform_msg_rate_example_50k_vs_30k() -> None:
    """PIP-364: 50K vs 30K msg/s is (50-30)/30 = 66% > 50%: unload from the 50K member."""
    rates = [30000, 10000, 3000, 2000, 1500, 1000, 800, 700, 500, 500]  # sums to 50000
    b1 = {f"b1-{i}": bundle(rate=r, mbytes=1) for i, r in enumerate(rates)}
    b2 = {"b2-0": bundle(rate=30000, mbytes=10)}
    ld = load_data({"b1": broker(bundles=b1), "b2": broker(bundles=b2)})
    result = UniformLoadShedder().find_bundles_for_unloading(ld, CONF)
    # (50000 - 30000) x 0.2 = 4000 msg/s, heaviest fitting first: 3000, then 1000 fits the 1000 left
    assert result == {"b1": ["b1-2", "b1-5"]}
    chosen = sum(r for i, r in enumerate(rates) if f"b1-{i}" in result["b1"])
    assert chosen <= 4000


def test_uniform_throughput_example_450_vs_100_mb() -> None:
    """PIP-364: 450 vs 100 MB/s is 4.5 > 4: unload by throughput (msg rates equal)."""
    b1 = {f"b1-{i}": bundle(rate=100, mbytes=s) for i, s in enumerate([200, 100, 60, 50, 40])}
    b2 = {"b2-0": bundle(rate=500, mbytes=100)}
    ld = load_data({"b1": broker(bundles=b1), "b2": broker(bundles=b2)})
    result = UniformLoadShedder().find_bundles_for_unloading(ld, CONF)
    # (450 - 100) x 0.2 = 70 MB/s: 60 fits, then nothing <= 10 MB/s is left
    assert result == {"b1": ["b1-2"]}


def test_uniform_below_thresholds_and_limits() -> None:
    b1 = {f"b1-{i}": bundle(rate=r, mbytes=1) for i, r in enumerate([20000, 20000])}
    b2 = {"b2-0": bundle(rate=30000, mbytes=1), "b2-1": bundle(rate=100, mbytes=1)}
    ld = load_data({"b1": broker(bundles=b1), "b2": broker(bundles=b2)})
    assert UniformLoadShedder().find_bundles_for_unloading(ld, CONF) == {}  # 40K vs 30.1K: 33% < 50%
    many = {f"b1-{i}": bundle(rate=500, mbytes=0.1) for i in range(100)}  # 50K
    ld = load_data({"b1": broker(bundles=many), "b2": broker(bundles={"b2-0": bundle(rate=30000, mbytes=5)})})
    limited = LoadBalancerConfig(max_unload_bundle_num_per_shedding=3)
    assert len(UniformLoadShedder().find_bundles_for_unloading(ld, limited)["b1"]) == 3
    strict = LoadBalancerConfig(min_unload_message=5000)  # 4000 to move < 5000 minimum
    assert UniformLoadShedder().find_bundles_for_unloading(ld, strict) == {}


# ---- AvgShedder -----------------------------------------------------------------------------------


def avg_cluster(scores: list[float], rates: list[float]) -> dict:
    return {
        f"b{i + 1}": broker(cpu=s, bundles={f"b{i + 1}-{j}": bundle(rate=rates[i] / 4, mbytes=1) for j in range(4)})
        for i, s in enumerate(scores)
    }


def test_avg_shedder_pairs_and_high_threshold_hits() -> None:
    """PIP-364: 20,30,52,70,80 pair (20,80) and (30,70); both differ by >= 40, two hits needed."""
    conf = LoadBalancerConfig(max_unload_percentage=0.5, min_unload_message=10)
    ld = load_data(avg_cluster([20, 30, 52, 70, 80], [400, 400, 400, 2000, 2000]))
    shedder = AvgShedder()
    assert shedder.find_bundles_for_unloading(ld, conf) == {}  # first hit
    assert shedder.broker_hit_count_for_high == {"b1": 1, "b5": 1, "b2": 1, "b4": 1}  # 70 - 30 counts as 40
    result = shedder.find_bundles_for_unloading(ld, conf)
    assert set(result) == {"b4", "b5"}
    for task in result["b5"]:
        assert shedder.select_broker(["b1", "b2", "b3", "b4", "b5"], task, ld, conf) == "b1"
    for task in result["b4"]:
        assert shedder.select_broker(["b1", "b2", "b3", "b4", "b5"], task, ld, conf) == "b2"
    assert shedder.broker_hit_count_for_high == {}  # reset after shedding


def test_avg_shedder_moves_half_the_difference_1000_500_to_750() -> None:
    conf = LoadBalancerConfig(max_unload_percentage=0.5, min_unload_message=100)
    hot = {
        "hot-a": bundle(rate=400),
        "hot-b": bundle(rate=250),
        "hot-c": bundle(rate=200),
        "hot-d": bundle(rate=100),
        "hot-e": bundle(rate=50),
    }  # 1000 msg/s
    cold = {"cold-a": bundle(rate=500)}
    ld = load_data({"hot": broker(cpu=80, bundles=hot), "cold": broker(cpu=20, bundles=cold)})
    shedder = AvgShedder()
    shedder.find_bundles_for_unloading(ld, conf)
    result = shedder.find_bundles_for_unloading(ld, conf)
    # (1000 - 500) x 0.5 = 250 to move: 400 is too big, 250 fits exactly, then nothing is left
    assert result == {"hot": ["hot-b"]}
    assert 1000 - 250 == 500 + 250 == 750


def test_avg_shedder_low_threshold_needs_8_consecutive_hits() -> None:
    conf = LoadBalancerConfig(max_unload_percentage=0.5, min_unload_message=10)
    ld = load_data(avg_cluster([40, 60], [400, 2000]))  # differ by 20: low hits only
    shedder = AvgShedder()
    for _ in range(7):
        assert shedder.find_bundles_for_unloading(ld, conf) == {}
    assert shedder.find_bundles_for_unloading(ld, conf) != {}
    # a balanced round resets the count
    for _ in range(7):
        shedder.find_bundles_for_unloading(ld, conf)
    shedder.find_bundles_for_unloading(load_data(avg_cluster([50, 55], [400, 2000])), conf)
    assert shedder.find_bundles_for_unloading(ld, conf) == {}


def test_avg_shedder_places_new_tasks_by_hash_within_candidates() -> None:
    import random

    shedder = AvgShedder()
    ld = load_data(avg_cluster([10, 20, 30], [1, 1, 1]))
    rng = random.Random(3)
    picks = {shedder.select_broker(["b1", "b3"], f"new-{i}", ld, CONF, rng=rng) for i in range(40)}
    assert picks == {"b1", "b3"}


# ---- common rules ---------------------------------------------------------------------------------

SHEDDERS = [OverloadShedder, ThresholdShedder, UniformLoadShedder, AvgShedder]


@pytest.mark.parametrize("cls", [ThresholdShedder, UniformLoadShedder, AvgShedder])
def test_one_member_gives_nothing_to_move_by_each_strategy_s_own_rule(cls: type) -> None:
    """The "only 1 broker" guard is the assignor's (tests/assignors/pulsar/test_fidelity.py); a single member
    is its own average, min and max, so these find nothing anyway. OverloadShedder does shed it."""
    ld = load_data({"b1": broker(cpu=99, bundles=mb_bundles("x", [50] * 5, rate=9000))})
    shedder = cls()
    for _ in range(3):
        assert shedder.find_bundles_for_unloading(ld, LoadBalancerConfig(max_unload_percentage=0.5)) == {}


@pytest.mark.parametrize("cls", SHEDDERS)
def test_recently_unloaded_tasks_are_skipped(cls: type) -> None:
    conf = LoadBalancerConfig(max_unload_percentage=0.5)
    hot = {f"h{i}": bundle(rate=3000, mbytes=40) for i in range(6)}
    cold = {"c0": bundle(rate=100, mbytes=1), "c1": bundle(rate=100, mbytes=1)}
    brokers = {"hot": broker(cpu=99, bundles=hot), "cold": broker(cpu=5, bundles=cold)}
    free = cls()
    results = [free.find_bundles_for_unloading(load_data(brokers), conf) for _ in range(2)]
    assert results[-1].get("hot")  # (AvgShedder needs its second high hit)
    graced = cls()
    ld = load_data(brokers, recently_unloaded={name: 0.0 for name in hot})
    for _ in range(2):
        assert graced.find_bundles_for_unloading(ld, conf) == {}
    assert MB == 1024 * 1024
