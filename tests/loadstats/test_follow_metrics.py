"""The follow loop's metrics on a fake clock: what a scrape shows after each event."""

from __future__ import annotations

import math

import pytest
from prometheus_client import CollectorRegistry

from groupcoord.loadstats.follow_metrics import FAILURE_KINDS, FollowMetrics


class _Clock:
    def __init__(self, now: float) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def _value(registry: CollectorRegistry, name: str, **labels: str) -> float:
    value = registry.get_sample_value(name, labels)
    assert value is not None, name
    return value


def test_age_rows_late_and_failures_as_a_scrape_reads_them() -> None:
    registry, clock = CollectorRegistry(), _Clock(1_000.0)
    metrics = FollowMetrics(registry, clock=clock)
    assert math.isnan(_value(registry, "groupcoord_stats_snapshot_age_seconds"))  # no snapshot yet
    assert math.isnan(_value(registry, "groupcoord_stats_files_behind"))  # nothing counts them yet
    behind = [3]
    metrics.count_files_behind(lambda: behind[0])
    metrics.snapshot_written(990_500)
    clock.now = 1_002.0
    assert _value(registry, "groupcoord_stats_snapshot_age_seconds") == pytest.approx(11.5)
    metrics.refreshed({"stage": "committed", "batch_id": 0, "rows_read": 120, "rows_late": 2,
                       "rows_rejected": {"malformed": 1, "negative": 0}, "rows_duplicate": 0})
    behind[0] = 0
    assert _value(registry, "groupcoord_stats_files_behind") == 0  # read at the scrape, not stored
    assert _value(registry, "groupcoord_stats_refreshes_total") == 0  # the snapshot is not written yet
    metrics.refreshed({"stage": "published", "batch_id": 0, "seconds": 4.0})
    assert _value(registry, "groupcoord_stats_refreshes_total") == 1
    assert _value(registry, "groupcoord_stats_refresh_seconds_sum") == 4.0
    assert _value(registry, "groupcoord_stats_rows_read_total") == 120
    assert _value(registry, "groupcoord_stats_refresh_rows") == 120
    assert _value(registry, "groupcoord_stats_rows_late_total") == 2
    assert _value(registry, "groupcoord_stats_rows_rejected_total", reason="malformed") == 1
    for kind in FAILURE_KINDS:  # every kind is exported from the start, at 0
        assert _value(registry, "groupcoord_stats_failures_total", kind=kind) == 0
    metrics.failed("publish")
    assert _value(registry, "groupcoord_stats_failures_total", kind="publish") == 1
    with pytest.raises(ValueError, match="unknown failure kind"):
        metrics.failed("gremlins")
