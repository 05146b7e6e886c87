"""The Pulsar load data model, its config, and LoadData built from a snapshot."""

from __future__ import annotations

import math

import pytest

from groupcoord.assignors.base import AssignmentContext, MemberInfo, TaskReplica, TaskSpec
from groupcoord.assignors.pulsar.config import MB, LoadBalancerConfig
from groupcoord.assignors.pulsar.convert import load_data_from_context
from groupcoord.assignors.pulsar.data import (
    DEFAULT_MESSAGE_RATE,
    DEFAULT_MESSAGE_THROUGHPUT,
    BundleData,
    LocalBrokerData,
    NamespaceBundleStats,
    ResourceUsage,
    TimeAverageBrokerData,
    TimeAverageMessageData,
    default_bundle_stats,
)
from groupcoord.assignors.snapshot import LoadSnapshot, TaskLoadStats, WorkerLoadStats


def test_percent_usage_and_unknown_limit() -> None:
    assert ResourceUsage(30, 200).percent_usage() == pytest.approx(15.0)
    assert ResourceUsage(30, 0).percent_usage() == 0.0  # limit <= 0 counts as 0%
    assert ResourceUsage(30, -1).percent_usage() == 0.0


def test_max_resource_usage_leaves_heap_memory_out() -> None:
    local = LocalBrokerData(
        cpu=ResourceUsage(40, 100),
        memory=ResourceUsage(99, 100),
        direct_memory=ResourceUsage(10, 100),
        bandwidth_in=ResourceUsage(55, 100),
        bandwidth_out=ResourceUsage(20, 100),
    )
    assert local.max_resource_usage() == pytest.approx(0.55)  # a fraction, heap's 99% ignored
    assert local.max_resource_usage_with_weight(1.0, 1.0, 0.5, 1.0) == pytest.approx(0.40)
    assert local.max_resource_usage_with_weight(2.0, 1.0, 1.0, 1.0) == pytest.approx(0.80)


def test_weighted_usage_counts_signals_over_100() -> None:
    """After Pulsar PR #18645 (the revert of #16937) a signal over its limit counts as it is."""
    local = LocalBrokerData(cpu=ResourceUsage(150, 100), bandwidth_in=ResourceUsage(60, 100))
    assert local.max_resource_usage_with_weight(1, 1, 1, 1) == pytest.approx(1.5)
    assert not hasattr(local, "max_resource_usage_with_weight_within_limit")


def test_update_bundle_data_sums_rates_and_counts() -> None:
    local = LocalBrokerData()
    local.update_bundle_data(
        {
            "a": NamespaceBundleStats(10, 20, 100, 200, topics=3, producer_count=1, consumer_count=2),
            "b": NamespaceBundleStats(1, 2, 10, 20, topics=1, producer_count=4, consumer_count=0),
        }
    )
    assert (local.msg_rate_in, local.msg_rate_out) == (11, 22)
    assert (local.msg_throughput_in, local.msg_throughput_out) == (110, 220)
    assert (local.num_topics, local.num_bundles, local.num_producers, local.num_consumers) == (4, 2, 5, 2)
    assert local.bundles == {"a", "b"}


def test_time_average_recurrence_seed_example() -> None:
    """Seed 000 §2.1.1: samples 1..5 with at most 3 samples give 1, 3/2, 2, 8/3, 31/9."""
    tad = TimeAverageMessageData(max_samples=3)
    expected = [1.0, 1.5, 2.0, 8 / 3, 31 / 9]
    for x, want in zip([1, 2, 3, 4, 5], expected):
        tad.update(x, x, x, x)
        assert tad.msg_rate_in == pytest.approx(want, rel=1e-12)
        assert tad.msg_throughput_out == pytest.approx(want, rel=1e-12)
    assert tad.num_samples == 3


def test_time_average_defaults_are_overwritten_by_first_sample() -> None:
    tad = TimeAverageMessageData.with_defaults(10, default_bundle_stats())
    assert tad.msg_rate_in == DEFAULT_MESSAGE_RATE
    tad.update(7, 8, 9, 10)
    assert (tad.msg_throughput_in, tad.msg_throughput_out, tad.msg_rate_in, tad.msg_rate_out) == (7, 8, 9, 10)


def test_bundle_data_default_sample_counts() -> None:
    bd = BundleData()
    assert bd.short_term_data.max_samples == 10
    assert bd.long_term_data.max_samples == 1000
    assert bd.long_term_data.msg_throughput_in == DEFAULT_MESSAGE_THROUGHPUT


def test_time_average_broker_data_sums_bundles_and_defaults() -> None:
    one = BundleData()
    one.update(NamespaceBundleStats(msg_rate_in=100, msg_rate_out=50, msg_throughput_in=1000, msg_throughput_out=500))
    tabd = TimeAverageBrokerData()
    tabd.reset(["one", "unknown"], {"one": one}, default_bundle_stats())
    assert tabd.long_term_msg_rate_in == pytest.approx(100 + DEFAULT_MESSAGE_RATE)
    assert tabd.short_term_msg_throughput_out == pytest.approx(500 + DEFAULT_MESSAGE_THROUGHPUT)


def test_config_defaults_follow_the_seeds() -> None:
    c = LoadBalancerConfig()
    assert c.load_balancer_broker_overloaded_threshold_percentage == 85
    assert c.load_balancer_history_resource_percentage == 0.9
    assert c.load_balancer_avg_shedder_low_threshold == 15
    assert c.load_balancer_avg_shedder_high_threshold == 40
    assert c.load_balancer_avg_shedder_hit_count_low_threshold == 8
    assert c.load_balancer_avg_shedder_hit_count_high_threshold == 2
    assert c.max_unload_percentage == 0.2
    assert c.min_unload_message == 1000
    assert c.min_unload_message_throughput == 1 * MB
    assert c.load_balancer_bundle_unload_min_throughput_threshold == 10  # MB
    assert c.load_balancer_shedding_grace_period_minutes == 30
    assert c.load_balancer_shedding_interval_minutes == 1
    assert c.shedding_interval_s == 60.0
    assert c.load_balancer_namespace_maximum_bundles == 128
    assert c.load_balancer_namespace_bundle_max_bandwidth_mbytes == 100
    assert c.max_unload_bundle_num_per_shedding == -1
    assert c.default_namespace_bundle_split_algorithm == "range_equally_divide"


@pytest.mark.parametrize(
    "kwargs",
    [
        {"load_balancer_history_resource_percentage": 90},  # 0-100 where a fraction is meant
        {"max_unload_percentage": 20},
        {"load_balancer_broker_threshold_shedder_percentage": 0.1 - 1},
        {"load_balancer_avg_shedder_low_threshold": 50},  # above the high threshold
        {"load_balancer_avg_shedder_hit_count_high_threshold": 0},
        {"max_unload_bundle_num_per_shedding": 0},
        {"default_namespace_bundle_split_algorithm": "nope"},
        {"load_balancer_shedding_interval_minutes": 0},
        {"min_unload_message": math.nan},
    ],
)
def test_config_rejects_wrong_units_and_relations(kwargs: dict[str, object]) -> None:
    with pytest.raises(ValueError):
        LoadBalancerConfig(**kwargs)  # type: ignore[arg-type]


def test_load_data_from_context_maps_snapshot_to_pulsar_model() -> None:
    snapshot = LoadSnapshot(
        group_id="g",
        snapshot_id="s1",
        tasks={
            "t1": TaskLoadStats(
                "t1",
                "a",
                short_samples=10,
                short_msg_rate_in=100,
                short_msg_rate_out=50,
                short_msg_throughput_in=1000,
                short_msg_throughput_out=500,
                long_samples=400,
                long_msg_rate_in=80,
                long_msg_rate_out=40,
                topics=3,
                producers=2,
                consumers=5,
            ),
        },
        workers={"a": WorkerLoadStats("a", cpu_usage=150, cpu_limit=400, memory_usage=900, memory_limit=1000)},
    )
    ctx = AssignmentContext(
        group_id="g",
        generation=3,
        members=(MemberInfo("a", owned=(TaskReplica("t1"), TaskReplica("t2"))), MemberInfo("b")),
        tasks=(TaskSpec("t1"), TaskSpec("t2")),
        load_snapshot=snapshot,
    )
    ld = load_data_from_context(ctx)
    a = ld.broker_data["a"]
    assert a.local_data.cpu.percent_usage() == pytest.approx(37.5)
    assert a.local_data.max_resource_usage() == pytest.approx(0.375)  # memory 90% left out
    assert a.local_data.bundles == {"t1", "t2"}
    # t2 has no row: Pulsar's default stats (50 msg/s each way)
    assert a.local_data.msg_rate_in == pytest.approx(100 + DEFAULT_MESSAGE_RATE)
    assert a.local_data.last_stats["t1"].topics == 3
    assert a.local_data.num_producers == 2
    assert a.time_average_data.long_term_msg_rate_in == pytest.approx(80 + DEFAULT_MESSAGE_RATE)
    assert ld.bundle_data["t1"].long_term_data.num_samples == 400
    assert ld.bundle_data["t2"].short_term_data.num_samples == 0
    # a member without a report is an idle member
    assert ld.broker_data["b"].local_data.max_resource_usage() == 0.0
    assert ld.round_id is not None
