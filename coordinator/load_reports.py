"""From a worker's ReportLoad to the sample log the statistics job reads."""

from __future__ import annotations

from typing import Any

from coordinator.coordinator import GroupCoordinator
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.wire import report_from_pb

__all__ = ["attach_sample_log"]


def attach_sample_log(coordinator: GroupCoordinator, sample_log: Any) -> None:
    """Append every accepted load report to ``sample_log`` (which never blocks the caller)."""

    def on_report(group_id: str, member_id: str, report: pb.LoadReport) -> None:
        sample_log.append(group_id, member_id, report_from_pb(report))

    coordinator.on_load_report = on_report
