"""Helpers for tests of code that uses the pulsar strategies: small ``LoadData`` builders and a fake clock.

ld = load_data({"b1": broker(cpu=50, bundles={"t1": bundle(rate=100, mbytes=1)})})
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from groupcoord.assignors.pulsar.config import MB
from groupcoord.assignors.pulsar.data import (
    NUM_LONG_SAMPLES,
    NUM_SHORT_SAMPLES,
    BrokerData,
    BundleData,
    LoadData,
    LocalBrokerData,
    NamespaceBundleStats,
    ResourceUsage,
    TimeAverageMessageData,
    default_bundle_stats,
)
from groupcoord.assignors.snapshot import TaskLoadStats
from groupcoord.figures import TASK_RATES

__all__ = ["FakeClock", "broker", "bundle", "load_data", "steady_task"]


def steady_task(task_id: str, worker_id: str, rate: float, *, msg_bytes: float = 4096.0,
                long_samples: int = 100) -> TaskLoadStats:
    """A snapshot task row whose short and long averages agree: ``rate`` msg/s and
    ``rate * msg_bytes`` bytes/s each way, one topic, producer and consumer."""
    return TaskLoadStats(
        task_id,
        worker_id,
        short_samples=10,
        long_samples=long_samples,
        short_msg_rate_in=rate,
        short_msg_rate_out=rate,
        short_msg_throughput_in=rate * msg_bytes,
        short_msg_throughput_out=rate * msg_bytes,
        long_msg_rate_in=rate,
        long_msg_rate_out=rate,
        long_msg_throughput_in=rate * msg_bytes,
        long_msg_throughput_out=rate * msg_bytes,
        topics=1,
        producers=1,
        consumers=1,
    )


@dataclass
class FakeClock:
    """A clock that moves only when told to (seconds)."""

    now: float = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


def bundle(rate: float = 0.0, mbytes: float = 0.0, *, long_rate: float | None = None, topics: int = 1) -> BundleData:
    """A task with ``rate`` msg/s and ``mbytes`` MB/s in total (split evenly in/out), short and long term."""
    long_rate = rate if long_rate is None else long_rate

    def tad(samples: int, r: float) -> TimeAverageMessageData:
        return TimeAverageMessageData(
            max_samples=samples,
            num_samples=samples,
            msg_rate_in=r / 2,
            msg_rate_out=r / 2,
            msg_throughput_in=mbytes * MB / 2,
            msg_throughput_out=mbytes * MB / 2,
        )

    return BundleData(
        short_term_data=tad(NUM_SHORT_SAMPLES, rate), long_term_data=tad(NUM_LONG_SAMPLES, long_rate), topics=topics
    )


def broker(
    cpu: float = 0.0,
    *,
    bundles: Mapping[str, BundleData] | None = None,
    memory: float = 0.0,
    direct_memory: float = 0.0,
    bandwidth_in: float = 0.0,
    bandwidth_out: float = 0.0,
    topics_per_bundle: int = 1,
) -> tuple[BrokerData, dict[str, BundleData]]:
    """A member with the given usage percentages (limits 100) and tasks; its totals are the tasks' sums."""
    bundles = dict(bundles or {})
    local = LocalBrokerData(
        cpu=ResourceUsage(cpu, 100.0),
        memory=ResourceUsage(memory, 100.0),
        direct_memory=ResourceUsage(direct_memory, 100.0),
        bandwidth_in=ResourceUsage(bandwidth_in, 100.0),
        bandwidth_out=ResourceUsage(bandwidth_out, 100.0),
    )
    local.update_bundle_data(
        {
            name: NamespaceBundleStats(
                **{rate: getattr(bd.short_term_data, rate) for rate in TASK_RATES}, topics=topics_per_bundle
            )
            for name, bd in bundles.items()
        }
    )
    data = BrokerData(local_data=local)
    data.time_average_data.reset(bundles, bundles, default_bundle_stats())
    return data, bundles


def load_data(
    brokers: Mapping[str, tuple[BrokerData, dict[str, BundleData]]],
    *,
    recently_unloaded: Mapping[str, float] | None = None,
    round_id: object = None,
) -> LoadData:
    """A ``LoadData`` of ``broker(...)`` results keyed by member id."""
    ld = LoadData(recently_unloaded_bundles=dict(recently_unloaded or {}), round_id=round_id)
    for name, (data, bundles) in brokers.items():
        ld.broker_data[name] = data
        ld.bundle_data.update(bundles)
    return ld
