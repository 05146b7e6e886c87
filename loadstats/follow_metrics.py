"""Prometheus metrics of ``groupcoord stats --follow``: is the snapshot fresh, is the job keeping up.

No PySpark here (the docs generator and the CLI's option parsing import it): the follow loop
calls :meth:`FollowMetrics.refreshed`, :meth:`FollowMetrics.failed` and
:meth:`FollowMetrics.published`, and a scrape reads the snapshot's age and the files behind
through callbacks, so they are current at the scrape, not at the last refresh.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

__all__ = ["FAILURE_KINDS", "FollowMetrics"]

#: Why a refresh or a publish failed (the ``kind`` label), as the follow loop tells them apart.
FAILURE_KINDS: tuple[str, ...] = (
    "spark_session",  # the session's JVM is gone (killed, out of memory): a new session is built
    "state_dir",  # the state directory could not be written
    "snapshot_dir",  # the snapshot could not be written
    "publish",  # the coordinator did not take the snapshot after the bounded retries
    "batch",  # anything else that failed a micro-batch
)


class FollowMetrics:
    """The follow loop's metric families on ``registry`` (a registry of the caller's, never the global one).

    ``clock``: wall-clock seconds (the snapshot age compares it with the snapshot's
    ``created_ms``).
    """

    def __init__(self, registry: CollectorRegistry, *, clock: Callable[[], float] = time.time) -> None:
        self.registry = registry
        self._clock = clock
        self._snapshot_ms: int | None = None
        self.snapshot_age = Gauge(
            "groupcoord_stats_snapshot_age_seconds",
            "Seconds since the newest snapshot was written (NaN before the first): alert when it exceeds a few "
            "--every intervals while samples arrive.", registry=registry)
        self.snapshot_age.set_function(self._age)
        self.files_behind = Gauge(
            "groupcoord_stats_files_behind",
            "Sample files in the log that no committed micro-batch has folded in yet (read at scrape).",
            registry=registry)
        self.files_behind.set_function(lambda: float("nan"))
        self.refreshes = Counter(
            "groupcoord_stats_refreshes", "Micro-batches folded into the state and published as a snapshot.",
            registry=registry)
        self.refresh_seconds = Histogram(
            "groupcoord_stats_refresh_seconds", "Seconds per refresh: fold one micro-batch and write the snapshot.",
            buckets=(0.5, 1, 2, 5, 10, 20, 30, 60, 120, 300, 600), registry=registry)
        self.refresh_rows = Gauge(
            "groupcoord_stats_refresh_rows", "Sample rows read by the latest refresh.", registry=registry)
        self.rows = Counter(
            "groupcoord_stats_rows_read", "Sample rows read by the refreshes of this process.", registry=registry)
        self.rows_rejected = Counter(
            "groupcoord_stats_rows_rejected", "Sample rows rejected, by reason (see docs/loadstats.md).",
            ["reason"], registry=registry)
        self.rows_late = Counter(
            "groupcoord_stats_rows_late",
            "Task samples older than their task's state: counted and left out (a --full rebuild places them).",
            registry=registry)
        self.failures = Counter(
            "groupcoord_stats_failures", "Refreshes or publishes that failed, by kind; the next refresh retries.",
            ["kind"], registry=registry)
        for kind in FAILURE_KINDS:
            self.failures.labels(kind=kind)
        self.published_snapshots = Counter(
            "groupcoord_stats_published", "Snapshots the coordinator accepted (one per group and refresh).",
            registry=registry)

    def _age(self) -> float:
        if self._snapshot_ms is None:
            return float("nan")
        return max(0.0, self._clock() - self._snapshot_ms / 1000.0)

    def count_files_behind(self, files_behind: Callable[[], int]) -> None:
        """Read ``files_behind()`` at each scrape (the follow loop knows the log and the checkpoint)."""
        self.files_behind.set_function(lambda: float(files_behind()))

    def snapshot_written(self, created_ms: int) -> None:
        self._snapshot_ms = int(created_ms)

    def refreshed(self, batch: Mapping[str, Any]) -> None:
        """``loadstats.stream``'s ``on_batch`` event: rows when the state committed them (so a crash
        before the snapshot cannot lose them, and a batch skipped on re-run is not counted again),
        the refresh and its seconds once the snapshot is written."""
        if batch["stage"] == "published":
            self.refreshes.inc()
            self.refresh_seconds.observe(float(batch["seconds"]))
            return
        self.refresh_rows.set(int(batch["rows_read"]))
        self.rows.inc(int(batch["rows_read"]))
        for reason, n in dict(batch.get("rows_rejected", {})).items():
            if n:
                self.rows_rejected.labels(reason=reason).inc(int(n))
        self.rows_late.inc(int(batch.get("rows_late", 0)))

    def failed(self, kind: str) -> None:
        if kind not in FAILURE_KINDS:
            raise ValueError(f"unknown failure kind {kind!r}")
        self.failures.labels(kind=kind).inc()

    def published(self, groups: int) -> None:
        self.published_snapshots.inc(groups)
