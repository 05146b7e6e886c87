"""From a worker's ReportLoad to the sample log the statistics job reads."""

from __future__ import annotations

from typing import Any

from groupcoord.coordinator.runtime.runtime import SampleSink
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.wire import report_from_pb

__all__ = ["sample_sink"]


def sample_sink(sample_log: Any) -> SampleSink:
    """Append every accepted load report to ``sample_log`` (whose ``append`` never blocks). The
    conversion from the wire form happens on the log's writer thread, not on the event loop."""

    def on_report(group_id: str, member_id: str, report: pb.LoadReport) -> None:
        sample_log.append(group_id, member_id, lambda: report_from_pb(report), len(report.tasks))

    return on_report
