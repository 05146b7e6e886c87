"""Task (bundle) split: when a task is too big, and where to cut its hash range.

A splittable task carries its hash range ``[lower, upper)`` in the attributes ``hash_lower`` and
``hash_upper`` — integers written in any base Python's ``int(s, 0)`` reads ("0x40000000" or
"1073741824"); Pulsar's full range ends at 0xffffffff, ours is half-open so either
0xffffffff or 0x100000000 works as the last upper bound. Its topics' hash positions go in
``topic_hashes`` (comma-separated, same syntax) and, for ``flow_or_qps_equally_divide``, their
msg rates and throughputs (bytes/s) in ``topic_msg_rates`` / ``topic_throughputs`` (same order).
``split_positions`` feeds ``specified_positions_divide``; ``split_algorithm`` overrides the
configured default for one task.

Each algorithm returns the boundaries strictly inside the range (sorted) or None when it
cannot split, as Pulsar's ``NamespaceBundleSplitAlgorithm`` implementations do.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise
from types import MappingProxyType

from groupcoord.assignors.base import TaskSpec, TaskSplit
from groupcoord.assignors.pulsar.config import MB, LoadBalancerConfig
from groupcoord.assignors.pulsar.data import BundleData, LoadData

__all__ = [
    "TopicInfo",
    "child_share",
    "estimate_children",
    "find_bundles_to_split",
    "flow_or_qps_equally_divide",
    "parse_position",
    "range_equally_divide",
    "specified_positions_divide",
    "split_boundaries",
    "split_range",
    "split_task",
    "task_hash_range",
    "task_topics",
    "topic_count_equally_divide",
]

log = logging.getLogger(__name__)

_RANGE_SUFFIX = re.compile(r"/0x[0-9a-fA-F]+_0x[0-9a-fA-F]+$")


@dataclass(frozen=True, slots=True)
class TopicInfo:
    """One topic of a task: its hash position and its load."""

    hash: int
    msg_rate: float = 0.0
    throughput: float = 0.0


def parse_position(text: str) -> int:
    """An integer position, "0x..." hex or decimal."""
    return int(text.strip(), 0)


def _parse_list(text: str | None) -> list[str]:
    return [t for t in (text or "").split(",") if t.strip()]


def task_hash_range(task: TaskSpec) -> tuple[int, int] | None:
    """``(lower, upper)`` from the task's attributes, or None when it has no (valid) range."""
    try:
        lower = parse_position(task.attributes["hash_lower"])
        upper = parse_position(task.attributes["hash_upper"])
    except (KeyError, ValueError):
        return None
    return (lower, upper) if upper > lower else None


def task_topics(task: TaskSpec) -> list[TopicInfo]:
    """The task's topics with their rates (0 where not given)."""
    hashes = [parse_position(h) for h in _parse_list(task.attributes.get("topic_hashes"))]
    rates = [float(r) for r in _parse_list(task.attributes.get("topic_msg_rates"))]
    tps = [float(t) for t in _parse_list(task.attributes.get("topic_throughputs"))]
    return [
        TopicInfo(h, rates[i] if i < len(rates) else 0.0, tps[i] if i < len(tps) else 0.0) for i, h in enumerate(hashes)
    ]


def range_equally_divide(lower: int, upper: int) -> list[int] | None:
    """One cut in the middle of the hash range."""
    if upper <= lower + 1:
        return None
    return [lower + (upper - lower) // 2]


def topic_count_equally_divide(topic_hashes: Sequence[int]) -> list[int] | None:
    """One cut halfway between the two middle topics, so each side has half the topics."""
    if len(topic_hashes) <= 1:
        return None
    ordered = sorted(topic_hashes)
    start = ordered[max(len(ordered) // 2 - 1, 0)]
    end = ordered[len(ordered) // 2]
    return [start + (end - start) // 2]


def specified_positions_divide(lower: int, upper: int, positions: Sequence[int], topic_count: int) -> list[int] | None:
    """Cut at the given positions that fall strictly inside the range (none for a task of <= 1 topic)."""
    if not positions:
        raise ValueError("split positions can't be empty")
    if topic_count <= 1:
        return None
    inside = sorted({p for p in positions if lower < p < upper})
    return inside or None


def flow_or_qps_equally_divide(
    topics: Sequence[TopicInfo],
    max_msg_rate: float,
    max_bandwidth_mbytes: float,
    difference_threshold_percentage: float,
) -> list[int] | None:
    """Cut wherever the running msg rate or throughput would pass the per-task maximum.

    Only when the task is above ``max x (1 + threshold/100)`` in msg rate or in throughput; idle
    topics are ignored. Each cut is one past the midpoint between the two neighbouring topics.
    """
    max_bytes = max_bandwidth_mbytes * MB
    diff = difference_threshold_percentage / 100.0
    busy = sorted((t for t in topics if t.msg_rate > 0 or t.throughput > 0), key=lambda t: t.hash)
    total_rate = sum(t.msg_rate for t in busy)
    total_tp = sum(t.throughput for t in busy)
    if len(busy) < 2 or (total_rate < max_msg_rate * (1 + diff) and total_tp < max_bytes * (1 + diff)):
        return None
    cuts: list[int] = []
    rate, tp = busy[0].msg_rate, busy[0].throughput
    for prev, topic in pairwise(busy):
        if (
            rate > max_msg_rate
            or tp > max_bytes
            or rate + topic.msg_rate > max_msg_rate
            or tp + topic.throughput > max_bytes
        ):
            cuts.append(prev.hash + (topic.hash - prev.hash) // 2 + 1)
            rate, tp = topic.msg_rate, topic.throughput
        else:
            rate += topic.msg_rate
            tp += topic.throughput
    return cuts


def split_boundaries(task: TaskSpec, algorithm: str, conf: LoadBalancerConfig) -> list[int] | None:
    """The cut positions for ``task`` by ``algorithm``, kept strictly inside its range."""
    hash_range = task_hash_range(task)
    if hash_range is None:
        return None
    lower, upper = hash_range
    topics = task_topics(task)
    if algorithm == "range_equally_divide":
        cuts = range_equally_divide(lower, upper)
    elif algorithm == "topic_count_equally_divide":
        cuts = topic_count_equally_divide([t.hash for t in topics])
    elif algorithm == "specified_positions_divide":
        positions = [parse_position(p) for p in _parse_list(task.attributes.get("split_positions"))]
        # Tasks that do not list their topics count as having several (Pulsar asks the broker).
        cuts = specified_positions_divide(lower, upper, positions, len(topics) or 2) if positions else None
    elif algorithm == "flow_or_qps_equally_divide":
        cuts = flow_or_qps_equally_divide(
            topics,
            conf.load_balancer_namespace_bundle_max_msg_rate,
            conf.load_balancer_namespace_bundle_max_bandwidth_mbytes,
            conf.flow_or_qps_difference_threshold_percentage,
        )
    else:
        raise ValueError(f"unknown split algorithm {algorithm!r}")
    if not cuts:
        return None
    inside = sorted({c for c in cuts if lower < c < upper})
    return inside or None


def split_range(lower: int, upper: int, boundaries: Sequence[int]) -> list[tuple[int, int]]:
    """``[lower, upper)`` cut at ``boundaries`` into consecutive half-open ranges."""
    edges = [lower, *sorted(b for b in boundaries if lower < b < upper), upper]
    return list(pairwise(edges))


def find_bundles_to_split(load_data: LoadData, conf: LoadBalancerConfig, bundle_count: int) -> list[str]:
    """Tasks over a split limit, as long as the group stays under ``load_balancer_namespace_maximum_bundles``.

    Limits: topics > max topics, sessions (producers + consumers) > max sessions (if > 0),
    long-term msg rate > max msg rate, long-term throughput > max bandwidth (MB -> bytes). Tasks
    with fewer than two topics are never split. Needs more than one member, as in Pulsar.
    """
    if not conf.load_balancer_auto_bundle_split_enabled or len(load_data.broker_data) <= 1:
        return []
    max_bandwidth = conf.load_balancer_namespace_bundle_max_bandwidth_mbytes * MB
    chosen: list[str] = []
    for broker in sorted(load_data.broker_data):
        local = load_data.broker_data[broker].local_data
        for bundle in sorted(local.last_stats):
            if bundle in chosen:
                continue  # a replicated task appears under each of its members
            stats = local.last_stats[bundle]
            if stats.topics < 2:
                continue
            long_term = (load_data.bundle_data.get(bundle) or BundleData()).long_term_data
            rate = long_term.total_msg_rate() if bundle in load_data.bundle_data else 0.0
            throughput = long_term.total_msg_throughput() if bundle in load_data.bundle_data else 0.0
            sessions = stats.producer_count + stats.consumer_count
            over = (
                stats.topics > conf.load_balancer_namespace_bundle_max_topics
                or (
                    conf.load_balancer_namespace_bundle_max_sessions > 0
                    and sessions > conf.load_balancer_namespace_bundle_max_sessions
                )
                or rate > conf.load_balancer_namespace_bundle_max_msg_rate
                or throughput > max_bandwidth
            )
            if not over:
                continue
            if bundle_count + len(chosen) < conf.load_balancer_namespace_maximum_bundles:
                chosen.append(bundle)
            else:
                log.warning("cannot split %s: the group has too many tasks (%d)", bundle, bundle_count + len(chosen))
    return chosen


def _child_id(parent_id: str, lower: int, upper: int) -> str:
    base = _RANGE_SUFFIX.sub("", parent_id)
    return f"{base}/0x{lower:08x}_0x{upper:08x}"


def split_task(task: TaskSpec, conf: LoadBalancerConfig, algorithm: str | None = None) -> TaskSplit | None:
    """Split ``task`` into children covering its range, or None when the algorithm finds no cut.

    Children are named ``<parent without its range suffix>/0x<lower>_0x<upper>`` (Pulsar's bundle
    naming), keep the parent's replicas, pool and weight, and carry their share of its topics.
    """
    algorithm = algorithm or task.attributes.get("split_algorithm") or conf.default_namespace_bundle_split_algorithm
    if algorithm not in conf.supported_namespace_bundle_split_algorithms:
        raise ValueError(f"split algorithm {algorithm!r} is not in supported_namespace_bundle_split_algorithms")
    hash_range = task_hash_range(task)
    cuts = split_boundaries(task, algorithm, conf)
    if hash_range is None or not cuts:
        return None
    topics = task_topics(task)
    has_rates = "topic_msg_rates" in task.attributes
    has_tps = "topic_throughputs" in task.attributes
    children: list[TaskSpec] = []
    for lo, hi in split_range(hash_range[0], hash_range[1], cuts):
        attrs = {k: v for k, v in task.attributes.items() if k not in ("split_positions",)}
        attrs["hash_lower"] = f"0x{lo:08x}"
        attrs["hash_upper"] = f"0x{hi:08x}"
        if "topic_hashes" in task.attributes:
            mine = [t for t in topics if lo <= t.hash < hi]
            attrs["topic_hashes"] = ",".join(f"0x{t.hash:08x}" for t in mine)
            if has_rates:
                attrs["topic_msg_rates"] = ",".join(repr(t.msg_rate) for t in mine)
            if has_tps:
                attrs["topic_throughputs"] = ",".join(repr(t.throughput) for t in mine)
        children.append(
            TaskSpec(
                task_id=_child_id(task.task_id, lo, hi),
                replicas=task.replicas,
                pool=task.pool,
                weight=task.weight,
                attributes=MappingProxyType(attrs),
            )
        )
    return TaskSplit(parent_task_id=task.task_id, children=tuple(children))


def child_share(parent: TaskSpec, child: TaskSpec) -> float:
    """The fraction of the parent's load a child is assumed to carry: by topic loads, topic count, or range."""
    parent_topics = task_topics(parent)
    child_topics = task_topics(child)
    total_rate = sum(t.msg_rate for t in parent_topics)
    if total_rate > 0:
        return sum(t.msg_rate for t in child_topics) / total_rate
    if parent_topics:
        return len(child_topics) / len(parent_topics)
    pr, cr = task_hash_range(parent), task_hash_range(child)
    if pr and cr:
        return (cr[1] - cr[0]) / (pr[1] - pr[0])
    return 1.0


def estimate_children(parent: BundleData, shares: Mapping[str, float]) -> dict[str, BundleData]:
    """BundleData for each child: the parent's averages scaled by the child's share."""
    return {
        name: BundleData(
            short_term_data=parent.short_term_data.scaled(share),
            long_term_data=parent.long_term_data.scaled(share),
            topics=parent.topics,
        )
        for name, share in shares.items()
    }
