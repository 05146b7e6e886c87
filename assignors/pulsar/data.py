"""Pulsar's load data model, with members in the role of brokers and tasks in the role of bundles.

These mirror ``pulsar-common``'s ``policies/data/loadbalancer`` classes so that a Pulsar user
reads the shedders below as they read Pulsar's: ``ResourceUsage``, ``NamespaceBundleStats``,
``LocalBrokerData``, ``TimeAverageMessageData``, ``BundleData``, ``TimeAverageBrokerData``,
``BrokerData`` and ``LoadData``. They are mutable on purpose: placement records preallocated
tasks into ``BrokerData`` during a round, as Pulsar does.

Units: msg rates msg/s, throughputs bytes/s, resource usage in the probe's unit with its limit
(``percent_usage()`` is 0-100), ``max_resource_usage*()`` are fractions (0-1), as in Pulsar.
The fields keep Pulsar's names (the rates and resources are ``groupcoord.figures``' names; the
rates are declared in its order); where a class handles them as a set (sums, averages, scaling)
it loops over the vocabulary instead of spelling each out.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from functools import reduce
from operator import add, attrgetter

from groupcoord.assignors.pulsar.config import LoadBalancerConfig
from groupcoord.figures import LONG, SHORT, TASK_RATES

__all__ = [
    "DEFAULT_MESSAGE_RATE",
    "DEFAULT_MESSAGE_THROUGHPUT",
    "NUM_LONG_SAMPLES",
    "NUM_SHORT_SAMPLES",
    "BrokerData",
    "BundleData",
    "LoadData",
    "LocalBrokerData",
    "NamespaceBundleStats",
    "ResourceUsage",
    "TimeAverageBrokerData",
    "TimeAverageMessageData",
    "default_bundle_stats",
    "rates_of",
]

NUM_SHORT_SAMPLES = 10
"""Samples in the short-term average (Pulsar's ModularLoadManagerImpl constant)."""
NUM_LONG_SAMPLES = 1000
"""Samples in the long-term average."""
DEFAULT_MESSAGE_RATE = 50.0
"""msg/s a task without any sample is assumed to have, in and out (Pulsar's defaultStats)."""
DEFAULT_MESSAGE_THROUGHPUT = 50000.0
"""bytes/s a task without any sample is assumed to have, in and out."""

#: The rates of a ``NamespaceBundleStats`` or ``TimeAverageMessageData`` as a tuple in
#: ``groupcoord.figures`` order: both classes declare them in that order, so the tuple also
#: constructs them positionally (fast: the Pulsar assignors build one per task per round).
rates_of = attrgetter(*TASK_RATES)
_RATE_GETTERS = tuple((rate, attrgetter(rate)) for rate in TASK_RATES)
_TERM_TOTALS = {term: tuple(f"{term}_term_{rate}" for rate in TASK_RATES) for term in (SHORT, LONG)}


@dataclass(slots=True)
class ResourceUsage:
    """One resource: usage and limit in the same unit; a limit <= 0 means unknown and counts as 0%."""

    usage: float = 0.0
    limit: float = -1.0

    def percent_usage(self) -> float:
        """0-100 (may exceed 100 when a limit is mis-set). Pulsar computes this in float32; we keep doubles."""
        if self.limit <= 0:
            return 0.0
        return self.usage / self.limit * 100.0


@dataclass(slots=True)
class NamespaceBundleStats:
    """One task's latest rates and session counts, as its member reports them."""

    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_in: float = 0.0
    msg_throughput_out: float = 0.0
    topics: int = 0
    producer_count: int = 0
    consumer_count: int = 0


def default_bundle_stats() -> NamespaceBundleStats:
    """The stats Pulsar assumes for a bundle it knows nothing about (50 msg/s, 50 kB/s each way)."""
    return NamespaceBundleStats(
        msg_rate_in=DEFAULT_MESSAGE_RATE,
        msg_rate_out=DEFAULT_MESSAGE_RATE,
        msg_throughput_in=DEFAULT_MESSAGE_THROUGHPUT,
        msg_throughput_out=DEFAULT_MESSAGE_THROUGHPUT,
    )


@dataclass(slots=True)
class LocalBrokerData:
    """What one member reports: resource usages, its tasks and their summed rates."""

    cpu: ResourceUsage = field(default_factory=ResourceUsage)
    memory: ResourceUsage = field(default_factory=ResourceUsage)
    direct_memory: ResourceUsage = field(default_factory=ResourceUsage)
    bandwidth_in: ResourceUsage = field(default_factory=ResourceUsage)
    bandwidth_out: ResourceUsage = field(default_factory=ResourceUsage)
    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_in: float = 0.0
    msg_throughput_out: float = 0.0
    num_topics: int = 0
    num_bundles: int = 0
    num_consumers: int = 0
    num_producers: int = 0
    bundles: set[str] = field(default_factory=set)
    last_stats: dict[str, NamespaceBundleStats] = field(default_factory=dict)

    def update_bundle_data(self, bundle_stats: Mapping[str, NamespaceBundleStats]) -> None:
        """Replace the task stats and recompute the totals (Pulsar's ``updateBundleData``)."""
        self.last_stats = dict(bundle_stats)
        self.bundles = set(bundle_stats)
        for rate, get in _RATE_GETTERS:
            setattr(self, rate, sum(map(get, bundle_stats.values())))
        self.num_topics = sum(s.topics for s in bundle_stats.values())
        self.num_bundles = len(bundle_stats)
        self.num_consumers = sum(s.consumer_count for s in bundle_stats.values())
        self.num_producers = sum(s.producer_count for s in bundle_stats.values())

    def max_resource_usage(self) -> float:
        """Max of cpu, direct memory and bandwidth in/out usage, as a fraction.

        Heap memory is left out, as the seed and Pulsar's original code say ("noisy by GC");
        recent Pulsar versions added it back here, but not to the weighted variant the
        strategies use — we keep the two consistent by leaving it out of both.
        """
        return (
            max(
                self.cpu.percent_usage(),
                self.direct_memory.percent_usage(),
                self.bandwidth_in.percent_usage(),
                self.bandwidth_out.percent_usage(),
            )
            / 100.0
        )

    def _weighted(
        self, cpu_weight: float, direct_memory_weight: float, bandwidth_in_weight: float, bandwidth_out_weight: float
    ) -> tuple[float, float, float, float]:
        return (
            self.cpu.percent_usage() * cpu_weight,
            self.direct_memory.percent_usage() * direct_memory_weight,
            self.bandwidth_in.percent_usage() * bandwidth_in_weight,
            self.bandwidth_out.percent_usage() * bandwidth_out_weight,
        )

    def max_resource_usage_with_weight(
        self, cpu_weight: float, direct_memory_weight: float, bandwidth_in_weight: float, bandwidth_out_weight: float
    ) -> float:
        """Max of the weighted usages (heap memory left out), as a fraction."""
        return max(self._weighted(cpu_weight, direct_memory_weight, bandwidth_in_weight, bandwidth_out_weight)) / 100.0

    def max_resource_usage_with_weight_conf(self, conf: LoadBalancerConfig) -> float:
        """The weighted max with the config's four weights (what every resource-based strategy uses)."""
        return self.max_resource_usage_with_weight(
            conf.load_balancer_cpu_resource_weight,
            conf.load_balancer_direct_memory_resource_weight,
            conf.load_balancer_bandwidth_in_resource_weight,
            conf.load_balancer_bandwidth_out_resource_weight,
        )


@dataclass(slots=True)
class TimeAverageMessageData:
    """A running average over at most ``max_samples`` samples (the seed's recurrence).

    ``n = min(n + 1, max_samples); avg = ((n - 1) * avg + x) / n`` for each of the four
    figures. Before the first update the figures hold defaults, overwritten by it (n = 1).
    The rates are declared in ``groupcoord.figures`` order (Pulsar lists throughputs first).
    """

    max_samples: int
    num_samples: int = 0
    msg_rate_in: float = 0.0
    msg_rate_out: float = 0.0
    msg_throughput_in: float = 0.0
    msg_throughput_out: float = 0.0

    @classmethod
    def with_defaults(cls, max_samples: int, stats: NamespaceBundleStats) -> TimeAverageMessageData:
        return cls(max_samples, 0, *rates_of(stats))

    def update(
        self, msg_throughput_in: float, msg_throughput_out: float, msg_rate_in: float, msg_rate_out: float
    ) -> None:
        """Add one sample (Pulsar's argument order)."""
        self.update_stats(
            NamespaceBundleStats(
                msg_rate_in=msg_rate_in,
                msg_rate_out=msg_rate_out,
                msg_throughput_in=msg_throughput_in,
                msg_throughput_out=msg_throughput_out,
            )
        )

    def update_stats(self, stats: NamespaceBundleStats) -> None:
        """Add one sample: each rate goes through the recurrence."""
        self.num_samples = min(self.num_samples + 1, self.max_samples)
        n = self.num_samples
        for rate in TASK_RATES:
            setattr(self, rate, ((n - 1) * getattr(self, rate) + getattr(stats, rate)) / n)

    def total_msg_rate(self) -> float:
        return self.msg_rate_in + self.msg_rate_out

    def total_msg_throughput(self) -> float:
        return self.msg_throughput_in + self.msg_throughput_out

    def scaled(self, fraction: float) -> TimeAverageMessageData:
        """A copy carrying ``fraction`` of the load (used to estimate the children of a split)."""
        return TimeAverageMessageData(self.max_samples, self.num_samples, *(v * fraction for v in rates_of(self)))


@dataclass(slots=True)
class BundleData:
    """A task's short-term (10 samples) and long-term (1000 samples) averages."""

    short_term_data: TimeAverageMessageData = field(
        default_factory=lambda: TimeAverageMessageData.with_defaults(NUM_SHORT_SAMPLES, default_bundle_stats())
    )
    long_term_data: TimeAverageMessageData = field(
        default_factory=lambda: TimeAverageMessageData.with_defaults(NUM_LONG_SAMPLES, default_bundle_stats())
    )
    topics: int = 0

    def update(self, stats: NamespaceBundleStats) -> None:
        self.short_term_data.update_stats(stats)
        self.long_term_data.update_stats(stats)
        self.topics = stats.topics


@dataclass(slots=True)
class TimeAverageBrokerData:
    """A member's short- and long-term totals: the sums over its tasks' ``BundleData``."""

    short_term_msg_throughput_in: float = 0.0
    short_term_msg_throughput_out: float = 0.0
    short_term_msg_rate_in: float = 0.0
    short_term_msg_rate_out: float = 0.0
    long_term_msg_throughput_in: float = 0.0
    long_term_msg_throughput_out: float = 0.0
    long_term_msg_rate_in: float = 0.0
    long_term_msg_rate_out: float = 0.0

    def reset(
        self, bundles: Iterable[str], data: Mapping[str, BundleData], default_stats: NamespaceBundleStats
    ) -> None:
        """Recompute from ``bundles``; a task without data counts with ``default_stats`` (Pulsar's reset)."""
        shorts: list[tuple[float, ...]] = []
        longs: list[tuple[float, ...]] = []
        for bundle in bundles:
            bd = data.get(bundle)
            if bd is None:
                s = lg = rates_of(default_stats)
            else:
                s, lg = rates_of(bd.short_term_data), rates_of(bd.long_term_data)
            shorts.append(s)
            longs.append(lg)
        # column totals in the bundles' order, from 0.0, by plain addition (not ``sum``, which
        # compensates rounding from Python 3.12): the same floats as adding them one by one
        short = [reduce(add, column, 0.0) for column in zip(*shorts)] if shorts else [0.0] * len(TASK_RATES)
        long = [reduce(add, column, 0.0) for column in zip(*longs)] if longs else [0.0] * len(TASK_RATES)
        for term, totals in ((SHORT, short), (LONG, long)):
            for name, total in zip(_TERM_TOTALS[term], totals, strict=True):
                setattr(self, name, total)


@dataclass(slots=True)
class BrokerData:
    """A member as the leader sees it: its report, its time averages, and tasks placed on it this round."""

    local_data: LocalBrokerData = field(default_factory=LocalBrokerData)
    time_average_data: TimeAverageBrokerData = field(default_factory=TimeAverageBrokerData)
    preallocated_bundle_data: dict[str, BundleData] = field(default_factory=dict)


@dataclass(slots=True)
class LoadData:
    """The leader's whole view: members, tasks, and tasks unloaded recently (time in clock seconds).

    ``round_id`` identifies the snapshot this view was built from; strategies that keep a
    history (ThresholdShedder, LeastResourceUsageWithWeight) advance it once per round.
    """

    broker_data: dict[str, BrokerData] = field(default_factory=dict)
    bundle_data: dict[str, BundleData] = field(default_factory=dict)
    recently_unloaded_bundles: dict[str, float] = field(default_factory=dict)
    round_id: object = None

    def bundle_data_for_load_shedding(self) -> dict[str, BundleData]:
        """Tasks the shedders may consider (Pulsar drops heartbeat/SLA namespaces here; we have none)."""
        return self.bundle_data

    def preallocate(self, broker: str, bundle: str) -> None:
        """Record that ``bundle`` was just placed on ``broker`` (seen by LeastLongTermMessageRate's score)."""
        self.broker_data[broker].preallocated_bundle_data[bundle] = self.bundle_data.get(bundle) or BundleData()
