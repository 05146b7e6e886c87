"""Pulsar's load-balancer settings, snake_case, with Pulsar's defaults and units.

Every setting of seed 000's configuration appendix is here, plus the ones its
§2.3 text and PIP-364 (seed 004) introduce. Units are the trap: Pulsar mixes
them, and so must we to keep its defaults meaningful:

* ``*_percentage`` thresholds are 0-100 (``load_balancer_broker_threshold_shedder_percentage=10``
  means ten points of usage), except the two that are *fractions* of 0-1:
  ``load_balancer_history_resource_percentage`` and ``max_unload_percentage``.
* ``load_balancer_bundle_unload_min_throughput_threshold`` and
  ``load_balancer_namespace_bundle_max_bandwidth_mbytes`` are MB (x 1024 x 1024 to compare
  with throughputs, which are bytes/s everywhere);
  ``min_unload_message_throughput`` is already bytes/s.
* AvgShedder's low/high thresholds are score points (scores are 0-100).

Relations are checked at construction and a wrong value raises ``ValueError``
naming the setting.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

__all__ = ["MB", "SPLIT_ALGORITHMS", "LoadBalancerConfig"]

MB = 1024 * 1024
"""Bytes in Pulsar's "MB" (it means MiB)."""

SPLIT_ALGORITHMS: tuple[str, ...] = (
    "range_equally_divide",
    "topic_count_equally_divide",
    "specified_positions_divide",
    "flow_or_qps_equally_divide",
)


@dataclass(frozen=True, kw_only=True, slots=True)
class LoadBalancerConfig:
    """All settings the shedders, placement strategies and splitter read."""

    # --- master switches -------------------------------------------------------------------
    load_balancer_enabled: bool = True
    """Master switch; False makes every pulsar-* assignor a plain sticky assignor."""
    load_balancer_shedding_enabled: bool = True
    """Shedding switch (Pulsar's ``loadBalancerSheddingEnabled``)."""

    # --- load reports (the workers' report policy reads these; kept for completeness) ---------
    load_balancer_report_update_min_interval_millis: int = 5000
    """ms between two load computations on a worker."""
    stats_update_initial_delay_in_secs: int = 60
    """s; period of the per-bundle stats refresh."""
    load_balancer_report_update_threshold_percentage: float = 10
    """0-100; report when any figure moved by more than this."""
    load_balancer_report_update_max_interval_minutes: int = 15
    """minutes; report at least this often."""
    load_balancer_resource_quota_update_interval_minutes: int = 15
    """minutes; period of the leader's aggregate write-back."""

    # --- shedding ------------------------------------------------------------------------------
    load_balancer_shedding_interval_minutes: float = 1
    """minutes between two shedding runs (the leader's recheck interval)."""
    load_balancer_shedding_grace_period_minutes: float = 30
    """minutes during which a task unloaded once is not unloaded again."""
    load_balancer_broker_overloaded_threshold_percentage: float = 85
    """0-100 (may exceed 100 to switch the cut-off off); OverloadShedder and the placement cut-off."""
    load_balancer_broker_threshold_shedder_percentage: float = 10
    """0-100 points above the average usage at which ThresholdShedder unloads."""
    load_balancer_bundle_unload_min_throughput_threshold: float = 10
    """MB/s; ThresholdShedder skips a member whose planned unload is smaller."""
    load_balancer_history_resource_percentage: float = 0.9
    """fraction 0-1; weight of the previous usage in the history average."""
    load_balancer_cpu_resource_weight: float = 1.0
    """weight of cpu usage in a member's weighted max usage (ThresholdShedder, LeastResourceUsageWithWeight)."""
    load_balancer_direct_memory_resource_weight: float = 1.0
    """weight of direct memory usage in a member's weighted max usage."""
    load_balancer_bandwidth_in_resource_weight: float = 1.0
    """weight of inbound bandwidth usage in a member's weighted max usage."""
    load_balancer_bandwidth_out_resource_weight: float = 1.0
    """weight of outbound bandwidth usage in a member's weighted max usage."""
    # Heap memory has no weight on purpose: Pulsar leaves it out of the max usage ("noisy by GC";
    # LocalBrokerData.getMaxResourceUsageWithWeight takes cpu, directMemory, bandwidthIn/Out only).
    lower_boundary_shedding_enabled: bool = False
    """ThresholdShedder also unloads from the busiest member when some member is under avg - threshold."""
    load_balancer_msg_rate_difference_shedder_threshold: float = 50
    """0-100; UniformLoadShedder: (max - min) / min x 100 above this triggers (<= 0 disables)."""
    load_balancer_msg_throughput_multiplier_difference_shedder_threshold: float = 4
    """multiplier; UniformLoadShedder: max / min above this triggers (<= 0 disables)."""
    max_unload_percentage: float = 0.2
    """fraction 0-1 of the max-min difference to move (PIP-364 advises 0.5 with AvgShedder)."""
    min_unload_message: float = 1000
    """msg/s; Uniform/AvgShedder skip smaller msg-rate moves."""
    min_unload_message_throughput: float = 1 * MB
    """bytes/s (not MB); Uniform/AvgShedder skip smaller throughput moves."""
    max_unload_bundle_num_per_shedding: int = -1
    """UniformLoadShedder: at most this many tasks per run; -1 = no limit."""
    load_balancer_avg_shedder_low_threshold: float = 15
    """score points; a pair differing by this much counts a low hit."""
    load_balancer_avg_shedder_high_threshold: float = 40
    """score points; a pair differing by this much counts a high hit too."""
    load_balancer_avg_shedder_hit_count_low_threshold: int = 8
    """consecutive low hits before AvgShedder moves load."""
    load_balancer_avg_shedder_hit_count_high_threshold: int = 2
    """consecutive high hits before AvgShedder moves load."""

    # --- TransferShedder (PIP-192's extensible load manager) ----------------------------------------
    load_balancer_broker_load_target_std: float = 0.25
    """TransferShedder sheds while the std of members' weighted max usage EMA is above this."""
    load_balancer_shedding_condition_hit_count_threshold: int = 3
    """TransferShedder acts only after more than this many consecutive rounds meet its condition."""
    load_balancer_max_number_of_broker_shedding_per_cycle: int = 3
    """members TransferShedder sheds from in one round."""
    load_balancer_transfer_enabled: bool = True
    """TransferShedder names the receiver (transfer); off: it unloads and placement chooses."""
    load_balance_shedding_delay_in_seconds: float = 180
    """seconds a member that gave or took a task is left alone (TransferShedder skips the round)."""
    load_balancer_max_number_of_bundles_in_bundle_load_report: int = 10
    """the top-k (heaviest) tasks of a member TransferShedder may move."""
    load_balancer_memory_resource_weight: float = 1.0
    """weight of heap memory in TransferShedder's weighted max (the modular strategies leave heap out)."""

    # --- placement -----------------------------------------------------------------------------
    load_balancer_average_resource_usage_difference_threshold_percentage: float = 10
    """0-100 points below the average a member must be to be a LeastResourceUsageWithWeight candidate."""
    load_balancer_broker_max_topics: int = 50000
    """members already serving more topics than this are not placement candidates."""
    load_balancer_distribute_bundles_evenly_enabled: bool = True
    """before the placement strategy runs, keep only the candidates owning the fewest tasks of the
    task's namespace (the task attribute ``namespace``; tasks without one are not spread)."""

    # --- split ---------------------------------------------------------------------------------
    load_balancer_auto_bundle_split_enabled: bool = True
    """split tasks that exceed one of the limits below (needs ``hash_lower``/``hash_upper`` attributes)."""
    load_balancer_auto_unload_split_bundles_enabled: bool = True
    """True: the children of a split are placed afresh; False: they stay on the parent's members."""
    load_balancer_namespace_maximum_bundles: int = 128
    """no split once the group has this many tasks."""
    load_balancer_namespace_bundle_max_topics: int = 1000
    """a task holding more topics than this is split (a task needs at least 2 topics to split)."""
    load_balancer_namespace_bundle_max_sessions: int = 1000
    """producers + consumers; <= 0 disables the condition."""
    load_balancer_namespace_bundle_max_msg_rate: float = 30000
    """msg/s (in + out, long-term)."""
    load_balancer_namespace_bundle_max_bandwidth_mbytes: float = 100
    """MB/s (in + out, long-term)."""
    supported_namespace_bundle_split_algorithms: tuple[str, ...] = SPLIT_ALGORITHMS
    """Pulsar's default lists all four (the seed's appendix shows three; Pulsar's code wins)."""
    default_namespace_bundle_split_algorithm: str = "range_equally_divide"
    """the split algorithm used (one of ``supported_namespace_bundle_split_algorithms``)."""
    flow_or_qps_difference_threshold_percentage: float = 10
    """0-100; flow_or_qps_equally_divide splits only above max x (1 + this/100)."""

    def __post_init__(self) -> None:
        def need(ok: bool, name: str, what: str) -> None:
            if not ok:
                raise ValueError(f"{name}={getattr(self, name)!r}: {what}")

        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, float) and math.isnan(value):
                raise ValueError(f"{f.name} is NaN")
        need(
            0.0 <= self.load_balancer_history_resource_percentage <= 1.0,
            "load_balancer_history_resource_percentage",
            "a fraction in [0, 1] (not 0-100)",
        )
        need(0.0 < self.max_unload_percentage <= 1.0, "max_unload_percentage", "a fraction in (0, 1]")
        for name in (
            "load_balancer_broker_threshold_shedder_percentage",
            "load_balancer_average_resource_usage_difference_threshold_percentage",
            "load_balancer_report_update_threshold_percentage",
            "flow_or_qps_difference_threshold_percentage",
        ):
            need(0.0 <= getattr(self, name) <= 100.0, name, "percentage points in [0, 100]")
        need(
            self.load_balancer_broker_overloaded_threshold_percentage > 0,
            "load_balancer_broker_overloaded_threshold_percentage",
            "a positive percentage (0-100, or above 100 to disable)",
        )
        for name in (
            "load_balancer_cpu_resource_weight",
            "load_balancer_direct_memory_resource_weight",
            "load_balancer_bandwidth_in_resource_weight",
            "load_balancer_bandwidth_out_resource_weight",
            "min_unload_message",
            "min_unload_message_throughput",
            "load_balancer_bundle_unload_min_throughput_threshold",
            "load_balancer_shedding_grace_period_minutes",
            "load_balancer_namespace_bundle_max_msg_rate",
            "load_balancer_namespace_bundle_max_bandwidth_mbytes",
        ):
            need(getattr(self, name) >= 0, name, "must be >= 0")
        need(self.load_balancer_shedding_interval_minutes > 0, "load_balancer_shedding_interval_minutes", "must be > 0")
        need(
            0 <= self.load_balancer_avg_shedder_low_threshold <= self.load_balancer_avg_shedder_high_threshold,
            "load_balancer_avg_shedder_low_threshold",
            "score points, 0 <= low <= load_balancer_avg_shedder_high_threshold",
        )
        for name in (
            "load_balancer_avg_shedder_hit_count_low_threshold",
            "load_balancer_avg_shedder_hit_count_high_threshold",
        ):
            need(getattr(self, name) >= 1, name, "must be >= 1")
        need(
            self.max_unload_bundle_num_per_shedding == -1 or self.max_unload_bundle_num_per_shedding >= 1,
            "max_unload_bundle_num_per_shedding",
            "-1 (no limit) or >= 1",
        )
        need(
            self.load_balancer_namespace_maximum_bundles >= 1, "load_balancer_namespace_maximum_bundles", "must be >= 1"
        )
        unknown = set(self.supported_namespace_bundle_split_algorithms) - set(SPLIT_ALGORITHMS)
        need(not unknown, "supported_namespace_bundle_split_algorithms", f"unknown algorithm(s) {sorted(unknown)}")
        need(
            self.default_namespace_bundle_split_algorithm in self.supported_namespace_bundle_split_algorithms,
            "default_namespace_bundle_split_algorithm",
            "must be one of supported_namespace_bundle_split_algorithms",
        )

    @property
    def shedding_interval_s(self) -> float:
        """``load_balancer_shedding_interval_minutes`` in seconds."""
        return self.load_balancer_shedding_interval_minutes * 60.0

    @property
    def grace_period_s(self) -> float:
        """``load_balancer_shedding_grace_period_minutes`` in seconds."""
        return self.load_balancer_shedding_grace_period_minutes * 60.0
