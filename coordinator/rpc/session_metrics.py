"""The Session streams' metrics, on the coordinator's registry: read at scrape time from running figures the
streams keep (ints, so a scrape from the metrics thread reads them without the loop), plus why streams ended."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter
from prometheus_client.metrics_core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

__all__ = ["SessionFigures", "SessionMetrics"]


class SessionFigures:
    """Kept by the registry and its streams as they change (on the loop)."""

    def __init__(self) -> None:
        self.streams = 0
        self.members = 0
        self.buffered_bytes = 0
        self.peak_buffered_bytes = 0


class SessionMetrics(Collector):
    def __init__(self, registry: CollectorRegistry, figures: SessionFigures | None = None) -> None:
        self.figures = figures or SessionFigures()
        self.ended = Counter("groupcoord_session_streams_ended", "Session streams the coordinator ended, by reason "
                             "(slow_reader, idle, protocol: a broken envelope, stopping)", ["reason"], registry=registry)
        registry.register(self)

    def collect(self) -> Iterator[Metric]:
        f = self.figures
        yield GaugeMetricFamily("groupcoord_session_streams", "Session streams open", value=f.streams)
        yield GaugeMetricFamily("groupcoord_session_members", "Members carried by Session streams", value=f.members)
        yield GaugeMetricFamily("groupcoord_session_buffered_bytes",
                                "Bytes of answers and news waiting for Session streams' readers", value=f.buffered_bytes)
        yield GaugeMetricFamily("groupcoord_session_buffered_bytes_peak", "The most bytes one Session stream has "
                                "held for its reader since the coordinator started (bounded by "
                                "session_max_buffered_bytes plus the message being written)",
                                value=f.peak_buffered_bytes)
