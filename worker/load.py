"""Load reporting from a worker: a probe says what the load is, a policy says when to send it.

``LoadReporter`` is what ``WorkerClient(load_reporter=...)`` takes: it is called
after each successful heartbeat and returns a report only when Pulsar's
update policy says so (a figure moved by more than 10%, or 15 minutes passed).
Reports travel on their own RPC (ReportLoad) rather than inside heartbeats:
heartbeats stay small and constant-cost, and a large report never delays the
liveness signal.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from groupcoord.loadstats.probe import LoadProbe, PsutilProbe
from groupcoord.loadstats.report_policy import ReportPolicy
from groupcoord.loadstats.samples import TaskLoad
from groupcoord.v1 import groupcoord_pb2 as pb
from groupcoord.wire import report_to_pb

if TYPE_CHECKING:  # pragma: no cover
    from groupcoord.worker.client import WorkerClient

__all__ = ["LoadReporter", "demo_load_reporter"]


class LoadReporter:
    """Collect from ``probe`` at each heartbeat; send when ``policy`` says so."""

    def __init__(self, probe: LoadProbe, policy: ReportPolicy | None = None) -> None:
        self.probe = probe
        self.policy = policy or ReportPolicy()
        self.sent = 0

    def __call__(self, client: WorkerClient) -> pb.LoadReport | None:
        report = self.probe.collect()
        if not self.policy.should_send(report):
            return None
        self.policy.sent(report)
        self.sent += 1
        return report_to_pb(report)


def demo_load_reporter(name: str, task_ids: Callable[[], Iterable[str]] | None = None,
                       policy: ReportPolicy | None = None) -> Callable[[WorkerClient], pb.LoadReport | None]:
    """psutil figures for this process plus synthetic per-task rates (stable per task id, with a
    slow wave), as a stand-in for a real service's counters."""
    holder: dict[str, WorkerClient] = {}

    def rates() -> Iterable[TaskLoad]:
        client = holder.get("client")
        ids = list(task_ids()) if task_ids else [t.task_id for t in (client.assigned_tasks if client else ())]
        phase = time.monotonic() / 20
        for task_id in ids:
            base = 50 + (sum(map(ord, task_id)) * 37) % 950  # 50..1000 msg/s, stable per task
            rate = base * (1 + 0.2 * math.sin(phase + len(task_id)))
            yield TaskLoad(task_id=task_id, msg_rate_in=rate, msg_rate_out=rate * 2,
                           msg_throughput_in=rate * 1024, msg_throughput_out=rate * 2048,
                           topics=1 + base % 7, producers=1 + base % 3, consumers=1 + base % 5)

    reporter = LoadReporter(PsutilProbe(rates, scope="process"), policy)

    def report(client: WorkerClient) -> pb.LoadReport | None:
        holder["client"] = client
        return reporter(client)

    return report
