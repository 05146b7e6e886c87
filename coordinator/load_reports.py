"""From a worker's ReportLoad to the sample log the statistics job reads."""

from __future__ import annotations

from typing import Any

from coordinator.runtime import SampleSink
from groupcoord.v1 import groupcoord_pb2 as pb

__all__ = ["report_from_pb", "sample_sink"]


def report_from_pb(report: pb.LoadReport) -> Any:
    from loadstats.samples import LoadReport, TaskLoad

    return LoadReport(
        ts_ms=report.ts_ms,
        cpu=(report.cpu.usage, report.cpu.limit),
        memory=(report.memory.usage, report.memory.limit),
        direct_memory=(report.direct_memory.usage, report.direct_memory.limit),
        bandwidth_in=(report.bandwidth_in.usage, report.bandwidth_in.limit),
        bandwidth_out=(report.bandwidth_out.usage, report.bandwidth_out.limit),
        tasks=tuple(
            TaskLoad(
                task_id=t.task_id,
                msg_rate_in=t.msg_rate_in,
                msg_rate_out=t.msg_rate_out,
                msg_throughput_in=t.msg_throughput_in,
                msg_throughput_out=t.msg_throughput_out,
                topics=t.topics,
                producers=t.producers,
                consumers=t.consumers,
            )
            for t in report.tasks
        ),
    )


def sample_sink(sample_log: Any) -> SampleSink:
    """Append every accepted load report to ``sample_log`` (whose ``append`` never blocks)."""

    def on_report(group_id: str, member_id: str, report: pb.LoadReport) -> None:
        sample_log.append(group_id, member_id, report_from_pb(report))

    return on_report
