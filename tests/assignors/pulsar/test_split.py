"""Task split: the four boundary algorithms, the split conditions, and the children."""

from __future__ import annotations

from types import MappingProxyType

import pytest

from groupcoord.assignors.base import TaskSpec
from groupcoord.assignors.pulsar.config import MB, LoadBalancerConfig
from groupcoord.assignors.pulsar.data import NamespaceBundleStats
from groupcoord.assignors.pulsar.split import (
    TopicInfo,
    find_bundles_to_split,
    flow_or_qps_equally_divide,
    range_equally_divide,
    specified_positions_divide,
    split_range,
    split_task,
    topic_count_equally_divide,
)
from groupcoord.assignors.pulsar.testing import broker, bundle, load_data

CONF = LoadBalancerConfig()


def test_range_equally_divide_seed_example() -> None:
    assert range_equally_divide(0x0000, 0x8000) == [0x4000]
    assert range_equally_divide(5, 6) is None  # upper must exceed lower + 1


def test_topic_count_equally_divide_seed_example() -> None:
    hashes = [0x0000, 0x0005, 0x0010, 0x0015, 0x0020, 0x0025]
    assert topic_count_equally_divide(hashes) == [0x0012]
    assert topic_count_equally_divide([0x10]) is None


def test_specified_positions_divide_keeps_inside_positions() -> None:
    assert specified_positions_divide(0x1000, 0x8000, [0x9000, 0x3000, 0x1000, 0x2000], 5) == [0x2000, 0x3000]
    assert specified_positions_divide(0x1000, 0x8000, [0x9000], 5) is None
    assert specified_positions_divide(0x1000, 0x8000, [0x2000], 1) is None
    with pytest.raises(ValueError):
        specified_positions_divide(0, 10, [], 5)


def test_flow_or_qps_equally_divide() -> None:
    topics = [TopicInfo(0x10, 15000), TopicInfo(0x20, 15000), TopicInfo(0x30, 15000), TopicInfo(0x40, 0)]
    # 45000 msg/s > 30000 x 1.1; 15000 + 15000 does not pass 30000, adding the third would:
    # cut one past the midpoint of 0x20 and 0x30. The idle topic 0x40 is ignored.
    assert flow_or_qps_equally_divide(topics, 30000, 100, 10) == [0x29]
    # under max x (1 + 10%) in both rate and throughput: no split
    assert flow_or_qps_equally_divide(topics[:2], 30000, 100, 10) is None
    # by throughput (MB -> bytes): three 60 MB/s topics against 100 MB: a cut before each of the last two
    heavy = [TopicInfo(h, 1, 60 * MB) for h in (0x100, 0x200, 0x300)]
    assert flow_or_qps_equally_divide(heavy, 30000, 100, 10) == [0x181, 0x281]


def test_split_range_half_open() -> None:
    assert split_range(0, 0x100, [0x80, 0x40, 0x200]) == [(0, 0x40), (0x40, 0x80), (0x80, 0x100)]


def stats_cluster(**stats: NamespaceBundleStats) -> object:
    """One member holding the given tasks, a second idle member (split needs more than one)."""
    bundles = {name: bundle(rate=100, mbytes=1) for name in stats}
    ld = load_data({"b1": broker(cpu=50, bundles=bundles), "b2": broker(cpu=10)})
    ld.broker_data["b1"].local_data.last_stats = dict(stats)
    return ld


def test_split_conditions() -> None:
    ld = stats_cluster(
        few=NamespaceBundleStats(topics=1, producer_count=5000),  # < 2 topics: never
        topics=NamespaceBundleStats(topics=1001),
        sessions=NamespaceBundleStats(topics=2, producer_count=600, consumer_count=401),
        quiet=NamespaceBundleStats(topics=5, producer_count=1, consumer_count=1),
    )
    assert find_bundles_to_split(ld, CONF, bundle_count=4) == ["sessions", "topics"]
    ld.bundle_data["quiet"] = bundle(rate=100, long_rate=30001, mbytes=1)
    assert "quiet" in find_bundles_to_split(ld, CONF, bundle_count=4)
    ld.bundle_data["quiet"] = bundle(rate=100, long_rate=10, mbytes=101)
    assert "quiet" in find_bundles_to_split(ld, CONF, bundle_count=4)
    # the group limit: 126 tasks + 2 splits reach 128
    assert find_bundles_to_split(ld, CONF, bundle_count=126) == ["quiet", "sessions"]
    assert find_bundles_to_split(ld, LoadBalancerConfig(load_balancer_auto_bundle_split_enabled=False), 4) == []


def task(task_id: str, **attrs: str) -> TaskSpec:
    return TaskSpec(task_id, replicas=2, pool="p", attributes=MappingProxyType(attrs))


def test_split_task_range_equally_divide_names_children_like_pulsar() -> None:
    parent = task(
        "orders/0x00000000_0x80000000", hash_lower="0x00000000", hash_upper="0x80000000", topic_hashes="0x10,0x50000000"
    )
    split = split_task(parent, CONF)
    assert split is not None and split.parent_task_id == parent.task_id
    assert [c.task_id for c in split.children] == ["orders/0x00000000_0x40000000", "orders/0x40000000_0x80000000"]
    assert [c.attributes["topic_hashes"] for c in split.children] == ["0x00000010", "0x50000000"]
    assert all(c.replicas == 2 and c.pool == "p" for c in split.children)


def test_split_task_other_algorithms_and_failures() -> None:
    t = task(
        "orders",
        hash_lower="0",
        hash_upper="0x100",
        topic_hashes="0x0,0x5,0x10,0x15,0x20,0x25",
        split_positions="0x80,0x200",
    )
    by_count = split_task(t, CONF, "topic_count_equally_divide")
    assert by_count is not None
    assert [c.attributes["hash_upper"] for c in by_count.children] == ["0x00000012", "0x00000100"]
    by_pos = split_task(t, CONF, "specified_positions_divide")
    assert by_pos is not None and [c.task_id for c in by_pos.children] == [
        "orders/0x00000000_0x00000080",
        "orders/0x00000080_0x00000100",
    ]
    assert split_task(TaskSpec("no-range"), CONF) is None
    narrow = CONF.__class__(supported_namespace_bundle_split_algorithms=("range_equally_divide",))
    with pytest.raises(ValueError):
        split_task(t, narrow, "topic_count_equally_divide")
